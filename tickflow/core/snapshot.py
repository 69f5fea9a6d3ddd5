"""The engine's whole state as plain data, and an engine rebuilt from it.

`capture` reads an engine between two commands; `restore` builds one that answers every later command
exactly as the captured one would (the same books in time priority, live orders, ids, idempotency table
and stamps: `state_hash` is the same). Finished orders are not in it: they are history, in SQLite. The store writes this to a snapshot file
(store/snapshots.py); nothing here touches a file.
"""

from __future__ import annotations

import hashlib

import msgspec

from tickflow.core.book import Book, Order
from tickflow.core.engine import Engine
from tickflow.core.idempotency import ClientOrderIds
from tickflow.core.types import OrderState


class BookState(msgspec.Struct, array_like=True, forbid_unknown_fields=True, gc=False):
    """One symbol's book: its seq, and each side's levels best first, each as its price and the ids of
    its live orders in time priority."""

    symbol: str
    seq: int
    bids: list[list[int]]
    asks: list[list[int]]
    last: int = 0
    """The last trade's price (the price band's centre)."""


class EngineState(msgspec.Struct, array_like=True, forbid_unknown_fields=True, gc=False):
    """Everything `Engine.apply` depends on, after the command with `last_seq`."""

    last_seq: int
    last_ts: int
    next_trade_id: int
    orders: list[Order | None]
    """The live orders, in no particular order. In a file written before `next_order_id` (0 there): every
    order, index = id (index 0 is None), of which `restore` keeps the live ones."""
    books: list[BookState]
    idempotency: list[tuple[str, str, OrderState]]
    """(account, clientOrderId, the order's first answer), oldest first: the order they are forgotten in."""
    next_order_id: int = 0
    """The id the next order takes; last, with a default, so that older files still read (as 0)."""
    max_open_orders: int = 0
    """The logged open-order limit (last, with a default: a snapshot from before it reads as none)."""
    price_band: int = 0
    """The logged price band, in basis points (0: none)."""
    idempotency_window: int = 0
    """The logged idempotency window, in milliseconds (0: for ever)."""


def live_orders(engine: Engine) -> list[Order]:
    """The engine's live orders, by id."""
    return sorted((o for open_ in engine.open_orders.values() for o in open_.values()), key=_by_id)


def _by_id(order: Order) -> int:
    return order.order_id


def capture(engine: Engine) -> EngineState:
    """The engine's state now; it shares the engine's order objects, so encode it before the next apply."""
    books = []
    for symbol, book in engine.books.items():
        sides = []
        for side in (book.bids, book.asks):
            sides.append([[level.price, *(o.order_id for o in level.live_orders())]
                          for level in side.sorted_levels()])
        books.append(BookState(symbol, book.seq, sides[0], sides[1], book.last))
    idempotency = [(account, coid, state) for (account, coid), state in engine.idempotency.items()]
    # In no particular order (restore indexes them by id): sorting a million would only cost the child time.
    orders: list[Order | None] = [o for open_ in engine.open_orders.values() for o in open_.values()]
    return EngineState(engine.last_seq, engine.last_ts, engine.next_trade_id, orders, books, idempotency,
                       engine.next_order_id, engine.max_open_orders, engine.price_band, engine.idempotency.window)


class BadState(ValueError):
    """A captured state that no engine could have had (an order twice, a level of dead orders, ...)."""


def restore(state: EngineState) -> Engine:
    """An engine in `state`; BadState if the state contradicts itself."""
    engine = Engine()
    engine.last_seq = state.last_seq
    engine.last_ts = state.last_ts
    engine.next_trade_id = state.next_trade_id
    engine.max_open_orders = state.max_open_orders
    engine.price_band = state.price_band
    if state.next_order_id == 0:  # written before next_order_id: every order, index = id
        if not state.orders or state.orders[0] is not None:
            raise BadState("the order table must start with the unused id 0")
        next_order_id = len(state.orders)
        listed: list[Order | None] = [o for o in state.orders[1:] if o is not None and o.live]
    else:
        next_order_id = state.next_order_id
        listed = state.orders
    orders: dict[int, Order] = {}
    accounts = engine.accounts
    for order in listed:
        if order is None or not order.live or not 0 < order.order_id < next_order_id or order.order_id in orders:
            raise BadState(f"not a live order, or listed twice: {order!r}")
        # One string per account name, as the engine keeps them.
        order.account = accounts.setdefault(order.account, order.account)
        orders[order.order_id] = order
    engine.next_order_id = next_order_id
    open_orders = engine.open_orders
    for book_state in state.books:
        if book_state.symbol in engine.books:
            raise BadState(f"the book {book_state.symbol!r} appears twice")
        book = engine.books[book_state.symbol] = Book(book_state.symbol)
        book.seq = book_state.seq
        book.last = book_state.last
        for book_side, levels in ((book.bids, book_state.bids), (book.asks, book_state.asks)):
            for price, *ids in levels:
                if not ids or price in book_side.levels:
                    raise BadState(f"{book_state.symbol}: level {price} is empty or appears twice")
                level = book_side.add_level(price)
                for order_id in ids:
                    order = _live_order(orders, order_id, book_state.symbol, book_side.side, price)
                    if order.order_id in open_orders[order.account]:
                        raise BadState(f"order {order_id} rests twice")
                    level.queue.append(order)
                    level.qty += order.qty - order.filled
                    level.count += 1
                    open_orders[order.account][order_id] = order
    resting = sum(len(by_id) for by_id in open_orders.values())
    if resting != len(orders):
        raise BadState("an order marked live rests in no level")
    engine.idempotency = ClientOrderIds.load(state.idempotency, state.idempotency_window)
    return engine


def _live_order(orders: dict[int, Order], order_id: int, symbol: str, side: str, price: int) -> Order:
    order = orders.get(order_id)
    if order is None or not order.live or order.symbol != symbol or order.side != side or order.price != price:
        raise BadState(f"order {order_id} cannot rest at {symbol} {side} {price}")
    return order


def state_hash(engine: Engine) -> str:
    """A digest of everything in `engine` that replay must reproduce: books in queue order, live orders, each
    account's open orders, the idempotency table, counters and the last stamps."""
    h = hashlib.blake2b(digest_size=16)
    enc = msgspec.msgpack.Encoder()
    h.update(enc.encode([engine.next_order_id, engine.next_trade_id, engine.last_seq, engine.last_ts,
                         sorted(engine.books), engine.max_open_orders, engine.price_band, engine.idempotency.window,
                         [engine.books[s].last for s in sorted(engine.books)]]))
    for symbol in sorted(engine.books):
        book = engine.books[symbol]
        for side in (book.bids, book.asks):
            for level in side.sorted_levels():
                h.update(enc.encode([level.price, level.qty, level.count,
                                     [o.order_id for o in level.live_orders()]]))
    for order in live_orders(engine):
        h.update(enc.encode(order))
    for account in sorted(a for a, open_ in engine.open_orders.items() if open_):
        h.update(enc.encode([account, sorted(engine.open_orders[account])]))
    # In the order they are forgotten in, which is part of the state: a replay must forget the same ones.
    for key, answer in engine.idempotency.items():
        h.update(enc.encode([key, answer]))
    return h.hexdigest()
