"""The matching engine: one `apply(seq, ts, command)` call per logged command, deterministic.

Order ids and trade ids are counters advanced only by applied commands, and every time stamp comes
from the record, so replaying the same log gives the same books and the same results byte for byte.
Business-rule failures are results, never exceptions: a bad command must not stop the sequencer.

The new-order path is written out in one function on purpose: it runs for almost every command,
and in CPython each helper call and attribute lookup on it costs a share of the time that
bench/bench_engine.py can see. Rarer paths (rejections, FOK, amend, queries) use the small helpers.
"""

from __future__ import annotations

import contextlib
from collections import defaultdict
from typing import Any, Iterable, Iterator

import msgspec

from tickflow.core.book import NO_LIMIT, Book, BookSide, Level, Order
from tickflow.core.idempotency import ClientOrderIds
from tickflow.core.orders import (
    NO_FILLS, Kept, plan_quote, quote_problem, rejection, state_of, unfilled_reason
)
from tickflow.core.types import (
    MAX_PRICE, MAX_QTY, AddSymbol, Amend, Cancel, CancelAll, Command, Fill, LevelChange, MakerFill, NewOrder,
    OrderState, Outcome, Quote, Reason, Rules, Status, Trade
)

# Shared by every outcome without trades, level changes or updates: the engine never changes a list it
# has returned, and an outcome is read-only to its consumers.
_EMPTY: list[Any] = NO_FILLS
_SELF_TRADE = Reason.SELF_TRADE
_NEVER = 1 << 63
"""Above every trade id and every seq."""
QUIET = Outcome(0, None, None, _EMPTY, _EMPTY, _EMPTY)
"""What `apply` returns while the engine replays quietly (see `Engine.replaying`): no answer was built."""


