"""What the screen shows, kept apart from how it is drawn.

`Market` folds the client session's events into plain state (books, trades, minute bars, my open
orders, connection) and says which parts changed, so the app can mark just those widgets dirty and
redraw them at screen speed however fast the feed runs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from tickflow.net.client import (
    Bar,
    BookChanged,
    Event,
    GapDetected,
    LocalBook,
    Order,
    OrderChanged,
    Resynced,
    ServerError,
    StateChanged,
    Trade,
    TradesReceived,
)
from tickflow.tui.candles import Candle, Candles, Cut

TAPE_LENGTH = 300

BOOK, TAPE, CHART, ORDERS, CONN = "book", "tape", "chart", "orders", "conn"


@dataclass
class Market:
    """The state behind the screen. `apply(event)` returns the names of the parts that changed."""

    symbol: str
    account: str
    symbols: list[str] = field(default_factory=list)
    books: dict[str, LocalBook] = field(default_factory=dict)
    trades: dict[str, deque[Trade]] = field(default_factory=dict)
    candles: dict[str, Candles] = field(default_factory=dict)
    orders: dict[int, Order] = field(default_factory=dict)
    closed: dict[int, int] = field(default_factory=dict)
    """Seq of the last change of orders that are no longer open, so a late stale answer cannot revive them."""
    conn: StateChanged = field(default_factory=lambda: StateChanged("connecting"))
    seq: int = 0
    gaps: int = 0
    notice: str | None = None

    def __post_init__(self) -> None:
        if self.symbol not in self.symbols:
            self.symbols.append(self.symbol)

    # ---- views

    @property
    def book(self) -> LocalBook | None:
        return self.books.get(self.symbol)

    def tape(self, symbol: str | None = None) -> deque[Trade]:
        return self.trades.setdefault(symbol or self.symbol, deque(maxlen=TAPE_LENGTH))

    def bars(self, symbol: str | None = None) -> list[Candle]:
        """Minute candles, oldest first: the server's bars and the trades seen after them."""
        return self.candles.setdefault(symbol or self.symbol, Candles()).candles()

    def bars_cut(self, symbol: str) -> Cut | None:
        """Where to ask `GET /bars` up to: just after the newest trade seen; None before any trade."""
        return self.candles.setdefault(symbol, Candles()).cut()

    def last_price(self, symbol: str | None = None) -> int | None:
        tape = self.trades.get(symbol or self.symbol)
        if tape:
            return tape[-1].price
        bars = self.bars(symbol)
        return bars[-1].close if bars else None

    def open_orders(self) -> list[Order]:
        """My open orders, oldest first."""
        return sorted((o for o in self.orders.values() if o.is_open), key=lambda o: o.order_id)

    @property
    def connected(self) -> bool:
        return self.conn.state == "connected"

    # ---- updates

    def apply(self, event: Event) -> set[str]:
        if isinstance(event, BookChanged):
            self.books[event.symbol] = event.book
            self.seq = max(self.seq, event.seq)
            return {BOOK, CONN} if event.symbol == self.symbol else {CONN}
        if isinstance(event, TradesReceived):
            self.add_trades(event.symbol, event.trades)
            return {TAPE, CHART} if event.symbol == self.symbol else set()
        if isinstance(event, OrderChanged):
            self.seq = max(self.seq, event.order.seq)
            self.set_order(event.order)
            return {ORDERS, CONN}
        if isinstance(event, StateChanged):
            self.conn = event
            return {CONN, BOOK}
        if isinstance(event, GapDetected):
            self.gaps += 1
            self.notice = f"gap on {event.symbol}: held seq {event.held_seq}, update prevSeq {event.prev_seq}; re-subscribed"
            return {CONN, BOOK}
        if isinstance(event, Resynced):
            self.notice = f"resync: {event.reason}"
            return {CONN}
        if isinstance(event, ServerError):
            self.notice = f"server: {event.body.get('error', event.body)}"
            return {CONN}
        return set()

    def add_trades(self, symbol: str, trades: list[Trade]) -> None:
        self.tape(symbol).extend(trades)
        self.candles.setdefault(symbol, Candles()).add_trades(trades)

    def set_bars(self, symbol: str, bars: list[Bar], before: int) -> None:
        """`GET /bars` over the trades with ids below `before`; the trades seen from `before` on are added."""
        self.candles.setdefault(symbol, Candles()).set_bars(bars, before)

    def set_order(self, order: Order) -> None:
        known = self.orders.get(order.order_id)
        known_seq = known.seq if known is not None else self.closed.get(order.order_id, -1)
        if known_seq > order.seq:
            return  # an older answer arriving after a newer private update
        if order.is_open:
            self.orders[order.order_id] = order
        else:
            self.orders.pop(order.order_id, None)
            self.closed[order.order_id] = order.seq

    def set_open_orders(self, orders: list[Order]) -> None:
        """The server's list of my open orders: the truth after (re)connecting. A private update newer
        than the list (by seq) still wins."""
        listed = {o.order_id for o in orders}
        for order_id in [i for i in self.orders if i not in listed]:
            del self.orders[order_id]
        for o in orders:
            self.set_order(o)
