"""The WebSocket feed and order entry against a real server process, and the fan-out's rules with no
socket at all: `Subscriber` and `Feed` (tickflow/net/exchange/fanout.py) are sans-I/O, so the tests of
parts, resyncs and buffers feed them outcomes and read what they queued."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import random
import socket
import time
from typing import Any

import aiohttp
import pytest
from helpers.wait import turns, until

from server_process import ServerProcess
from tickflow.core.types import LevelChange, OrderState, Outcome, Trade
from tickflow.net.exchange.fanout import UPDATE_LIST, Feed, Subscriber
from tickflow.net.exchange.mirror import PART_LEVELS, PART_TRADES, SLICE_LEVELS
from tickflow.net.gateway.websocket import write_loop


class FeedMirror:
    """A subscriber's view: the snapshot, then every update applied in order, with gap checks."""

    def __init__(self) -> None:
        self.bids: dict[int, tuple[int, int]] = {}
        self.asks: dict[int, tuple[int, int]] = {}
        self.seq = -1
        self.trades: list[dict[str, Any]] = []
        self.gaps = 0

    def apply(self, msg: dict[str, Any]) -> None:
        if msg["type"] == "snapshot":
            self.bids = {p: (q, n) for p, q, n in msg["bids"]}
            self.asks = {p: (q, n) for p, q, n in msg["asks"]}
            self.seq = msg["seq"]
        elif msg["type"] == "update":
            if msg["prevSeq"] != self.seq:
                self.gaps += 1
            self.seq = msg["seq"]
            for side, levels in (("bids", self.bids), ("asks", self.asks)):
                for p, q, n in msg[side]:
                    if q:
                        levels[p] = (q, n)
                    else:
                        levels.pop(p, None)
            self.trades.extend(msg["trades"])

    def book(self) -> dict[str, Any]:
        return {"bids": [{"price": p, "qty": self.bids[p][0], "orders": self.bids[p][1]}
                         for p in sorted(self.bids, reverse=True)],
                "asks": [{"price": p, "qty": self.asks[p][0], "orders": self.asks[p][1]} for p in sorted(self.asks)]}


def queued(sub: Subscriber) -> list[bytes]:
    """The feed messages waiting for `sub`, a message in parts as its parts."""
    return [part for _, message, _ in sub.buffer for part in (message if isinstance(message, tuple) else (message,))]


async def receive_until(ws: aiohttp.ClientWebSocketResponse, done: Any, timeout: float = 10.0) -> list[dict[str, Any]]:
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not done(got):
        left = deadline - time.monotonic()
        assert left > 0, f"timed out; last messages: {got[-3:]}"
        msg = await ws.receive(timeout=left)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        got.append(json.loads(msg.data))
    return got


def test_an_update_too_big_for_one_message_is_sent_in_parts_any_reader_puts_together() -> None:
    """(The feed alone, no server.) An update over PART_LEVELS levels or PART_TRADES trades goes in
    parts: the first says how many `more` follow, the rest are updates with seq = prevSeq, so a reader
    that applies updates by the rules (FeedMirror) rebuilds it; each part is under 1 MiB, removals come
    first, and between parts the book is never crossed. (A deep snapshot: tests/test_deep_book.py.)"""
    feed = Feed()
    bids = [LevelChange("X", "buy", 100_000 + i, 1 + i % 9, 1 + i % 3) for i in range(20_000)]
    asks = [LevelChange("X", "sell", 200_000 + i, 5, 2) for i in range(3)]
    feed.load("X", 7, bids, asks, [])
    sub = Subscriber(feed)  # no socket: the fan-out is sans-I/O
    feed.subscribe(sub, "X")
    mirror = FeedMirror()
    while (message := sub.next_message()) is not None:
        assert isinstance(message, bytes)
        mirror.apply(json.loads(message))
    assert mirror.gaps == 0 and mirror.seq == 7
    assert mirror.bids == {c.price: (c.qty, c.orders) for c in bids}
    assert mirror.asks == {c.price: (c.qty, c.orders) for c in asks}

    # One sell through every bid, resting at 50: 20,001 level changes and 1,100 trades in one update.
    sub.buffer.clear()
    trades = [Trade(i, "X", 120_000 - i, 1, 10 + i, 9, "b", "s", "sell", 8, 1_000) for i in range(1, 1_101)]
    gone = [LevelChange("X", "buy", c.price, 0, 0) for c in reversed(bids)]
    feed.publish([Outcome(8, None, None, trades, [*gone, LevelChange("X", "sell", 50, 9, 1)], [])])
    parts = queued(sub)
    head, *rest = map(json.loads, parts)
    assert max(map(len, parts)) < 1 << 20
    assert (head["seq"], head["prevSeq"], head["more"]) == (8, 7, 2)  # 1,100 trades, 512 a part
    assert [(m["seq"], m["prevSeq"]) for m in rest] == [(8, 8)] * 2
    for message in (head, *rest):
        mirror.apply(message)
        assert not mirror.bids or max(mirror.bids) < min(mirror.asks)
    assert mirror.gaps == 0 and mirror.seq == 8 and mirror.bids == {}
    assert mirror.asks == {50: (9, 1), **{c.price: (c.qty, c.orders) for c in asks}}
    assert [t["tradeId"] for t in mirror.trades] == list(range(1, 1_101))


