"""A batch of order operations and a mass quote, validated into commands (docs/protocol.md, "Batches" and
"Mass quotes"). As for single requests, input that fails here is answered 4xx and never reaches the log."""

from __future__ import annotations

from typing import Annotated, Any, Container, Literal

import msgspec
from msgspec import Meta

from tickflow.core.types import MAX_PRICE, MAX_QTY, MAX_QUOTE_LEVELS, Amend, Command, Quote, Reason
from tickflow.net.wire import requests
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import MAX_BATCH, MAX_WS_ID

BATCHABLE = ("order", "cancel", "amend", "cancelAll")
"""The ops a batch may carry: order entry, each as it is sent alone."""


def batch_ops(ops: Any) -> list[dict[str, Any]]:
    """The ops of a batch, each a JSON object naming a batchable op; BadRequest for the batch as a whole."""
    if not isinstance(ops, list):
        raise BadRequest(f"ops must be a list of order operations, not {brief(ops)}", "ops")
    if not 1 <= len(ops) <= MAX_BATCH:
        raise BadRequest(f"ops must hold 1 to {MAX_BATCH} operations, not {len(ops)}", "ops")
    for i, op in enumerate(ops):
        if not isinstance(op, dict):
            raise BadRequest(f"ops[{i}] must be a JSON object with an 'op', not {brief(op)}", f"ops[{i}]")
        kind = op.get("op")
        if kind not in BATCHABLE:
            raise BadRequest(f"ops[{i}]: the op {brief(kind)} cannot be batched: a batch takes "
                             f"{', '.join(BATCHABLE)}", f"ops[{i}].op")
    return ops


RATED = ("order", "amend", "quote")
"""The ops that count against an account's order rate: cancels never do, so an account can always get out."""


def rated(ops: list[dict[str, Any]]) -> int:
    """How many of a batch's ops count against the order rate."""
    return sum(1 for op in ops if op["op"] in RATED)


def command(op: str, account: str, message: dict[str, Any], symbols: Container[str]) -> Command:
    """One order operation (`message` without its `op` and `id`) as the command it asks for."""
    if op == "order":
        return requests.new_order(account, message, symbols)
    if op == "cancelAll":
        return requests.cancel_all(account, message, symbols)
    order_id = requests.order_id_field(message.pop("orderId", None))
    if op == "cancel":
        if message:
            names = list(message)
            raise BadRequest(f"unknown fields for cancel: {', '.join(brief(k) for k in names[:10])}", cut(names[0]))
        return requests.cancel(account, order_id)
    return requests.amend(account, order_id, message)


def batch_command(account: str, op: dict[str, Any], symbols: Container[str]) -> Command:
    """One op of a batch (checked by `batch_ops`) as its command; BadRequest for this op alone."""
    message = dict(op)
    kind = message.pop("op")
    if "id" in message:
        raise BadRequest("an op inside a batch has no id of its own: the batch's id names its answer", "id")
    return command(kind, account, message, symbols)


QUOTE_FIELDS = ("bids", "asks")


def quote(account: str, symbol: Any, data: Any, symbols: Container[str]) -> Quote:
    """A mass quote's levels (`{"bids": [[price, qty], ...], "asks": [...]}`) in `symbol`, as one command."""
    if not isinstance(data, dict):
        raise BadRequest("expected a JSON object with bids and asks")
    unknown = [k for k in data if k not in QUOTE_FIELDS]
    if unknown:
        raise BadRequest(f"unknown field {brief(unknown[0])} for a quote: it takes symbol, bids and asks",
                         cut(unknown[0]))
    if not isinstance(symbol, str) or symbol not in symbols:
        raise BadRequest(f"unknown symbol {brief(symbol)}", "symbol")
    bids, asks = (_levels(name, data) for name in QUOTE_FIELDS)
    if bids and asks and max(bids)[0] >= min(asks)[0]:
        raise BadRequest(f"the best bid {max(bids)[0]} is at or above the best ask {min(asks)[0]}: a quote "
                         "may not cross itself", "bids", code=Reason.CROSSED_QUOTE)
    return Quote(account, symbol, bids, asks)


