"""Batches and mass quotes through the client library against a real `tickflow serve` (127.0.0.1, temp
dir): `Session.batch` / `Session.quote` over the WebSocket and `Client.batch` / `Client.quote` over HTTP.
Each test trades as accounts of its own, so they share one server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
from helpers.wait import until

from tickflow.demo import ServerProcess
from tickflow.net.client import ApiError, Client, Op, Order, OrderChanged, Session, ops


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("batch-server"), symbols=["ACME", "BETA", "GAMMA"],
                         durability="none")
    proc.start()
    yield proc
    proc.kill()


def open_ids(orders: list[Order]) -> set[int]:
    return {o.order_id for o in orders if o.is_open}


# ---------------------------------------------------------------- batches over the WebSocket


async def test_session_batch_answers_each_op_in_its_place_and_the_tracker_learns_them(server: ServerProcess) -> None:
    async with Session(server.url, "batch-ws", updates=False) as ws:
        resting = await ws.place_order("ACME", "buy", 7, 8000)
        results = await ws.batch([
            ops.order("ACME", "buy", 5, 8010, client_order_id="bw-1"),
            ops.order("ACME", "sell", 5, 12000),
            ops.cancel(resting.order_id),
            ops.amend(987_654_321, qty=3),  # no such order
            ops.order("ACME", "buy", 0, 8000),  # a bad qty: refused in its place, the rest still run
            {"op": "order", "symbol": "ACME", "side": "buy", "qty": 1, "price": 8000, "colour": "red"},
            ops.amend(resting.order_id, qty=3),  # cancelled two ops earlier, in the same batch
        ])
        assert [r.status for r in results] == [200, 200, 200, 404, 400, 400, 409]
        assert [r.op.kind for r in results] == ["order", "order", "cancel", "amend", "order", "order", "amend"]
        first, second, cancelled = (r.order for r in results[:3])
        assert first is not None and first.client_order_id == "bw-1" and first.status == "new"
        assert second is not None and second.side == "sell" and second.price == 12000
        assert cancelled is not None and cancelled.order_id == resting.order_id and cancelled.status == "cancelled"
        assert second.seq >= first.seq and cancelled.seq >= second.seq  # sequenced in the order given
        unknown = results[3].error
        assert unknown is not None and unknown.code == "unknown_order" and unknown.field == "orderId"
        assert results[4].error is not None and results[4].error.field == "qty"
        assert results[5].error is not None and results[5].error.field == "colour"
        closed = results[6].error
        assert closed is not None and closed.code == "not_open"
        assert closed.order is not None and closed.order.order_id == resting.order_id
        # The session holds what the answers said: the two new orders open, the cancelled one gone.
        assert set(ws.orders) == {first.order_id, second.order_id}
        assert open_ids(await ws.http.open_orders()) == {first.order_id, second.order_id}

        # A clientOrderId sent again inside a batch answers its original; a cancel-all's result is its orders.
        again = await ws.batch([ops.order("ACME", "buy", 5, 8010, client_order_id="bw-1"), ops.cancel_all("ACME")])
        assert again[0].order is not None and again[0].order.order_id == first.order_id
        assert again[1].order is None and {o.order_id for o in again[1].orders} == {first.order_id, second.order_id}
        assert all(o.status == "cancelled" for o in again[1].orders)
        assert not ws.orders


async def test_a_batch_refused_as_a_whole_raises_and_runs_nothing(server: ServerProcess) -> None:
    async with Session(server.url, "batch-refused", updates=False) as ws:
        place = ops.order("BETA", "buy", 1, 5000)
        malformed: list[list[Op | dict[str, Any]]] = [
            [], [place] * 257, [place, {"op": "quote", "symbol": "BETA", "bids": [], "asks": []}],
            [place, {"op": "batch", "ops": []}]]
        for bad in malformed:
            with pytest.raises(ApiError) as refused:
                await ws.batch(bad)
            # (docs/protocol.md's example names the field "ops"; the server names the op at fault, "ops[1].op")
            field = refused.value.field or ""
            assert refused.value.status == 400 and (field == "ops" or field.startswith("ops[")), refused.value.body
        assert not ws.orders and not await ws.http.open_orders()
    # Without signing in: 401 as a whole.
    async with Session(server.url) as anonymous:
        with pytest.raises(ApiError) as unsigned:
            await anonymous.batch([place])
        assert unsigned.value.status == 401
    async with Client(server.url) as http:
        assert not (await http.book("BETA")).bids


async def test_many_batches_in_flight_on_one_session(server: ServerProcess) -> None:
    """More ops in flight than one connection may carry (1024) wait their turn in the session: every batch
    is answered, none is refused with 429."""
    async with Session(server.url, "batch-many", updates=False) as ws:
        batches = [[ops.order("GAMMA", "buy", 1, 100 + (b * 100 + i) % 50) for i in range(100)] for b in range(15)]
        answers = await asyncio.gather(*(ws.batch(batch) for batch in batches))
        assert [len(a) for a in answers] == [100] * 15
        assert all(r.ok for a in answers for r in a)
        assert len(ws.orders) == 1500
        await ws.cancel_all("GAMMA")


# ---------------------------------------------------------------- mass quotes over the WebSocket


async def test_session_quote_replaces_the_levels_and_the_tracker_follows(server: ServerProcess) -> None:
    async with Session(server.url, "quote-ws", updates=False) as ws:
        first = await ws.quote("BETA", bids=[(4990, 10), (4980, 20)], asks=[(5010, 10), (5020, 20)])
        assert first.symbol == "BETA" and first.seq > 0
        by_price = {o.price or 0: o for o in first.orders}
        assert sorted(by_price) == [4980, 4990, 5010, 5020]
        assert all(o.is_open and o.seq == first.seq for o in first.orders)
        assert set(ws.orders) == {o.order_id for o in first.orders}

        # Kept as it was, reduced, moved, and a side level gone: the first two keep their orders.
        second = await ws.quote("BETA", bids=[(4990, 10), (4980, 15)], asks=[(5011, 10)])
        now = {o.price or 0: o for o in second.orders if o.is_open}
        assert now[4990].order_id == by_price[4990].order_id
        assert now[4980].order_id == by_price[4980].order_id and now[4980].remaining_qty == 15
        assert now[5011].order_id not in {o.order_id for o in first.orders}
        gone = [o for o in second.orders if not o.is_open]
        assert {o.order_id for o in gone} == {by_price[5010].order_id, by_price[5020].order_id}
        assert all(o.reason == "replaced_by_quote" for o in gone)
        assert set(ws.orders) == {o.order_id for o in now.values()}
        assert open_ids(await ws.http.open_orders("BETA")) == set(ws.orders)

        # An empty side pulls it; both empty pull the quote.
        asks_only = await ws.quote("BETA", bids=[], asks=[(5011, 10)])
        assert {o.side for o in asks_only.orders if o.is_open} == {"sell"}
        await ws.quote("BETA", bids=[], asks=[])
        assert not ws.orders and not await ws.http.open_orders("BETA")


async def test_a_refused_quote_raises_and_changes_nothing(server: ServerProcess) -> None:
    async with Session(server.url, "quote-refused", updates=False) as ws:
        standing = await ws.quote("GAMMA", bids=[(990, 5)], asks=[(1010, 5)])
        for bids, asks, code in (([(1010, 1)], [(1000, 1)], "crossed_quote"),
                                 ([(990, 1), (990, 2)], [(1010, 1)], "repeated_price")):
            with pytest.raises(ApiError) as refused:
                await ws.quote("GAMMA", bids=bids, asks=asks)
            assert refused.value.status == 400 and refused.value.code == code, refused.value.body
        with pytest.raises(ApiError) as too_many:
            await ws.quote("GAMMA", bids=[(900 - i, 1) for i in range(65)], asks=[])
        assert too_many.value.status == 400
        assert set(ws.orders) == {o.order_id for o in standing.orders}
        assert open_ids(await ws.http.open_orders("GAMMA")) == set(ws.orders)
        await ws.quote("GAMMA", bids=[], asks=[])


async def test_quote_orders_trade_like_any_and_the_makers_session_sees_the_fill(server: ServerProcess) -> None:
    async with Session(server.url, "quote-maker") as maker, Client(server.url, "quote-taker") as taker:
        quote = await maker.quote("ACME", bids=[(9_000, 10)], asks=[(11_000, 10), (11_001, 10)])
        best_ask = next(o for o in quote.orders if o.price == 11_000)
        hit = await taker.place_order("ACME", "buy", 15, 11_001, tif="ioc")
        assert hit.filled_qty == 15 and [f.price for f in hit.fills] == [11_000, 11_001]
        # The maker's private updates close its best ask and leave 5 of the next.
        await until(lambda: best_ask.order_id not in maker.orders, message="the filled quote order closed")
        await until(lambda: any(o.remaining_qty == 5 for o in maker.orders.values() if o.price == 11_001),
                    message="the partly filled level at 5")
        # The answer of a quote lists what it kept: the partly filled level, with its open 5.
        requote = await maker.quote("ACME", bids=[(9_000, 10)], asks=[(11_001, 5)])
        kept = [o for o in requote.orders if o.price == 11_001 and o.is_open]
        assert len(kept) == 1 and kept[0].remaining_qty == 5 and kept[0].filled_qty == 5
        await maker.cancel_all("ACME")


async def test_a_session_with_updates_as_lists_follows_its_quotes_and_their_fills(server: ServerProcess) -> None:
    """Signed in with updates="lists": the quote's orders, and the fills the maker did not cause, come as
    `orders` lists; the session reports each as an OrderChanged and holds the orders as they are."""
    async with Session(server.url, "quote-lists", updates="lists") as maker, \
            Client(server.url, "quote-lists-taker") as taker:
        changed: list[Order] = []
        maker.add_listener(lambda e: changed.append(e.order) if isinstance(e, OrderChanged) else None)
        quote = await maker.quote("GAMMA", bids=[(500, 5)], asks=[(700, 5), (701, 5)])
        ids = {o.order_id for o in quote.orders}
        await until(lambda: ids <= {o.order_id for o in changed}, message="the quote's orders as updates")
        await taker.place_order("GAMMA", "buy", 5, 700, tif="ioc")
        filled = next(o.order_id for o in quote.orders if o.price == 700)
        await until(lambda: any(o.order_id == filled and o.status == "filled" for o in changed),
                    message="the fill of the quote order as an update")
        assert set(maker.orders) == ids - {filled}
        await maker.cancel_all("GAMMA")


# ---------------------------------------------------------------- over HTTP


async def test_http_client_batch_and_quote(server: ServerProcess) -> None:
    async with Client(server.url, "batch-http") as http:
        results = await http.batch([ops.order("BETA", "buy", 3, 4000, client_order_id="bh-1"),
                                    ops.cancel(987_654_321), ops.cancel_all("BETA", "sell")])
        assert [r.status for r in results] == [200, 404, 200]
        placed = results[0].order
        assert placed is not None and placed.status == "new" and results[2].orders == []
        assert results[1].error is not None and results[1].error.code == "unknown_order"
        with pytest.raises(ApiError) as refused:
            await http.batch([])
        assert refused.value.status == 400

        quote = await http.quote("BETA", bids=[(4001, 4)], asks=[(6000, 4)])
        assert quote.symbol == "BETA" and {o.price for o in quote.orders} == {4001, 6000}
        with pytest.raises(ApiError) as crossed:
            await http.quote("BETA", bids=[(6000, 1)], asks=[(5999, 1)])
        assert crossed.value.code == "crossed_quote"
        open_now = open_ids(await http.open_orders("BETA"))
        assert open_now == {placed.order_id} | {o.order_id for o in quote.orders}
        await http.cancel_all("BETA")
    async with Client(server.url) as anonymous:
        with pytest.raises(ApiError) as unsigned:
            await anonymous.batch([ops.cancel(1)])
        assert unsigned.value.status == 401
