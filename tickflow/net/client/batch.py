"""What a batch and a mass quote send and how their answers are read, for `Session` and `Client` alike.

A batch is answered op by op: `OpResult` is one op's answer in its place, what the op alone would have
been answered (an order, the orders a cancel-all took, or an error). One op's failure is in its result,
never raised; a batch refused as a whole (malformed, not signed in, too many in flight) raises `ApiError`
from the call. A quote's answer is a `Quote` (tickflow.net.wire.messages).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from tickflow.net.client.bodies import decode_as, decode_body
from tickflow.net.client.errors import ApiError, ProtocolError
from tickflow.net.client.ops import Op
from tickflow.net.wire.messages import OpAnswer, Order, OrderList

__all__ = ["OpResult", "QuoteLevel", "batch_body", "op_results", "quote_body"]

QuoteLevel = tuple[int, int]
"""One level of a mass quote: `(price, qty)`, qty being what to show at that price (open, not filled)."""


@dataclass(frozen=True, slots=True)
class OpResult:
    """One op's answer in a batch, in the op's place: the status and body it would have had alone.

    A success (2xx) holds the order it left (`order`: an order, cancel or amend) or the orders it
    cancelled (`orders`: a cancel-all; for the others, `[order]`). A failure holds `error`, the
    `ApiError` the call alone would have raised (`status`, `message`, `code`, `field`, and the order as
    it is now for a 409). A new order the book turned down is a success whose order says `rejected`."""

    op: Op
    """The op as it was sent."""
    status: int
    order: Order | None = None
    orders: list[Order] = field(default_factory=list)
    error: ApiError | None = None

    @property
    def ok(self) -> bool:
        """True when the op was carried out (2xx)."""
        return self.error is None

    def raise_for_status(self) -> None:
        """Raise the op's `ApiError` if it failed; nothing if it succeeded."""
        if self.error is not None:
            raise self.error


def batch_body(ops: Iterable[Op | Mapping[str, Any]]) -> tuple[list[Op], list[dict[str, Any]]]:
    """The ops of a batch (builders' `Op`s, or ops written as the wire has them) and their wire form."""
    sent = [Op.of(op) for op in ops]
    return sent, [op.wire() for op in sent]


def op_results(ops: Sequence[Op], answers: bytes | Sequence[OpAnswer], what: str) -> list[OpResult]:
    """A batch's `results` (the raw JSON array, or decoded) as one `OpResult` per op, in order;
    `ProtocolError` when it is not one answer per op."""
    if isinstance(answers, bytes):
        answers = decode_as(list[OpAnswer], answers, what)
    if len(answers) != len(ops):
        raise ProtocolError(what, 200, msgspec.json.encode(answers),
                            ValueError(f"{len(answers)} results for {len(ops)} ops"))
    return [_result(op, answer, what) for op, answer in zip(ops, answers, strict=True)]


def _result(op: Op, answer: OpAnswer, what: str) -> OpResult:
    status, body = answer.status, bytes(answer.body)
    if status >= 400:
        return OpResult(op, status, error=ApiError(status, decode_body(body)))
    if op.kind == "cancelAll":
        return OpResult(op, status, orders=decode_as(OrderList, body, f"{what}: cancelAll", status).orders)
    order = decode_as(Order, body, f"{what}: {op.kind}", status)
    return OpResult(op, status, order=order, orders=[order])


def quote_body(bids: Iterable[QuoteLevel] | Iterable[Sequence[int]],
               asks: Iterable[QuoteLevel] | Iterable[Sequence[int]]) -> dict[str, Any]:
    """A mass quote's sides as the wire has them: `[[price, qty], ...]` each (an empty side pulls it)."""
    return {"bids": [[price, qty] for price, qty in bids], "asks": [[price, qty] for price, qty in asks]}
