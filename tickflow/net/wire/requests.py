"""Request bodies and messages validated into commands.

Validation happens here, before anything is queued: input that fails it is answered with a 4xx and
never reaches the log. The engine re-checks its own rules, so a command that slips past still gets
a result, never an exception.
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Container, Literal

import msgspec
from msgspec import Meta

from tickflow.core.types import MAX_CLIENT_ORDER_ID, MAX_PRICE, MAX_QTY, Amend, Cancel, CancelAll, NewOrder
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import DIGITS

Price = Annotated[int, Meta(ge=1, le=MAX_PRICE)]
Qty = Annotated[int, Meta(ge=1, le=MAX_QTY)]
# \Z, not $: "$" also matches before a final newline, which would let "abc\n" in as an id.
ClientOrderId = Annotated[
    str, Meta(min_length=1, max_length=MAX_CLIENT_ORDER_ID, pattern=r"\A[A-Za-z0-9._:-]+\Z")
]

class OrderRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    symbol: str
    side: Literal["buy", "sell"]
    qty: Qty
    type: Literal["limit", "market"] = "limit"
    price: Price | None = None
    tif: Literal["gtc", "ioc", "fok"] = "gtc"
    post_only: bool = False
    client_order_id: ClientOrderId | None = None


class AmendRequest(msgspec.Struct, rename="camel", forbid_unknown_fields=True):
    qty: Qty | None = None
    price: Price | None = None


class OrderFilter(msgspec.Struct, forbid_unknown_fields=True):
    """Which of an account's open orders a cancel-all takes, or `GET /orders` lists: all, or those in a
    symbol and/or on a side."""

    symbol: str | None = None
    side: Literal["buy", "sell"] | None = None


_AT = re.compile(r" - at `\$\.?([^`]*)`$")
_NAMED = re.compile(r"^Object (?:missing required|contains unknown) field `(.*)`$", re.DOTALL)
_json_decoder = msgspec.json.Decoder()


_FIELD_RULES = {
    "symbol": "symbol must be a string naming a listed symbol",
    "side": 'side must be "buy" or "sell"',
    "type": 'type must be "limit" or "market"',
    "qty": f"qty must be an integer between 1 and {MAX_QTY}",
    "price": f"price must be an integer number of ticks between 1 and {MAX_PRICE}",
    "tif": 'tif must be "gtc", "ioc" or "fok"',
    "postOnly": "postOnly must be true or false",
    "clientOrderId": f"clientOrderId must be 1-{MAX_CLIENT_ORDER_ID} characters of A-Z a-z 0-9 . _ : -",
}


_QUOTED_LAST = re.compile(r"^([^`'\"]*)([`'\"])(.{41,})\2$", re.DOTALL)
"""A message ending in a quoted value longer than an error message may echo: msgspec ends its message with
what it was sent, quoted whole (in `, ' or ", whatever the value holds)."""


def _field_error(e: msgspec.ValidationError) -> BadRequest:
    """Turn msgspec's message ("Expected `int` >= 1 - at `$.qty`") into a plain rule and a field;
    what was sent is quoted at most 40 characters long, as everywhere."""
    text = str(e)
    match = _AT.search(text)
    field = cut(match.group(1)) if match else None
    message = _QUOTED_LAST.sub(lambda m: f"{m[1]}{m[2]}{cut(m[3])}{m[2]}", _AT.sub("", text))
    named = _NAMED.match(message)
    if named:  # "Object missing required field `qty`" names the field inside the message
        inner = named.group(1)
        return BadRequest(message, f"{field}.{inner}" if field else inner)
    if field in _FIELD_RULES:
        return BadRequest(f"{_FIELD_RULES[field]} ({message})", field)
    return BadRequest(f"{field}: {message}" if field else message, field or None)


def decode_json(raw: bytes | str) -> Any:
    try:
        return _json_decoder.decode(raw)
    except msgspec.DecodeError as e:
        raise _explained(raw) or BadRequest(f"malformed JSON: {e}") from None
    except RecursionError:  # a few kilobytes of "[[[[..." go deeper than the decoder's recursion allows
        raise BadRequest("malformed JSON: nested too deeply") from None


class _Huge(str):
    """A JSON number too large for a float (1e400), as written, to be named."""


def _explained(raw: bytes | str) -> BadRequest | None:
    """What msgspec's message gets wrong, said plainly, with the field: a number too large for a float
    ("Number out of range - at `$[...]`", no field) and a lone UTF-16 surrogate escape such as
    "\\ud800", which no character is ("Input data was truncated"). Only on the error path."""
    try:
        data = json.loads(raw, parse_float=lambda t: _Huge(t) if math.isinf(float(t)) else float(t),
                          parse_constant=lambda t: None)
    except (ValueError, RecursionError):
        return None  # malformed for stdlib json too: msgspec's message stands
    found = _find_odd(data, "")
    if found is None:
        return None
    path, value = found
    field = path or None
    where = f"`{cut(path)}`: " if path else ""
    if isinstance(value, _Huge):
        return BadRequest(f"malformed JSON: {where}number out of range ({cut(value)})", field)
    return BadRequest(f"malformed JSON: {where}a lone UTF-16 surrogate escape (\\u{ord(value):04x}) is not a "
                      "character", field)


def _find_odd(value: Any, path: str, depth: int = 0) -> tuple[str, Any] | None:
    """The first number too large or lone surrogate in `value` (a key counts as where it is), with its path."""
    if isinstance(value, _Huge):
        return path, value
    if isinstance(value, str):
        odd = _SURROGATE.search(value)
        return (path, odd.group()) if odd else None
    if depth > 64:
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            inner = f"{path}.{key}" if path else key
            found = _find_odd(key, path, depth + 1) or _find_odd(item, inner, depth + 1)
            if found is not None:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _find_odd(item, f"{path}[{i}]", depth + 1)
            if found is not None:
                return found
    return None


_SURROGATE = re.compile("[\ud800-\udfff]")


WHOLE_NUMBER_FIELDS = ("qty", "price")
"""Integer fields of request bodies, whose values may also be written 5.0 or 5e0."""


def _whole_numbers(data: dict[str, Any]) -> dict[str, Any]:
    """JSON has one kind of number: 5.0 is the integer 5 (so JSON Schema and /openapi.json say), 5.5 is not."""
    whole = {k: int(v) for k in WHOLE_NUMBER_FIELDS if type(v := data.get(k)) is float and v.is_integer()}
    return {**data, **whole} if whole else data


def convert(data: Any, kind: type[msgspec.Struct]) -> Any:
    if not isinstance(data, dict):
        raise BadRequest("expected a JSON object")
    try:
        return msgspec.convert(_whole_numbers(data), kind)
    except msgspec.ValidationError as e:
        raise _field_error(e) from None


def new_order(account: str, data: Any, symbols: Container[str]) -> NewOrder:
    return order_of(account, convert(data, OrderRequest), symbols)


def order_of(account: str, req: OrderRequest, symbols: Container[str]) -> NewOrder:
    """The order a request's fields (decoded and in range) ask for, once the rules between them hold."""
    if req.symbol not in symbols:
        raise BadRequest(f"unknown symbol {brief(req.symbol)}", "symbol")
    if req.type == "limit":
        if req.price is None:
            raise BadRequest("a limit order needs a price", "price")
        price = req.price
    else:
        if req.price is not None:
            raise BadRequest("a market order takes no price", "price")
        if req.post_only:
            raise BadRequest("postOnly needs a limit order", "postOnly")
        price = 0
    if req.post_only and req.tif != "gtc":
        raise BadRequest("postOnly needs tif gtc", "postOnly")
    # A market order never rests: say so in its tif rather than echo a meaningless "gtc".
    tif = "ioc" if req.type == "market" and req.tif == "gtc" else req.tif
    return NewOrder(account, req.symbol, req.side, req.type, price, req.qty, tif, req.post_only,
                    req.client_order_id)


def amend(account: str, order_id: int, data: Any) -> Amend:
    req: AmendRequest = convert(data, AmendRequest)
    if req.qty is None and req.price is None:
        raise BadRequest("nothing to amend: give qty, price or both")
    return Amend(account, order_id, req.qty, req.price)


def cancel(account: str, order_id: int) -> Cancel:
    return Cancel(account, order_id)


def cancel_all(account: str, data: dict[str, Any], symbols: Container[str],
               names: str = "fields") -> CancelAll:
    """`{"symbol"?, "side"?}` (a WebSocket message's `names` = fields, or DELETE /orders' query
    parameters): the orders to cancel."""
    req = order_filter(data, symbols, names, "a cancel-all takes symbol and side, both optional")
    return CancelAll(account, req.symbol, req.side)


def order_filter(data: dict[str, Any], symbols: Container[str], names: str, takes: str) -> OrderFilter:
    """`{"symbol"?, "side"?}`; any other name is refused (a misspelt filter would otherwise widen the
    choice to every order), `takes` saying what is allowed."""
    unknown = [k for k in data if k not in ("symbol", "side")]
    if unknown:
        raise BadRequest(f"unknown {names} {', '.join(brief(k) for k in unknown[:10])}: {takes}", cut(unknown[0]))
    req: OrderFilter = convert(data, OrderFilter)
    if req.symbol is not None and req.symbol not in symbols:
        raise BadRequest(f"unknown symbol {brief(req.symbol)}", "symbol")
    return req


def order_id(text: str) -> int:
    """An order id from a URL path: anything but a number in range names no order (404)."""
    return _in_range(int(text) if DIGITS.match(text) else None, text)


def order_id_field(value: Any) -> int:
    """An order id from a JSON message: a missing or mistyped field is a bad request (400)."""
    if type(value) is not int:
        raise BadRequest(f"orderId must be an integer, not {brief(value)}", "orderId")
    return _in_range(value, value)


def _in_range(value: int | None, given: Any) -> int:
    """An order id can only be 1..2**62-1; any other number names no order (404)."""
    if value is None or not 0 < value < 1 << 62:
        raise BadRequest(f"order id must be a positive integer, not {brief(given)}", "orderId", 404)
    return value
