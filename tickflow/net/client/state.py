"""The client's side of the protocol as plain state, with no I/O: no sockets, no aiohttp, no asyncio.

`ClientState` takes the server's decoded messages (`receive`) and what the session read over HTTP
(`backfilled`, `orders_read`, `judge`), and returns what came of them, in order: `Event`s to report and
`Action`s for the session to carry out (send `subscribe` again, fetch missed trades, read the orders
again). It holds:

- a `LocalBook` per symbol (book.py): a snapshot, then updates checked against `prevSeq`; a gap marks
  the book stale and asks for a fresh snapshot; a snapshot or update sent in parts is reported once
  whole;
- the account's open orders (`OrderTracker`): never an older state over a newer one, never a closed
  order again;
- the trades delivered per symbol, so each is reported once, in order, also across snapshots and a
  reconnection's backfill;
- what identifies the exchange followed (`last_seq`, `log_started`, the newest trade seen).

`Session` (session.py) is the asyncio layer around it; tests drive it with messages alone.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any

from tickflow.net.client.book import LocalBook
from tickflow.net.wire.messages import ConnState, Health, Order, OrderMsg, OrdersMsg, Resync, Snapshot, Trade, Update

__all__ = [
    "LocalBook", "OrderTracker", "ClientState", "CLOSED_MEMORY",
    "Event", "StateChanged", "BookChanged", "TradesReceived", "OrderChanged", "GapDetected", "Resynced",
    "ServerError", "ServerChanged",
    "Action", "Resubscribe", "FetchTrades", "ReadOrders",
]

CLOSED_MEMORY = 65_536
"""Closed orders remembered, so that an older state read late never reopens one."""


class OrderTracker:
    """The newest state of each of the account's open orders, from answers, updates and reads.

    States can come late (an order call's answer is read by its caller after the updates behind it),
    so an older one never replaces a newer one, and a closed order never reopens: the last `memory`
    orders seen closed are remembered.
    """

    def __init__(self, memory: int = CLOSED_MEMORY) -> None:
        self._open: dict[int, Order] = {}
        self._closed: OrderedDict[int, None] = OrderedDict()
        """Orders seen closed, most recent last."""
        self._memory = memory
        self.open: Mapping[int, Order] = MappingProxyType(self._open)
        """The open orders by id (a read-only view that follows the tracker)."""

    def track(self, order: Order) -> bool:
        """Take `order` as the newest state of its order; False when it is older than the one held, or
        its order was seen closed (then nothing changes)."""
        order_id = order.order_id
        known = self._open.get(order_id)
        if order_id in self._closed or (known is not None and known.seq > order.seq):
            return False
        if order.is_open:
            self._open[order_id] = order
            return True
        self._open.pop(order_id, None)
        self._closed[order_id] = None
        if len(self._closed) > self._memory:
            self._closed.popitem(last=False)
        return True

    def get(self, order_id: int) -> Order | None:
        """The open order's newest state, or None when it is not open (or not known)."""
        return self._open.get(order_id)

    def is_closed(self, order_id: int) -> bool:
        return order_id in self._closed

    def set_aside(self, order_id: int) -> Order | None:
        """No longer count the order as open, without taking it as closed (a list of open orders left
        it out: its closing state, when it comes, is still taken); its last state, if it was open."""
        return self._open.pop(order_id, None)

    def clear(self) -> None:
        """Forget every order (another exchange: its order ids are others)."""
        self._open.clear()
        self._closed.clear()


# ------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class StateChanged:
    """The connection went `connecting` → `connected` → `reconnecting` (waiting `delay` s) → ... → `closed`."""

    state: ConnState
    attempt: int = 0
    delay: float = 0.0
    error: str | None = None
    account: str | None = None


@dataclass(frozen=True, slots=True)
class BookChanged:
    """`book` (the session's `LocalBook`) took a snapshot (`snapshot=True`) or an update; one the server
    sent in parts (a book too big for one message) is reported once, when the last part is in."""

    symbol: str
    book: LocalBook
    seq: int
    snapshot: bool


@dataclass(frozen=True, slots=True)
class TradesReceived:
    """Trades not seen before on this session, oldest first (snapshot trades are de-duplicated)."""

    symbol: str
    trades: list[Trade]


@dataclass(frozen=True, slots=True)
class OrderChanged:
    """A private update: one of the account's orders changed, whoever caused it."""

    order: Order


@dataclass(frozen=True, slots=True)
class GapDetected:
    """An update's `prevSeq` was not the `seq` held (or a part of a message sent in parts is missing):
    the book is stale until the fresh snapshot."""

    symbol: str
    held_seq: int
    prev_seq: int
    seq: int


@dataclass(frozen=True, slots=True)
class Resynced:
    """The server dropped our buffer (slow consumer); fresh snapshots follow."""

    reason: str


@dataclass(frozen=True, slots=True)
class ServerError:
    """A `{"type": "error"}` message: something we sent was refused."""

    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ServerChanged:
    """A reconnection found another server at the address (a fresh data directory, say): `reason` says
    how it was told. What the session held of the old one (`last_seq`, the trades and orders seen) was
    let go before connecting, so seqs, trade ids and order ids start again; a screen drops its own copy."""

    reason: str


Event = (StateChanged | BookChanged | TradesReceived | OrderChanged | GapDetected | Resynced | ServerError
         | ServerChanged)


# ------------------------------------------------------------------ actions


@dataclass(frozen=True, slots=True)
class Resubscribe:
    """Send `subscribe` for `symbol` again: its book missed something and waits for a fresh snapshot."""

    symbol: str


@dataclass(frozen=True, slots=True)
class FetchTrades:
    """Read `symbol`'s trades after trade id `after` (up to `ClientState.backfill_upto`) over HTTP, then
    hand them to `ClientState.backfilled`."""

    symbol: str
    after: int


@dataclass(frozen=True, slots=True)
class ReadOrders:
    """Read the account's orders again (`ClientState.orders_read`): private updates may have been lost."""


Action = Resubscribe | FetchTrades | ReadOrders
Out = Event | Action
"""What `ClientState` returns: what to report and what to do, in the order they are due."""


@dataclass
class _Parts:
    """A snapshot or update the server sent in parts: how many are still to come (-1: a deep snapshot,
    whole at the update that says `deeper` false), and their trades (with those of the updates between
    a deep snapshot's levels)."""

    left: int
    snapshot: bool
    trades: list[Trade]


@dataclass
class _Backfill:
    """A symbol's missed trades being fetched; the trades that arrive meanwhile wait in `held`."""

    held: list[Trade]
    upto: int
    """Fetch up to this trade id: just before the oldest trade a snapshot brought."""


def trade_key(t: Trade) -> tuple[int, str, int, int, str, int]:
    """What makes a trade the same trade on the feed and in `GET /trades`."""
    return t.trade_id, t.symbol, t.price, t.qty, t.aggressor, t.ts


def log_times(a: int, b: int) -> tuple[str, str]:
    """Two log start times (ms since the epoch) in words, UTC, to the second (to the millisecond when
    the seconds are the same)."""
    def at(ms: int, millis: bool) -> str:
        t = datetime.fromtimestamp(ms / 1000, timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{ms % 1000:03d}" if millis else "") + " UTC"

    millis = a // 1000 == b // 1000
    return at(a, millis), at(b, millis)


class ClientState:
    """What a client holds of one exchange, and the protocol's rules for changing it (see the module)."""

    def __init__(self) -> None:
        self.books: dict[str, LocalBook] = {}
        """The books of the symbols followed (and of those let go, as they were, not live)."""
        self.orders = OrderTracker()
        self.last_seq = 0
        """The highest `seq` seen on any message: how far this client has followed the log."""
        self.log_started: int | None = None
        """When the log of the exchange followed began (`GET /health`'s logStarted), once known: a
        server at the address whose log began at another time is another exchange."""
        self.gaps = 0
        """Gaps detected so far."""
        self.newest_trade: Trade | None = None
        """The last trade delivered (any symbol): a server that does not hold it is another server."""
        self._last_trade: dict[str, int] = {}
        self._parts: dict[str, _Parts] = {}
        """Per symbol, the snapshot or update whose parts are arriving (its book is not live meanwhile)."""
        self._backfills: dict[str, _Backfill] = {}

    def last_trade(self, symbol: str) -> int | None:
        """The id of the last trade of `symbol` delivered (0: none yet since the first snapshot), or None
        before its first snapshot."""
        return self._last_trade.get(symbol)

    def parts_left(self, symbol: str) -> int:
        """Parts still to come of the message `symbol`'s book is being sent in (0: it is whole, or a deep
        snapshot's levels are coming, whose count is not known: `deeper_left`)."""
        parts = self._parts.get(symbol)
        return max(parts.left, 0) if parts is not None else 0

    def deeper_left(self, symbol: str) -> bool:
        """True while the deeper levels of `symbol`'s snapshot are still to come."""
        parts = self._parts.get(symbol)
        return parts is not None and parts.left < 0

    # ---- messages

    def receive(self, msg: Snapshot | Update | OrderMsg | OrdersMsg | Resync) -> list[Out]:
        """Take one market-data message, private update (or list of them) or resync."""
        if isinstance(msg, Update):
            return self._update(msg)
        if isinstance(msg, Snapshot):
            return self._snapshot(msg)
        if isinstance(msg, OrderMsg):
            self.last_seq = max(self.last_seq, msg.order.seq)
            self.orders.track(msg.order)
            return [OrderChanged(msg.order)]
        if isinstance(msg, OrdersMsg):  # the same, gathered: each reported as if it came alone
            for order in msg.orders:
                self.last_seq = max(self.last_seq, order.seq)
                self.orders.track(order)
            return [OrderChanged(order) for order in msg.orders]
        # The server dropped the market data it had queued for us; snapshots follow. Private updates are
        # never dropped, but the orders are read again all the same (an older server dropped them).
        self.stale()
        return [Resynced(msg.reason), ReadOrders()]

    def _snapshot(self, msg: Snapshot) -> list[Out]:
        book = self.books.get(msg.symbol)
        if book is None:
            book = self.books[msg.symbol] = LocalBook(msg.symbol)
        book.load(msg.seq, msg.bids, msg.asks)
        self.last_seq = max(self.last_seq, msg.seq)
        self._parts.pop(msg.symbol, None)
        if msg.more or msg.deeper:
            book.live = False
            self._parts[msg.symbol] = _Parts(msg.more or -1, True, list(msg.trades))
            return []
        return [BookChanged(msg.symbol, book, msg.seq, True), *self._snapshot_trades(msg.symbol, list(msg.trades))]

    def _update(self, msg: Update) -> list[Out]:
        book = self.books.get(msg.symbol)
        parts = self._parts.get(msg.symbol)
        if book is None or not (book.live or parts):
            return []  # waiting for a snapshot: it will include this change
        # A part continues its message: prevSeq and seq both the seq that message brought.
        if msg.prev_seq != book.seq or (parts and parts.left > 0 and msg.seq != book.seq):
            return self._gap(book, msg)
        book.apply(msg.seq, msg.bids, msg.asks)
        self.last_seq = max(self.last_seq, msg.seq)
        if parts is None and msg.more:
            book.live = False
            self._parts[msg.symbol] = _Parts(msg.more, False, list(msg.trades))
            return []
        if parts is not None:
            parts.trades.extend(msg.trades)
            if parts.left < 0:  # the symbol's other updates come between a deep snapshot's levels
                return [] if msg.deeper is not False else self._whole(book, self._parts.pop(msg.symbol))
            parts.left -= 1
            return [] if parts.left else self._whole(book, self._parts.pop(msg.symbol))
        return [BookChanged(msg.symbol, book, msg.seq, False), *self._update_trades(msg.symbol, msg.trades)]

    def _whole(self, book: LocalBook, parts: _Parts) -> list[Out]:
        """The last part of a snapshot or update arrived: report it as one."""
        book.live = True
        changed = BookChanged(book.symbol, book, book.seq, parts.snapshot)
        if parts.snapshot:
            return [changed, *self._snapshot_trades(book.symbol, parts.trades)]
        return [changed, *self._update_trades(book.symbol, parts.trades)]

    def _gap(self, book: LocalBook, msg: Update) -> list[Out]:
        """Something was missed (an update, or a part of one): the book is stale until a fresh snapshot."""
        book.live = False
        self._parts.pop(book.symbol, None)
        self.gaps += 1
        return [GapDetected(book.symbol, book.seq, msg.prev_seq, msg.seq), Resubscribe(book.symbol)]

    # ---- trades, each once and in order

    def _snapshot_trades(self, symbol: str, trades: list[Trade]) -> list[Out]:
        """A snapshot's trades, after those printed before them that this client has not seen (which
        are fetched first when there are any)."""
        running = self._backfills.get(symbol)
        if running is not None:
            running.held.extend(trades)
            if trades:
                running.upto = max(running.upto, trades[0].trade_id - 1)
            return []
        last = self._last_trade.get(symbol)
        if last is not None and trades and trades[0].trade_id > last + 1:
            self._backfills[symbol] = _Backfill(trades, trades[0].trade_id - 1)
            return [FetchTrades(symbol, last)]
        return [*self._deliver(symbol, trades)]

    def _update_trades(self, symbol: str, trades: Sequence[Trade]) -> list[Out]:
        running = self._backfills.get(symbol)
        if running is not None:
            running.held.extend(trades)  # delivered after the missed ones, in order
            return []
        return [*self._deliver(symbol, trades)]

    def backfill_upto(self, symbol: str) -> int | None:
        """The trade id a running backfill of `symbol` fetches up to (it grows when another snapshot
        comes meanwhile), or None when none runs."""
        running = self._backfills.get(symbol)
        return running.upto if running is not None else None

    def backfilled(self, symbol: str, missed: Sequence[Trade], *, deliver: bool = True) -> list[Event]:
        """The end of a `FetchTrades`: the trades it found (maybe not all of them). They are delivered
        with those that arrived meanwhile, each once and in order (nothing, when not `deliver`)."""
        running = self._backfills.pop(symbol, None)
        if running is None or not deliver:
            return []
        trades = {t.trade_id: t for t in [*missed, *running.held]}
        return self._deliver(symbol, [trades[i] for i in sorted(trades)])

    def _deliver(self, symbol: str, trades: Sequence[Trade]) -> list[Event]:
        last = self._last_trade.get(symbol, 0)
        fresh = [t for t in trades if t.trade_id > last]
        if fresh:
            self._last_trade[symbol] = fresh[-1].trade_id
            self.newest_trade = fresh[-1]
            return [TradesReceived(symbol, fresh)]
        if symbol not in self._last_trade:
            self._last_trade[symbol] = 0
        return []

    # ---- the connection

    def stale(self) -> None:
        """Every book waits for a fresh snapshot (a new connection, one lost, or a resync); parts on
        their way are let go."""
        for book in self.books.values():
            book.live = False
        self._parts.clear()

    def unsubscribed(self, symbols: Iterable[str]) -> None:
        """These symbols are no longer followed: their books stay as they were, not live."""
        for symbol in symbols:
            book = self.books.get(symbol)
            if book is not None:
                book.live = False
            self._parts.pop(symbol, None)  # parts already on their way are let go with the rest of the stream

    def orders_read(self, before: Mapping[int, Order], read: Iterable[Order]) -> list[Event]:
        """The account's orders as read again after a reconnection or a resync, `before` being the open
        orders held when the read began. Private updates kept arriving meanwhile, so a state read is
        news only if it is newer (a higher `seq`) than the last one seen, and never for an order
        closed meanwhile."""
        out: list[Event] = []
        for order in read:
            order_id = order.order_id
            latest = self.orders.get(order_id)
            if self.orders.is_closed(order_id) or (latest is None and order_id in before):
                continue  # closed by an update that came in meanwhile: that state is final
            if latest is None or order.seq > latest.seq:
                self.orders.track(order)
                out.append(OrderChanged(order))
        return out

    # ---- which exchange

    def witness(self, health: Health) -> Trade | None:
        """The trade to look up on the server at the address (`GET /trades`, then `judge`) to tell
        whether it is the exchange followed; None when its health tells, or no trade was seen."""
        if health.log_started is not None and self.log_started is not None:
            return None
        return self.newest_trade if health.seq >= self.last_seq else None

    def judge(self, health: Health, page: Sequence[Trade] | None = None) -> str | None:
        """Why the server now at the address is not the exchange followed so far, or None when it is (or
        it cannot tell). `logStarted` names the exchange: when it and the one remembered are both known,
        they decide, whatever the seqs say (another exchange may well be further on). Otherwise (an
        older server, or a log that had no record yet) its log is the witness: a restart of the same
        server (kill -9 included) is at or past every seq and holds every trade already seen; `page` is
        its answer for `witness()`'s trade (None when it was not asked, or the answer did not tell)."""
        started = health.log_started
        if started is not None and self.log_started is not None:
            if started == self.log_started:
                return None
            theirs, ours = log_times(started, self.log_started)
            self.log_started = started
            return f"another exchange at this address: its log began at {theirs}, not {ours}"
        reason = None
        seen = self.newest_trade
        if health.seq < self.last_seq:
            reason = f"its log is at seq {health.seq}, behind the {self.last_seq} seen"
        elif seen is not None and page is not None and (not page or trade_key(page[0]) != trade_key(seen)):
            reason = f"it does not hold the {seen.symbol} trade #{seen.trade_id} seen"
        if started is not None or reason is not None:
            self.log_started = started  # this exchange's, when the seqs or trades tell it is another
        return reason

    def forget_server(self, reason: str) -> list[Event]:
        """Let go of what belongs to the server followed so far: with another one, its seqs, trade ids
        and order ids mean nothing (an order id seen closed there may be open here)."""
        self.last_seq = 0
        self._last_trade.clear()
        self.newest_trade = None
        self.orders.clear()
        return [ServerChanged(reason)]
