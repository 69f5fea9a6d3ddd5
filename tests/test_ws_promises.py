"""The WebSocket close codes and cancel on disconnect, as promised in docs/design.md (The feed).

The thresholds are tested exactly on the sans-I/O Subscriber (tickflow/net/exchange/fanout.py), on an
event loop whose clock the test sets: 1013 on the fourth slow-consumer resync within RESYNC_WINDOW
seconds, 1008 for MAX_REPLIES unread answers, for MAX_REPLIES own-order updates while the socket has
taken nothing for STALL seconds, and for MAX_KEPT_BYTES of either. Then real clients of a real server
that stop reading get the code in a close frame, and a connection with cancelOnDisconnect that the
server closes (a slow consumer) or that its ping finds silent has its account's orders cancelled."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any, Callable

import aiohttp
import pytest
from helpers.promises import RawWebSocket, eventually, metric, read_close_once

from server_process import ServerProcess
from tickflow.net.exchange.fanout import MAX_KEPT_BYTES, MAX_REPLIES, MAX_RESYNCS, RESYNC_WINDOW, STALL, Feed, Subscriber


class ClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose `time()` is what the test says (only synchronous code runs on it)."""

    now = 1000.0

    def time(self) -> float:
        return self.now


def on_clock(body: Callable[[ClockLoop], None]) -> None:
    loop = ClockLoop()
    try:
        async def main() -> None:
            body(loop)
        loop.run_until_complete(main())
    finally:
        loop.close()


def subscriber(closes: list[tuple[int, bytes]], buffer_messages: int = 4) -> tuple[Feed, Subscriber]:
    feed = Feed(buffer_messages=buffer_messages)
    feed.add_symbol("ACME", 0)
    sub = Subscriber(feed, lambda code, why: closes.append((code, why)))
    feed.attach(sub)
    return feed, sub


def test_the_fourth_slow_consumer_resync_within_the_window_closes_with_1013() -> None:
    def body(loop: ClockLoop) -> None:
        closes: list[tuple[int, bytes]] = []
        feed, sub = subscriber(closes)
        feed.subscribe(sub, "ACME")
        sub.blocked = True  # the writer waits for the socket: the client is not reading

        def fall_behind() -> None:
            resyncs = feed.stats_resyncs
            for _ in range(100):
                sub.send("ACME", b'{"type":"update"}')
                if feed.stats_resyncs > resyncs:
                    return
            raise AssertionError("a full buffer on a backed-up socket was not resynced")

        start = loop.now
        for i in range(MAX_RESYNCS):  # three resyncs, 3 s apart: resynced, still open
            fall_behind()
            assert closes == [] and not sub.closed
            loop.now += 3.0
        loop.now = start + RESYNC_WINDOW + 0.5  # the first has left the window: the fourth is tolerated
        fall_behind()
        assert closes == [] and not sub.closed
        loop.now += 0.5  # four within the window now (3 s, 6 s, 10.5 s, 11 s)
        fall_behind()
        assert closes == [(1013, b"too slow: fell behind the feed")] and sub.closed

    on_clock(body)


def test_a_burst_while_the_socket_takes_everything_is_not_slowness() -> None:
    def body(loop: ClockLoop) -> None:
        closes: list[tuple[int, bytes]] = []
        feed, sub = subscriber(closes)
        feed.subscribe(sub, "ACME")
        for _ in range(20):  # five times the buffer, with the socket never backed up (blocked is False)
            sub.send("ACME", b'{"type":"update"}')
        assert feed.stats_resyncs == 0 and closes == []

    on_clock(body)


def test_the_answer_after_max_replies_unread_closes_with_1008() -> None:
    def body(loop: ClockLoop) -> None:
        closes: list[tuple[int, bytes]] = []
        _, sub = subscriber(closes)
        for _ in range(MAX_REPLIES):
            sub.reply(b'{"type":"pong"}')
        assert closes == [] and len(sub.replies) == MAX_REPLIES
        sub.next_message()  # the client read one: room for one more
        sub.reply(b'{"type":"pong"}')
        assert closes == []
        sub.reply(b'{"type":"pong"}')  # MAX_REPLIES wait and it sends again without reading
        assert closes == [(1008, b"too many unread answers: read them before sending more")] and sub.closed

    on_clock(body)


def test_max_replies_own_order_updates_close_with_1008_only_once_the_socket_took_nothing_for_stall_seconds() -> None:
    def body(loop: ClockLoop) -> None:
        closes: list[tuple[int, bytes]] = []
        _, sub = subscriber(closes)
        update = b'{"type":"order"}'
        for _ in range(MAX_REPLIES + 100):  # a sweep's burst: over MAX_REPLIES, and not closed for it
            sub.private_update(update)
        assert closes == []
        loop.now += STALL - 0.01
        sub.private_update(update)
        assert closes == []  # not yet STALL seconds without progress
        sub.next_message()  # the writer took one: the socket is moving
        sub.sent += 1
        loop.now += 0.02
        sub.private_update(update)
        assert closes == []
        loop.now += STALL - 0.01  # STALL seconds since that progress, not since the first update
        sub.private_update(update)
        assert closes == []
        loop.now += 0.02
        sub.private_update(update)
        assert closes == [(1008, b"too many unread order updates: read them")] and sub.closed

    on_clock(body)


