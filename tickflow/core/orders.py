"""An order as the outside sees it, and the rules on its terms that need no book state."""

from __future__ import annotations

from typing import Any

from tickflow.core.book import Book, Order
from tickflow.core.types import (
    MAX_PRICE, MAX_QTY, MAX_QUOTE_LEVELS, Fill, NewOrder, OrderState, Outcome, Quote, Reason, Side, Trade, maker_state
)

NO_FILLS: list[Any] = []
"""The one empty list that results without fills share; nothing may append to it."""
FINAL: frozenset[str] = frozenset(("filled", "cancelled", "rejected"))
"""The statuses of a finished order: it is out of the book and never changes again."""


class Kept(list[Trade]):
    """What a quiet replay collects (Engine.replaying): the trades asked for, and in `closed` the orders
    that closed, as the engine's objects (a closed order never changes again)."""

    def __init__(self) -> None:
        super().__init__()
        self.closed: list[Order] = []


def finished(outcome: Outcome) -> list[OrderState]:
    """The orders `outcome` finished, each in its final state (fills: those of this command): the order
    itself, resting orders it filled or cancelled, a quote's own orders it replaced or that filled."""
    if outcome.error is not None or outcome.replayed:
        return []
    done = []
    result = outcome.result
    if result is not None and result.status in FINAL:
        done.append(result)
    for u in outcome.changed:
        if isinstance(u, OrderState):
            if u.status in FINAL:
                done.append(u)
        elif u[2] == "filled":
            done.append(maker_state(u))
    if outcome.quoted:
        done.extend(q for q in outcome.quoted if q.status in FINAL)
    return done


def state_of(order: Order, fills: list[Fill] = NO_FILLS) -> OrderState:
    """The public view of an order, with the fills the current command made."""
    return OrderState(
        order.order_id,
        order.client_order_id,
        order.account,
        order.symbol,
        order.side,
        order.type,
        order.price,
        order.qty,
        order.tif,
        order.post_only,
        order.status,
        order.filled,
        order.qty - order.filled,
        fills,
        order.reason,
        order.seq,
        order.ts,
    )


def same_order(first: OrderState, command: NewOrder) -> bool:
    """True when `command` is the order that was first answered with `first` (same account and id assumed)."""
    return (first.symbol == command.symbol and first.side == command.side and first.type == command.type
            and first.price == command.price and first.qty == command.qty and first.tif == command.tif
            and first.post_only == command.post_only)


def unfilled_reason(type_: str, tif: str) -> str:
    """Why an order that found nothing to trade with did not rest."""
    if tif == "fok":
        return Reason.FOK_NOT_FILLED
    return Reason.IOC_REMAINDER if type_ == "limit" else Reason.NO_LIQUIDITY


def rejection(cmd: NewOrder, book: Book | None) -> str:
    """Why a new order breaks the book's rules before matching (the post-only cross aside)."""
    if book is None:
        return Reason.UNKNOWN_SYMBOL
    if not 0 < cmd.qty <= MAX_QTY:
        return Reason.BAD_QTY
    if cmd.type == "limit":
        if not 0 < cmd.price <= MAX_PRICE:
            return Reason.BAD_PRICE
    elif cmd.price != 0:
        return Reason.BAD_PRICE
    return Reason.BAD_ORDER


def quote_problem(cmd: Quote, book: Book | None = None, band: int = 0) -> str | None:
    """Why a mass quote breaks the rules on its terms, or the price band (`band` basis points around the last
    trade in `book`): a Reason, or None."""
    for levels in (cmd.bids, cmd.asks):
        if len(levels) > MAX_QUOTE_LEVELS:
            return Reason.TOO_MANY_LEVELS
        for price, qty in levels:
            if not 0 < price <= MAX_PRICE:
                return Reason.BAD_PRICE
            if not 0 < qty <= MAX_QTY:
                return Reason.BAD_QTY
        if len({price for price, _ in levels}) != len(levels):
            return Reason.REPEATED_PRICE
    if cmd.bids and cmd.asks and max(p for p, _ in cmd.bids) >= min(p for p, _ in cmd.asks):
        return Reason.CROSSED_QUOTE
    if band and book is not None and any(book.outside_band(price, band) for price, _ in (*cmd.bids, *cmd.asks)):
        return Reason.OUTSIDE_PRICE_BAND
    return None


QuotePlan = tuple[list[Order], list[tuple[Order, int]], list[tuple[Side, int, int]]]
"""(orders to cancel, orders kept with their open quantity to show, levels to place as side, price, qty)."""


def plan_quote(standing: list[Order], cmd: Quote) -> QuotePlan:
    """What a mass quote does to the account's quote orders in its symbol (`standing`, oldest first).

    An order whose price is quoted again with no more than its open quantity keeps its place (cut to
    the new quantity, as an amend would); every other one is cancelled, and every level not kept is
    placed, bids then asks, best price first."""
    wanted: dict[tuple[Side, int], int] = {("buy", p): q for p, q in cmd.bids}
    wanted.update((("sell", p), q) for p, q in cmd.asks)
    cancel: list[Order] = []
    keep: list[tuple[Order, int]] = []
    for order in standing:
        key = (order.side, order.price)
        qty = wanted.get(key)
        if qty is not None and qty <= order.qty - order.filled:
            del wanted[key]  # a second order at the same price is not kept
            keep.append((order, qty))
        else:
            cancel.append(order)
    place = [(side, price, qty) for (side, price), qty in wanted.items()]
    place.sort(key=lambda level: (level[0] == "sell", -level[1] if level[0] == "buy" else level[1]))
    return cancel, keep, place
