"""What a client reads from the server, as msgspec schemas: the HTTP answers (orders, trades, fills,
books, bars, symbols, health) and the WebSocket messages, told apart by their `type` field.

They describe the JSON of docs/protocol.md; `server_message` decodes one WebSocket text frame into the
matching class. Prices and quantities are integers (prices in ticks of the symbol).
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from tickflow.core.types import Liquidity, OrderType, Side, Status, Tif

__all__ = [
    "Side", "OrderType", "Tif", "Status", "Liquidity", "ConnState", "Updates", "OPEN_STATUSES",
    "Fill", "Order", "Trade", "AccountFill", "Level", "BookLevel", "Book", "Bar", "SymbolInfo", "Health",
    "OrderList", "SymbolList", "OpAnswer", "BatchAnswer", "Quote",
    "Snapshot", "Update", "Result", "Results", "OrderMsg", "OrdersMsg", "AuthMsg", "Resync", "ErrorMsg", "Pong",
    "ServerMessage", "server_message",
]

ConnState = Literal["connecting", "connected", "reconnecting", "closed"]
"""A client session's connection, as its `StateChanged` events report it."""

Updates = bool | Literal["lists"]
"""The private updates a WebSocket signs in for: each change its own message (True), none (False), or
gathered into one `orders` message per durable batch ("lists")."""

OPEN_STATUSES = frozenset({"new", "partially_filled"})
"""The statuses of an order still resting on the book."""


# ------------------------------------------------------------------ HTTP answers


class Fill(msgspec.Struct, frozen=True, rename="camel"):
    """One fill made by an order call, in execution order."""

    trade_id: int
    price: int
    qty: int
    liquidity: Liquidity
    """`taker` in the answer of the order (or amend) that traded; `maker` in a resting order's update."""


class Order(msgspec.Struct, rename="camel"):
    """The order result: an order as the last command left it.

    `status` is one of new, partially_filled, filled, cancelled, rejected; `reason` says why it was
    cancelled or rejected (cancelled_by_user, post_only_would_take, ...). `price` is 0 or None for a
    market order. `fills` holds only the fills made by the call that produced this result.
    """

    order_id: int
    account: str
    symbol: str
    side: Side
    type: OrderType
    qty: int
    status: Status
    price: int | None = None
    client_order_id: str | None = None
    tif: Tif = "gtc"
    post_only: bool = False
    filled_qty: int = 0
    remaining_qty: int = 0
    fills: list[Fill] = []
    reason: str | None = None
    seq: int = 0
    ts: int = 0

    @property
    def is_open(self) -> bool:
        """True while the order rests on the book (status new or partially_filled)."""
        return self.status in OPEN_STATUSES


class Trade(msgspec.Struct, frozen=True, rename="camel"):
    """A public trade. `aggressor` is the side of the order that took liquidity."""

    trade_id: int
    symbol: str
    price: int
    qty: int
    aggressor: Side
    seq: int
    ts: int
    buy_order_id: int = 0
    sell_order_id: int = 0


class AccountFill(msgspec.Struct, frozen=True, rename="camel"):
    """The caller's side of one of its trades: its order, the side it was on, and whether that order was
    resting (`maker`) or took liquidity (`taker`)."""

    trade_id: int
    symbol: str
    order_id: int
    side: Side
    price: int
    qty: int
    liquidity: Liquidity
    seq: int
    ts: int


class Level(msgspec.Struct, frozen=True, array_like=True):
    """A price level: total quantity and number of orders at `price` (the feed's `[price, qty, orders]`).

    Levels are equal when their fields are, whichever wire form they came from: a client's book levels
    compare equal to `GET /book`'s (`BookLevel`) at the same seq.
    """

    price: int
    qty: int
    orders: int

    # msgspec's own comparison also wants the same class; a level is its three numbers.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Level):
            return (self.price, self.qty, self.orders) == (other.price, other.qty, other.orders)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, Level):
            return (self.price, self.qty, self.orders) != (other.price, other.qty, other.orders)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.price, self.qty, self.orders))


class BookLevel(Level, frozen=True, array_like=False):
    """A level of `GET /book`: a `Level` that is a JSON object on the wire, equal to the feed's `Level`
    with the same fields."""


class Book(msgspec.Struct, frozen=True):
    """`GET /book/{symbol}`: best levels first; `seq` is the last command applied to this book."""

    symbol: str
    seq: int
    bids: list[BookLevel]
    asks: list[BookLevel]


class Bar(msgspec.Struct, frozen=True):
    """One OHLC bar; `t` is the bucket start in milliseconds since the epoch."""

    t: int
    open: int
    high: int
    low: int
    close: int
    volume: int
    vwap: float | None = None


class SymbolInfo(msgspec.Struct, frozen=True, rename="camel"):
    """`GET /symbols`: a symbol with its best bid, best ask and last trade price (None when there is none)."""

    symbol: str
    best_bid: int | None = None
    best_ask: int | None = None
    last: int | None = None


