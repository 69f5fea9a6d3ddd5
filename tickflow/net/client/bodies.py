"""What the client's calls send and how their answers are read, shared by the HTTP `Client`, the
WebSocket `Session` and the batch ops (ops.py): request bodies from keyword arguments, and JSON answers
decoded into the wire's schemas."""

from __future__ import annotations

from typing import Any, TypeVar

import msgspec

from tickflow.net.client.errors import ProtocolError
from tickflow.net.wire.messages import OrderType, Side, Tif

__all__ = ["encode", "decode_body", "decode_as", "order_fields", "order_filters", "amend_fields"]

T = TypeVar("T")
_json = msgspec.json.Decoder()
encode = msgspec.json.Encoder().encode
"""Any JSON value -> UTF-8 bytes, as the client sends it."""


def decode_body(raw: bytes) -> Any:
    """An answer's body as JSON, or its text when it is not JSON."""
    try:
        return _json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")


def decode_as(kind: type[T], raw: bytes, what: str, status: int = 200) -> T:
    """`raw` as a `kind`, or `ProtocolError` when the answer is not one."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.DecodeError as e:  # ValidationError included
        raise ProtocolError(what, status, raw, e) from e



def order_fields(symbol: str, side: Side, qty: int, price: int | None, type: OrderType | None,
                 tif: Tif, post_only: bool, client_order_id: str | None) -> dict[str, Any]:
    """A new order's body; a market order when `price` is None and `type` is not given."""
    body: dict[str, Any] = {"symbol": symbol, "side": side,
                            "type": type or ("limit" if price is not None else "market"), "qty": qty}
    if price is not None:
        body["price"] = price
    if tif != "gtc":
        body["tif"] = tif
    if post_only:
        body["postOnly"] = True
    if client_order_id is not None:
        body["clientOrderId"] = client_order_id
    return body


def order_filters(symbol: str | None, side: Side | None) -> dict[str, Any]:
    """The filters of a cancel-all or an open-orders read: the ones given."""
    return {k: v for k, v in (("symbol", symbol), ("side", side)) if v is not None}


def amend_fields(qty: int | None, price: int | None) -> dict[str, Any]:
    """An amend's body: the fields given."""
    body: dict[str, Any] = {}
    if qty is not None:
        body["qty"] = qty
    if price is not None:
        body["price"] = price
    return body

