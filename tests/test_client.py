"""The client library against a real `tickflow serve` started by the tests (127.0.0.1, temp dir)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import pytest
from aiohttp import web

from helpers.logs import write_log
from helpers.wait import turns, until
from tickflow.core.types import AddSymbol, Command, NewOrder
from tickflow.demo import ServerProcess
from tickflow.net.client import (
    AccountFill,
    ApiError,
    AuthFailed,
    Backoff,
    BookChanged,
    BookLevel,
    Client,
    ConnectionLost,
    Event,
    GapDetected,
    InvalidURL,
    MAX_MESSAGE,
    Level,
    LocalBook,
    NotConnected,
    Order,
    OrderChanged,
    ProtocolError,
    RequestTimeout,
    ServerChanged,
    Session,
    StateChanged,
    TickflowError,
    Trade,
    TradesReceived,
    ws_url,
)
from tickflow.store.datadir import WAL_FILE


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("client-server"), symbols=["ACME", "BETA", "GAMMA", "DELTA"],
                         durability="none")
    proc.start()
    yield proc
    proc.kill()


# ---------------------------------------------------------------- pure parts


def test_local_book_applies_snapshot_and_updates() -> None:
    book = LocalBook("X")
    assert not book.live and book.best_bid is None and book.mid is None
    book.load(10, [Level(100, 5, 1), Level(99, 7, 2)], [Level(102, 3, 1)])
    assert book.live and book.seq == 10
    assert book.spread == 2 and book.mid == 101.0
    book.apply(11, [Level(100, 0, 0), Level(101, 4, 1)], [Level(103, 9, 2)])
    assert book.seq == 11
    assert [lv.price for lv in book.bids()] == [101, 99]
    assert [lv.price for lv in book.asks()] == [102, 103]
    assert book.bids(1) == [Level(101, 4, 1)]
    assert len(book) == 4


def test_feed_and_http_levels_are_equal_with_the_same_fields() -> None:
    """The feed's `Level` (an array on the wire) and GET /book's `BookLevel` (an object) are one level to
    a user: equal with the same numbers, one set member, one dict key; each keeps its own wire form."""
    feed, http = Level(100, 5, 2), BookLevel(100, 5, 2)
    assert feed == http and http == feed and not feed != http and not http != feed
    assert [feed, Level(99, 1, 1)] == [http, BookLevel(99, 1, 1)]
    assert feed != BookLevel(100, 5, 3) and http != Level(101, 5, 2) and feed != (100, 5, 2)
    keyed: dict[Level | BookLevel, str] = {http: "x"}
    assert {feed, http} == {feed} and keyed[feed] == "x"
    assert msgspec.json.encode([feed, http]) == b'[[100,5,2],{"price":100,"qty":5,"orders":2}]'
    assert msgspec.json.decode(b'{"price":100,"qty":5,"orders":2}', type=BookLevel) == feed
    assert msgspec.json.decode(b'[100,5,2]', type=Level) == http


def test_backoff_grows_is_capped_and_jittered() -> None:
    backoff = Backoff(initial=0.1, maximum=2.0, factor=2.0, jitter=0.5, rng=random.Random(1))
    delays = [backoff.delay(n) for n in range(12)]
    for n, d in enumerate(delays):
        base = min(2.0, 0.1 * 2**n)
        assert base * 0.5 <= d <= base
    assert max(delays) <= 2.0
    assert len({round(d, 6) for d in delays[6:]}) > 1  # capped, but not in lock step


def test_ws_url() -> None:
    assert ws_url("http://127.0.0.1:8080") == "ws://127.0.0.1:8080/ws"
    assert ws_url("https://example.test/") == "wss://example.test/ws"


async def test_calls_before_connecting_raise_not_connected() -> None:
    session = Session("http://127.0.0.1:9", "alice")
    with pytest.raises(NotConnected):
        await session.place_order("ACME", "buy", 1, 100)


# ---------------------------------------------------------------- HTTP


async def test_http_order_round_trip(server: ServerProcess) -> None:
    async with Client(server.url, "alice") as http:
        health = await http.health()
        assert (health.status, health.accounts) == ("ok", "open")
        assert {s.symbol for s in await http.symbols()} >= {"ACME", "BETA"}
        placed = await http.place_order("BETA", "buy", 30, 5000, client_order_id="rt-1")
        assert placed.status == "new" and placed.is_open and placed.remaining_qty == 30
        assert (await http.get_order(placed.order_id)).order_id == placed.order_id
        assert placed.order_id in {o.order_id for o in await http.open_orders()}
        book = await http.book("BETA", depth=5)
        assert book.bids[0].price == 5000 and book.bids[0].qty >= 30
        again = await http.place_order("BETA", "buy", 30, 5000, client_order_id="rt-1")
        assert again.order_id == placed.order_id  # idempotent retry
        amended = await http.amend_order(placed.order_id, qty=20)
        assert amended.qty == 20 and amended.remaining_qty == 20
        cancelled = await http.cancel_order(placed.order_id)
        assert cancelled.status == "cancelled" and not cancelled.is_open
        with pytest.raises(ApiError) as err:
            await http.cancel_order(placed.order_id)
        assert err.value.status == 409
        assert err.value.order is not None and err.value.order.status == "cancelled"


async def test_http_errors_are_typed(server: ServerProcess) -> None:
    async with Client(server.url, "alice") as alice, Client(server.url, "bob") as bob, \
            Client(server.url) as anonymous:
        with pytest.raises(ApiError) as bad:
            await alice.place_order("BETA", "buy", 0, 100)
        assert bad.value.status == 400 and bad.value.field == "qty" and "qty" in bad.value.message
        with pytest.raises(ApiError) as unknown:
            await alice.place_order("NOPE", "buy", 1, 100)
        assert unknown.value.status == 400
        mine = await alice.place_order("BETA", "sell", 1, 900_000)
        with pytest.raises(ApiError) as other:
            await bob.cancel_order(mine.order_id)  # another account's order looks unknown
        assert other.value.status == 404
        with pytest.raises(ApiError) as anon:
            await anonymous.open_orders()
        assert anon.value.status == 401
        with pytest.raises(ApiError) as reused:
            await alice.place_order("BETA", "sell", 2, 900_000, client_order_id="dup-1")
            await alice.place_order("BETA", "sell", 3, 900_000, client_order_id="dup-1")
        assert reused.value.status == 409 and reused.value.order is not None
        await alice.cancel_order(mine.order_id)


async def test_trades_and_bars(server: ServerProcess) -> None:
    async with Client(server.url, "alice") as alice, Client(server.url, "bob") as bob:
        before = await alice.trades("GAMMA", limit=1000)
        await alice.place_order("GAMMA", "sell", 5, 700)
        taken = await bob.place_order("GAMMA", "buy", 5, 700, tif="ioc")
        assert taken.status == "filled" and taken.fills[0].price == 700
        after: list = []

        async def fetch() -> None:  # the trade store is written just after the ack: poll briefly
            after[:] = await alice.trades("GAMMA", after=before[-1].trade_id if before else 0)

        async def fetched() -> bool:
            await fetch()
            return bool(after)

        await until(fetched, interval=0.02, message="the trade in the trade store")
        assert after[-1].price == 700 and after[-1].aggressor == "buy"
        assert after[-1].trade_id == taken.fills[0].trade_id
        bars = await alice.bars("GAMMA")
        assert bars and bars[-1].close == 700 and bars[-1].volume >= 5


# ---------------------------------------------------------------- WebSocket


async def test_ws_order_entry_many_in_flight(server: ServerProcess) -> None:
    async with Session(server.url, "carol") as ws:
        assert ws.account == "carol"
        orders = await asyncio.gather(*(ws.place_order("BETA", "buy", 1 + i, 100 + i) for i in range(40)))
        assert [o.qty for o in orders] == [1 + i for i in range(40)]  # each answer matched to its call
        assert len({o.order_id for o in orders}) == 40
        cancels = await asyncio.gather(*(ws.cancel_order(o.order_id) for o in orders))
        assert all(c.status == "cancelled" for c in cancels)
        with pytest.raises(ApiError) as err:
            await ws.cancel_order(orders[0].order_id)
        assert err.value.status == 409
        assert await ws.ping() < 5


async def test_ws_book_follows_the_server_and_private_updates(server: ServerProcess) -> None:
    events: list[Event] = []
    async with Session(server.url, "dave", symbols=["DELTA"]) as ws, Client(server.url, "erin") as erin:
        ws.add_listener(events.append)
        await until(lambda: "DELTA" in ws.books and ws.books["DELTA"].live)
        resting = await ws.place_order("DELTA", "buy", 10, 400)
        for price in (401, 402, 402, 405):
            await erin.place_order("DELTA", "sell", 3, price)
        await erin.place_order("DELTA", "sell", 4, 400)  # fills part of dave's bid
        http_book = await erin.book("DELTA", depth=100)
        await until(lambda: ws.books["DELTA"].seq >= http_book.seq)
        # GET /book's BookLevels and the feed's Levels: compared as they come, no conversion.
        assert (ws.books["DELTA"].bids(), ws.books["DELTA"].asks()) == (http_book.bids, http_book.asks)
        assert http_book.bids[0] == ws.books["DELTA"].best_bid and http_book.asks == ws.books["DELTA"].asks(100)
        await until(lambda: any(isinstance(e, OrderChanged) and e.order.order_id == resting.order_id
                                   and e.order.filled_qty == 4 for e in events))
        fill = next(e for e in events if isinstance(e, OrderChanged) and e.order.filled_qty == 4)
        assert fill.order.status == "partially_filled" and fill.order.fills[0].qty == 4
        assert fill.order.fills[0].liquidity == "maker"
        trades = [t for e in events if isinstance(e, TradesReceived) for t in e.trades]
        assert trades[-1].price == 400 and trades[-1].aggressor == "sell"


async def test_gap_in_the_feed_resubscribes_for_a_fresh_snapshot(server: ServerProcess) -> None:
    events: list[Event] = []
    async with Session(server.url, "frank", symbols=["ACME"]) as ws, Client(server.url, "grace") as grace:
        ws.add_listener(events.append)
        await until(lambda: "ACME" in ws.books and ws.books["ACME"].live)
        held = ws.books["ACME"].seq
        bogus = {"type": "update", "symbol": "ACME", "seq": held + 1000, "prevSeq": held + 999,
                 "bids": [[1, 1, 1]], "asks": [], "trades": []}
        await ws.feed(msgspec.json.encode(bogus))
        gap = next(e for e in events if isinstance(e, GapDetected))
        assert (gap.held_seq, gap.prev_seq) == (held, held + 999)
        assert not ws.books["ACME"].live and ws.gaps == 1
        await until(lambda: ws.books["ACME"].live)  # the session re-subscribed; a snapshot came back
        after_gap = events[events.index(gap):]
        assert [e for e in after_gap if isinstance(e, BookChanged) and e.snapshot]
        await grace.place_order("ACME", "buy", 2, 3)
        http_book = await grace.book("ACME", depth=1000)
        await until(lambda: ws.books["ACME"].seq >= http_book.seq)
        assert [lv.price for lv in ws.books["ACME"].bids()] == [lv.price for lv in http_book.bids]


async def all_trades(client: Client, symbol: str, after: int) -> list[int]:
    ids: list[int] = []
    while page := await client.trades(symbol, after=after, limit=1000):
        ids += [t.trade_id for t in page]
        after = ids[-1]
    return ids


async def test_reconnect_backfills_missed_trades_and_orders_that_changed(server: ServerProcess) -> None:
    """More trades than one page of /trades print while the session is away, and one of them fills
    the session's own resting order: after reconnecting it has every trade once and the fill."""
    trades: list[int] = []
    states: list[str] = []
    changed: list[Order] = []

    def listen(e: Event) -> None:
        if isinstance(e, TradesReceived) and e.symbol == "GAMMA":
            trades.extend(t.trade_id for t in e.trades)
        if isinstance(e, StateChanged):
            states.append(e.state)
        if isinstance(e, OrderChanged):
            changed.append(e.order)

    backoff = Backoff(initial=1.0, maximum=1.0, jitter=0.0)
    async with Session(server.url, "hank", symbols=["GAMMA"], backoff=backoff) as ws, \
            Client(server.url, "ivan") as ivan, Client(server.url, "judy") as judy:
        ws.add_listener(listen)
        await until(lambda: "GAMMA" in ws.books and ws.books["GAMMA"].live)
        await ivan.place_order("GAMMA", "sell", 1, 650)
        await judy.place_order("GAMMA", "buy", 1, 650)
        await until(lambda: len(trades) >= 1)
        mine = await ws.place_order("GAMMA", "sell", 1, 650)
        for start in range(0, 1100, 100):
            await asyncio.gather(*(ivan.place_order("GAMMA", "sell", 1, 651) for _ in range(100)))
        await ws.drop_connection()  # the network drops; the server carries on
        await until(lambda: "reconnecting" in states)
        swept = await judy.place_order("GAMMA", "buy", 1101, 651)  # 1101 trades while away
        assert swept.filled_qty == 1101
        await until(lambda: states[-1] == "connected" and ws.books["GAMMA"].live)
        gamma_ids = await all_trades(ivan, "GAMMA", trades[0] - 1)
        await until(lambda: trades[-1] == gamma_ids[-1], 10)
        assert trades == gamma_ids  # nothing missed, nothing twice
        assert ws.reconnects == 1
        await until(lambda: any(o.order_id == mine.order_id and o.status == "filled" for o in changed))