class Health(msgspec.Struct, frozen=True, rename="camel"):
    """`GET /health`; `Client.request("GET", "/health")` gives every field of the body as a dict."""

    status: str
    seq: int = 0
    log_started: int | None = None
    """When the exchange's log began (ms since the epoch; the time on its first record): the same across
    restarts, another for another exchange (a fresh data directory). None while the log has no record
    yet, and from a server too old to say."""
    durability: str | None = None
    accounts: str | None = None
    """"open" (demo mode: the token is the account name) or "tokens" (only a --tokens file's tokens)."""
    warning: str | None = None
    """What the operator should know: open accounts on an address other machines can reach."""


class OrderList(msgspec.Struct):
    """`GET /orders` and `DELETE /orders` (cancel all): the orders, oldest first."""

    orders: list[Order]


class SymbolList(msgspec.Struct):
    """`GET /symbols`."""

    symbols: list[SymbolInfo]


class OpAnswer(msgspec.Struct, frozen=True):
    """One op's answer in a batch, in the op's place: the status and body it would have been answered
    alone (an order result, `{"orders": [...], "seq": N}` for a cancel-all, or an error)."""

    status: int
    body: msgspec.Raw


class BatchAnswer(msgspec.Struct, frozen=True):
    """`POST /batch`: one answer per op, in the order the ops were given."""

    results: list[OpAnswer]


class Quote(msgspec.Struct, frozen=True):
    """A mass quote's answer (`PUT /quotes/{symbol}`, or the WebSocket `quote` op): every quote order of
    the account in `symbol` that the command touched or kept, those it cancelled first (by id, `reason`
    `replaced_by_quote`), then those it kept or reduced, then the new ones (with the fills they made);
    `seq` is the command's."""

    symbol: str
    seq: int
    orders: list[Order]


# ------------------------------------------------------------------ WebSocket messages


class Snapshot(msgspec.Struct, tag_field="type", tag="snapshot", rename="camel"):
    """A symbol's whole book at `seq` and its latest trades: the start of its stream."""

    symbol: str
    seq: int
    bids: list[Level]
    asks: list[Level]
    trades: list[Trade] = []
    more: int = 0
    """Parts still to come (updates with seq = prevSeq = this seq) when the book did not fit one message."""
    deeper: bool = False
    """True when the book is deeper than this message: its other levels follow as updates (seq = prevSeq),
    between the symbol's other updates, the last of them with `deeper` false."""


class Update(msgspec.Struct, tag_field="type", tag="update", rename="camel"):
    """The levels (new totals, qty 0 gone) and trades one batch changed; `prev_seq` is the seq it follows."""

    symbol: str
    seq: int
    prev_seq: int
    bids: list[Level] = []
    asks: list[Level] = []
    trades: list[Trade] = []
    more: int = 0
    """Parts still to come, as for a snapshot."""
    deeper: bool | None = None
    """Set only on the deeper levels of a snapshot: false on the last of them."""


class Result(msgspec.Struct, tag_field="type", tag="result"):
    """The answer to an order-entry request: the HTTP status and body it would have had, with its `id`."""

    id: Any
    status: int
    body: msgspec.Raw


class Results(msgspec.Struct, tag_field="type", tag="results"):
    """The answer to a batch, with its `id`: a JSON array with one `{"status", "body"}` per op, in order
    (kept raw here: a `list[OpAnswer]`). A batch refused as a whole is answered with a `Result` instead."""

    id: Any
    results: msgspec.Raw


class OrderMsg(msgspec.Struct, tag_field="type", tag="order"):
    """A private update: one of the signed-in account's orders changed."""

    order: Order


class OrdersMsg(msgspec.Struct, tag_field="type", tag="orders"):
    """Private updates as a list (a connection signed in with `updates: "lists"`): every change to the
    account's orders in one durable batch of the log, in order (at most 1,000 a message)."""

    orders: list[Order]


class AuthMsg(msgspec.Struct, tag_field="type", tag="auth", rename="camel"):
    """The token was taken: the account it names, and what the connection was armed with."""

    account: str
    updates: Updates = True
    cancel_on_disconnect: bool = False


class Resync(msgspec.Struct, tag_field="type", tag="resync"):
    """The server dropped the market data queued for this connection; fresh snapshots follow."""

    reason: str = ""


class ErrorMsg(msgspec.Struct, tag_field="type", tag="error"):
    """Something sent was refused; `id` or `op` say what, when the server knows."""

    error: str = ""
    id: Any = None
    op: Any = None


class Pong(msgspec.Struct, tag_field="type", tag="pong"):
    """The answer to `{"op": "ping"}`."""


ServerMessage = Snapshot | Update | Result | Results | OrderMsg | OrdersMsg | AuthMsg | Resync | ErrorMsg | Pong
"""Every message the server sends on a WebSocket."""

server_message = msgspec.json.Decoder(ServerMessage).decode
"""One WebSocket text frame -> its `ServerMessage`; raises msgspec.DecodeError (ValidationError included)."""
