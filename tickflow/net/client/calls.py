"""Order entry over a WebSocket: each request goes out with a fresh `id` and its caller waits for the
answer that carries it back. `OrderEntry` holds what is in flight; `Session` gives it its socket.
Batches and mass quotes are written and read by batch.py, the same for HTTP."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import deque
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

from tickflow.net.client.batch import OpResult, QuoteLevel, batch_body, op_results, quote_body
from tickflow.net.client.bodies import amend_fields, decode_as, decode_body, order_fields, order_filters
from tickflow.net.client.errors import ApiError, ConnectionLost, NotConnected, RequestTimeout, TickflowError
from tickflow.net.client.ops import Op
from tickflow.net.client.state import ClientState
from tickflow.net.wire.limits import MAX_WS_IN_FLIGHT
from tickflow.net.wire.messages import ConnState, Order, OrderList, OrderType, Quote, Result, Results, Side, Tif

__all__ = ["OrderEntry", "Slots", "MAX_IN_FLIGHT"]

T = TypeVar("T")

MAX_IN_FLIGHT = MAX_WS_IN_FLIGHT
"""Order-entry requests one WebSocket may have in flight (the server answers 429 above it); more wait.
A batch counts as its number of ops, as the server counts it."""


class Slots:
    """A semaphore whose holders take several slots at once (a batch takes one per op), first come first
    served: a big batch waiting is not overtaken by small requests behind it, and two batches never hold
    part of what each needs while waiting for the rest."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.free = total
        self._waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def acquire(self, n: int) -> int:
        """Take `n` slots (at most `total`), waiting for them; returns how many were taken."""
        n = max(1, min(n, self.total))
        if not self._waiting and self.free >= n:
            self.free -= n
            return n
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append((n, future))
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():
                self.release(n)  # handed over just as the waiter was cancelled
            else:
                self._waiting.remove((n, future))
                self._wake()  # those behind it may fit now
            raise
        return n

    def release(self, n: int) -> None:
        self.free += n
        self._wake()

    def _wake(self) -> None:
        while self._waiting and self.free >= self._waiting[0][0]:
            n, future = self._waiting.popleft()
            self.free -= n
            future.set_result(None)


