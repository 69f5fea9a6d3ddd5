"""What the screen shows, kept apart from how it is drawn.

`Market` folds the client session's events into plain state (books, trades, minute bars, my open
orders, my fills, connection) and says which parts changed, so the app can mark just those widgets
dirty and redraw them at screen speed however fast the feed runs. Which state of an order wins (never
an older one over a newer, never a closed order reopened) is the client library's rule: my orders are
kept by its `OrderTracker`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from tickflow.net.client import (
    AccountFill,
    Bar,
    BookChanged,
    Event,
    GapDetected,
    LocalBook,
    Order,
    OrderChanged,
    OrderTracker,
    Resynced,
    ServerChanged,
    ServerError,
    StateChanged,
    Trade,
    TradesReceived,
)
from tickflow.tui import format as fmt
from tickflow.tui.candles import Candle, Candles, Cut

TAPE_LENGTH = 300
FILLS_KEPT = 200
"""My fills kept per symbol, the newest: more than `GET /fills` gives in one page (100)."""

BOOK, TAPE, CHART, ORDERS, FILLS, CONN = "book", "tape", "chart", "orders", "fills", "conn"

Severity = Literal["information", "warning", "error"]


def order_news(before: Order, after: Order) -> str | None:
    """A line about what happened to one of my resting orders, when it was not this screen's doing:
    `#123 sell ACME: filled 3 @ 100 (5/10)`, `#124 buy ACME: cancelled: self-trade prevented`."""
    done = after.filled_qty - before.filled_qty
    where = f"#{after.order_id} {after.side} {after.symbol}"
    if done > 0:
        fills = after.fills  # none when the state was read over HTTP (a fill while away)
        price = f" @ {fmt.price(sum(f.price * f.qty for f in fills) / sum(f.qty for f in fills))}" if fills else ""
        left = "all" if after.status == "filled" else f"{after.filled_qty}/{after.qty}"
        news = f"{where}: filled {done}{price} ({left})"
        if not after.is_open and after.status != "filled":
            news += f", then {_closed(after)}"
        return news
    if not after.is_open:
        return f"{where}: {_closed(after)}"
    return None


def _closed(order: Order) -> str:
    reason = {"self_trade_prevented": "self-trade prevented", "cancelled_by_user": "by this account elsewhere"}
    why = reason.get(order.reason or "", (order.reason or "").replace("_", " "))
    return f"{order.status}: {why}" if why else order.status


@dataclass
class Market:
    """The state behind the screen. `apply(event)` returns the names of the parts that changed."""

    symbol: str
    account: str
    symbols: list[str] = field(default_factory=list)
    books: dict[str, LocalBook] = field(default_factory=dict)
    trades: dict[str, deque[Trade]] = field(default_factory=dict)
    candles: dict[str, Candles] = field(default_factory=dict)
    tracker: OrderTracker = field(default_factory=OrderTracker)
    """My orders: the newest state of each open one, and those seen closed (a late stale answer cannot
    revive them)."""
    unlisted: dict[int, Order] = field(default_factory=dict)
    """Orders the server's open list left out, until their closing update says what became of them."""
    asked: set[int] = field(default_factory=set)
    """Orders this screen has a cancel or amend in flight for: their closing is no news."""
    fills: dict[str, dict[int, AccountFill]] = field(default_factory=dict)
    """My fills by symbol and trade id: from `GET /fills` and from order answers and updates, each once."""
    fills_loaded: set[str] = field(default_factory=set)
    """Symbols whose fills `GET /fills` has listed from this exchange (until then the view says loading)."""
    epoch: int = 0
    """Counts the exchanges followed (`ServerChanged`): an answer asked of the one before is dropped."""
    conn: StateChanged = field(default_factory=lambda: StateChanged("connecting"))
    seq: int = 0
    gaps: int = 0
    notices: list[tuple[str, Severity]] = field(default_factory=list)
    """Lines for the trader's eye (a fill, a gap, a refusal), taken by the app as they come."""

    def __post_init__(self) -> None:
        if self.symbol not in self.symbols:
            self.symbols.append(self.symbol)

    # ---- views

    @property
    def orders(self) -> Mapping[int, Order]:
        """My open orders by id, each in its newest state."""
        return self.tracker.open

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
        return sorted(self.orders.values(), key=lambda o: o.order_id)

    def my_fills(self, symbol: str | None = None) -> list[AccountFill]:
        """My fills in `symbol` (the one on screen by default), newest first."""
        kept = self.fills.get(symbol or self.symbol, {})
        return [kept[i] for i in sorted(kept, reverse=True)]

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
            self.set_order(event.order, news=True)
            return {ORDERS, FILLS, CONN} if event.order.fills else {ORDERS, CONN}
        if isinstance(event, StateChanged):
            self.conn = event
            return {CONN, BOOK}
        if isinstance(event, GapDetected):
            self.gaps += 1
            self.notices.append((f"gap on {event.symbol}: held seq {event.held_seq}, update prevSeq "
                                 f"{event.prev_seq}; re-subscribed", "warning"))
            return {CONN, BOOK}
        if isinstance(event, Resynced):
            self.notices.append((f"resync: {event.reason}", "warning"))
            return {CONN}
        if isinstance(event, ServerError):
            self.notices.append((f"server: {event.body.get('error', event.body)}", "error"))
            return {CONN}
        if isinstance(event, ServerChanged):
            self.forget_server()
            # "another exchange at this address: its log began at ...", or how the seqs told it
            said = event.reason if event.reason.startswith("another ") else \
                f"another server at this address ({event.reason})"
            self.notices.append((f"{said}: reloading", "warning"))
            return {BOOK, TAPE, CHART, ORDERS, FILLS, CONN}
        return set()

    def forget_server(self) -> None:
        """Another server answers at the address: its seqs, trade ids and order ids start again."""
        self.books.clear()
        self.trades.clear()
        self.candles.clear()
        self.tracker.clear()
        self.unlisted.clear()
        self.fills.clear()
        self.fills_loaded.clear()
        self.epoch += 1
        self.seq = 0

    def add_trades(self, symbol: str, trades: list[Trade]) -> None:
        self.tape(symbol).extend(trades)
        self.candles.setdefault(symbol, Candles()).add_trades(trades)

    def set_bars(self, symbol: str, bars: list[Bar], before: int) -> None:
        """`GET /bars` over the trades with ids below `before`; the trades seen from `before` on are added."""
        self.candles.setdefault(symbol, Candles()).set_bars(bars, before)

    def set_order(self, order: Order, *, news: bool = False) -> None:
        """A state of one of my orders: an answer to this screen's own call, or (`news`) what the server
        says of it otherwise. For an order already resting, that is someone else's doing (a fill, a
        self-trade cancel, a cancel from another screen of the account) and is told in `notices`."""
        order_id = order.order_id
        known = self.tracker.get(order_id)
        before = known if known is not None else self.unlisted.get(order_id)
        if order.fills:  # trades, whatever the state's age: a later state does not repeat them
            self.add_fills(order)
        if not self.tracker.track(order):
            return  # an older answer arriving after a newer private update, or a closed order's
        if news and before is not None and order.seq > before.seq:
            line = order_news(before, order)
            if line and not (order.reason == "cancelled_by_user" and order_id in self.asked):
                self.notices.append((line, "information"))
        if not order.is_open:
            self.unlisted.pop(order_id, None)

    def add_fills(self, order: Order) -> None:
        """The fills in an order's answer or update, each with the server's maker or taker."""
        kept = self.fills.setdefault(order.symbol, {})
        for f in order.fills:
            if f.trade_id not in kept:  # an answer and its update repeat a fill; the list may hold it
                kept[f.trade_id] = AccountFill(f.trade_id, order.symbol, order.order_id, order.side, f.price,
                                               f.qty, f.liquidity, order.seq, order.ts)
        self._trim(kept)

    def set_fills(self, symbol: str, fills: list[AccountFill]) -> None:
        """`GET /fills` for `symbol`: the server's word on each of them; fills seen live since stay."""
        kept = self.fills.setdefault(symbol, {})
        for f in fills:
            kept[f.trade_id] = f
        self.fills_loaded.add(symbol)
        self._trim(kept)

    def _trim(self, kept: dict[int, AccountFill]) -> None:
        for trade_id in sorted(kept)[:max(0, len(kept) - FILLS_KEPT)]:
            del kept[trade_id]

    def set_open_orders(self, orders: list[Order]) -> None:
        """The server's list of my open orders: the truth after (re)connecting. A private update newer
        than the list (by seq) still wins. An order missing from it is kept aside until the session's
        catch-up says how it closed."""
        listed = {o.order_id for o in orders}
        for order_id in [i for i in self.orders if i not in listed]:
            aside = self.tracker.set_aside(order_id)
            if aside is not None:
                self.unlisted[order_id] = aside
        for o in orders:
            self.set_order(o, news=True)