def _levels(name: str, data: dict[str, Any]) -> list[tuple[int, int]]:
    if name not in data:
        raise BadRequest(f"{name} is required: a list of [price, qty] levels ([] pulls that side)", name)
    given = data[name]
    if not isinstance(given, list):
        raise BadRequest(f"{name} must be a list of [price, qty] levels, not {brief(given)}", name)
    if len(given) > MAX_QUOTE_LEVELS:
        raise BadRequest(f"{name} holds {len(given)} levels, over the {MAX_QUOTE_LEVELS} a side may",
                         name, code=Reason.TOO_MANY_LEVELS)
    levels = []
    seen = set()
    for i, level in enumerate(given):
        where = f"{name}[{i}]"
        if not isinstance(level, list) or len(level) != 2:
            raise BadRequest(f"{where} must be a [price, qty] pair, not {brief(level)}", where)
        price, qty = (_whole(v) for v in level)
        if price is None or not 1 <= price <= MAX_PRICE:
            raise BadRequest(f"{where}: the price must be an integer number of ticks between 1 and {MAX_PRICE}, "
                             f"not {brief(level[0])}", where)
        if qty is None or not 1 <= qty <= MAX_QTY:
            raise BadRequest(f"{where}: the qty must be an integer between 1 and {MAX_QTY}, not {brief(level[1])}",
                             where)
        if price in seen:
            raise BadRequest(f"{name}: the price {price} is given twice", where, code=Reason.REPEATED_PRICE)
        seen.add(price)
        levels.append((price, qty))
    return levels


def _whole(value: Any) -> int | None:
    """A JSON number that is a whole number (5, 5.0) as an int; None for anything else."""
    if type(value) is int:
        return value
    if type(value) is float and value.is_integer():
        return int(value)
    return None


# ---------------------------------------------------------------- the fast way in
# A batch as bots send it (well-formed ops, integers where integers go) is decoded in one msgspec call into
# typed ops, several times cheaper than a JSON tree checked op by op. Anything else (a failure of any kind,
# a number written 5.0) goes the general way above, which is the reference: it answers every op.


class _OrderOp(requests.OrderRequest, tag="order", tag_field="op"):
    pass


class _CancelOp(msgspec.Struct, tag="cancel", tag_field="op", rename="camel", forbid_unknown_fields=True):
    order_id: int


class _AmendOp(requests.AmendRequest, tag="amend", tag_field="op"):
    order_id: int = 0


class _CancelAllOp(requests.OrderFilter, tag="cancelAll", tag_field="op"):
    pass


class _Batch(msgspec.Struct, tag="batch", tag_field="op", forbid_unknown_fields=True):
    id: int | Annotated[str, Meta(max_length=MAX_WS_ID)]
    ops: Annotated[list[_OrderOp | _CancelOp | _AmendOp | _CancelAllOp], Meta(min_length=1, max_length=MAX_BATCH)]


_batch_decoder = msgspec.json.Decoder(_Batch)


def fast_batch(raw: str | bytes, account: str, symbols: Container[str]) -> tuple[int | str, list[Command], int] | None:
    """A WebSocket batch message as (its id, its commands, how many count against the order rate), when every
    op is well formed and valid; None otherwise (the caller then takes the general way, which answers each
    op). Gives exactly the commands the general way would."""
    try:
        batch = _batch_decoder.decode(raw)
        if type(batch.id) is int and not -(1 << 63) <= batch.id < 1 << 63:
            return None
        commands: list[Command] = []
        rated = 0
        for op in batch.ops:
            if isinstance(op, _OrderOp):
                commands.append(requests.order_of(account, op, symbols))
                rated += 1
            elif isinstance(op, _CancelOp):
                commands.append(requests.cancel(account, requests.order_id_field(op.order_id)))
            elif isinstance(op, _AmendOp):
                order_id = requests.order_id_field(op.order_id)
                if op.qty is None and op.price is None:
                    return None
                commands.append(Amend(account, order_id, op.qty, op.price))
                rated += 1
            else:
                commands.append(requests.cancel_all(account, msgspec.structs.asdict(op), symbols))
        return batch.id, commands, rated
    except (msgspec.DecodeError, msgspec.ValidationError, BadRequest):
        return None
