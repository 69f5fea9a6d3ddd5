"""An order as the outside sees it, and the rules on its terms that need no book state."""

from __future__ import annotations

from typing import Any

from tickflow.core.book import Book, Order
from tickflow.core.types import MAX_PRICE, MAX_QTY, Fill, NewOrder, OrderState, Reason

NO_FILLS: list[Any] = []
"""The one empty list that results without fills share; nothing may append to it."""


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
