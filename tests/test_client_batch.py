"""Batches and mass quotes in the client, with no server: what `OrderEntry` sends and how it reads the
answers (tickflow/net/client/ops.py, batch.py, calls.py). tests/test_client_batch_live.py runs the same
calls against a real server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import msgspec
import pytest
from helpers.wait import turns, until

from tickflow.net.client import ApiError, ClientState, Op, OpResult, Order, ProtocolError, Quote, ops
from tickflow.net.client.calls import MAX_IN_FLIGHT, OrderEntry, Slots
from tickflow.net.client import OrderChanged
from tickflow.net.wire.messages import ConnState, OrdersMsg, Result, Results, server_message


class Wire(OrderEntry):
    """An `OrderEntry` whose socket is a list: what it sends is kept, answers are handed in as the
    session hands them over (`_answered` with the decoded message)."""

    url = "ws://test"
    state: ConnState = "connected"

    def __init__(self) -> None:
        super().__init__(request_timeout=5.0)
        self.client_state = ClientState()
        self.sent: list[dict[str, Any]] = []

    def _can_send(self) -> bool:
        return True

    async def _send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    def answer(self, **message: Any) -> None:
        msg = server_message(json.dumps(message))
        assert isinstance(msg, (Result, Results))
        self._answered(msg)


def order_body(order_id: int, status: str = "new", seq: int = 1, side: str = "buy", price: int = 9990,
               qty: int = 5, **more: Any) -> dict[str, Any]:
    return {"orderId": order_id, "account": "mm", "symbol": "ACME", "side": side, "type": "limit",
            "price": price, "qty": qty, "status": status, "filledQty": 0,
            "remainingQty": qty if status in ("new", "partially_filled") else 0, "fills": [], "seq": seq,
            "ts": 1, **more}


def as_order(body: dict[str, Any]) -> Order:
    return msgspec.convert(body, Order)


# ---------------------------------------------------------------- building ops


def test_builders_write_each_op_as_it_is_sent_alone_without_an_id() -> None:
    assert ops.order("ACME", "buy", 5, 9990, client_order_id="mm-1").wire() == {
        "op": "order", "symbol": "ACME", "side": "buy", "type": "limit", "qty": 5, "price": 9990,
        "clientOrderId": "mm-1"}
    assert ops.order("ACME", "sell", 3).wire() == {"op": "order", "symbol": "ACME", "side": "sell", "type": "market",
                                                   "qty": 3}
    assert ops.order("ACME", "buy", 1, 10, tif="ioc", post_only=True).wire()["tif"] == "ioc"
    assert ops.cancel(17).wire() == {"op": "cancel", "orderId": 17}
    assert ops.amend(18, qty=3).wire() == {"op": "amend", "orderId": 18, "qty": 3}
    assert ops.amend(18, price=7).wire() == {"op": "amend", "orderId": 18, "price": 7}
    assert ops.cancel_all("ACME", "buy").wire() == {"op": "cancelAll", "symbol": "ACME", "side": "buy"}
    assert ops.cancel_all().wire() == {"op": "cancelAll"}
    # An op written as the wire has it is sent as it is (the server judges it in its place).
    raw = Op.of({"op": "order", "symbol": "ACME", "bogus": 1})
    assert raw.kind == "order" and raw.wire() == {"op": "order", "symbol": "ACME", "bogus": 1}


# ---------------------------------------------------------------- batches


async def test_a_batch_is_one_message_and_its_results_come_back_in_order_with_each_ops_failure() -> None:
    wire = Wire()
    wire.client_state.orders.track(as_order(order_body(17, seq=3)))
    wire.client_state.orders.track(as_order(order_body(21, seq=4, side="sell", price=10010)))
    call = asyncio.create_task(wire.batch([
        ops.order("ACME", "buy", 5, 9990, client_order_id="mm-1"),
        ops.cancel(17),
        ops.amend(99, qty=3),
        ops.cancel_all("ACME", "sell"),
        {"op": "order", "symbol": "ACME", "side": "buy", "qty": 0, "price": 1},
    ]))
    await until(lambda: wire.sent, message="the batch sent")
    [sent] = wire.sent
    assert sent["op"] == "batch" and isinstance(sent["id"], int)
    assert [op["op"] for op in sent["ops"]] == ["order", "cancel", "amend", "cancelAll", "order"]
    assert all("id" not in op for op in sent["ops"])
    wire.answer(type="results", id=sent["id"], results=[
        {"status": 200, "body": order_body(30, seq=10, clientOrderId="mm-1")},
        {"status": 200, "body": order_body(17, "cancelled", seq=10, reason="cancelled_by_user")},
        {"status": 404, "body": {"error": "unknown order", "code": "unknown_order", "field": "orderId"}},
        {"status": 200, "body": {"orders": [order_body(21, "cancelled", seq=10, side="sell", price=10010)],
                                 "seq": 10}},
        {"status": 400, "body": {"error": "qty must be an integer between 1 and 1000000000", "field": "qty"}},
    ])
    results = await call
    assert [r.status for r in results] == [200, 200, 404, 200, 400]
    assert [r.ok for r in results] == [True, True, False, True, False]
    assert results[0].order is not None and results[0].order.client_order_id == "mm-1"
    assert results[0].orders == [results[0].order] and results[0].op.kind == "order"
    assert results[1].order is not None and results[1].order.status == "cancelled"
    failed = results[2].error
    assert failed is not None and (failed.status, failed.code, failed.field) == (404, "unknown_order", "orderId")
    assert results[2].order is None and results[2].orders == []
    with pytest.raises(ApiError) as raised:
        results[2].raise_for_status()
    assert raised.value is failed
    results[0].raise_for_status()  # a success raises nothing
    assert results[3].order is None and [o.order_id for o in results[3].orders] == [21]
    assert results[4].error is not None and results[4].error.field == "qty"
    # The tracker learnt every order the answers carried: the new one open, the cancelled ones closed.
    assert set(wire.client_state.orders.open) == {30}


async def test_a_batch_refused_as_a_whole_raises_and_tracks_nothing() -> None:
    wire = Wire()
    call = asyncio.create_task(wire.batch([{"op": "quote", "symbol": "ACME", "bids": [], "asks": []}]))
    await until(lambda: wire.sent, message="the batch sent")
    wire.answer(type="result", id=wire.sent[0]["id"], status=400,
                body={"error": "an op of kind quote cannot be batched", "field": "ops"})
    with pytest.raises(ApiError) as raised:
        await call
    assert (raised.value.status, raised.value.field) == (400, "ops")
    assert not wire.client_state.orders.open


async def test_results_that_are_not_one_per_op_are_a_protocol_error() -> None:
    wire = Wire()
    call = asyncio.create_task(wire.batch([ops.cancel(1), ops.cancel(2)]))
    await until(lambda: wire.sent, message="the batch sent")
    wire.answer(type="results", id=wire.sent[0]["id"], results=[{"status": 404, "body": {"error": "unknown order"}}])
    with pytest.raises(ProtocolError):
        await call


async def test_a_batch_holds_one_in_flight_slot_per_op() -> None:
    wire = Wire()
    batch = asyncio.create_task(wire.batch([ops.cancel(i) for i in range(1, 65)]))
    await until(lambda: wire.sent, message="the batch sent")
    assert wire._slots.free == MAX_IN_FLIGHT - 64
    wire.answer(type="results", id=wire.sent[0]["id"],
                results=[{"status": 404, "body": {"error": "unknown order"}}] * 64)
    assert len(await batch) == 64
    assert wire._slots.free == MAX_IN_FLIGHT


async def test_slots_are_taken_whole_and_first_come_first_served() -> None:
    slots = Slots(10)
    assert await slots.acquire(6) == 6
    big = asyncio.create_task(slots.acquire(8))  # waits: 4 free
    await turns()
    small = asyncio.create_task(slots.acquire(1))  # would fit, but the big one came first
    await turns()
    assert not big.done() and not small.done() and slots.free == 4
    slots.release(6)
    assert await big == 8 and await small == 1 and slots.free == 1
    # More than there are is taken as all of them, not waited for forever.
    slots.release(9)
    assert await slots.acquire(50) == 10 and slots.free == 0
    # A waiter that gives up lets those behind it through.
    first = asyncio.create_task(slots.acquire(5))
    second = asyncio.create_task(slots.acquire(1))
    await turns()
    first.cancel()
    await turns()
    assert first.cancelled() and not second.done()
    slots.release(1)
    assert await second == 1


# ---------------------------------------------------------------- mass quotes


async def test_a_quote_sends_its_levels_and_its_orders_are_tracked() -> None:
    wire = Wire()
    wire.client_state.orders.track(as_order(order_body(5, seq=2, price=9980)))
    call = asyncio.create_task(wire.quote("ACME", bids=[(9990, 10), (9985, 20)], asks=[(10010, 10)]))
    await until(lambda: wire.sent, message="the quote sent")
    [sent] = wire.sent
    assert {k: v for k, v in sent.items() if k != "id"} == {
        "op": "quote", "symbol": "ACME", "bids": [[9990, 10], [9985, 20]], "asks": [[10010, 10]]}
    wire.answer(type="result", id=sent["id"], status=200, body={"symbol": "ACME", "seq": 12, "orders": [
        order_body(5, "cancelled", seq=12, price=9980, reason="replaced_by_quote"),
        order_body(40, seq=12, qty=10),
        order_body(41, seq=12, price=9985, qty=20),
        order_body(42, seq=12, side="sell", price=10010, qty=10),
    ]})
    quote = await call
    assert isinstance(quote, Quote) and (quote.symbol, quote.seq) == ("ACME", 12)
    assert [o.order_id for o in quote.orders] == [5, 40, 41, 42]
    assert set(wire.client_state.orders.open) == {40, 41, 42}


async def test_a_refused_quote_raises() -> None:
    wire = Wire()
    call = asyncio.create_task(wire.quote("ACME", bids=[(10010, 1)], asks=[(10000, 1)]))
    await until(lambda: wire.sent, message="the quote sent")
    wire.answer(type="result", id=wire.sent[0]["id"], status=400,
                body={"error": "the best bid is at or above the best ask", "code": "crossed_quote"})
    with pytest.raises(ApiError) as raised:
        await call
    assert raised.value.code == "crossed_quote"


def test_op_result_is_a_plain_value() -> None:
    result = OpResult(ops.cancel(1), 404, error=ApiError(404, {"error": "unknown order", "code": "unknown_order"}))
    assert not result.ok and result.error is not None and result.error.message == "unknown order"


# ---------------------------------------------------------------- updates as lists, rate limits


def test_updates_as_lists_are_taken_as_if_each_came_alone() -> None:
    """A connection signed in with updates="lists" gets one `orders` message per durable batch: each order
    in it is tracked and reported in order, as its own update would have been."""
    state = ClientState()
    state.orders.track(as_order(order_body(5, seq=2)))
    msg = server_message(json.dumps({"type": "orders", "orders": [
        order_body(5, "cancelled", seq=9, reason="replaced_by_quote"), order_body(6, seq=9), order_body(7, seq=9)]}))
    assert isinstance(msg, OrdersMsg)
    outs = state.receive(msg)
    assert [o.order.order_id for o in outs if isinstance(o, OrderChanged)] == [5, 6, 7]
    assert set(state.orders.open) == {6, 7} and state.last_seq == 9
    auth = server_message('{"type": "auth", "account": "mm", "updates": "lists"}')
    assert getattr(auth, "updates") == "lists"


def test_a_rate_limited_answer_says_when_to_send_again() -> None:
    limited = ApiError(429, {"error": "over the order rate", "code": "rate_limited", "retryAfter": 0.25})
    assert limited.code == "rate_limited" and limited.retry_after == 0.25
    assert ApiError(404, {"error": "unknown order"}).retry_after is None
    assert ApiError(500, "not json").retry_after is None