def test_every_part_is_under_1_mib_whatever_the_numbers() -> None:
    """The bound PART_LEVELS and PART_TRADES promise, at the widest numbers JSON can be given here:
    10-digit prices, 63-bit totals and ids, a 16-character symbol."""
    feed = Feed()
    symbol, big = "S" * 16, 2**63 - 1
    feed.add_symbol(symbol, 0)
    sub = Subscriber(feed)  # no socket: the fan-out is sans-I/O
    feed.subscribe(sub, symbol)
    sub.buffer.clear()
    levels = [LevelChange(symbol, side, 1_000_000_000 + i, big, big) for side in ("buy", "sell")
              for i in range(PART_LEVELS)]
    trades = [Trade(big - i, symbol, 1_000_000_000, 1_000_000_000, big, big, "b", "s", "sell", big, big)
              for i in range(2 * PART_TRADES)]
    feed.publish([Outcome(1, None, None, trades, levels, [])])
    parts = queued(sub)
    assert len(parts) == 2 and max(map(len, parts)) < 1 << 20
    feed.subscribe(sub, symbol)  # the book now: PART_LEVELS a side, in slices of SLICE_LEVELS a side
    snapshot = []  # in place of the update still queued
    while (message := sub.next_message()) is not None:
        assert isinstance(message, bytes)
        snapshot.append(message)
    assert len(snapshot) == PART_LEVELS // SLICE_LEVELS and max(map(len, snapshot)) < 1 << 20


async def test_a_resync_snapshot_carries_the_seq_of_the_levels_it_holds() -> None:
    """A send that resyncs a slow subscriber snapshots the book with the batch being published in it:
    its seq must be that batch's, or the client holds a wrong seq and takes the next update for a gap."""
    feed = Feed(buffer_messages=2)
    feed.add_symbol("X", 10)
    sub = Subscriber(feed)  # no socket: the fan-out is sans-I/O
    feed.subscribe(sub, "X")
    sub.blocked = True  # its socket is backed up: a full buffer now means a resync
    for seq, price in ((11, 100), (12, 99), (13, 98)):
        feed.publish([Outcome(seq, None, None, [], [LevelChange("X", "buy", price, 5, 1)], [])])
    messages = [json.loads(m) for m in queued(sub)]
    snapshot = next(m for m in messages if m["type"] == "snapshot")
    assert messages[0] == {"type": "resync", "reason": "slow consumer"}
    assert snapshot["seq"] == feed.mirrors["X"].seq == 13
    assert [level[0] for level in snapshot["bids"]] == [100, 99, 98]


def test_a_message_in_parts_counts_once_against_the_subscribers_buffer() -> None:
    """One update of many trades goes in many parts; it is one message behind, not dozens."""
    feed = Feed(buffer_messages=4)
    feed.add_symbol("X", 0)
    sub = Subscriber(feed)
    feed.subscribe(sub, "X")
    sub.blocked = True
    trades = [Trade(i, "X", 100, 1, 10 + i, 9, "b", "s", "sell", 1, 1_000) for i in range(1, 10 * PART_TRADES)]
    feed.publish([Outcome(1, None, None, trades, [LevelChange("X", "buy", 100, 5, 1)], [])])
    feed.publish([Outcome(2, None, None, [], [LevelChange("X", "buy", 101, 5, 1)], [])])
    assert len(sub.buffer) == 3 and len(queued(sub)) == 1 + 10 + 1  # snapshot, update in 10 parts, update
    assert feed.stats_resyncs == 0


def _deep_feed(symbols: tuple[str, ...] = ("X", "Y"), levels: int = 500, **limits: int) -> tuple[Feed, Subscriber]:
    feed = Feed(**limits)
    for symbol in symbols:
        feed.add_symbol(symbol, 0)
        feed.publish([Outcome(1, None, None, [], [LevelChange(symbol, "buy", 1000 + p, 5, 1) for p in range(levels)], [])])
    sub = Subscriber(feed)  # no socket: the fan-out is sans-I/O
    return feed, sub


