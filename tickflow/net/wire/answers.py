"""What the server answers: a command's outcome as a status and JSON body (with the error table of the
engine's refusals), and trades as the public sees them."""

from __future__ import annotations

from typing import Any

import msgspec

from tickflow.core.types import MAX_PRICE, MAX_QTY, OrderState, Outcome, Reason, Trade

encode = msgspec.json.Encoder().encode
"""Any wire value -> UTF-8 JSON bytes."""


ERRORS: dict[str, tuple[int, str, str | None]] = {
    Reason.UNKNOWN_ORDER: (404, "unknown order", "orderId"),
    Reason.NOT_OPEN: (409, "the order is not open any more", None),
    Reason.DUPLICATE_MISMATCH: (
        409, "clientOrderId was already used for a different order; the original stands", "clientOrderId"),
    Reason.NOTHING_TO_AMEND: (400, "nothing to amend", None),
    Reason.BAD_QTY: (400, f"qty must be between 1 and {MAX_QTY}", "qty"),
    Reason.BAD_PRICE: (400, f"price must be between 1 and {MAX_PRICE}", "price"),
    Reason.QTY_BELOW_FILLED: (400, "qty must be above the quantity already filled", "qty"),
    Reason.POST_ONLY_WOULD_TAKE: (409, "a post-only order would take liquidity at that price", "price"),
}


def refusal(code: str, order: OrderState | None = None) -> tuple[int, bytes]:
    """The status and error body for a refused command or read (`code` is a Reason)."""
    status, message, field = ERRORS.get(code, (400, code, None))
    body: dict[str, Any] = {"error": message, "code": code}
    if field:
        body["field"] = field
    if order is not None:
        body["original" if code == Reason.DUPLICATE_MISMATCH else "order"] = order
    return status, encode(body)


def answer(outcome: Outcome) -> tuple[int, bytes]:
    """The HTTP status and JSON body for a command's outcome."""
    if outcome.error is None:
        return 200, encode(outcome.result)
    return refusal(outcome.error, outcome.result)


def answer_cancel_all(outcome: Outcome) -> tuple[int, bytes]:
    """What a cancel-all answers: the orders it cancelled, oldest first, and its seq."""
    return 200, encode({"orders": outcome.updates, "seq": outcome.seq})


class PublicTrade(msgspec.Struct, rename="camel"):
    """A trade as everyone may see it: no accounts."""

    trade_id: int
    symbol: str
    price: int
    qty: int
    buy_order_id: int
    sell_order_id: int
    aggressor: str
    seq: int
    ts: int


def public_trade(t: Trade) -> PublicTrade:
    return PublicTrade(t.trade_id, t.symbol, t.price, t.qty, t.buy_order_id, t.sell_order_id,
                       t.aggressor, t.seq, t.ts)