class OrderEntry:
    """The order-entry calls of a WebSocket session and the answers they wait for.

    A subclass sends (`_send`), says whether it can (`_can_send`), and hands over what comes back:
    `_answered` for a result or a batch's results (`_answer` for an error naming a request id), `_pong`
    for a pong, `_fail_waiters` when the connection ends. Every order state in an answer (a batch's and
    a quote's included) is tracked in `client_state`.
    """

    url: str
    state: ConnState
    client_state: ClientState

    def __init__(self, request_timeout: float) -> None:
        self._request_timeout = request_timeout
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        """Requests on the wire by id, each waiting for its status and raw body."""
        self._pongs: list[asyncio.Future[None]] = []
        self._slots = Slots(MAX_IN_FLIGHT)

    def _can_send(self) -> bool:
        raise NotImplementedError

    async def _send(self, message: dict[str, Any]) -> None:
        """Send one message: `NotConnected` when there is no connection, `ConnectionLost` when it fails."""
        raise NotImplementedError

    async def request(self, op: dict[str, Any], timeout: float | None = None, *,
                      weight: int = 1) -> tuple[int, bytes]:
        """Send one order-entry message with a fresh `id`; return the answer's HTTP status and raw body
        (a batch's `results`, raw, with status 200). It takes `weight` of the MAX_IN_FLIGHT slots."""
        if not self._can_send():
            raise NotConnected(f"not connected to {self.url} ({self.state})")
        timeout = self._request_timeout if timeout is None else timeout
        taken = await self._slots.acquire(weight)
        try:
            rid = next(self._ids)
            future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
            self._pending[rid] = future
            try:
                await self._send({**op, "id": rid})
                return await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError as e:
                raise RequestTimeout(f"no answer to {op.get('op')} in {timeout} s; outcome unknown") from e
            finally:
                self._pending.pop(rid, None)
        finally:
            self._slots.release(taken)

    async def _call(self, kind: type[T], op: dict[str, Any], timeout: float | None) -> T:
        """An order-entry request's answer as a `kind`; `ApiError` on a 4xx/5xx status."""
        status, raw = await self.request(op, timeout)
        if status >= 400:
            raise ApiError(status, decode_body(raw))
        return decode_as(kind, raw, f"{op.get('op')} over the WebSocket", status)

    async def _order_call(self, op: dict[str, Any], timeout: float | None) -> Order:
        order = await self._call(Order, op, timeout)
        self.client_state.orders.track(order)
        return order

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None = None, *,
                          type: OrderType | None = None, tif: Tif = "gtc", post_only: bool = False,
                          client_order_id: str | None = None, timeout: float | None = None) -> Order:
        """Place an order over the WebSocket; same answer as `Client.place_order`."""
        fields = order_fields(symbol, side, qty, price, type, tif, post_only, client_order_id)
        return await self._order_call({"op": "order", **fields}, timeout)

    async def cancel_order(self, order_id: int, *, timeout: float | None = None) -> Order:
        """Cancel over the WebSocket; same answer as `Client.cancel_order`."""
        return await self._order_call({"op": "cancel", "orderId": order_id}, timeout)

    async def amend_order(self, order_id: int, *, qty: int | None = None, price: int | None = None,
                          timeout: float | None = None) -> Order:
        """Amend over the WebSocket; same answer as `Client.amend_order`."""
        return await self._order_call({"op": "amend", "orderId": order_id, **amend_fields(qty, price)},
                                      timeout)

    async def cancel_all(self, symbol: str | None = None, side: Side | None = None, *,
                         timeout: float | None = None) -> list[Order]:
        """Cancel all over the WebSocket; same answer as `Client.cancel_all`. Each order it cancelled
        also comes as an `OrderChanged`. An answer over MAX_MESSAGE (some 13,000 orders) ends the
        connection: for that many, use `Client.cancel_all` (`self.http`)."""
        op = {"op": "cancelAll", **order_filters(symbol, side)}
        orders = (await self._call(OrderList, op, timeout)).orders
        for order in orders:
            self.client_state.orders.track(order)
        return orders

    async def batch(self, ops: Iterable[Op | Mapping[str, Any]], *, timeout: float | None = None) -> list[OpResult]:
        """Send up to 256 ops (`tickflow.net.client.ops`) in one message; they are sequenced one after
        another, nothing of anyone else's between them. Returns one `OpResult` per op, in order, each
        what the op alone would have been answered: an op's failure is in its result, not raised (they
        are not all-or-nothing). `ApiError` when the batch is refused as a whole (400 malformed: empty,
        over 256 ops, an op kind that cannot be batched; 401 not signed in; 429 too many in flight), and
        then nothing of it ran. It counts as one request per op against MAX_IN_FLIGHT. The orders in
        the answers are tracked (`orders`) as those of single calls are; the same as `Client.batch`."""
        sent, wire = batch_body(ops)
        status, raw = await self.request({"op": "batch", "ops": wire}, timeout, weight=len(sent))
        if status >= 400:
            raise ApiError(status, decode_body(raw))
        results = op_results(sent, raw, "batch over the WebSocket")
        for result in results:
            for order in result.orders:
                self.client_state.orders.track(order)
        return results

    async def quote(self, symbol: str, bids: Iterable[QuoteLevel], asks: Iterable[QuoteLevel], *,
                    timeout: float | None = None) -> Quote:
        """Replace the account's whole quote in `symbol` with these `(price, qty)` levels, best first or
        not, in one logged command (an empty side pulls it): a level whose price and quantity stay, or
        whose quantity goes down, keeps its order and its place in the queue; the others are new orders,
        which trade like any. Returns the quote orders it touched or kept (`Quote.orders`: cancelled,
        kept, new), tracked as any order; `ApiError` 400 for crossed levels (`code` `crossed_quote`), a
        price twice (`repeated_price`) or over 64 levels a side, and nothing changed. As `Client.quote`."""
        op = {"op": "quote", "symbol": symbol, **quote_body(bids, asks)}
        answer = await self._call(Quote, op, timeout)
        for order in answer.orders:
            self.client_state.orders.track(order)
        return answer

    async def ping(self, timeout: float = 5.0) -> float:
        """Round trip of `{"op": "ping"}` in seconds; `RequestTimeout` when no pong comes in `timeout`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(future)
        start = time.perf_counter()
        try:
            await self._send({"op": "ping"})
        except TickflowError:
            self._pongs.remove(future)  # never sent: no pong will answer it
            raise
        try:
            await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError as e:
            raise RequestTimeout(f"no pong in {timeout} s") from e
        return time.perf_counter() - start

    def _answered(self, msg: Result | Results) -> None:
        """A `result` (its status and body) or a batch's `results` (status 200, the raw array)."""
        if isinstance(msg, Results):
            self._answer(msg.id, 200, bytes(msg.results))
        else:
            self._answer(msg.id, msg.status, bytes(msg.body))

    def _answer(self, request_id: Any, status: int, body: bytes) -> None:
        """The answer to request `request_id`, if one of ours still waits for it."""
        future = self._pending.get(request_id) if isinstance(request_id, int) else None
        if future is not None and not future.done():
            future.set_result((status, body))

    def _pong(self) -> None:
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(None)

    def _fail_waiters(self) -> None:
        """The connection ended: what waits for an answer on it will not get one."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(f"connection to {self.url} lost; outcome unknown"))
        self._pending.clear()
        for pong in self._pongs:
            if not pong.done():
                pong.set_exception(ConnectionLost("connection lost"))
        self._pongs.clear()