async def test_session_survives_kill_9(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="group")
    proc.start()
    states: list[StateChanged] = []
    try:
        backoff = Backoff(initial=0.05, maximum=0.3)
        others: list[ServerChanged] = []
        async with Session(proc.url, "kate", symbols=["ACME"], backoff=backoff) as ws:
            ws.add_listener(lambda e: states.append(e) if isinstance(e, StateChanged) else None)
            ws.add_listener(lambda e: others.append(e) if isinstance(e, ServerChanged) else None)
            async with Client(proc.url, "kim") as kim:
                await kim.place_order("ACME", "sell", 1, 1234)
            await ws.place_order("ACME", "buy", 1, 1234)  # a trade the restarted server still holds
            placed = await ws.place_order("ACME", "buy", 7, 1234)
            await until(lambda: ws.books.get("ACME") is not None and ws.books["ACME"].live
                           and ws.books["ACME"].best_bid is not None)
            await asyncio.to_thread(proc.kill)
            await until(lambda: ws.state == "reconnecting")
            with pytest.raises(NotConnected):
                await ws.place_order("ACME", "buy", 1, 1)
            await asyncio.to_thread(proc.restart)
            await ws.wait_connected(10)
            await until(lambda: ws.books["ACME"].live)
            assert ws.books["ACME"].best_bid == Level(1234, 7, 1)  # the acked order survived
            assert others == [] and ws.last_seq >= placed.seq  # the same server: nothing let go
            again = await ws.cancel_order(placed.order_id)
            assert again.status == "cancelled"
        attempts = [s for s in states if s.state == "reconnecting" and s.delay > 0]
        assert attempts and all(s.delay <= 0.3 for s in attempts)
        # One event per attempt, each with its reason (no second, reasonless one as it starts).
        assert all(s.error for s in states if s.state == "reconnecting")
    finally:
        proc.kill()


