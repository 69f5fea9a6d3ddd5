"""Batches and mass quotes against a real server process (issue 28): over WebSocket and HTTP, in order and
with nothing between a batch's ops, each op answered as it would be alone, and nothing refused logged."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from server_process import ServerProcess
from tickflow.net.wire import batches


def order(side: str = "buy", price: int = 100, qty: int = 1, symbol: str = "ACME", **kw: Any) -> dict[str, Any]:
    return {"op": "order", "symbol": symbol, "side": side, "price": price, "qty": qty, **kw}


async def call(s: aiohttp.ClientSession, method: str, url: str, account: str | None = None,
               body: Any = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {account}"} if account else {}
    async with s.request(method, url, json=body, headers=headers) as r:
        return r.status, await r.json(content_type=None)


async def seq(s: aiohttp.ClientSession, url: str) -> int:
    return (await call(s, "GET", f"{url}/health"))[1]["seq"]


class Ws:
    """One signed-in WebSocket: send a request, read its answer by id (other messages are kept)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.seen: list[dict[str, Any]] = []

    async def ask(self, message: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({**message, "id": self.next_id})
        return await self.answer(self.next_id)

    async def answer(self, request_id: int, timeout: float = 30) -> dict[str, Any]:
        async with asyncio.timeout(timeout):
            while True:
                msg = json.loads((await self.ws.receive()).data)
                if msg.get("id") == request_id and msg["type"] in ("result", "results"):
                    return msg
                self.seen.append(msg)


async def connect(s: aiohttp.ClientSession, server: ServerProcess, account: str | None = "alice") -> Ws:
    url = server.ws_url + (f"?token={account}" if account else "")
    ws = Ws(await s.ws_connect(url))
    if account:
        hello = json.loads((await ws.ws.receive()).data)
        assert hello["type"] == "auth"
    return ws


async def test_a_batch_answers_each_op_in_order_as_it_would_be_answered_alone(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await connect(s, server)
        _, resting = await call(s, "POST", f"{server.url}/orders", "alice",
                                {"symbol": "ACME", "side": "buy", "price": 90, "qty": 4})
        before = await seq(s, server.url)
        got = await ws.ask({"op": "batch", "ops": [
            order("buy", 95, 5, clientOrderId="b-1"),
            order("sell", 0),  # a bad price: refused alone, the others run
            {"op": "amend", "orderId": resting["orderId"], "qty": 3},
            {"op": "cancel", "orderId": 10**6},
            order("buy", 96, 1, id=7),  # an id of its own
            {"op": "cancelAll", "side": "buy"},
        ]})
        assert got["type"] == "results" and len(got["results"]) == 6
        statuses = [r["status"] for r in got["results"]]
        assert statuses == [200, 400, 200, 404, 400, 200]
        placed, bad, amended, unknown, with_id, cancelled = (r["body"] for r in got["results"])
        assert placed["status"] == "new" and placed["clientOrderId"] == "b-1"
        assert bad["field"] == "price"
        assert amended["qty"] == 3 and amended["orderId"] == resting["orderId"]
        assert unknown["code"] == "unknown_order"
        assert with_id["field"] == "id"
        assert sorted(o["orderId"] for o in cancelled["orders"]) == sorted([resting["orderId"], placed["orderId"]])
        # Three records: the order, the amend and the cancel-all (the refusals took none), one after another.
        assert [placed["seq"], amended["seq"], cancelled["seq"]] == [before + 1, before + 2, before + 3]
        assert await seq(s, server.url) == before + 3


async def test_the_ops_of_a_batch_are_never_interleaved_with_other_clients_commands(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await connect(s, server)

        async def others() -> None:
            for i in range(300):
                await call(s, "POST", f"{server.url}/orders", "bob",
                           {"symbol": "GLOBEX", "side": "buy", "price": 10 + i % 5, "qty": 1})

        noise = asyncio.create_task(others())
        batches: list[list[int]] = []
        while not noise.done() and len(batches) < 200:
            got = await ws.ask({"op": "batch", "ops": [order("buy", 50 + i, 1) for i in range(16)]})
            batches.append([r["body"]["seq"] for r in got["results"]])
        await noise
        assert len(batches) >= 3
        for seqs in batches:
            assert seqs == list(range(seqs[0], seqs[0] + 16))


@pytest.mark.parametrize("message,status,field", [
    ({"op": "batch"}, 400, "ops"),
    ({"op": "batch", "ops": {"op": "order"}}, 400, "ops"),
    ({"op": "batch", "ops": []}, 400, "ops"),
    ({"op": "batch", "ops": [order()] * 257}, 400, "ops"),
    ({"op": "batch", "ops": [order(), 5]}, 400, "ops[1]"),
    ({"op": "batch", "ops": [order(), {"op": "quote", "symbol": "ACME", "bids": [], "asks": []}]}, 400, "ops[1].op"),
    ({"op": "batch", "ops": [order(), {"op": "batch", "ops": [order()]}]}, 400, "ops[1].op"),
    ({"op": "batch", "ops": [order(), {"op": "auth", "token": "x"}]}, 400, "ops[1].op"),
    ({"op": "batch", "ops": [order()], "extra": 1}, 400, "extra"),
])
async def test_a_malformed_batch_is_one_error_and_nothing_of_it_runs(server: ServerProcess, message: dict[str, Any],
                                                                    status: int, field: str) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await connect(s, server)
        before = await seq(s, server.url)
        got = await ws.ask(message)
        assert (got["type"], got["status"], got["body"].get("field")) == ("result", status, field), got
        assert await seq(s, server.url) == before


async def test_a_batch_needs_a_sign_in_and_room_in_flight(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        anonymous = await connect(s, server, None)
        got = await anonymous.ask({"op": "batch", "ops": [order()]})
        assert (got["type"], got["status"]) == ("result", 401)
        got = await anonymous.ask({"op": "batch", "ops": "not even a list"})
        assert got["status"] == 401  # signed out is said first
        status, body = await call(s, "POST", f"{server.url}/batch", None, {"ops": [order()]})
        assert status == 401


async def test_a_retried_client_order_id_inside_a_batch_answers_the_original(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await connect(s, server)
        first = await ws.ask({"op": "batch", "ops": [order("buy", 80, 2, clientOrderId="r-1"),
                                                      order("buy", 80, 2, clientOrderId="r-1"),
                                                      order("buy", 80, 3, clientOrderId="r-1")]})
        one, same, other = first["results"]
        assert one["status"] == same["status"] == 200 and same["body"] == one["body"]
        assert other["status"] == 409 and other["body"]["original"] == one["body"]
        again = await ws.ask({"op": "batch", "ops": [order("buy", 80, 2, clientOrderId="r-1")]})
        assert again["results"][0] == one
        _, book = await call(s, "GET", f"{server.url}/book/ACME")
        assert book["bids"] == [{"price": 80, "qty": 2, "orders": 1}]


async def test_post_batch_over_http(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ops = [order("sell", 120, 2), {"op": "cancel", "orderId": 999_999}, order("buy", 120, 1)]
        status, body = await call(s, "POST", f"{server.url}/batch", "alice", {"ops": ops})
        assert status == 200
        assert [r["status"] for r in body["results"]] == [200, 404, 200]
        assert body["results"][2]["body"]["status"] == "new"  # alice's own ask: self-trade prevention
        assert body["results"][2]["body"]["fills"] == []
        before = await seq(s, server.url)
        for bad in ({"ops": "x"}, {"ops": [order()], "more": 1}, [order()], {"ops": [{"op": "ping"}]}):
            status, err = await call(s, "POST", f"{server.url}/batch", "alice", bad)
            assert status == 400 and err["error"], bad
        assert await seq(s, server.url) == before


async def test_a_quote_replaces_the_makers_levels_in_one_command(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        mm = await connect(s, server, "mm")
        before = await seq(s, server.url)
        got = await mm.ask({"op": "quote", "symbol": "ACME", "bids": [[99, 5], [98, 5]], "asks": [[101, 5]]})
        assert got["status"] == 200, got
        body = got["body"]
        assert body["symbol"] == "ACME" and body["seq"] == before + 1
        assert [(o["side"], o["price"], o["qty"], o["status"]) for o in body["orders"]] == [
            ("buy", 99, 5, "new"), ("buy", 98, 5, "new"), ("sell", 101, 5, "new")]
        first_bid = body["orders"][0]["orderId"]
        # A taker lifts part of the ask; the maker re-quotes: the bid at 99 keeps its order, 98 is pulled.
        _, taken = await call(s, "POST", f"{server.url}/orders", "taker",
                              {"symbol": "ACME", "side": "buy", "price": 101, "qty": 2})
        assert taken["filledQty"] == 2
        status, again = await call(s, "PUT", f"{server.url}/quotes/ACME", "mm",
                                   {"bids": [[99, 5]], "asks": [[101, 3], [102, 1]]})
        assert status == 200, again
        kept = {(o["side"], o["price"]): o for o in again["orders"]}
        assert kept[("buy", 99)]["orderId"] == first_bid and kept[("buy", 99)]["status"] == "new"
        assert kept[("buy", 98)]["status"] == "cancelled" and kept[("buy", 98)]["reason"] == "replaced_by_quote"
        assert kept[("sell", 101)]["status"] == "partially_filled" and kept[("sell", 101)]["remainingQty"] == 3
        _, book = await call(s, "GET", f"{server.url}/book/ACME")
        assert book["bids"] == [{"price": 99, "qty": 5, "orders": 1}]
        assert book["asks"] == [{"price": 101, "qty": 3, "orders": 1}, {"price": 102, "qty": 1, "orders": 1}]
        _, listed = await call(s, "GET", f"{server.url}/orders", "mm")
        assert sorted((o["side"], o["price"]) for o in listed["orders"]) == [("buy", 99), ("sell", 101), ("sell", 102)]
        # Quote orders are orders: a cancel-all takes them.
        _, swept = await call(s, "DELETE", f"{server.url}/orders", "mm")
        assert len(swept["orders"]) == 3


@pytest.mark.parametrize("quote,field,code", [
    ({"bids": [[100, 1]], "asks": [[100, 1]]}, "bids", "crossed_quote"),
    ({"bids": [[99, 1], [99, 2]], "asks": []}, "bids[1]", "repeated_price"),
    ({"bids": [[p, 1] for p in range(1, 66)], "asks": []}, "bids", "too_many_levels"),
    ({"bids": [[0, 1]], "asks": []}, "bids[0]", None),
    ({"bids": [[99, 1.5]], "asks": []}, "bids[0]", None),
    ({"bids": [[99]], "asks": []}, "bids[0]", None),
    ({"bids": "99", "asks": []}, "bids", None),
    ({"bids": []}, "asks", None),
    ({"bids": [], "asks": [], "sides": 2}, "sides", None),
])
async def test_a_bad_quote_is_refused_and_changes_nothing(server: ServerProcess, quote: dict[str, Any],
                                                          field: str, code: str | None) -> None:
    async with aiohttp.ClientSession() as s:
        mm = await connect(s, server, "mm")
        await mm.ask({"op": "quote", "symbol": "ACME", "bids": [[90, 1]], "asks": [[110, 1]]})
        before = await seq(s, server.url)
        got = await mm.ask({"op": "quote", "symbol": "ACME", **quote})
        assert (got["status"], got["body"].get("field"), got["body"].get("code")) == (400, field, code), got
        status, body = await call(s, "PUT", f"{server.url}/quotes/ACME", "mm", quote)
        assert (status, body.get("field"), body.get("code")) == (400, field, code), body
        status, body = await call(s, "PUT", f"{server.url}/quotes/NOPE", "mm", {"bids": [], "asks": []})
        assert (status, body.get("field")) == (400, "symbol")
        assert await seq(s, server.url) == before
        _, book = await call(s, "GET", f"{server.url}/book/ACME")
        assert (book["bids"], book["asks"]) == ([{"price": 90, "qty": 1, "orders": 1}],
                                                [{"price": 110, "qty": 1, "orders": 1}])


async def test_a_quote_sends_private_updates_and_cancel_on_disconnect_takes_it(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        watcher = await connect(s, server, "mm")
        ws = await s.ws_connect(server.ws_url + "?token=mm&cancelOnDisconnect=true")
        mm = Ws(ws)
        await mm.ws.receive()
        got = await mm.ask({"op": "quote", "symbol": "ACME", "bids": [[97, 2]], "asks": [[103, 2]]})
        ids = {o["orderId"] for o in got["body"]["orders"]}
        seen: set[int] = set()
        async with asyncio.timeout(30):
            while seen != ids:
                msg = json.loads((await watcher.ws.receive()).data)
                if msg["type"] == "order":
                    seen.add(msg["order"]["orderId"])
        await ws.close()
        async with asyncio.timeout(30):
            while True:
                _, listed = await call(s, "GET", f"{server.url}/orders", "mm")
                if not listed["orders"]:
                    break
                await asyncio.sleep(0.05)


async def test_order_updates_come_as_lists_when_asked_and_one_by_one_otherwise(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        listed = Ws(await s.ws_connect(server.ws_url + "?token=mm&updates=lists"))
        hello = json.loads((await listed.ws.receive()).data)
        assert hello["updates"] == "lists"
        each = await connect(s, server, "mm")
        got = await listed.ask({"op": "batch", "ops": [order("buy", 90 - i, 1) for i in range(5)]})
        ids = [r["body"]["orderId"] for r in got["results"]]

        async def updates(ws: Ws, kind: str) -> list[int]:
            seen: list[int] = [m for msg in ws.seen if msg["type"] == kind
                               for m in ([o["orderId"] for o in msg["orders"]] if kind == "orders"
                                         else [msg["order"]["orderId"]])]
            async with asyncio.timeout(30):
                while len(seen) < len(ids):
                    msg = json.loads((await ws.ws.receive()).data)
                    if msg["type"] == "orders":
                        seen += [o["orderId"] for o in msg["orders"]]
                    elif msg["type"] == "order":
                        seen.append(msg["order"]["orderId"])
            return seen

        assert await updates(listed, "orders") == ids
        assert await updates(each, "order") == ids
        assert not [m for m in listed.seen if m["type"] == "order"]
        await listed.ws.send_json({"op": "auth", "token": "mm", "updates": "some"})
        async with asyncio.timeout(30):
            while (msg := json.loads((await listed.ws.receive()).data))["type"] != "error":
                pass
        assert msg["field"] == "updates"


@settings(max_examples=300, deadline=None, derandomize=True, database=None)
@given(st.lists(st.one_of(
    st.fixed_dictionaries({"op": st.just("order"), "symbol": st.sampled_from(["ACME", "NOPE"]),
                           "side": st.sampled_from(["buy", "sell"]), "qty": st.integers(-1, 5)},
                          optional={"price": st.one_of(st.none(), st.integers(0, 3), st.floats(1, 3)),
                                    "type": st.sampled_from(["limit", "market", "stop"]),
                                    "tif": st.sampled_from(["gtc", "ioc", "fok"]), "postOnly": st.booleans(),
                                    "clientOrderId": st.sampled_from(["a", "b c", ""]), "extra": st.just(1)}),
    st.fixed_dictionaries({"op": st.sampled_from(["cancel", "amend"]), "orderId": st.integers(-1, 3)},
                          optional={"qty": st.integers(0, 3), "price": st.integers(0, 3), "id": st.just(1)}),
    st.fixed_dictionaries({"op": st.just("cancelAll")},
                          optional={"symbol": st.sampled_from(["ACME", "NOPE"]), "side": st.sampled_from(["buy", "x"])}),
), min_size=0, max_size=6), st.one_of(st.integers(-(2**64), 2**64), st.text(max_size=3), st.booleans()))
def test_the_fast_way_in_gives_exactly_the_commands_of_the_general_way(ops: list[dict[str, Any]], request_id: Any
                                                                      ) -> None:
    raw = json.dumps({"op": "batch", "id": request_id, "ops": ops})
    fast = batches.fast_batch(raw, "alice", {"ACME"})
    if fast is None:
        return  # the general way answers it (every path of it is tested above)
    assert fast[0] == request_id and type(request_id) in (int, str) and type(request_id) is not bool
    assert fast[1] == [batches.batch_command("alice", op, {"ACME"}) for op in ops]
    assert fast[2] == batches.rated(ops)


def test_a_batch_as_bots_send_it_takes_the_fast_way_in() -> None:
    ops = [{"op": "order", "symbol": "ACME", "side": "buy", "qty": 1, "price": 5, "clientOrderId": "k1"},
           {"op": "cancel", "orderId": 7}, {"op": "amend", "orderId": 8, "qty": 2}, {"op": "cancelAll", "side": "sell"}]
    fast = batches.fast_batch(json.dumps({"op": "batch", "id": "b1", "ops": ops}), "alice", {"ACME"})
    assert fast is not None and fast[0] == "b1" and len(fast[1]) == 4 and fast[2] == 2