class Engine:
    """All books, the live orders, the idempotency table and the id counters. A finished order leaves
    memory the moment it closes (its final state is history: SQLite keeps it, see store/trades.py)."""

    def __init__(self, symbols: Iterable[str] = ()) -> None:
        self.books: dict[str, Book] = {s: Book(s) for s in symbols}
        # Every new order, whatever becomes of it, takes the next id; only live orders are kept.
        self.next_order_id = 1
        self.open_orders: defaultdict[str, dict[int, Order]] = defaultdict(dict)
        # (account, clientOrderId) -> the order's first answer, for the idempotency window. That answer
        # repeats every field of the order as sent, so a retry is compared with it, and the command need not be kept.
        self.idempotency = ClientOrderIds()
        # One string object per account name, shared by its orders that rest or trade (a rejected one
        # keeps the command's): each decoded record and each request brings a fresh copy.
        self.accounts: dict[str, str] = {}
        self.next_trade_id = 1
        self.max_open_orders = 0
        """The open orders one account may have (0: no limit), as the last Rules record set it."""
        self.price_band = 0
        """Basis points around a symbol's last trade a limit price may be (0: no band), as Rules set it."""
        self.last_seq = 0
        self.last_ts = 0
        # While replaying quietly no answers are built; `_kept` collects what `replaying` asked for.
        self.quiet = False
        self._keep_trades_after = 0
        self._keep_closed_after = _NEVER
        self._kept = Kept()

    @contextlib.contextmanager
    def replaying(self, keep_trades_after: int | None = None,
                  keep_closed_after_seq: int | None = None) -> Iterator[Kept]:
        """Apply commands quietly while inside: the books, orders, counters and idempotency table
        change exactly as with answers, but `apply` returns `QUIET` instead of building the outcome
        nobody reads during a replay (the objects of an answer cost a quarter of replay's time).
        Yields the list that collects the trades with ids above `keep_trades_after` (none if None);
        its `closed` collects the orders closed by records with seqs above `keep_closed_after_seq`."""
        if self.quiet:
            raise RuntimeError("already replaying")
        self.quiet = True
        self._keep_trades_after = _NEVER if keep_trades_after is None else keep_trades_after
        self._keep_closed_after = _NEVER if keep_closed_after_seq is None else keep_closed_after_seq
        kept = self._kept = Kept()
        try:
            yield kept
        finally:
            self.quiet = False
            self._keep_trades_after = 0
            self._keep_closed_after = _NEVER
            self._kept = Kept()

    # ------------------------------------------------------------------ commands

    def apply(self, seq: int, ts: int, command: Command) -> Outcome:
        """Apply one command stamped with its log sequence number and time; never raises for bad input."""
        self.last_seq = seq
        self.last_ts = ts
        if ts >= self.idempotency.due and type(command) is not Rules:  # a new window applies to what is kept
            self.idempotency.forget_until(ts)
        if type(command) is not NewOrder:
            if type(command) is Cancel:
                return self._cancel(seq, ts, command)
            outcome = self._apply_other(seq, ts, command)
            return QUIET if self.quiet else outcome
        # New orders are nearly all the traffic, so they are handled right here, in straight-line
        # code; the order is built once, with its final state, after matching.
        cmd: NewOrder = command
        coid = cmd.client_order_id
        if coid is not None and (cmd.account, coid) in self.idempotency:
            return QUIET if self.quiet else self.check_duplicate(cmd)  # type: ignore[return-value]
        order_id = self.next_order_id
        self.next_order_id = order_id + 1
        symbol = cmd.symbol
        type_ = cmd.type
        price = cmd.price
        qty = cmd.qty
        tif = cmd.tif
        book = self.books.get(symbol)
        if book is None or not 0 < qty <= MAX_QTY or cmd.post_only and (type_ != "limit" or tif != "gtc"):
            return self._unfilled(seq, ts, cmd, order_id, "rejected", rejection(cmd, book))
        side = cmd.side
        # `key` is the limit as a key of the opposite side's heap (see BookSide): asks are keyed
        # by price, bids by -price, so "crosses" is always "key of the best level <= key".
        if side == "buy":
            own, opposite, key = book.bids, book.asks, price
        else:
            own, opposite, key = book.asks, book.bids, -price
        if type_ == "limit":
            if not 0 < price <= MAX_PRICE:
                return self._unfilled(seq, ts, cmd, order_id, "rejected", Reason.BAD_PRICE)
            if self.price_band and book.outside_band(price, self.price_band):
                return self._unfilled(seq, ts, cmd, order_id, "rejected", Reason.OUTSIDE_PRICE_BAND)
            if self.max_open_orders and tif == "gtc" and self._at_cap(cmd.account):
                return self._unfilled(seq, ts, cmd, order_id, "rejected", Reason.TOO_MANY_OPEN_ORDERS)
        elif price:
            return self._unfilled(seq, ts, cmd, order_id, "rejected", Reason.BAD_PRICE)
        else:
            key = NO_LIMIT
        symbol = book.symbol  # the book's own string, like the account below: live orders share them
        account = cmd.account
        account = self.accounts.setdefault(account, account)
        heap = opposite.heap
        if not heap or heap[0] > key:
            # Nothing to trade with: the common case, a limit order that just rests.
            if tif != "gtc" or type_ != "limit":
                return self._unfilled(seq, ts, cmd, order_id, "cancelled", unfilled_reason(type_, tif))
            order = Order(order_id, coid, account, symbol, side, type_, price, qty, tif, cmd.post_only,
                          0, "new", None, seq, ts, True)
            level = own.levels.get(price)
            if level is None:
                level = own.add_level(price)
            level.queue.append(order)
            level.qty += qty
            level.count += 1
            self.open_orders[account][order_id] = order
            book.seq = seq
            if self.quiet and coid is None:
                return QUIET
            result = OrderState(order_id, coid, account, symbol, side, type_, price, qty, tif, cmd.post_only,
                                "new", 0, qty, _EMPTY, None, seq, ts)
            if coid is not None:
                self.idempotency.remember((account, coid), result)
                if self.quiet:
                    return QUIET
            return Outcome(seq, result, None, _EMPTY,
                           [LevelChange(symbol, side, price, level.qty, level.count)], _EMPTY)

        if cmd.post_only:
            return self._unfilled(seq, ts, cmd, order_id, "rejected", Reason.POST_ONLY_WOULD_TAKE)
        if tif == "fok" and not opposite.fillable(qty, key, account if self.open_orders.get(account) else None):
            return self._unfilled(seq, ts, cmd, order_id, "cancelled", Reason.FOK_NOT_FILLED)
        # While replaying, the fills are still needed for the first answer of an order with a clientOrderId.
        no_answer = self.quiet and coid is None
        left, fills, trades, updates, changes = self._match(
            opposite, key, book, account, order_id, qty, seq, ts, no_answer)
        filled = qty - left
        reason = None
        rests = False
        if not left:
            status = "filled"
        elif tif == "gtc" and type_ == "limit":
            # Self-trade prevention may have cancelled everything it crossed: then it is still new.
            status = "partially_filled" if filled else "new"
            rests = True
        else:
            status = "cancelled"
            reason = Reason.IOC_REMAINDER if type_ == "limit" else Reason.NO_LIQUIDITY
        order = Order(order_id, coid, account, symbol, side, type_, price, qty, tif, cmd.post_only,
                      filled, status, reason, seq, ts, False)  # type: ignore[arg-type]
        book.seq = seq
        if rests:
            self.open_orders[account][order_id] = order
            level = book.rest(order)
            if not no_answer:
                changes.append(book.change(level))
        elif seq > self._keep_closed_after:
            self._kept.closed.append(order)
        if self.quiet:
            if trades:
                self._keep(trades)
            if no_answer:
                return QUIET
        result = OrderState(order_id, coid, account, symbol, side, type_, price, qty, tif, cmd.post_only,
                            status, filled, left, fills, reason, seq, ts)  # type: ignore[arg-type]
        if coid is not None:
            self.idempotency.remember((account, coid), result)
            if self.quiet:
                return QUIET
        return Outcome(seq, result, None, trades, changes, updates)

    def _apply_other(self, seq: int, ts: int, command: Command) -> Outcome:
        kind = type(command)
        if kind is Amend:
            return self._amend(seq, ts, command)  # type: ignore[arg-type]
        if kind is CancelAll:
            return self._cancel_all(seq, ts, command)  # type: ignore[arg-type]
        if kind is Quote:
            return self._quote(seq, ts, command)  # type: ignore[arg-type]
        if kind is Rules:
            self.max_open_orders = command.max_open_orders  # type: ignore[union-attr]
            self.price_band = command.price_band  # type: ignore[union-attr]
            self.idempotency.set_window(command.idempotency_window, ts)  # type: ignore[union-attr]
            return Outcome(seq, None, None, _EMPTY, _EMPTY, _EMPTY)
        if isinstance(command, AddSymbol):
            if command.symbol in self.books:
                return Outcome(seq, None, Reason.SYMBOL_EXISTS, _EMPTY, _EMPTY, _EMPTY)
            book = self.books[command.symbol] = Book(command.symbol)
            book.seq = seq
            return Outcome(seq, None, None, _EMPTY, _EMPTY, _EMPTY)
        raise TypeError(f"not a command: {command!r}")

    def check_duplicate(self, command: NewOrder, now: int = 0) -> Outcome | None:
        """The answer to a retried clientOrderId without applying anything, or None if it is new (or its
        window has passed at stamp `now`: its record will find it forgotten)."""
        return self.idempotency.retry(command, now)

    def _unfilled(self, seq: int, ts: int, cmd: NewOrder, order_id: int, status: Status, reason: str) -> Outcome:
        """A new order that ends before matching: rejected by the rules, or a FOK that cannot fill."""
        order = Order(order_id, cmd.client_order_id, cmd.account, cmd.symbol, cmd.side, cmd.type, cmd.price,
                      cmd.qty, cmd.tif, cmd.post_only, 0, status, reason, seq, ts, False)
        if seq > self._keep_closed_after:
            self._kept.closed.append(order)
        result = state_of(order)
        if cmd.client_order_id is not None:
            self.idempotency.remember((cmd.account, cmd.client_order_id), result)
        return QUIET if self.quiet else Outcome(seq, result, None, _EMPTY, _EMPTY, _EMPTY)

    def _cancel(self, seq: int, ts: int, cmd: Cancel) -> Outcome:
        order = self._find(cmd.account, cmd.order_id)
        if order is None:
            return QUIET if self.quiet else Outcome(seq, None, self._not_found(cmd.order_id), _EMPTY, _EMPTY, _EMPTY)
        book = self.books[order.symbol]
        level = book.unrest(order)
        self._close(order, "cancelled", Reason.USER_CANCEL, seq, ts)
        book.seq = seq
        if self.quiet:
            return QUIET
        return Outcome(seq, state_of(order), None, _EMPTY, [book.change(level)], _EMPTY)

    def _cancel_all(self, seq: int, ts: int, cmd: CancelAll) -> Outcome:
        """Every open order of the account (in `cmd.symbol`, on `cmd.side` when given), oldest first."""
        open_ = self.open_orders.get(cmd.account)
        if not open_:
            return Outcome(seq, None, None, _EMPTY, _EMPTY, _EMPTY)
        symbol, side = cmd.symbol, cmd.side
        chosen = sorted((o for o in open_.values()
                         if (symbol is None or o.symbol == symbol) and (side is None or o.side == side)), key=_by_id)
        touched: dict[tuple[str, str, int], tuple[Book, Level]] = {}
        updates: list[OrderState | MakerFill] = []
        for order in chosen:
            book = self.books[order.symbol]
            # Levels are only emptied here, never added, so an emptied one keeps its price and totals
            # (0) until the changes are taken below.
            touched[(order.symbol, order.side, order.price)] = (book, book.unrest(order))
            self._close(order, "cancelled", Reason.USER_CANCEL, seq, ts)
            book.seq = seq
            updates.append(state_of(order))
        changes = [book.change(level) for book, level in touched.values()]
        return Outcome(seq, None, None, _EMPTY, changes, updates)

    def _amend(self, seq: int, ts: int, cmd: Amend) -> Outcome:
        order = self._find(cmd.account, cmd.order_id)
        if order is None:
            return Outcome(seq, None, self._not_found(cmd.order_id), _EMPTY, _EMPTY, _EMPTY)
        if (cmd.qty is None or cmd.qty == order.qty) and (cmd.price is None or cmd.price == order.price):
            # Nothing would change: the order keeps its seq and the book its state, as if never sent.
            return Outcome(seq, state_of(order), Reason.NOTHING_TO_AMEND, _EMPTY, _EMPTY, _EMPTY)
        qty = order.qty if cmd.qty is None else cmd.qty
        price = order.price if cmd.price is None else cmd.price
        book = self.books[order.symbol]
        opposite = book.opposite(order.side)
        key = opposite.key(price)
        error = None
        if not 0 < qty <= MAX_QTY:
            error = Reason.BAD_QTY
        elif not 0 < price <= MAX_PRICE:
            error = Reason.BAD_PRICE
        elif qty <= order.filled:
            error = Reason.QTY_BELOW_FILLED
        elif self.price_band and price != order.price and book.outside_band(price, self.price_band):
            error = Reason.OUTSIDE_PRICE_BAND
        elif order.post_only and price != order.price and opposite.heap and opposite.heap[0] <= key:
            error = Reason.POST_ONLY_WOULD_TAKE
        if error is not None:
            return Outcome(seq, state_of(order), error, _EMPTY, _EMPTY, _EMPTY)

        if price == order.price and qty <= order.qty:
            # Reducing the quantity keeps the order's place in the queue.
            level = book.side(order.side).levels[order.price]
            level.qty -= order.qty - qty
            order.qty = qty
            order.seq, order.ts = seq, ts
            book.seq = seq
            return Outcome(seq, state_of(order), None, _EMPTY, [book.change(level)], _EMPTY)

        # A new price or a larger quantity loses time priority: the order is re-queued as a new
        # object (the old one stays dead in its old queue) and may trade at its new price.
        old_level = book.unrest(order)
        old_change = book.change(old_level)  # now: an emptied level may be reused by the rest below
        moved = msgspec.structs.replace(order, price=price, qty=qty, seq=seq, ts=ts)
        self.open_orders[order.account][order.order_id] = moved
        if opposite.heap and opposite.heap[0] <= key:
            left, fills, trades, updates, changes = self._match(
                opposite, key, book, moved.account, moved.order_id, qty - moved.filled, seq, ts, False)
            moved.filled = qty - left
            if self.quiet:
                self._keep(trades)
        else:
            fills, trades, updates, changes = _EMPTY, _EMPTY, _EMPTY, []
        new_level = None
        if moved.filled == moved.qty:
            self._close(moved, "filled", None, seq, ts)
        else:
            moved.status = "partially_filled" if moved.filled else "new"
            new_level = book.rest(moved)
        if new_level is None or new_level.price != old_change.price:
            changes.insert(0, old_change)
        if new_level is not None:
            changes.append(book.change(new_level))
        book.seq = seq
        return Outcome(seq, state_of(moved, fills), None, trades, changes, updates)

    def _quote(self, seq: int, ts: int, cmd: Quote) -> Outcome:
        """Replace the account's quote orders in the symbol by the quote's levels (core/orders.plan_quote)."""
        book = self.books.get(cmd.symbol)
        error = Reason.UNKNOWN_SYMBOL if book is None else quote_problem(cmd, book, self.price_band)
        if error is not None or book is None:
            return Outcome(seq, None, error, _EMPTY, _EMPTY, _EMPTY)
        account = self.accounts.setdefault(cmd.account, cmd.account)
        open_ = self.open_orders.get(account)
        standing = sorted((o for o in open_.values() if o.quote and o.symbol == book.symbol),
                          key=_by_id) if open_ else []
        cancel, keep, place = plan_quote(standing, cmd)
        if self.max_open_orders and place and self._at_cap(account, len(place) - len(cancel)):
            return Outcome(seq, None, Reason.TOO_MANY_OPEN_ORDERS, _EMPTY, _EMPTY, _EMPTY)
        quoted: list[OrderState] = []
        levels: dict[tuple[str, int], LevelChange] = {}
        for order in cancel:
            level = book.unrest(order)
            self._close(order, "cancelled", Reason.QUOTE_REPLACED, seq, ts)
            levels[(order.side, order.price)] = book.change(level)
            quoted.append(state_of(order))
        for order, show in keep:
            if show < order.qty - order.filled:
                level = book.side(order.side).levels[order.price]
                level.qty -= order.qty - order.filled - show
                order.qty = order.filled + show
                order.seq, order.ts = seq, ts
                levels[(order.side, order.price)] = book.change(level)
            quoted.append(state_of(order))
        if levels:
            book.seq = seq
        trades: list[Trade] = []
        changed: list[OrderState | MakerFill] = []
        for side, price, qty in place:
            order_id = self.next_order_id
            placed = self.apply(seq, ts, NewOrder(account, book.symbol, side, "limit", price, qty))
            resting = self.open_orders[account].get(order_id)
            if resting is not None:  # still live: the next quote replaces it
                resting.quote = True
            if placed.result is not None:  # None while replaying quietly
                quoted.append(placed.result)
                trades.extend(placed.trades)
                changed.extend(placed.changed)
                levels.update(((c.side, c.price), c) for c in placed.book)
        if self.quiet:
            return QUIET
        return Outcome(seq, None, None, trades, list(levels.values()), changed, quoted=quoted)

    # ------------------------------------------------------------------ matching

    def _match(
        self, opposite: BookSide, key: int, book: Book, account: str, order_id: int, want: int,
        seq: int, ts: int, no_answer: bool,
    ) -> tuple[int, list[Fill], list[Trade], list[OrderState | MakerFill], list[LevelChange]]:
        """Trade `want` of an incoming order against `opposite` while its best key is <= `key`.

        Returns the quantity left unfilled, the incoming order's fills, the trades, the resting
        orders changed and the levels changed. `no_answer` (a replay that builds no answer) leaves
        the fills, the orders changed and the levels changed empty, and keeps only the trades
        with ids above the engine's `_keep_trades_after`."""
        fills: list[Fill] = []
        trades: list[Trade] = []
        updates: list[OrderState | MakerFill] = []
        changes: list[LevelChange] = []
        heap = opposite.heap
        levels = opposite.levels
        sign = opposite.sign
        resting_side = opposite.side
        buying = resting_side == "sell"
        open_orders = self.open_orders
        trade_id = self.next_trade_id
        keep_after = self._keep_trades_after if no_answer else 0
        keep_closed_after = self._keep_closed_after
        symbol = book.symbol
        traded = 0
        status: Status
        while heap and heap[0] <= key:
            level = levels[heap[0] * sign]
            price = level.price
            queue = level.queue
            while want and level.count:
                maker = queue.popleft()
                if not maker.live:
                    continue
                maker_account = maker.account
                maker_id = maker.order_id
                filled = maker.filled
                left = maker.qty - filled
                if maker_account == account:
                    # Self-trade prevention: the resting order is cancelled, the incoming one goes on.
                    maker.live = False
                    level.qty -= left
                    level.count -= 1
                    self._close(maker, "cancelled", _SELF_TRADE, seq, ts)
                    if not no_answer:
                        updates.append(state_of(maker))
                    continue
                if left <= want:
                    n = left
                    maker.live = False
                    status = "filled"
                    level.count -= 1
                    del open_orders[maker_account][maker_id]
                    if seq > keep_closed_after:
                        self._kept.closed.append(maker)
                else:
                    n = want
                    queue.appendleft(maker)  # partly filled, it keeps its place
                    status = "partially_filled"
                filled += n
                want -= n
                traded = price
                level.qty -= n
                maker.filled = filled
                maker.status = status
                maker.seq = seq
                maker.ts = ts
                if trade_id > keep_after:
                    if buying:
                        trades.append(Trade(trade_id, symbol, price, n, order_id, maker_id,
                                            account, maker_account, "buy", seq, ts))
                    else:
                        trades.append(Trade(trade_id, symbol, price, n, maker_id, order_id,
                                            maker_account, account, "sell", seq, ts))
                if not no_answer:
                    fill = Fill(trade_id, price, n, "taker")
                    fills.append(fill)
                    updates.append((maker, maker.qty, status, filled, fill, seq, ts))
                trade_id += 1
            if not no_answer:
                changes.append(LevelChange(symbol, resting_side, price, level.qty, level.count))
            if not level.count:
                opposite.drop(level)
            if not want:
                break
        self.next_trade_id = trade_id
        if traded:
            book.last = traded
        return want, fills, trades, updates, changes

    # ------------------------------------------------------------------ bookkeeping

    def _keep(self, trades: list[Trade]) -> None:
        """While replaying quietly: keep the trades the caller asked for."""
        after = self._keep_trades_after
        self._kept.extend(t for t in trades if t.trade_id > after)

    def _find(self, account: str, order_id: int) -> Order | None:
        """`account`'s live order with this id, or None."""
        open_ = self.open_orders.get(account)
        return open_.get(order_id) if open_ else None

    def _not_found(self, order_id: int) -> str:
        """Why no live order of the account's has this id: NOT_LIVE for an id given out (finished, or another
        account's: only SQLite can tell, see net/exchange/service.py), UNKNOWN_ORDER for one never given."""
        return Reason.NOT_LIVE if 0 < order_id < self.next_order_id else Reason.UNKNOWN_ORDER

    def _at_cap(self, account: str, more: int = 1) -> bool:
        """True when `more` new open orders would take `account` past the open-order limit."""
        open_ = self.open_orders.get(account)
        return (len(open_) if open_ else 0) + more > self.max_open_orders

    def _close(self, order: Order, status: Status, reason: str | None, seq: int, ts: int) -> None:
        order.status = status
        order.reason = reason
        order.seq = seq
        order.ts = ts
        self.open_orders[order.account].pop(order.order_id, None)
        if seq > self._keep_closed_after:
            self._kept.closed.append(order)

    def order_state(self, account: str, order_id: int) -> OrderState | None:
        """The state of `account`'s live order with this id, or None (finished orders are in SQLite)."""
        return None if (order := self._find(account, order_id)) is None else state_of(order)


def _by_id(order: Order) -> int:
    return order.order_id