async def test_another_server_at_the_address_is_followed_afresh(tmp_path: Path) -> None:
    """kill -9, then a fresh server (a new data directory) on the same port: its seqs, trade ids and order
    ids start again. The session kept the old server's: it dropped every trade whose id was at or below
    the last one seen, and every update of an order whose id it had seen closed."""
    first = ServerProcess(tmp_path / "one", symbols=["ACME"], durability="none")
    first.start()
    second = ServerProcess(tmp_path / "two", port=first.port, symbols=["ACME"], durability="none")
    events: list[Event] = []
    try:
        async with Session(first.url, "lena", symbols=["ACME"], backoff=Backoff(0.05, 0.2)) as ws, \
                Client(first.url, "moe") as moe:
            ws.add_listener(events.append)
            await until(lambda: "ACME" in ws.books and ws.books["ACME"].live)
            for _ in range(5):  # orders 1-10, trades 1-5: every id and seq the new server starts with
                await moe.place_order("ACME", "sell", 1, 100)
                await ws.place_order("ACME", "buy", 1, 100)
            await until(lambda: ws.client_state.last_trade("ACME") == 5)
            old_seq, old_started = ws.last_seq, ws.log_started
            assert old_started is not None and old_started == (await moe.health()).log_started
            await asyncio.to_thread(first.kill)
            await until(lambda: ws.state == "reconnecting")
            await asyncio.to_thread(second.start)
            await ws.wait_connected(10)
            began = (await moe.health()).log_started  # the second server's
            assert [e.reason for e in events if isinstance(e, ServerChanged)] == \
                [f"another exchange at this address: its log began at {_when(began, old_started)}"]
            assert ws.last_seq < old_seq and ws.log_started == began

            await moe.place_order("ACME", "sell", 1, 100)  # order 1 and trade 1 of the new server
            mine = await ws.place_order("ACME", "buy", 3, 100)  # order 2: id seen filled on the old one
            assert (mine.order_id, mine.status) == (2, "partially_filled")
            await until(lambda: any(isinstance(e, TradesReceived) and e.trades[0].trade_id == 1
                                       for e in events[-20:]))
            assert dict(ws.orders) == {2: mine}
    finally:
        first.kill()
        second.kill()


def _when(theirs: int | None, ours: int | None) -> str:
    """`2026-12-05 03:12:07 UTC, not 2026-12-04 21:40:12 UTC`, as the reason puts two log start times
    (with milliseconds when they fall in the same second)."""
    assert theirs is not None and ours is not None
    fmt = "%Y-%m-%d %H:%M:%S.%f" if theirs // 1000 == ours // 1000 else "%Y-%m-%d %H:%M:%S"

    def at(ms: int) -> str:
        text = datetime.fromtimestamp(ms / 1000, timezone.utc).strftime(fmt)
        return (text[:-3] if "." in text else text) + " UTC"

    return f"{at(theirs)}, not {at(ours)}"


async def test_another_exchange_further_on_is_told_by_when_its_log_began(tmp_path: Path) -> None:
    """Another exchange (a fresh data directory) at the address whose log has gone further than the
    one followed, and holds no trade the session saw: its seq is not behind, so only `GET /health`'s
    logStarted tells it apart, and it does, whatever the seq says."""
    first = ServerProcess(tmp_path / "one", symbols=["ACME"], durability="none")
    first.start()
    second = ServerProcess(tmp_path / "two", symbols=["ACME"], durability="group")
    events: list[Event] = []
    try:
        second.start()  # on a port of its own first, to go further than the first will
        async with Client(second.url, "moe") as moe:
            for i in range(30):
                await moe.place_order("ACME", "sell", 1, 200 + i)
            ahead = (await moe.health())
        second.stop()
        async with Session(first.url, "lena", symbols=["ACME"], backoff=Backoff(0.05, 0.2)) as ws:
            ws.add_listener(events.append)
            assert ws.log_started is not None  # known from the first connection on
            mine = await ws.place_order("ACME", "buy", 2, 100)  # rests: no trade seen
            await until(lambda: mine.order_id in ws.orders and ws.last_seq >= mine.seq)
            old_seq, old_started = ws.last_seq, ws.log_started
            assert ahead.seq > old_seq and ahead.log_started != old_started
            await asyncio.to_thread(first.kill)
            await until(lambda: ws.state == "reconnecting")
            second.port = first.port
            await asyncio.to_thread(second.restart)
            await ws.wait_connected(10)
            changed = [e for e in events if isinstance(e, ServerChanged)]
            assert [e.reason for e in changed] == \
                [f"another exchange at this address: its log began at {_when(ahead.log_started, old_started)}"]
            assert ws.log_started == ahead.log_started
            assert mine.order_id not in ws.orders  # the old exchange's order is let go
            await until(lambda: "ACME" in ws.books and ws.books["ACME"].live)
            assert ws.books["ACME"].best_ask == Level(200, 1, 1)  # the new exchange's book
    finally:
        first.kill()
        second.kill()


async def test_a_restart_of_the_same_exchange_is_not_another(tmp_path: Path) -> None:
    """kill -9 and a restart on the same data directory: the same logStarted, so nothing is let go."""
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="group")
    proc.start()
    events: list[Event] = []
    try:
        async with Session(proc.url, "lena", symbols=["ACME"], backoff=Backoff(0.05, 0.2)) as ws:
            ws.add_listener(events.append)
            started = ws.log_started
            async with Client(proc.url, "moe") as moe:
                assert started is not None and started == (await moe.health()).log_started
            for restart in (proc.kill, proc.stop):
                mine = await ws.place_order("ACME", "buy", 2, 100)
                await until(lambda: ws.last_seq >= mine.seq)  # its update seen, too
                await asyncio.to_thread(restart)
                await until(lambda: ws.state == "reconnecting")
                await asyncio.to_thread(proc.restart)
                await ws.wait_connected(10)
                assert ws.log_started == started
                assert mine.order_id in ws.orders and ws.last_seq >= mine.seq
            assert not [e for e in events if isinstance(e, ServerChanged)]
    finally:
        proc.kill()


async def test_whether_it_is_another_exchange_falls_back_on_the_seq_when_the_server_does_not_say() -> None:
    """`GET /health` without logStarted (an older server) or with null (no record yet) leaves the
    decision to the seq and trades; with both times known they decide, whatever the seq."""
    from tickflow.net.client import ClientState, Health
    from tickflow.net.client.catchup import other_server

    class Server:
        def __init__(self) -> None:
            self.health_ = Health("ok")

        async def health(self) -> Health:
            return self.health_

        async def trades(self, *args: object, **kwargs: object) -> list[Trade]:
            return []

    server = Server()
    state = ClientState()  # what a Session holds of the exchange; other_server is what it asks on reconnecting

    async def told(seq: int, started: int | None, remembered: int | None, last_seq: int = 700) -> str | None:
        server.health_ = Health("ok", seq=seq, log_started=started)
        state.log_started, state.last_seq = remembered, last_seq
        return await other_server(server, state, 5.0, 5.0)  # type: ignore[arg-type]

    assert msgspec.json.decode(b'{"status":"ok","seq":3}', type=Health).log_started is None  # an older server
    assert msgspec.json.decode(b'{"status":"ok","seq":3,"logStarted":5}', type=Health).log_started == 5
    t1, t2 = 1796440821046, 1796440899512
    assert await told(3, None, None) == "its log is at seq 3, behind the 700 seen"
    assert await told(3, None, t1) == "its log is at seq 3, behind the 700 seen"
    assert state.log_started is None  # another exchange, whose log has no record yet
    assert await told(3, t2, None) == "its log is at seq 3, behind the 700 seen"
    assert state.log_started == t2
    assert await told(900, None, t1) is None and state.log_started == t1  # the same, as far as seqs tell
    assert await told(900, t1, None) is None and state.log_started == t1  # now known
    assert await told(3, t1, t1) is None  # the same exchange: its own word counts, not the seq
    assert await told(900, t2, t1) == \
        "another exchange at this address: its log began at 2026-12-05 03:21:39 UTC, not 2026-12-05 03:20:21 UTC"
    assert state.log_started == t2
    assert await told(900, t2 + 100, t2) == "another exchange at this address: its log began at " \
        "2026-12-05 03:21:39.612 UTC, not 2026-12-05 03:21:39.512 UTC"