def test_subscribing_again_replaces_what_is_queued_for_the_symbol() -> None:
    """A client that sends subscribe over and over without reading gets one fresh snapshot, not one
    whole book per request piled up in the server's memory."""
    feed, sub = _deep_feed()
    feed.subscribe(sub, "X")
    feed.subscribe(sub, "Y")
    feed.publish([Outcome(2, None, None, [], [LevelChange("Y", "buy", 999, 5, 1)], [])])
    feed.publish([Outcome(3, None, None, [], [LevelChange("X", "buy", 998, 5, 1)], [])])
    one_snapshot = len(feed.snapshot("X")[0])
    for _ in range(200):
        feed.subscribe(sub, "X")
    messages = [json.loads(m) for m in queued(sub)]
    assert [(m["type"], m["symbol"]) for m in messages] == [("snapshot", "Y"), ("update", "Y"), ("snapshot", "X")]
    assert messages[2]["seq"] == 3 and messages[2]["bids"][-1] == [998, 5, 1]  # the book as it is now
    assert sub.buffered == sum(map(len, queued(sub))) < 3 * one_snapshot
    assert sub.snapshots_total == sum(sub.snapshot_bytes.values()) == len(queued(sub)[0]) + len(queued(sub)[2])
    assert feed.stats_resyncs == 0


def test_unsubscribing_drops_what_is_queued_for_the_symbol() -> None:
    feed, sub = _deep_feed()
    feed.subscribe(sub, "X")
    feed.subscribe(sub, "Y")
    feed.unsubscribe(sub, "X")
    assert [json.loads(m)["symbol"] for m in queued(sub)] == ["Y"]
    assert sub.buffered == len(queued(sub)[0])


async def test_the_buffer_is_bounded_in_bytes_as_well_as_messages() -> None:
    """Few but huge updates (deep sweeps) resync a subscriber once they pass the byte bound beyond a
    fresh snapshot, even in one burst before its writer ever ran."""
    feed, sub = _deep_feed(("X",), levels=10, buffer_messages=1000, buffer_bytes=100_000)
    feed.subscribe(sub, "X")
    for seq in range(2, 14):  # each update 1,000 levels, ~20 KB: about two resyncs, not the fourth that closes
        feed.publish([Outcome(seq, None, None, [], [LevelChange("X", "sell", 5000 + 1000 * seq + p, 1, 1)
                                                   for p in range(1000)], [])])
        assert sub.buffered <= 100_000 + sub.snapshot_bytes["X"] + 25_000
    assert not sub.closed and feed.stats_resyncs >= 1 and json.loads(queued(sub)[0]) == {"type": "resync", "reason": "slow consumer"}
    assert sub.buffered == sum(map(len, queued(sub)))


async def test_nothing_is_sent_between_the_parts_of_a_message() -> None:
    """Answers go before the feed, but not into the middle of a message in parts."""
    sent: list[str] = []

    class Socket:
        async def send_frame(self, data: bytes, kind: object) -> None:
            sent.append(json.loads(data).get("type", "?"))
            if len(sent) == 2:  # an answer arrives while the parts are going out
                sub.reply(b'{"type": "result", "id": 1}')
            await asyncio.sleep(0)

    feed = Feed()
    feed.add_symbol("X", 0)
    sub = Subscriber(feed)
    feed.subscribe(sub, "X")
    trades = [Trade(i, "X", 100, 1, 10 + i, 9, "b", "s", "sell", 1, 1_000) for i in range(1, 3 * PART_TRADES)]
    feed.publish([Outcome(1, None, None, trades, [LevelChange("X", "buy", 100, 5, 1)], [])])
    writer = asyncio.create_task(write_loop(sub, Socket()))  # type: ignore[arg-type]
    await turns(50)
    sub.closed = True
    sub.wake.set()
    await writer
    assert sent == ["snapshot", "update", "update", "update", "result"]


def test_order_updates_as_lists_come_one_message_per_batch_and_account_cut_at_the_list_size() -> None:
    feed = Feed()
    feed.add_symbol("X", 0)
    lists, each, other = Subscriber(feed), Subscriber(feed), Subscriber(feed)
    feed.authenticate(lists, "a", "lists")
    feed.authenticate(each, "a", True)
    feed.authenticate(other, "b", "lists")
    n = 2 * UPDATE_LIST + 5
    cancelled = [OrderState(i, None, "a", "X", "buy", "limit", 100, 1, "gtc", False, "cancelled", 0, 1, [], None, 1, 1)
                 for i in range(1, n + 1)]
    feed.publish([Outcome(1, None, None, [], [], cancelled)])  # type: ignore[arg-type]
    messages = [json.loads(m) for m in lists.private]
    assert [len(m["orders"]) for m in messages] == [UPDATE_LIST, UPDATE_LIST, 5]
    assert [o["orderId"] for m in messages for o in m["orders"]] == list(range(1, n + 1))
    assert [json.loads(m)["order"]["orderId"] for m in each.private] == list(range(1, n + 1))
    assert not other.private