def test_answers_and_updates_together_close_with_1008_at_max_kept_bytes_however_the_client_reads() -> None:
    def body(loop: ClockLoop) -> None:
        closes: list[tuple[int, bytes]] = []
        _, sub = subscriber(closes)
        mib = b"x" * (1 << 20)
        count = MAX_KEPT_BYTES // len(mib)
        for i in range(count):  # exactly MAX_KEPT_BYTES, half answers and half updates
            (sub.reply if i % 2 else sub.private_update)(mib)
            sub.sent += 1  # the socket takes something all along: never stalled
        assert closes == [] and sub.kept == MAX_KEPT_BYTES
        for _ in range(2):  # one more byte than the bound is refused; a check made after queueing lets one in
            sub.private_update(mib)
            if closes:
                break
        assert closes == [(1008, b"too many unread order updates: read them")] and sub.closed
        assert sub.kept == 0  # what it held is let go

    on_clock(body)


# ---------------------------------------------------------------- real clients of a real server


async def call(ws: aiohttp.ClientWebSocketResponse, orders: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Send orders over a WebSocket and wait for all their results."""
    for i, order in enumerate(orders):
        await ws.send_json({"op": "order", "id": i, "symbol": "ACME", "qty": 1, **order})
    results: list[dict[str, Any]] = []
    while len(results) < len(orders):
        msg = json.loads((await ws.receive(timeout=30)).data)
        if msg["type"] == "result":
            results.append(msg)
    return results


async def place_resting(s: aiohttp.ClientSession, server: ServerProcess, account: str, n: int = 3) -> list[int]:
    ids = []
    for i in range(n):
        async with s.post(f"{server.url}/orders", headers={"Authorization": f"Bearer {account}"},
                          json={"symbol": "ACME", "side": "buy", "type": "limit", "price": 10 + i, "qty": 5}) as r:
            assert r.status == 200
            ids.append((await r.json())["orderId"])
    return ids


async def statuses(s: aiohttp.ClientSession, server: ServerProcess, account: str, ids: list[int]) -> list[str]:
    out = []
    for order_id in ids:
        async with s.get(f"{server.url}/orders/{order_id}", headers={"Authorization": f"Bearer {account}"}) as r:
            out.append((await r.json())["status"])
    return out


async def all_cancelled(s: aiohttp.ClientSession, server: ServerProcess, account: str, ids: list[int]) -> bool:
    return await statuses(s, server, account, ids) == ["cancelled"] * len(ids)


@pytest.fixture
def patient_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """The servers started after it wait 10 s, not 1, for a dropped peer to take its close frame
    (TICKFLOW_WS_CLOSE_WAIT, gateway/websocket.py): the test's reading thread, on a machine busy with other
    tests, must reach the close frame before the server gives up and aborts. Listed before `server`."""
    monkeypatch.setenv("TICKFLOW_WS_CLOSE_WAIT", "10")


async def test_a_subscriber_that_stops_reading_gets_1013_and_its_cancel_on_disconnect_fires(
        patient_close: None, tmp_path: Path) -> None:
    """The server closes the connection (slow consumer), not the client: its account's orders are cancelled."""
    server = ServerProcess(tmp_path / "data", extra=["--ws-buffer", "8"]).start()
    raw: RawWebSocket | None = None
    stop = threading.Event()
    try:
        async with aiohttp.ClientSession() as s:
            resting = await place_resting(s, server, "alice")
            raw = RawWebSocket(server.port, "/ws?token=alice&cancelOnDisconnect=true", rcvbuf=4096)
            raw.send({"op": "subscribe", "symbols": ["ACME"]})
            maker = await s.ws_connect(server.ws_url + "?token=maker")
            taker = await s.ws_connect(server.ws_url + "?token=taker")
            closed = asyncio.ensure_future(asyncio.to_thread(
                read_close_once, raw, server.url, lambda text: metric(text, "tickflow_websocket_clients") == 2,
                [{"op": "ping"}], stop))
            deadline = time.monotonic() + 60
            while not closed.done():  # market data: 200 levels laid, then swept in one update
                assert time.monotonic() < deadline, "the client that does not read was never closed"
                await call(maker, [{"side": "sell", "price": 3000 + i} for i in range(200)])
                await call(taker, [{"side": "buy", "price": 3199, "qty": 200, "tif": "ioc"}])
            messages, code, why = await closed
            assert (code, why) == (1013, b"too slow: fell behind the feed")
            assert sum(json.loads(m)["type"] == "resync" for m in messages) <= MAX_RESYNCS
            async with s.get(f"{server.url}/metrics") as r:
                assert metric(await r.text(), "tickflow_websocket_resyncs_total") == MAX_RESYNCS + 1
            await eventually(lambda: all_cancelled(s, server, "alice", resting), 10, "alice's orders to be cancelled")
            async with s.get(f"{server.url}/metrics") as r:
                assert metric(await r.text(), "tickflow_cancel_on_disconnect_total") == 1
    finally:
        stop.set()
        if raw is not None:
            raw.close()
        server.kill()


async def test_a_client_that_leaves_its_answers_unread_gets_1008(patient_close: None, server: ServerProcess) -> None:
    raw = RawWebSocket(server.port, "/ws", rcvbuf=4096)
    stop = threading.Event()
    try:  # pings it never reads the pongs of, until the server gives up on it
        messages, code, why = await asyncio.to_thread(
            read_close_once, raw, server.url, lambda text: metric(text, "tickflow_websocket_clients") == 0,
            [{"op": "ping"}] * 500, stop)
        assert (code, why) == (1008, b"too many unread answers: read them before sending more")
        assert messages and all(m == b'{"type":"pong"}' for m in messages)
    finally:
        stop.set()
        raw.close()


async def test_a_client_that_leaves_its_order_updates_unread_gets_1008(patient_close: None,
                                                                      server: ServerProcess) -> None:
    """Updates of its own orders pile up while the socket takes nothing: after MAX_REPLIES of them and
    STALL seconds, closed with 1008, a code the client reads (it can tell it from a network failure)."""
    raw = RawWebSocket(server.port, "/ws?token=alice", rcvbuf=4096)
    stop = threading.Event()
    try:
        async with aiohttp.ClientSession() as s:
            trader = await s.ws_connect(server.ws_url + "?token=alice&updates=false")
            closed = asyncio.ensure_future(asyncio.to_thread(
                read_close_once, raw, server.url, lambda text: metric(text, "tickflow_websocket_clients") == 1,
                [{"op": "ping"}], stop))
            deadline = time.monotonic() + 60
            while not closed.done():  # each order an update for the connection that does not read
                assert time.monotonic() < deadline, "the client that does not read its updates was never closed"
                await call(trader, [{"side": "buy", "price": 100, "tif": "ioc"}] * 500)
            messages, code, why = await closed
            assert (code, why) == (1008, b"too many unread order updates: read them")
            assert sum(json.loads(m)["type"] == "order" for m in messages) > 1
            await trader.send_json({"op": "ping"})  # the other connection of the account goes on
            assert (await trader.receive_json(timeout=10)) == {"type": "pong"}
    finally:
        stop.set()
        raw.close()


async def test_a_silent_peer_is_found_by_the_ping_and_its_cancel_on_disconnect_fires(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A peer that keeps its TCP connection but answers nothing (a frozen machine, a cut cable behind a
    NAT) is found by the WebSocket ping; a client that answers pings stays. The heartbeat is shortened
    through its seam (TICKFLOW_WS_HEARTBEAT, gateway/websocket.py) from 30 s to 0.5 s."""
    monkeypatch.setenv("TICKFLOW_WS_HEARTBEAT", "0.5")
    server = ServerProcess(tmp_path / "data").start()
    silent: RawWebSocket | None = None
    try:
        async with aiohttp.ClientSession() as s:
            bobs = await place_resting(s, server, "bob")
            carols = await place_resting(s, server, "carol")
            live = await s.ws_connect(server.ws_url + "?token=carol&cancelOnDisconnect=true")
            received: asyncio.Queue[Any] = asyncio.Queue()

            async def read_live() -> None:  # a client that reads, as clients do (aiohttp answers pings in receive)
                async for msg in live:
                    received.put_nowait(json.loads(msg.data))
            reader = asyncio.create_task(read_live())
            assert (await asyncio.wait_for(received.get(), 10))["type"] == "auth"
            silent = RawWebSocket(server.port, "/ws?token=bob&cancelOnDisconnect=true")
            await eventually(lambda: all_cancelled(s, server, "bob", bobs), 10, "bob's orders to be cancelled")
            # Found after a ping went unanswered; the live connection had its pings by then, and answered.
            assert await statuses(s, server, "carol", carols) == ["new"] * 3
            async with s.get(f"{server.url}/metrics") as r:
                text = await r.text()
            assert metric(text, "tickflow_cancel_on_disconnect_total") == 1
            assert metric(text, "tickflow_websocket_clients") == 1
            await live.send_json({"op": "ping"})
            assert await asyncio.wait_for(received.get(), 10) == {"type": "pong"}
            reader.cancel()
    finally:
        if silent is not None:
            silent.close()
        server.kill()
