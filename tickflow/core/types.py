"""Commands in, results and events out: the vocabulary of the matching engine.

Commands are what the write-ahead log stores (tagged, array-like msgspec structs, so the binary
encoding is compact). Results and events are what the engine returns; their camelCase field names
are the wire names, so the server can encode them without copying.
"""

from __future__ import annotations

from typing import Container, Final, Literal, Protocol

import msgspec

Side = Literal["buy", "sell"]
OrderType = Literal["limit", "market"]
Tif = Literal["gtc", "ioc", "fok"]
Status = Literal["new", "partially_filled", "filled", "cancelled", "rejected"]
Liquidity = Literal["maker", "taker"]
"""How an order traded: resting on the book (maker), or as the incoming order that took it (taker)."""

MAX_PRICE: Final = 1_000_000_000
"""Highest price in ticks a limit order may carry."""
MAX_QTY: Final = 1_000_000_000
"""Largest quantity a single order may carry."""
MAX_CLIENT_ORDER_ID: Final = 64
MAX_QUOTE_LEVELS: Final = 64
"""The most levels one side of a mass quote may carry."""


class Reason:
    """Why a command was rejected or an order ended without filling; the wire value of `reason`."""

    UNKNOWN_SYMBOL: Final = "unknown_symbol"
    BAD_PRICE: Final = "bad_price"
    BAD_QTY: Final = "bad_qty"
    BAD_ORDER: Final = "bad_order"
    POST_ONLY_WOULD_TAKE: Final = "post_only_would_take"
    FOK_NOT_FILLED: Final = "fok_not_filled"
    IOC_REMAINDER: Final = "ioc_remainder_cancelled"
    NO_LIQUIDITY: Final = "no_liquidity"
    SELF_TRADE: Final = "self_trade_prevented"
    UNKNOWN_ORDER: Final = "unknown_order"
    NOT_OPEN: Final = "not_open"
    NOT_LIVE: Final = "not_live"
    """The engine's answer to a cancel or amend of an id it gave out that is not one of the account's live
    orders: finished, or another account's. Never on the wire: the exchange service reads SQLite and
    answers NOT_OPEN (with the order's final state) or UNKNOWN_ORDER."""
    NOTHING_TO_AMEND: Final = "nothing_to_amend"
    QTY_BELOW_FILLED: Final = "qty_not_above_filled"
    DUPLICATE_MISMATCH: Final = "duplicate_client_order_id"
    USER_CANCEL: Final = "cancelled_by_user"
    SYMBOL_EXISTS: Final = "symbol_exists"
    QUOTE_REPLACED: Final = "replaced_by_quote"
    REPEATED_PRICE: Final = "repeated_price"
    CROSSED_QUOTE: Final = "crossed_quote"
    TOO_MANY_LEVELS: Final = "too_many_levels"
    TOO_MANY_OPEN_ORDERS: Final = "too_many_open_orders"
    OUTSIDE_PRICE_BAND: Final = "outside_price_band"
    HISTORY_UNAVAILABLE: Final = "history_unavailable"
    """Not the engine's: a refusal of an order no longer live, while SQLite cannot say whose it was."""


# ---------------------------------------------------------------- commands (what the log holds)
# A log record with more fields than these is refused, not half-read: it was written by a newer
# tickflow, and applying only the fields known here could give a different book.


class NewOrder(msgspec.Struct, tag_field="kind", tag="n", array_like=True, forbid_unknown_fields=True,
               frozen=True, gc=False):
    """Place an order. `price` is ignored (must be 0) for market orders."""

    account: str
    symbol: str
    side: Side
    type: OrderType
    price: int
    qty: int
    tif: Tif = "gtc"
    post_only: bool = False
    client_order_id: str | None = None


class Cancel(msgspec.Struct, tag_field="kind", tag="c", array_like=True, forbid_unknown_fields=True,
             frozen=True, gc=False):
    account: str
    order_id: int


class Amend(msgspec.Struct, tag_field="kind", tag="a", array_like=True, forbid_unknown_fields=True,
            frozen=True, gc=False):
    """Change an open order: `qty` is the new total quantity (filled included), `price` the new limit."""

    account: str
    order_id: int
    qty: int | None = None
    price: int | None = None


class CancelAll(msgspec.Struct, tag_field="kind", tag="x", array_like=True, forbid_unknown_fields=True,
                frozen=True, gc=False):
    """Cancel every open order of the account, or only those in `symbol` and/or on `side`, at once:
    one record, so nothing can trade between the first cancel and the last."""

    account: str
    symbol: str | None = None
    side: Side | None = None


class AddSymbol(msgspec.Struct, tag_field="kind", tag="s", array_like=True, forbid_unknown_fields=True,
                frozen=True, gc=False):
    """Open a book. Logged like any command, so a replay knows the same symbols."""

    symbol: str


class Quote(msgspec.Struct, tag_field="kind", tag="q", array_like=True, forbid_unknown_fields=True,
            frozen=True, gc=False):
    """Replace the account's quote in `symbol`: its quote orders there become these levels, each
    (price, the open quantity to show), bids and asks. One record, so nothing trades between the
    first change and the last."""

    account: str
    symbol: str
    bids: list[tuple[int, int]]
    asks: list[tuple[int, int]]