async def test_snapshot_then_updates_reproduce_the_book_and_the_trades(server: ServerProcess) -> None:
    rnd = random.Random(7)
    async with aiohttp.ClientSession() as s:
        # Some resting state before the subscriber arrives, so the snapshot is not empty.
        for i in range(20):
            await s.post(f"{server.url}/orders", headers={"Authorization": f"Bearer a{i % 4}"},
                         json={"symbol": "ACME", "side": rnd.choice(["buy", "sell"]), "price": rnd.randint(95, 105),
                               "qty": rnd.randint(1, 20)})
        ws = await s.ws_connect(server.ws_url)
        await ws.send_json({"op": "subscribe", "symbols": ["ACME"]})
        mirror = FeedMirror()
        (snapshot,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert snapshot["type"] == "snapshot" and snapshot["symbol"] == "ACME"
        mirror.apply(snapshot)
        first_trade_seen = max([t["tradeId"] for t in snapshot["trades"]], default=0)

        async def trader(i: int) -> None:
            for _ in range(40):
                body: dict[str, Any] = {"symbol": "ACME", "side": rnd.choice(["buy", "sell"]),
                                        "qty": rnd.randint(1, 30)}
                if rnd.random() < 0.1:
                    body["type"] = "market"
                else:
                    body["price"] = rnd.randint(95, 105)
                async with s.post(f"{server.url}/orders", json=body, headers={"Authorization": f"Bearer t{i}"}) as r:
                    assert r.status == 200

        await asyncio.gather(*(trader(i) for i in range(8)))
        async with s.get(f"{server.url}/book/ACME?depth=1000") as r:
            book = await r.json()
        updates = await receive_until(ws, lambda got: got and got[-1]["seq"] >= book["seq"])
        for msg in updates:
            mirror.apply(msg)
        assert mirror.gaps == 0
        assert mirror.seq == book["seq"]
        assert mirror.book() == {"bids": book["bids"], "asks": book["asks"]}
        # (GET /trades waits until the trade store holds every durable trade: no pause for it needed.)
        async with s.get(f"{server.url}/trades?symbol=ACME&after={first_trade_seen}&limit=1000") as r:
            stored = await r.json()
        assert mirror.trades == stored and stored
        ids = [t["tradeId"] for t in stored]
        assert ids == list(range(ids[0], ids[0] + len(ids)))  # no holes
        await ws.close()


async def test_order_entry_over_websocket_with_many_in_flight(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(server.ws_url + "?token=bot")
        (hello,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert hello == {"type": "auth", "account": "bot", "updates": True, "cancelOnDisconnect": False}
        for i in range(200):
            await ws.send_json({"op": "order", "id": f"r{i}", "symbol": "GLOBEX", "side": "buy" if i % 2 else "sell",
                                "price": 50 + i % 7, "qty": 1 + i % 5, "clientOrderId": f"bot-{i}"})
        msgs = await receive_until(ws, lambda got: sum(m["type"] == "result" for m in got) >= 200)
        results = {m["id"]: m for m in msgs if m["type"] == "result"}
        assert set(results) == {f"r{i}" for i in range(200)}
        assert all(m["status"] == 200 for m in results.values())
        assert [results[f"r{i}"]["body"]["clientOrderId"] for i in range(200)] == [f"bot-{i}" for i in range(200)]
        # The same clientOrderId again, over WebSocket, answers with the original body.
        await ws.send_json({"op": "order", "id": "again", "symbol": "GLOBEX", "side": "sell", "price": 50, "qty": 1,
                            "clientOrderId": "bot-0"})
        msgs = await receive_until(ws, lambda got: any(m.get("id") == "again" for m in got))
        assert next(m for m in msgs if m.get("id") == "again")["body"] == results["r0"]["body"]
        # Its crossing orders met its own resting ones: self-trade prevention cancelled those, no trades.
        assert all(not r["body"]["fills"] for r in results.values())
        await ws.send_json({"op": "order", "id": 6, "symbol": "GLOBEX", "side": "buy", "price": 10, "qty": 3})
        (placed,) = [m for m in await receive_until(ws, lambda got: any(m.get("id") == 6 for m in got))
                     if m.get("id") == 6]
        oid = placed["body"]["orderId"]
        await ws.send_json({"op": "cancel", "id": 7, "orderId": oid})
        await ws.send_json({"op": "cancel", "id": 8, "orderId": 10**9})
        await ws.send_json({"op": "amend", "id": 9, "orderId": oid, "qty": 0})
        msgs = await receive_until(ws, lambda got: {7, 8, 9} <= {m.get("id") for m in got})
        by_id = {m.get("id"): m for m in msgs if m["type"] == "result"}
        assert by_id[7]["status"] == 200 and by_id[7]["body"]["status"] == "cancelled"
        assert by_id[8]["status"] == 404
        assert by_id[9]["status"] == 400 and by_id[9]["body"]["field"] == "qty"
        await ws.close()


async def test_a_failed_auth_signs_the_connection_out(server: ServerProcess) -> None:
    """A client that switches accounts and mistypes the token must not go on trading as the old account."""
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(server.ws_url + "?token=switcher")
        await receive_until(ws, lambda got: any(m["type"] == "auth" for m in got))
        for bad in ({"token": "no such name!"}, {"token": "bob", "updates": "yes"}):
            await ws.send_json({"op": "auth", **bad})
            await ws.send_json({"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 10, "qty": 1})
            msgs = await receive_until(ws, lambda got: any(m["type"] == "result" for m in got))
            assert [m["type"] for m in msgs] == ["error", "result"] and msgs[1]["status"] == 401, msgs
            await ws.send_json({"op": "auth", "token": "switcher"})
            await receive_until(ws, lambda got: any(m["type"] == "auth" for m in got))
        async with s.get(f"{server.url}/orders", headers={"Authorization": "Bearer switcher"}) as r:
            assert (await r.json())["orders"] == []
        await ws.close()


async def test_private_updates_reach_the_resting_orders_owner(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(server.ws_url)
        await ws.send_json({"op": "auth", "token": "alice"})
        await receive_until(ws, lambda got: got and got[-1]["type"] == "auth")
        async with s.post(f"{server.url}/orders", json={"symbol": "ACME", "side": "sell", "price": 120, "qty": 10},
                          headers={"Authorization": "Bearer alice"}) as r:
            rest = await r.json()
        async with s.post(f"{server.url}/orders", json={"symbol": "ACME", "side": "buy", "price": 120, "qty": 4},
                          headers={"Authorization": "Bearer bob"}) as r:
            assert (await r.json())["filledQty"] == 4
        msgs = await receive_until(ws, lambda got: sum(m["type"] == "order" for m in got) >= 2)
        orders = [m["order"] for m in msgs if m["type"] == "order"]
        assert orders[0]["orderId"] == rest["orderId"] and orders[0]["status"] == "new"
        assert orders[1]["orderId"] == rest["orderId"] and orders[1]["status"] == "partially_filled"
        assert orders[1]["filledQty"] == 4 and orders[1]["fills"][0]["qty"] == 4
        assert orders[1]["fills"][0]["liquidity"] == "maker"  # bob's answer said taker for the same trade
        assert all(o["account"] == "alice" for o in orders)  # bob's own order is not sent to alice
        await ws.close()


async def test_garbage_gets_an_error_and_the_connection_keeps_working(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(server.ws_url)
        for junk in ("{not json", "[1,2]", '"hello"', '{"op": "dance"}', '{"op": "subscribe", "symbols": "ACME"}',
                     '{"op": "subscribe", "symbols": ["NOPE"]}', '{"op": "order", "symbol": "ACME"}',
                     '{"op": "auth", "token": 5}'):
            await ws.send_str(junk)
            (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
            assert reply["type"] == "error" and reply["error"], junk
        await ws.send_json({"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 1, "qty": 1})
        (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert reply["status"] == 401  # order entry needs an account
        await ws.send_bytes(b"\x00\x01")
        (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert reply["type"] == "error"
        await ws.send_json({"op": "ping"})
        assert (await receive_until(ws, lambda got: len(got) >= 1)) == [{"type": "pong"}]
        await ws.send_str("x" * (70 * 1024))  # over the 64 KiB frame limit: closed with a reason
        msg = await ws.receive(timeout=10)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
        assert ws.close_code == 1009
        async with s.get(f"{server.url}/health") as r:
            assert r.status == 200


async def test_odd_order_ids_tokens_and_sizes_over_websocket(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(server.ws_url)
        await ws.send_str("[" * 5000 + "]" * 5000)  # deeper than the JSON decoder recurses
        (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert reply["type"] == "error" and "malformed JSON" in reply["error"]
        await ws.send_str('{"op": "order", "id": 7, "symbol": "ACME", "qty": -1e999}')
        (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert reply == {"type": "error", "error": "malformed JSON: `qty`: number out of range (-1e999)", "field": "qty"}
        await ws.send_json({"op": "auth", "token": "mm\n"})
        (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
        assert reply == {"type": "error", "error": "unknown token", "op": "auth"}
        await ws.send_json({"op": "auth", "token": "mm"})
        await receive_until(ws, lambda got: len(got) >= 1)
        await ws.send_json({"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 10, "qty": 5})
        (placed,) = await receive_until(ws, lambda got: any(m.get("type") == "result" for m in got))
        oid = placed["body"]["orderId"]
        requests = [{"op": "amend", "orderId": oid + 0.7, "qty": 2}, {"op": "cancel", "orderId": str(oid)},
                    {"op": "cancel", "orderId": True}, {"op": "cancel"}, {"op": "cancel", "orderId": [oid]},
                    {"op": "cancel", "orderId": None}]
        for i, request in enumerate(requests, 2):
            await ws.send_json({**request, "id": i})
            got = await receive_until(ws, lambda got: any(m.get("type") == "result" for m in got))
            (result,) = [m for m in got if m.get("type") == "result"]
            assert result["status"] == 400 and result["body"]["field"] == "orderId", (request, result)
        await ws.send_json({"op": "cancel", "id": 9, "orderId": oid, "qty": 1, "y" * 100: 1})
        (result,) = [m for m in await receive_until(ws, lambda got: any(m.get("type") == "result" for m in got))]
        assert (result["status"], result["body"]["field"]) == (400, "qty") and "'qty'" in result["body"]["error"]
        async with s.get(f"{server.url}/orders/{oid}", headers={"Authorization": "Bearer mm"}) as r:
            assert (await r.json())["status"] == "new"  # neither amended nor cancelled
        for long_id in ("x" * 129, 1 << 64):
            await ws.send_json({"op": "cancel", "id": long_id, "orderId": oid})
            (reply,) = await receive_until(ws, lambda got: len(got) >= 1)
            assert reply["type"] == "error" and "id" not in reply and "at most 128" in reply["error"]
        for updates in ("0", "no", "False"):
            other = await s.ws_connect(server.ws_url + f"?token=mm&updates={updates}")
            (reply,) = await receive_until(other, lambda got: len(got) >= 1)
            assert reply["type"] == "error" and reply["field"] == "updates", updates
            await other.close()
        await ws.send_str('{"op": "ping"}' + " " * (64 * 1024 - 14))  # exactly 64 KiB: allowed
        assert (await receive_until(ws, lambda got: len(got) >= 1)) == [{"type": "pong"}]
        await ws.send_str('{"op": "ping"}' + " " * (64 * 1024 - 13))  # one byte over
        await ws.receive(timeout=10)
        assert ws.close_code == 1009
    assert "Traceback" not in server.output()


def metric(text: str, name: str) -> int:
    (line,) = [line for line in text.splitlines() if line.startswith(name + " ")]
    return int(line.split()[1])


def _raw_ws_that_never_reads(port: int, path: str = "/ws") -> socket.socket:
    """A WebSocket client with a tiny receive buffer that subscribes and then stops reading."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
    sock.connect(("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    response = b""
    while b"\r\n\r\n" not in response:
        response += sock.recv(1)
    assert b" 101 " in response
    payload = json.dumps({"op": "subscribe", "symbols": ["ACME"]}).encode()
    mask = os.urandom(4)
    sock.sendall(bytes([0x81, 0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    return sock


async def test_a_slow_subscriber_never_stalls_order_entry_or_other_viewers(tmp_path: Any) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--ws-buffer", "64"]).start()
    slow = _raw_ws_that_never_reads(server.port)
    try:
        async with aiohttp.ClientSession() as s:
            viewer = await s.ws_connect(server.ws_url)
            await viewer.send_json({"op": "subscribe", "symbols": ["ACME"]})
            mirror = FeedMirror()
            trader = await s.ws_connect(server.ws_url + "?token=trader")
            await receive_until(trader, lambda got: len(got) >= 1)

            async def read_viewer() -> None:
                async for msg in viewer:
                    mirror.apply(json.loads(msg.data))

            reader = asyncio.create_task(read_viewer())
            resynced = 0
            sent = 0
            started = time.monotonic()
            # Keep trading until the server has given up on the slow client (bounded in count and time).
            while sent < 60_000 and time.monotonic() - started < 60:
                for _ in range(10):  # small bursts: many batches, so many feed messages
                    for i in range(10):
                        await trader.send_json({"op": "order", "id": sent + i, "symbol": "ACME",
                                                "side": "buy" if (sent + i) % 2 else "sell",
                                                "price": 1000 + (sent + i) % 300, "qty": 1})
                    await receive_until(trader, lambda got: sum(m["type"] == "result" for m in got) >= 10, 30)
                    sent += 10
                async with s.get(f"{server.url}/metrics") as r:
                    text = await r.text()
                resynced = metric(text, "tickflow_websocket_resyncs_total")
                clients = metric(text, "tickflow_websocket_clients")
                if resynced > 3 and clients == 2:
                    break
            assert resynced > 3 and clients == 2, f"slow client not dropped after {sent} orders"
            async with s.get(f"{server.url}/book/ACME?depth=1000") as r:
                book = await r.json()
            await until(lambda: mirror.seq >= book["seq"], interval=0.05,
                        message=lambda: f"the viewer at seq {book['seq']} (it is at {mirror.seq})")
            assert mirror.gaps == 0 and mirror.book() == {"bids": book["bids"], "asks": book["asks"]}
            reader.cancel()
    finally:
        slow.close()
        server.kill()


async def test_a_flood_of_subscribes_that_is_never_read_holds_one_snapshot(server: ServerProcess) -> None:
    """Each subscribe answers with the whole book; a client that repeats it without reading must not
    make the server hold a book per request (hundreds of MB from a few hundred KB of requests)."""
    async with aiohttp.ClientSession() as s:
        trader = await s.ws_connect(server.ws_url + "?token=maker")
        await receive_until(trader, lambda got: len(got) >= 1)
        for i in range(1500):  # a deep book: 1,500 levels
            await trader.send_json({"op": "order", "id": i, "symbol": "GLOBEX", "side": "sell", "price": 20_000 + i, "qty": 1})
        await receive_until(trader, lambda got: sum(m["type"] == "result" for m in got) >= 1500, 30)
        viewer = await s.ws_connect(server.ws_url)
        await viewer.send_json({"op": "subscribe", "symbols": ["GLOBEX"]})
        snapshot = await viewer.receive(timeout=10)
        assert json.loads(snapshot.data)["type"] == "snapshot"
        async with s.get(f"{server.url}/metrics") as r:
            received = metric(await r.text(), "tickflow_websocket_messages_total")
        sock = _raw_ws_that_never_reads(server.port)  # it subscribes to ACME: one more message
        try:
            sock.sendall(b"".join(_masked_text_frame(b'{"op": "subscribe", "symbols": ["GLOBEX"]}') for _ in range(400)))
            async def all_received() -> str | None:
                async with s.get(f"{server.url}/metrics") as r:
                    text = await r.text()
                return text if metric(text, "tickflow_websocket_messages_total") >= received + 401 else None

            text = await until(all_received, 30, interval=0.1, message="the server to read the 401 messages")
            assert metric(text, "tickflow_websocket_messages_total") >= received + 401
            assert metric(text, "tickflow_websocket_buffered_bytes") < 3 * len(snapshot.data)  # was 400 books
            async with s.get(f"{server.url}/health") as r:
                assert r.status == 200
        finally:
            sock.close()
    assert "Traceback" not in server.output()


def _read_frames(sock: socket.socket, done: Any, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Text frames from a raw WebSocket (the server's are unmasked) until `done(messages)`."""
    sock.settimeout(timeout)
    data = b""
    messages: list[dict[str, Any]] = []

    def need(n: int) -> bytes:
        nonlocal data
        while len(data) < n:
            chunk = sock.recv(65536)
            if not chunk:
                raise ConnectionError(f"closed after {len(messages)} messages")
            data += chunk
        out, data = data[:n], data[n:]
        return out

    while not done(messages):
        first, second = need(2)
        length = second & 0x7F
        if length == 126:
            length = int.from_bytes(need(2), "big")
        elif length == 127:
            length = int.from_bytes(need(8), "big")
        payload = need(length)
        if first & 0x0F == 0x1:
            messages.append(json.loads(payload))
        elif first & 0x0F == 0x8:
            raise ConnectionError(f"closed by the server: {payload[:2].hex()} {payload[2:]!r}")
    return messages


async def test_a_resync_never_drops_a_fill_of_the_subscribers_own_orders(tmp_path: Any) -> None:
    """A slow consumer's market data is dropped and replaced by snapshots; its own order updates are
    not feed data a snapshot replaces, so every fill still reaches it once it reads again."""
    server = ServerProcess(tmp_path / "data", extra=["--ws-buffer", "64"]).start()
    maker = _raw_ws_that_never_reads(server.port, "/ws?token=maker")
    try:
        async with aiohttp.ClientSession() as s:
            resting = []
            for i in range(20):
                async with s.post(f"{server.url}/orders", headers={"Authorization": "Bearer maker"},
                                  json={"symbol": "ACME", "side": "sell", "price": 5000 + i, "qty": 1,
                                        "clientOrderId": f"m{i}"}) as r:
                    resting.append((await r.json())["orderId"])
            trader = await s.ws_connect(server.ws_url + "?token=trader")
            seller = await s.ws_connect(server.ws_url + "?token=seller")
            for ws in (trader, seller):
                await receive_until(ws, lambda got: len(got) >= 1)

            async def call(ws: aiohttp.ClientWebSocketResponse, orders: list[dict[str, Any]]) -> None:
                for i, order in enumerate(orders):
                    await ws.send_json({"op": "order", "id": i, "symbol": "ACME", "qty": 1, **order})
                await receive_until(ws, lambda got: sum(m["type"] == "result" for m in got) >= len(orders), 30)

            async def churn(until_resyncs: int) -> int:
                """Market data for the maker's stalled socket until the server has resynced it: 100
                levels laid and swept at once, so each sweep is one update of 100 levels and trades."""
                for cycle in range(1000):
                    await call(seller, [{"side": "sell", "price": 3000 + i} for i in range(100)])
                    await call(trader, [{"side": "buy", "price": 3099, "qty": 100, "tif": "ioc"}])
                    async with s.get(f"{server.url}/metrics") as r:
                        resyncs = metric(await r.text(), "tickflow_websocket_resyncs_total")
                    if resyncs >= until_resyncs:
                        return resyncs
                raise AssertionError(f"the stalled socket was never resynced ({resyncs} resyncs)")

            await churn(1)  # the maker's socket is backed up: its feed is being dropped
            for i in range(20):  # every resting sell is filled while the maker is not reading
                await trader.send_json({"op": "order", "id": f"take{i}", "symbol": "ACME", "side": "buy",
                                        "price": 5000 + i, "qty": 1, "tif": "ioc"})
            await receive_until(trader, lambda got: sum(m["type"] == "result" for m in got) >= 20, 30)
            resyncs = await churn(2)  # a resync after the fills: before, it dropped their updates
            assert resyncs <= 3, "the maker must still be connected: more resyncs close it"
            await trader.close()
            await seller.close()
        messages = await asyncio.to_thread(
            _read_frames, maker,
            lambda got: any(m["type"] == "resync" for m in got) and {
                m["order"]["orderId"] for m in got if m["type"] == "order" and m["order"]["status"] == "filled"
            } >= set(resting))
        filled = [m["order"]["orderId"] for m in messages if m["type"] == "order" and m["order"]["status"] == "filled"]
        assert sorted(filled) == sorted(resting)  # each fill once
    finally:
        maker.close()
        server.kill()


def _masked_text_frame(payload: bytes) -> bytes:
    mask = os.urandom(4)
    header = bytes([0x81, 0x80 | len(payload)]) if len(payload) < 126 else \
        bytes([0x81, 0x80 | 126]) + len(payload).to_bytes(2, "big")
    return header + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))


async def test_a_client_that_never_reads_its_answers_is_closed_not_buffered_forever(server: ServerProcess) -> None:
    """Every message is answered; a client that keeps sending and never reads would otherwise grow the
    server's memory without bound (answers are not feed data, so no resync can replace them)."""
    sock = _raw_ws_that_never_reads(server.port)
    frames = b"".join(_masked_text_frame(json.dumps({"op": "order", "id": f"request-{i}"}).encode())
                      for i in range(30_000))  # each answered with a 401: it never authenticated

    def send() -> None:
        try:
            sock.sendall(frames)
        except OSError:  # closed by the server part way: what this test wants
            pass

    try:
        sender = asyncio.create_task(asyncio.to_thread(send))
        async with aiohttp.ClientSession() as s:
            async def dropped() -> bool:
                async with s.get(f"{server.url}/metrics") as r:
                    return metric(await r.text(), "tickflow_websocket_clients") == 0

            await until(dropped, 30, interval=0.2, message="the client that does not read to be dropped")
            async with s.get(f"{server.url}/health") as r:
                assert r.status == 200
        await asyncio.wait_for(sender, 30)
    finally:
        sock.close()
    assert "Traceback" not in server.output()


async def test_websockets_over_the_limit_are_refused_with_a_reason_and_let_in_once_one_closes(tmp_path: Any) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--max-websockets", "2", "--max-anonymous-websockets", "2"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            first = await s.ws_connect(server.ws_url)
            second = await s.ws_connect(server.ws_url)
            async with s.get(server.ws_url, headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                                      "Sec-WebSocket-Version": "13",
                                                      "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()}) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "5"
                assert "too many WebSocket connections (2 open" in (await r.json())["error"]
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await s.ws_connect(server.ws_url)
            assert refused.value.status == 503
            # The two let in are served as before, and so is HTTP.
            await second.send_json({"op": "ping"})
            assert (await second.receive_json(timeout=5)) == {"type": "pong"}
            async with s.get(f"{server.url}/metrics") as r:
                text = await r.text()
                assert metric(text, "tickflow_websocket_refused_total") == 2
                assert metric(text, "tickflow_websocket_clients") == 2
            await first.close()
            async def let_in() -> aiohttp.ClientWebSocketResponse | None:
                try:
                    return await s.ws_connect(server.ws_url)
                except aiohttp.WSServerHandshakeError:
                    return None

            # The server notices the close a moment later.
            third = await until(let_in, interval=0.05, message="a closed WebSocket still counts against the limit")
            await third.send_json({"op": "ping"})
            assert (await third.receive_json(timeout=5)) == {"type": "pong"}
            await third.close()
            await second.close()
    finally:
        server.kill()


async def test_a_sweep_of_thousands_of_one_accounts_orders_reaches_it_whole(server: ServerProcess) -> None:
    """One order filling 5,000 of a market maker's resting orders queues 5,000 updates for it at once:
    a burst of a client that reads, not a client that does not (it used to be closed after about 2,500)."""
    n = 5000
    async with aiohttp.ClientSession() as s:
        maker = await s.ws_connect(server.ws_url + "?token=mm")
        await receive_until(maker, lambda got: len(got) >= 1)  # signed in
        for start in range(0, n, 1000):
            for i in range(start, start + 1000):
                await maker.send_json({"op": "order", "id": i, "symbol": "ACME", "side": "sell", "price": 100,
                                       "qty": 1})
            await receive_until(maker, lambda got: sum(m["type"] == "result" for m in got) >= 1000, 30)
        async with s.post(f"{server.url}/orders", json={"symbol": "ACME", "side": "buy", "price": 100, "qty": n},
                          headers={"Authorization": "Bearer taker"}) as r:
            taken = await r.json()
        assert taken["filledQty"] == n
        filled: set[Any] = set()
        while len(filled) < n:
            msg = await maker.receive(timeout=10)
            assert msg.type is aiohttp.WSMsgType.TEXT, (msg.type, msg.data, msg.extra, len(filled))
            update = json.loads(msg.data)
            if update["type"] == "order" and update["order"]["status"] == "filled":
                filled.add(update["order"]["orderId"])
        await maker.send_json({"op": "ping"})
        assert (await receive_until(maker, lambda got: bool(got) and got[-1]["type"] == "pong"))[-1] == {"type": "pong"}