async def test_a_refused_token_stops_the_session(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tok-alice-0123456789": "alice"}')
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], extra=["--tokens", str(tokens)])
    proc.start()
    try:
        bad = Session(proc.url, "not-a-token")
        with pytest.raises(AuthFailed):
            await bad.start(timeout=5)
        assert bad.state == "closed"  # no endless reconnecting with a token that will never work
        await bad.close()
        async with Session(proc.url, "tok-alice-0123456789") as good:
            assert good.account == "alice"
        async with Client(proc.url, "not-a-token") as http:
            with pytest.raises(ApiError) as err:
                await http.open_orders()
            assert err.value.status == 401
    finally:
        proc.kill()


async def test_events_end_when_the_session_stops_by_itself_and_start_at_the_call(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"])
    proc.start()
    try:
        session = Session(proc.url, "mona", reconnect=False)
        events = session.events()  # registered here: nothing before the first iteration is missed
        await session.start()
        await asyncio.to_thread(proc.kill)
        async def collect() -> list[Event]:
            return [e async for e in events]

        seen = await asyncio.wait_for(collect(), 10)  # ends: the session will not reconnect
        states = [e.state for e in seen if isinstance(e, StateChanged)]
        assert states[:2] == ["connecting", "connected"] and states[-1] == "closed"
        events = session.events()
        assert await asyncio.wait_for(collect(), 5) == []  # already stopped: nothing to wait for
        await session.close()
    finally:
        proc.kill()


async def test_events_iterator_sees_the_session_from_connect_to_close(server: ServerProcess) -> None:
    session = Session(server.url, "lena", symbols=["BETA"])
    seen: list[str] = []

    async def consume() -> None:
        async for event in session.events():
            seen.append(type(event).__name__ if not isinstance(event, StateChanged) else event.state)
            if isinstance(event, BookChanged) and event.snapshot:
                await session.close()

    consumer = asyncio.create_task(consume())
    await turns(1)  # the iterator is listening before the session starts
    await session.start()
    await asyncio.wait_for(consumer, 10)
    assert seen[:2] == ["connecting", "connected"]
    assert "BookChanged" in seen and seen[-1] == "closed"


# ---------------------------------------------------------------- books too big for one message

DEEP_SIDE = 90_000
"""Levels a side of DEEP: 180,000 levels of 24 bytes of JSON each make a snapshot over 4 MiB."""
SWEEP = "SWEEP-ALL-ASKS.1"
SWEEP_ORDERS = 26_000
SWEEP_QTY = 38_000
"""One market order for all of SWEEP's asks makes 26,000 trades: an update over 4 MiB."""


def deep_levels() -> tuple[list[Level], list[Level]]:
    """DEEP's levels as the log below leaves them, best first."""
    bids = [Level(499_999_999 - i, 999_999_999 - i, 1) for i in range(DEEP_SIDE)]
    asks = [Level(500_000_100 + i, 999_999_999 - i, 1) for i in range(DEEP_SIDE)]
    return bids, asks


@pytest.fixture(scope="module")
def big_books(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose log holds DEEP's book and SWEEP's asks: replaying a log is the quickest way to
    build books this big (order entry would take minutes)."""
    bids, asks = deep_levels()
    commands: list[Command] = [AddSymbol("DEEP"), AddSymbol(SWEEP)]
    commands += [NewOrder("maker", "DEEP", "buy", "limit", lv.price, lv.qty) for lv in bids]
    commands += [NewOrder("maker", "DEEP", "sell", "limit", lv.price, lv.qty) for lv in asks]
    commands += [NewOrder("maker", SWEEP, "sell", "limit", 500_000_000 + i, SWEEP_QTY) for i in range(SWEEP_ORDERS)]
    data = tmp_path_factory.mktemp("big-books")
    write_log(str(data / WAL_FILE), commands)
    proc = ServerProcess(data, symbols=["DEEP", SWEEP], durability="none")
    proc.start(timeout=120)
    yield proc
    proc.kill()


def _message(kind: str, seq: int, prev: int | None = None, bids: list[list[int]] | None = None,
             asks: list[list[int]] | None = None, trade_ids: list[int] | None = None, more: int = 0,
             deeper: bool | None = None) -> bytes:
    """A feed message of symbol X, as the server words it."""
    message: dict[str, object] = {"type": kind, "symbol": "X", "seq": seq, "bids": bids or [], "asks": asks or [],
                     "trades": [{"tradeId": i, "symbol": "X", "price": 100, "qty": 1, "aggressor": "buy", "seq": seq,
                                 "ts": 1} for i in trade_ids or []]}
    if prev is not None:
        message["prevSeq"] = prev
    if more:
        message["more"] = more
    if deeper is not None:
        message["deeper"] = deeper
    return msgspec.json.encode(message)


async def test_a_deep_snapshot_is_reported_once_whole_with_the_updates_that_came_between_its_levels() -> None:
    """A deep book's snapshot: its best levels, then the deeper ones as updates (seq = prevSeq), with
    the symbol's other updates between them; the book is live, and reported, once the last has come."""
    session = Session("http://127.0.0.1:9")  # never connected: messages are fed to it
    events: list[Event] = []
    session.add_listener(events.append)
    await session.feed(_message("snapshot", 5, bids=[[100, 1, 1]], asks=[[105, 1, 1]], trade_ids=[1], deeper=True))
    book = session.books["X"]
    await session.feed(_message("update", 5, 5, bids=[[99, 2, 1]], deeper=True))
    await session.feed(_message("update", 6, 5, bids=[[100, 0, 0]], trade_ids=[2]))  # a batch between them
    await session.feed(_message("update", 6, 6, asks=[[106, 3, 2]], deeper=True))
    assert not book.live and events == []
    await session.feed(_message("update", 6, 6, bids=[[98, 1, 1]], deeper=False))
    assert book.live and (book.bids(), book.asks()) == ([Level(99, 2, 1), Level(98, 1, 1)],
                                                        [Level(105, 1, 1), Level(106, 3, 2)])
    changed, traded = events
    assert isinstance(changed, BookChanged) and (changed.seq, changed.snapshot) == (6, True)
    assert isinstance(traded, TradesReceived) and [t.trade_id for t in traded.trades] == [1, 2]
    await session.feed(_message("update", 8, 7, bids=[[97, 1, 1]]))  # a gap is still a gap
    assert not book.live and session.gaps == 1


async def test_a_message_in_parts_is_reported_once_whole_and_a_part_missing_is_a_gap() -> None:
    session = Session("http://127.0.0.1:9")  # never connected: messages are fed to it
    events: list[Event] = []
    session.add_listener(events.append)
    await session.feed(_message("snapshot", 5, bids=[[100, 1, 1]], asks=[[105, 1, 1]], trade_ids=[1], more=2))
    book = session.books["X"]
    await session.feed(_message("update", 5, 5, bids=[[99, 2, 1]]))
    assert not book.live and events == []  # not whole yet
    await session.feed(_message("update", 5, 5, asks=[[106, 3, 2]]))
    assert book.live and (book.bids(), book.asks()) == ([Level(100, 1, 1), Level(99, 2, 1)],
                                                        [Level(105, 1, 1), Level(106, 3, 2)])
    assert [(type(e).__name__, e.seq if isinstance(e, BookChanged) else None) for e in events] == [
        ("BookChanged", 5), ("TradesReceived", None)]
    events.clear()
    await session.feed(_message("update", 6, 5, bids=[[100, 0, 0]], trade_ids=[2], more=1))
    assert not book.live and events == []
    await session.feed(_message("update", 6, 6, asks=[[105, 0, 0]], trade_ids=[3]))
    changed, traded = events
    assert isinstance(changed, BookChanged) and (changed.seq, changed.snapshot) == (6, False) and book.live
    assert isinstance(traded, TradesReceived) and [t.trade_id for t in traded.trades] == [2, 3]
    assert (book.bids(), book.asks()) == ([Level(99, 2, 1)], [Level(106, 3, 2)])
    events.clear()
    await session.feed(_message("update", 7, 6, bids=[[98, 1, 1]], more=1))
    await session.feed(_message("update", 8, 7, bids=[[97, 1, 1]]))  # not the part that was due
    assert [e for e in events if isinstance(e, GapDetected)] == [GapDetected("X", 7, 7, 8)]
    assert not book.live and session.gaps == 1
    await session.feed(_message("update", 7, 7, bids=[[96, 1, 1]]))  # a late part of the message let go
    assert not book.live and not [e for e in events if isinstance(e, BookChanged)]
    await session.feed(_message("snapshot", 9, bids=[[90, 1, 1]], more=1))
    await session.feed(b'{"type": "resync", "reason": "slow consumer"}')  # its other part was dropped
    await session.feed(_message("update", 9, 9, bids=[[89, 1, 1]]))
    assert not book.live and not [e for e in events if isinstance(e, BookChanged)]
    await session.feed(_message("snapshot", 10, bids=[[80, 1, 1]]))
    assert book.live and book.bids() == [Level(80, 1, 1)] and book.seq == 10


async def test_a_book_too_big_for_one_message_arrives_whole(big_books: ServerProcess) -> None:
    """Its snapshot in one message was over the 4 MiB a session takes: the connection failed (1009),
    reconnected and failed again, forever. It now comes as its best levels, then the deeper ones as
    updates (docs/protocol.md), each message under 1 MiB, and a reader that knows nothing of that (the
    web page) puts it together as well."""
    bids, asks = deep_levels()
    whole = msgspec.json.encode({"type": "snapshot", "symbol": "DEEP", "seq": 180_002, "bids": bids,
                                 "asks": asks, "trades": []})
    assert len(whole) > MAX_MESSAGE  # big enough to have failed
    events: list[Event] = []
    session = Session(big_books.url, "viewer", symbols=["DEEP"], reconnect=False)
    session.add_listener(events.append)
    async with session:
        await until(lambda: "DEEP" in session.books and session.books["DEEP"].live, 60)
        book = session.books["DEEP"]
        assert book.bids() == bids and book.asks() == asks
        assert [e.snapshot for e in events if isinstance(e, BookChanged)] == [True]
        placed = await session.place_order("DEEP", "buy", 7, 500_000_050)  # and the feed goes on from it
        await until(lambda: book.live and book.seq == placed.seq)
        top = await session.http.book("DEEP", depth=1000)
        assert top.seq == book.seq and (top.bids, top.asks) == (book.bids(1000), book.asks(1000))
        assert book.best_bid == Level(500_000_050, 7, 1) and len(book) == 2 * DEEP_SIDE + 1
        assert session.reconnects == 0 and session.gaps == 0 and session.connected
    plain_bids, plain_asks = await plain_reader_book("DEEP", big_books.url)
    assert plain_bids == {lv.price: lv for lv in [Level(500_000_050, 7, 1), *bids]}
    assert plain_asks == {lv.price: lv for lv in asks}


async def plain_reader_book(symbol: str, url: str) -> tuple[dict[int, Level], dict[int, Level]]:
    """A symbol's book as a reader that applies updates by the protocol's rules and no more builds it
    from a subscription, on aiohttp's default message limit; each message must be at most 1 MiB."""
    bids: dict[int, Level] = {}
    asks: dict[int, Level] = {}
    async with aiohttp.ClientSession() as http, http.ws_connect(ws_url(url)) as ws:
        await ws.send_json({"op": "subscribe", "symbols": [symbol]})
        raw = [(await ws.receive(timeout=30)).data]
        snapshot = json.loads(raw[0])
        assert snapshot["type"] == "snapshot" and snapshot["deeper"] is True
        while json.loads(raw[-1]).get("deeper"):  # nothing else comes meanwhile: the book does not change
            raw.append((await ws.receive(timeout=30)).data)
        assert max(len(data) for data in raw) <= 1 << 20
        for message in [snapshot, *map(json.loads, raw[1:])]:
            assert message["symbol"] == symbol and message["seq"] == snapshot["seq"]
            assert message is snapshot or (message["type"], message["prevSeq"]) == ("update", snapshot["seq"])
            for side, levels in ((bids, message["bids"]), (asks, message["asks"])):
                side.update({price: Level(price, qty, orders) for price, qty, orders in levels})
    return bids, asks


async def test_an_update_too_big_for_one_message_arrives_whole(big_books: ServerProcess) -> None:
    """One market order through every ask: the update of its 26,000 trades was over the 4 MiB a session
    takes, so the session lost its connection and the update. It now comes in parts, reported as one."""
    events: list[Event] = []
    session = Session(big_books.url, "watcher", symbols=[SWEEP], reconnect=False)
    session.add_listener(events.append)
    async with session, Client(big_books.url, "taker", timeout=60) as taker:
        await until(lambda: SWEEP in session.books and session.books[SWEEP].live, 60)
        book = session.books[SWEEP]
        asks = book.asks()
        assert len(asks) == SWEEP_ORDERS
        swept = await taker.place_order(SWEEP, "buy", SWEEP_ORDERS * SWEEP_QTY)
        assert swept.status == "filled" and len(swept.fills) == SWEEP_ORDERS
        await until(lambda: book.live and book.seq == swept.seq, 30)
        assert book.asks() == [] and book.bids() == []
        trades = [t for e in events if isinstance(e, TradesReceived) for t in e.trades]
        assert [t.trade_id for t in trades] == [f.trade_id for f in swept.fills]
        assert [(e.seq, e.snapshot) for e in events if isinstance(e, BookChanged)][1:] == [(swept.seq, False)]
        whole = msgspec.json.encode({"type": "update", "symbol": SWEEP, "seq": swept.seq, "prevSeq": swept.seq - 1,
                                     "bids": [], "asks": [[lv.price, 0, 0] for lv in asks], "trades": trades})
        assert len(whole) > MAX_MESSAGE  # big enough to have failed
        assert session.reconnects == 0 and session.gaps == 0 and session.connected


# ---------------------------------------------------------------- from a scripted user's review


@contextlib.asynccontextmanager
async def not_tickflow(ws_handler: Any = None, routes: dict[str, Any] | None = None) -> AsyncIterator[str]:
    """An HTTP server on 127.0.0.1 that is not tickflow: HTML for /health, the wrong JSON elsewhere,
    `ws_handler(ws, message)` (when given) answering what a session sends to /ws, and `routes`
    (path -> JSON answer) for GETs."""
    async def html(request: web.Request) -> web.Response:
        return web.Response(text="<html>a router's login page</html>", content_type="text/html")

    async def wrong_json(request: web.Request) -> web.Response:
        return web.json_response({"hello": "world"})

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws_handler(ws, json.loads(msg.data))
        return ws

    app = web.Application()
    app.router.add_get("/health", html)
    app.router.add_get("/symbols", wrong_json)
    app.router.add_post("/orders", wrong_json)
    if ws_handler is not None:
        app.router.add_get("/ws", websocket)
    for path, answer in (routes or {}).items():
        app.router.add_get(path, json_answer(answer))
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


def json_answer(answer: object) -> Any:
    async def handler(request: web.Request) -> web.Response:
        return web.json_response(answer)
    return handler


def refused_url() -> str:
    """The address of a port on 127.0.0.1 where nothing listens."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def other_tasks() -> list[asyncio.Task]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]


async def test_every_failure_while_the_server_dies_is_a_tickflow_error(tmp_path: Path) -> None:
    """kill -9 under a stream of orders: a send onto the dying socket raised aiohttp's
    ClientConnectionResetError, which no `except TickflowError` caught."""
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="none")
    proc.start()
    failures: list[BaseException] = []

    async def trade(ws: Session, n: int) -> None:
        for i in range(10_000):
            try:
                await ws.place_order("ACME", "buy", 1, 100 + i % 10, client_order_id=f"die-{n}-{i}")
            except Exception as e:  # noqa: BLE001 (what is under test)
                failures.append(e)
                return

    try:
        async with Session(proc.url, "nina") as ws:
            traders = asyncio.gather(*(trade(ws, n) for n in range(500)))
            await until(lambda: ws.last_seq > 50, 10)
            await asyncio.to_thread(proc.kill)
            await asyncio.wait_for(traders, 30)
        assert failures and all(isinstance(e, (NotConnected, ConnectionLost)) for e in failures), failures
    finally:
        proc.kill()


async def test_an_answer_that_is_not_the_protocol_is_a_protocol_error() -> None:
    async def answer(ws: web.WebSocketResponse, message: dict) -> None:
        if message["op"] == "auth":
            await ws.send_json({"type": "auth", "account": "olga"})
        elif message["op"] == "order":
            await ws.send_json({"type": "result", "id": message["id"], "status": 200, "body": {"hello": 1}})

    async with not_tickflow(answer) as url:
        async with Client(url, "olga") as http:
            with pytest.raises(ProtocolError) as html:
                await http.health()
            assert html.value.status == 200 and "login page" in html.value.body
            with pytest.raises(TickflowError):
                await http.symbols()
            with pytest.raises(msgspec.DecodeError):  # what callers caught before keeps working
                await http.place_order("ACME", "buy", 1, 100)
        async with Session(url, "olga") as ws:
            with pytest.raises(ProtocolError):
                await ws.place_order("ACME", "buy", 1, 100)
            assert ws.connected  # one odd answer costs that call, not the session


async def test_a_session_that_cannot_connect_says_why_and_leaves_nothing_running(tmp_path: Path) -> None:
    url = refused_url()
    with pytest.raises(NotConnected) as stopped:
        async with Session(url, "pia", reconnect=False):
            pass
    assert "refused" in str(stopped.value) or "Connect call failed" in str(stopped.value)
    retrying = Session(url, "pia", backoff=Backoff(0.05, 0.1))
    with pytest.raises(NotConnected) as late:
        await retrying.start(timeout=0.5)
    assert "Connect call failed" in str(late.value)  # the reason, not just "not connected"
    await retrying.close()

    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tok-pia-0123456789": "pia"}')
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], extra=["--tokens", str(tokens)])
    proc.start()
    try:
        session = Session(proc.url, "wrong")
        with pytest.raises(AuthFailed):
            async with session:
                pass
        assert session._http is None  # its aiohttp session is closed, not left for the garbage collector
    finally:
        proc.kill()
    never = Session(url, "pia", backoff=Backoff(0.05, 0.1))

    async def enter() -> None:
        async with never:
            pass

    with pytest.raises(asyncio.TimeoutError):  # the caller gives up while async with waits to connect
        await asyncio.wait_for(enter(), 0.5)
    assert never.state == "closed" and not other_tasks()  # nothing left reconnecting for no one


async def test_no_fill_is_reported_twice_after_a_reconnection() -> None:
    """An order call's answer is read by its caller after the messages that came with it: a fill's update
    read first was overwritten by the older "new" answer, and after a reconnection the order was read
    again and reported filled a second time."""
    new = {"orderId": 1, "account": "quinn", "symbol": "BETA", "side": "sell", "type": "limit", "price": 777,
           "qty": 1, "status": "new", "filledQty": 0, "remainingQty": 1, "seq": 5}
    filled = {**new, "status": "filled", "filledQty": 1, "remainingQty": 0, "seq": 6}
    # A second order, open when the network drops and cancelled meanwhile: the reading again reports it,
    # in the same step as any report of the first, so once it is reported the first would have been too.
    other = {**new, "orderId": 2, "price": 778, "seq": 7}
    other_cancelled = {**other, "status": "cancelled", "remainingQty": 0, "seq": 8}

    async def server(ws: web.WebSocketResponse, message: dict) -> None:
        if message["op"] == "auth":
            await ws.send_json({"type": "auth", "account": "quinn"})
        elif message["op"] == "order" and message["price"] == 777:  # a fill's update may come before the answer
            await ws.send_json({"type": "order", "order": filled})
            await ws.send_json({"type": "result", "id": message["id"], "status": 200, "body": new})
        elif message["op"] == "order":
            await ws.send_json({"type": "result", "id": message["id"], "status": 200, "body": other})

    reported: list[int] = []
    cancelled: list[int] = []
    routes = {"/orders": {"orders": []}, "/orders/1": filled, "/orders/2": other_cancelled}
    async with not_tickflow(server, routes) as url, Session(url, "quinn", backoff=Backoff(0.05, 0.1)) as ws:
        ws.add_listener(lambda e: reported.append(e.order.order_id)
                        if isinstance(e, OrderChanged) and e.order.status == "filled" else None)
        ws.add_listener(lambda e: cancelled.append(e.order.order_id)
                        if isinstance(e, OrderChanged) and e.order.status == "cancelled" else None)
        assert (await ws.place_order("BETA", "sell", 1, 777)).status == "new"
        assert (await ws.place_order("BETA", "sell", 1, 778)).status == "new"
        await ws.drop_connection()  # the network drops: the session reconnects and reads its orders again
        await until(lambda: ws.reconnects == 1 and ws.connected)
        await until(lambda: cancelled == [2], message="the reading again to report the other order cancelled")
        assert reported == [1]


async def test_closing_while_catching_up_is_quiet(server: ServerProcess, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "tickflow.client")
    session = Session(server.url, "sara", symbols=["BETA"], backoff=Backoff(0.05, 0.1))
    await session.start()
    await session.place_order("BETA", "buy", 1, 10)
    closing: list[asyncio.Task] = []
    session.add_listener(lambda e: closing.append(asyncio.ensure_future(session.close()))
                         if isinstance(e, StateChanged) and e.state == "connected" else None)
    await session.drop_connection()
    await until(lambda: bool(closing) and closing[0].done())
    assert session.state == "closed"
    assert not other_tasks()
    assert not [r for r in caplog.records if r.name == "tickflow.client"], caplog.text
    async with Client(server.url, "sara") as http:
        for order in await http.open_orders():
            await http.cancel_order(order.order_id)


class HeldTrades(Client):
    """A `Client` whose `GET /trades` waits until `release` is set."""

    release: asyncio.Event

    async def trades(self, symbol: str | None = None, after: int = 0, limit: int = 100, *,
                     before: int | None = None, newest_first: bool = False) -> list[Trade]:
        if limit > 1:  # the pages of missed trades (a reconnection's look at one trade is let through)
            await self.release.wait()
        return await super().trades(symbol, after, limit, before=before, newest_first=newest_first)


async def test_fetching_missed_trades_does_not_hold_up_order_answers(server: ServerProcess) -> None:
    trades: list[int] = []
    async with Session(server.url, "tess", symbols=["DELTA"], backoff=Backoff(1, 1, jitter=0)) as ws, \
            Client(server.url, "uma") as uma, Client(server.url, "vic") as vic:
        ws.add_listener(lambda e: trades.extend(t.trade_id for t in e.trades)
                        if isinstance(e, TradesReceived) and e.symbol == "DELTA" else None)
        await until(lambda: "DELTA" in ws.books and ws.books["DELTA"].live)
        await uma.place_order("DELTA", "sell", 1, 9000)
        await vic.place_order("DELTA", "buy", 1, 9000)
        await until(lambda: len(trades) >= 1)
        held = HeldTrades(server.url, "tess")
        held.release = asyncio.Event()
        ws._http_client = held
        await ws.drop_connection()
        await until(lambda: ws.state == "reconnecting")
        for _ in range(60):  # more than a snapshot's 50 recent trades: the rest must be fetched
            await uma.place_order("DELTA", "sell", 1, 9000)
            await vic.place_order("DELTA", "buy", 1, 9000)
        await until(lambda: ws.connected and ws.books["DELTA"].live)
        placed = await ws.place_order("DELTA", "buy", 1, 1, timeout=5)  # answered while the fetch waits
        assert placed.status == "new"
        held.release.set()
        expected = await all_trades(uma, "DELTA", trades[0] - 1)
        await until(lambda: trades[-1:] == expected[-1:], 10)
        assert trades == expected  # nothing missed, nothing twice, in order
        await ws.cancel_order(placed.order_id)
        await held.close()


async def test_a_resync_reads_the_orders_again(server: ServerProcess) -> None:
    """The server drops a slow consumer's queue, private updates included: a fill in it was lost."""
    changed: list[Order] = []
    async with Session(server.url, "ugo") as ws, Client(server.url, "wes") as wes:
        ws.add_listener(lambda e: changed.append(e.order) if isinstance(e, OrderChanged) else None)
        resting = await ws.place_order("GAMMA", "sell", 5, 88_000)
        await ws._send({"op": "auth", "token": "ugo", "updates": False})  # the fill's update goes missing
        await until(lambda: changed and changed[-1].order_id == resting.order_id)
        await wes.place_order("GAMMA", "buy", 5, 88_000, tif="ioc")
        await ws._send({"op": "auth", "token": "ugo", "updates": True})
        await ws.ping()
        assert not any(o.status == "filled" for o in changed)
        await ws.feed('{"type": "resync", "reason": "slow consumer"}')
        await until(lambda: any(o.order_id == resting.order_id and o.status == "filled" for o in changed))


async def test_addresses_are_checked_when_made() -> None:
    for url in ("127.0.0.1:8080", "ftp://127.0.0.1:21", "http://", "http://host:port", "http://h/?x=1"):
        with pytest.raises(InvalidURL):
            Client(url)
        with pytest.raises(ValueError):  # InvalidURL is both a ValueError and a TickflowError
            Session(url)


async def test_api_error_names_the_engine_reason(server: ServerProcess) -> None:
    async with Client(server.url, "xena") as http:
        order = await http.place_order("BETA", "sell", 3, 700_000)
        with pytest.raises(ApiError) as same:
            await http.amend_order(order.order_id, qty=3)
        assert (same.value.status, same.value.code) == (400, "nothing_to_amend")
        await http.cancel_order(order.order_id)
        with pytest.raises(ApiError) as gone:
            await http.cancel_order(order.order_id)
        assert (gone.value.status, gone.value.code) == (409, "not_open")
        assert ApiError(409, {"error": "x", "order": {"unexpected": 1}}).order is None  # no ValidationError


async def test_close_codes_reason_and_auth(tmp_path: Path) -> None:
    """1001 (server shutting down) is named in the state; a close before the auth answer is a refused
    token only with a policy (1008) or application (4xxx) code: 1011 is worth another attempt."""
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"])
    proc.start()
    states: list[StateChanged] = []
    try:
        async with Session(proc.url, "yara", backoff=Backoff(5, 5)) as ws:
            ws.add_listener(lambda e: states.append(e) if isinstance(e, StateChanged) else None)
            await asyncio.to_thread(proc.stop)
            await until(lambda: ws.state == "reconnecting")
        assert "1001" in (states[0].error or "") and "shutting down" in (states[0].error or "")
    finally:
        proc.kill()

    def closing(code: int) -> Any:
        async def answer(ws: web.WebSocketResponse, message: dict) -> None:
            await ws.close(code=code, message=b"go away")
        return answer

    async with not_tickflow(closing(1011)) as url:
        session = Session(url, "yara", backoff=Backoff(0.05, 0.1))
        with pytest.raises(NotConnected):
            await session.start(timeout=1)
        assert session.state != "closed" and "1011" in (session.last_error or "")
        await session.close()
    async with not_tickflow(closing(4001)) as url:
        with pytest.raises(AuthFailed):
            async with Session(url, "yara"):
                pass


async def test_start_again_after_the_session_stopped_by_itself(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"])
    proc.start()
    try:
        session = Session(proc.url, "zoe", reconnect=False)
        await session.start()
        await asyncio.to_thread(proc.kill)
        await until(lambda: session.state == "closed")
        with pytest.raises(NotConnected):
            await session.place_order("ACME", "buy", 1, 1)
        await asyncio.to_thread(proc.start)
        await session.start(timeout=10)
        assert (await session.place_order("ACME", "buy", 1, 1)).status == "new"
        await session.close()
    finally:
        proc.kill()


async def test_ping_timeout_and_ping_while_away_are_tickflow_errors() -> None:
    async def silent(ws: web.WebSocketResponse, message: dict) -> None:
        if message["op"] == "auth":
            await ws.send_json({"type": "auth", "account": "abe"})
        elif message["op"] == "ping" and message.get("answer"):
            await ws.send_json({"type": "pong"})

    async with not_tickflow(silent) as url, Session(url, "abe", backoff=Backoff(5, 5)) as ws:
        with pytest.raises(RequestTimeout):
            await ws.ping(timeout=0.2)
        await ws.drop_connection()
        await until(lambda: ws.state == "reconnecting")
        with pytest.raises(NotConnected):
            await ws.ping()
        assert ws._pongs == []  # a ping never sent leaves no waiter for a later pong to answer


async def test_a_session_without_private_updates(server: ServerProcess) -> None:
    events: list[Event] = []
    async with Session(server.url, "bea", updates=False) as ws, Client(server.url, "cid") as cid:
        ws.add_listener(events.append)
        mine = await ws.place_order("GAMMA", "sell", 2, 99_000)
        taken = await cid.place_order("GAMMA", "buy", 2, 99_000, tif="ioc")
        assert taken.filled_qty == 2
        await ws.ping()
        assert not [e for e in events if isinstance(e, OrderChanged)]
        assert (await ws.http.get_order(mine.order_id)).status == "filled"


def test_the_example_runs_as_documented_also_twice_at_once(server: ServerProcess) -> None:
    """docs/client_example.py, twice at the same time: a clientOrderId made from the time in seconds was
    the same in both, so one run got the other's order back and failed to cancel it."""
    example = Path(__file__).parent.parent / "docs" / "client_example.py"
    runs = [subprocess.Popen([sys.executable, str(example), server.url], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    for run in runs:
        out, err = run.communicate(timeout=60)
        assert run.returncode == 0, err
        assert "cancelled #" in out and "from the trade store" in out


# ---------------------------------------------------------------- cancel all, cancel on disconnect


async def open_ids(http: Client) -> list[int]:
    return [o.order_id for o in await http.open_orders()]


async def until_open(http: Client, expected: list[int], timeout: float = 10.0) -> None:
    """Wait until the account's open orders are `expected` (the server cancels on disconnect once it
    has seen the connection go)."""
    seen: list[int] = []

    async def now_expected() -> bool:
        seen[:] = await open_ids(http)
        return seen == expected

    await until(now_expected, timeout, interval=0.05, message=lambda: f"open orders {expected}, not {seen}")


async def test_fills_are_the_callers_side_of_its_trades(server: ServerProcess) -> None:
    async with Client(server.url, "fill-maker") as maker, Client(server.url, "fill-taker") as taker:
        rest = await maker.place_order("ACME", "sell", 6, 120)
        took = await taker.place_order("ACME", "buy", 4, 120)
        assert took.fills[0].liquidity == "taker"
        (mine,) = await maker.fills("ACME")
        assert mine == AccountFill(took.fills[0].trade_id, "ACME", rest.order_id, "sell", 120, 4, "maker",
                                   took.seq, took.ts)
        (theirs,) = await taker.fills(newest_first=True)
        assert (theirs.order_id, theirs.side, theirs.liquidity) == (took.order_id, "buy", "taker")
        assert await taker.fills(after=theirs.trade_id) == []
        with pytest.raises(ApiError) as err:
            await taker.fills(limit=0)
        assert (err.value.status, err.value.field) == (400, "limit")


@pytest.mark.parametrize("over", ["http", "ws"])
async def test_cancel_all_returns_exactly_what_it_cancelled(server: ServerProcess, over: str) -> None:
    account = f"sweeper-{over}"
    events: list[Event] = []
    async with Client(server.url, account) as http, Session(server.url, account) as ws, \
            Client(server.url, "bystander") as other:
        ws.add_listener(events.append)
        caller = http if over == "http" else ws
        bids = [await http.place_order("ACME", "buy", 5, p) for p in (90, 91, 91)]
        ask = await http.place_order("ACME", "sell", 5, 95_000)
        beta = await ws.place_order("BETA", "buy", 5, 90)  # over the WebSocket: the account's all the same
        theirs = await other.place_order("ACME", "buy", 5, 91)
        assert [o.order_id for o in await http.open_orders("ACME", "buy")] == [o.order_id for o in bids]
        assert [o.order_id for o in await http.open_orders(side="sell")] == [ask.order_id]

        gone = await caller.cancel_all("ACME", "buy")
        assert [o.order_id for o in gone] == [o.order_id for o in bids]  # oldest first
        assert all(o.status == "cancelled" and o.reason == "cancelled_by_user" and o.remaining_qty == 5
                   for o in gone)
        assert len({o.seq for o in gone}) == 1  # one command
        assert await open_ids(http) == [ask.order_id, beta.order_id]
        assert [o.order_id for o in await caller.cancel_all(side="sell")] == [ask.order_id]
        assert await caller.cancel_all("ACME") == []  # nothing open there: not an error
        assert [o.order_id for o in await caller.cancel_all()] == [beta.order_id]
        assert await open_ids(http) == [] and await caller.cancel_all() == []
        assert await open_ids(other) == [theirs.order_id]  # another account's order stays

        for bad, field_name in (({"symbol": "NOPE"}, "symbol"), ({"side": "up"}, "side")):
            with pytest.raises(ApiError) as err:
                await caller.cancel_all(**bad)  # type: ignore[arg-type]
            assert (err.value.status, err.value.field) == (400, field_name)
        # Each cancelled order also came as a private update; the session holds none of them open.
        await ws.ping()
        await until(lambda: {o.order_id for o in gone} <= {
            e.order.order_id for e in events if isinstance(e, OrderChanged) and e.order.status == "cancelled"})
        assert dict(ws.orders) == {}
        await other.cancel_all()
    async with Client(server.url) as anonymous:
        with pytest.raises(ApiError) as err:
            await anonymous.cancel_all()
        assert err.value.status == 401


async def test_cancel_on_disconnect_cancels_the_accounts_orders_when_the_session_closes(
        server: ServerProcess) -> None:
    """Armed on every sign-in: a dropped connection cancels, and so does closing the next one. A session
    without it leaves its orders (closed at the same moment as an armed one, so it had its chance)."""
    states: list[str] = []
    bot = Session(server.url, "cod-bot", cancel_on_disconnect=True, backoff=Backoff(initial=0.05, maximum=0.1))
    bot.add_listener(lambda e: states.append(e.state) if isinstance(e, StateChanged) else None)
    human = Session(server.url, "cod-human")
    async with Client(server.url, "cod-bot") as http, Client(server.url, "cod-human") as human_http:
        try:
            await bot.start()
            await bot.place_order("ACME", "buy", 1, 80)
            await http.place_order("BETA", "sell", 1, 90_000)  # over HTTP: the account's, so cancelled too
            await bot.drop_connection()  # the connection goes; the session reconnects
            await until_open(http, [])
            await until(lambda: states[-1] == "connected")
            placed = await bot.place_order("GAMMA", "buy", 2, 70)  # armed again with the new sign-in

            await human.start()
            kept = await human.place_order("GAMMA", "buy", 2, 70)
            assert await open_ids(http) == [placed.order_id]
        finally:
            await asyncio.gather(bot.close(), human.close())
        await until_open(http, [])
        after = await http.get_order(placed.order_id)
        assert (after.status, after.reason) == ("cancelled", "cancelled_by_user")
        assert await open_ids(human_http) == [kept.order_id]
        await human_http.cancel_order(kept.order_id)

BOT = """
import asyncio, sys
from tickflow.net.client import Session

async def main() -> None:
    async with Session(sys.argv[1], "cod-killed", cancel_on_disconnect=True) as ws:
        for price in (60, 61, 62):
            await ws.place_order("DELTA", "buy", 1, price)
        print("placed", flush=True)
        await asyncio.Event().wait()

asyncio.run(main())
"""


async def test_cancel_on_disconnect_when_the_process_is_killed(server: ServerProcess) -> None:
    bot = await asyncio.create_subprocess_exec(sys.executable, "-c", BOT, server.url,
                                               stdout=asyncio.subprocess.PIPE)
    try:
        assert bot.stdout is not None
        assert await asyncio.wait_for(bot.stdout.readline(), 30) == b"placed\n"
        async with Client(server.url, "cod-killed") as http:
            assert len(await open_ids(http)) == 3
            bot.kill()  # no close frame: the kernel just closes its socket
            await bot.wait()
            await until_open(http, [])
    finally:
        if bot.returncode is None:
            bot.kill()
            await bot.wait()


async def test_cancel_on_disconnect_is_confirmed_or_the_session_stops() -> None:
    """A server that does not say it armed it (one too old to know it) must not be traded on as if it had."""
    sent: list[dict] = []

    async def old_server(ws: web.WebSocketResponse, message: dict) -> None:
        sent.append(message)
        if message["op"] == "auth":
            await ws.send_json({"type": "auth", "account": "ola", "updates": True})

    async with not_tickflow(old_server) as url:
        with pytest.raises(AuthFailed, match="cancel on disconnect"):
            async with Session(url, "ola", cancel_on_disconnect=True):
                pass
    assert sent[0] == {"op": "auth", "token": "ola", "cancelOnDisconnect": True}
    with pytest.raises(ValueError, match="needs a token"):
        Session("http://127.0.0.1:9", cancel_on_disconnect=True)
