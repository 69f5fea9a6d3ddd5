"""The ops of a batch, built with the same arguments as the single calls.

```python
from tickflow.net.client import ops

results = await session.batch([
    ops.order("ACME", "buy", 5, 9990, client_order_id="mm-1"),
    ops.order("ACME", "sell", 5, 10010),
    ops.cancel(17),
    ops.amend(18, qty=3),
    ops.cancel_all("ACME", "buy"),
])
```

Each builder gives an `Op`: the op's kind and its fields as it is sent alone (docs/protocol.md, "Order
entry"), without an `id` (a batch has one id; its ops have none). Nothing is checked here: an op the
server refuses is answered with an error in its place (`OpResult.error`), as it would be alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast

from tickflow.net.client.bodies import amend_fields, order_fields, order_filters
from tickflow.net.wire.messages import OrderType, Side, Tif

__all__ = ["Op", "OpKind", "order", "cancel", "amend", "cancel_all"]

OpKind = Literal["order", "cancel", "amend", "cancelAll"]
"""The order operations a batch may hold (a `quote` may not: it is a command of its own)."""


@dataclass(frozen=True, slots=True)
class Op:
    """One order operation of a batch: `kind` and its fields as sent alone (no `op`, no `id`)."""

    kind: OpKind
    fields: Mapping[str, Any] = field(default_factory=dict)

    def wire(self) -> dict[str, Any]:
        """The op as it goes into a batch's `ops`."""
        return {"op": self.kind, **self.fields}

    @classmethod
    def of(cls, op: Op | Mapping[str, Any]) -> Op:
        """`op` itself, or an op written as the wire has it (`{"op": "cancel", "orderId": 17}`): sent
        as it is, also with fields the builders would not write (the server answers those in place)."""
        if isinstance(op, Op):
            return op
        fields = dict(op)
        return cls(cast(OpKind, fields.pop("op", None)), fields)


def order(symbol: str, side: Side, qty: int, price: int | None = None, *, type: OrderType | None = None,
          tif: Tif = "gtc", post_only: bool = False, client_order_id: str | None = None) -> Op:
    """A new order, as `place_order` takes it (a market order when `price` is None and `type` is not
    given); its result is the order (`OpResult.order`)."""
    return Op("order", order_fields(symbol, side, qty, price, type, tif, post_only, client_order_id))


def cancel(order_id: int) -> Op:
    """Cancel an order; its result is the order, cancelled."""
    return Op("cancel", {"orderId": order_id})


def amend(order_id: int, *, qty: int | None = None, price: int | None = None) -> Op:
    """Amend an order (`qty` the new total, filled part included); its result is the order as amended."""
    return Op("amend", {"orderId": order_id, **amend_fields(qty, price)})


def cancel_all(symbol: str | None = None, side: Side | None = None) -> Op:
    """Cancel every open order of the account's, or those in `symbol` and/or on `side`; its result is
    the orders it cancelled (`OpResult.orders`)."""
    return Op("cancelAll", order_filters(symbol, side))