class Rules(msgspec.Struct, tag_field="kind", tag="r", array_like=True, forbid_unknown_fields=True,
            frozen=True, gc=False):
    """The limits the engine enforces from this record on: logged like symbols, so a replay applies the
    limits that were in force, whatever the flags of the server that replays it."""

    max_open_orders: int = 0
    """The most open orders one account may have; a limit order that could rest past it is rejected. 0: none."""
    price_band: int = 0
    """How far, in basis points of the symbol's last trade price, a limit price may be from it. 0: no band."""
    idempotency_window: int = 0
    """Milliseconds of log time a clientOrderId is remembered after its order (core/idempotency.py). 0: for ever."""


Command = NewOrder | Cancel | Amend | CancelAll | AddSymbol | Quote | Rules


class Record(msgspec.Struct, array_like=True, forbid_unknown_fields=True, frozen=True, gc=False):
    """One log record: a command as the sequencer accepted it, with its sequence number and time."""

    seq: int
    ts: int
    """Milliseconds since the epoch, stamped by the sequencer, never read from the clock at replay."""
    command: Command


# ---------------------------------------------------------------- results and events


class Fill(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    trade_id: int
    price: int
    qty: int
    liquidity: Liquidity
    """taker in the answer of the order (or amend) that traded, maker in the updates of the orders it hit."""


class OrderState(msgspec.Struct, gc=False, rename="camel"):
    """What happened to an order: the answer to a new order, a cancel or an amend, and an order's state."""

    order_id: int
    client_order_id: str | None
    account: str
    symbol: str
    side: Side
    type: OrderType
    price: int
    qty: int
    tif: Tif
    post_only: bool
    status: Status
    filled_qty: int
    remaining_qty: int
    """qty - filledQty: still resting while status is new or partially_filled, cancelled otherwise."""
    fills: list[Fill]
    """Fills made by this command, in execution order (empty for a cancel or a state query)."""
    reason: str | None
    seq: int
    ts: int


class Trade(msgspec.Struct, frozen=True, gc=False, rename="camel"):
    trade_id: int
    symbol: str
    price: int
    qty: int
    buy_order_id: int
    sell_order_id: int
    buy_account: str
    sell_account: str
    aggressor: Side
    seq: int
    ts: int


class LevelChange(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A price level after a command: `qty` and `orders` are 0 when the level is gone."""

    symbol: str
    side: Side
    price: int
    qty: int
    orders: int


class RestingOrder(Protocol):
    """What a maker fill reads of the order it hit: its identity and terms, which never change on the
    object (book.Order is one; an amend that re-queues makes a new one)."""

    @property
    def order_id(self) -> int: ...
    @property
    def client_order_id(self) -> str | None: ...
    @property
    def account(self) -> str: ...
    @property
    def symbol(self) -> str: ...
    @property
    def side(self) -> Side: ...
    @property
    def type(self) -> OrderType: ...
    @property
    def price(self) -> int: ...
    @property
    def tif(self) -> Tif: ...
    @property
    def post_only(self) -> bool: ...


MakerFill = tuple[RestingOrder, int, Status, int, Fill, int, int]
"""A fill of a resting order as matching notes it: (the order, its qty, status and filled qty after the
fill, the taker's fill, seq, ts). Cheaper to note than an OrderState, which is built only when it is read: most
makers have nobody listening for their updates."""


def maker_state(fill: MakerFill) -> OrderState:
    """The OrderState a noted maker fill stands for. An order's identity, price and terms never change
    on the object (an amend that re-queues makes a new one); what does change was noted at the fill."""
    order, qty, status, filled, taken, seq, ts = fill
    return OrderState(order.order_id, order.client_order_id, order.account, order.symbol, order.side,
                      order.type, order.price, qty, order.tif, order.post_only, status, filled, qty - filled,
                      [Fill(taken.trade_id, taken.price, taken.qty, "maker")], None, seq, ts)


class Outcome(msgspec.Struct, gc=False):
    """Everything one command did, enough to answer the caller and publish the feed."""

    seq: int
    result: OrderState | None
    """The order after the command; None for AddSymbol, CancelAll (its orders are `updates`) and for a
    cancel or amend of an unknown order."""
    error: str | None
    """Set when the command was refused and changed nothing (unknown order, not open, a reused
    clientOrderId with other fields, ...). A new order that was rejected by the book's rules is not
    an error: its result has status "rejected" and a reason."""
    trades: list[Trade]
    book: list[LevelChange]
    changed: list[OrderState | MakerFill]
    """Resting orders the command changed, as the engine noted them: read them through `updates`."""
    replayed: bool = False
    """True when the command was an idempotent retry answered with the original result."""
    quoted: list[OrderState] | None = None
    """A mass quote's own orders: those it cancelled (by id), kept or reduced, then placed."""

    @property
    def updates(self) -> list[OrderState]:
        """Resting orders the command changed (filled against, cancelled by self-trade prevention, or all
        that a CancelAll cancelled, oldest first), each as it was after this command."""
        return [u if isinstance(u, OrderState) else maker_state(u) for u in self.changed]

    def updates_of(self, accounts: Container[str]) -> list[OrderState]:
        """`updates` of the orders of `accounts` only; the others are never built."""
        states = []
        for u in self.changed:
            if isinstance(u, OrderState):
                if u.account in accounts:
                    states.append(u)
            elif u[0].account in accounts:
                states.append(maker_state(u))
        return states
