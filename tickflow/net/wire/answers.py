"""What the server answers: a command's outcome as a status and JSON body (with the error table of the
engine's refusals), and trades as the public sees them."""

from __future__ import annotations

from typing import Any

import msgspec

from tickflow.core.types import (MAX_PRICE, MAX_QTY, MAX_QUOTE_LEVELS, CancelAll, Command, OrderState, Outcome, Quote,
                                  Reason, Trade)

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
    Reason.UNKNOWN_SYMBOL: (400, "unknown symbol", "symbol"),
    Reason.CROSSED_QUOTE: (400, "the quote's best bid is at or above its best ask", "bids"),
    Reason.REPEATED_PRICE: (400, "a price is given twice on one side of the quote", None),
    Reason.TOO_MANY_LEVELS: (400, f"a side of a quote holds at most {MAX_QUOTE_LEVELS} levels", None),
    Reason.HISTORY_UNAVAILABLE: (503, "the order is not live, and SQLite, which keeps finished orders, is behind "
                                      "until the server restarts: try again after", "orderId"),
    Reason.OUTSIDE_PRICE_BAND: (409, "the price is outside the band around the symbol's last trade "
                                     "(--price-band)", "price"),
    Reason.TOO_MANY_OPEN_ORDERS: (409, "the quote would leave the account with more open orders than the "
                                       "server's limit (--max-open-orders): cancel some first", None),
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


def answer_of(command: Command, outcome: Outcome) -> tuple[int, bytes]:
    """The status and body of a command's outcome: a cancel-all's, a quote's, or any other's."""
    if type(command) is CancelAll:
        return answer_cancel_all(outcome)
    if isinstance(command, Quote):
        return answer_quote(command.symbol, outcome)
    return answer(outcome)


def answer_quote(symbol: str, outcome: Outcome) -> tuple[int, bytes]:
    """What a mass quote answers: its symbol, its seq, and every quote order it touched or kept."""
    if outcome.error is not None:
        return refusal(outcome.error)
    return 200, encode({"symbol": symbol, "seq": outcome.seq, "orders": outcome.quoted or []})


def results(answers: list[tuple[int, bytes]]) -> bytes:
    """A batch's answers as the JSON list of {"status", "body"} entries, in order."""
    return b"[" + b",".join(b'{"status":%d,"body":%s}' % answer for answer in answers) + b"]"


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
