"""The matching engine: one `apply(seq, ts, command)` call per logged command, deterministic.

Order ids and trade ids are counters advanced only by applied commands, and every time stamp comes
from the record, so replaying the same log gives the same books and the same results byte for byte.
Business-rule failures are results, never exceptions: a bad command must not stop the sequencer.
"""

from __future__ import annotations

import hashlib
from typing import Iterable

import msgspec

from tickflow.core.book import Book, BookSide, Level, Order
from tickflow.core.types import (
    MAX_PRICE,
    MAX_QTY,
    AddSymbol,
    Amend,
    Cancel,
    Command,
    Fill,
    LevelChange,
    NewOrder,
    OrderState,
    Outcome,
    Reason,
    Trade,
)

_NO_TRADES: list[Trade] = []


def state_of(order: Order, fills: list[Fill] | None = None) -> OrderState:
    """The public view of an order, with the fills the current command made."""
    return OrderState(
        order.order_id,
        order.client_order_id,
        order.account,
        order.symbol,
        order.side,
        order.type,
        order.price,
        order.qty,
        order.tif,
        order.post_only,
        order.status,
        order.filled,
        order.qty - order.filled,
        fills if fills is not None else [],
        order.reason,
        order.seq,
        order.ts,
    )


class Engine:
    """All books, all orders, the idempotency table and the id counters."""

    def __init__(self, symbols: Iterable[str] = ()) -> None:
        self.books: dict[str, Book] = {s: Book(s) for s in symbols}
        self.orders: dict[int, Order] = {}
        self.open_orders: dict[str, dict[int, Order]] = {}
        self.idempotency: dict[tuple[str, str], tuple[NewOrder, OrderState]] = {}
        self.next_order_id = 1
        self.next_trade_id = 1
        self.last_seq = 0
        self.last_ts = 0

    # ------------------------------------------------------------------ commands

    def apply(self, seq: int, ts: int, command: Command) -> Outcome:
        """Apply one command stamped with its log sequence number and time; never raises for bad input."""
        self.last_seq = seq
        self.last_ts = ts
        kind = type(command)
        if kind is NewOrder:
            return self._new_order(seq, ts, command)  # type: ignore[arg-type]
        if kind is Cancel:
            return self._cancel(seq, ts, command)  # type: ignore[arg-type]
        if kind is Amend:
            return self._amend(seq, ts, command)  # type: ignore[arg-type]
        if kind is AddSymbol:
            if command.symbol in self.books:  # type: ignore[union-attr]
                return Outcome(seq, None, Reason.SYMBOL_EXISTS, _NO_TRADES, [], [])
            self.books[command.symbol] = Book(command.symbol)  # type: ignore[union-attr]
            return Outcome(seq, None, None, _NO_TRADES, [], [])
        raise TypeError(f"not a command: {command!r}")

    def check_duplicate(self, command: NewOrder) -> Outcome | None:
        """The answer to a retried clientOrderId without applying anything, or None if it is new."""
        if command.client_order_id is None:
            return None
        known = self.idempotency.get((command.account, command.client_order_id))
        if known is None:
            return None
        original, result = known
        if original == command:
            return Outcome(result.seq, result, None, _NO_TRADES, [], [], replayed=True)
        return Outcome(result.seq, result, Reason.DUPLICATE_MISMATCH, _NO_TRADES, [], [], replayed=True)

    def _new_order(self, seq: int, ts: int, cmd: NewOrder) -> Outcome:
        duplicate = self.check_duplicate(cmd)
        if duplicate is not None:
            return duplicate
        order_id = self.next_order_id
        self.next_order_id = order_id + 1
        order = Order(
            order_id,
            cmd.client_order_id,
            cmd.account,
            cmd.symbol,
            cmd.side,
            cmd.type,
            cmd.price,
            cmd.qty,
            cmd.tif,
            cmd.post_only,
            seq=seq,
            ts=ts,
        )
        book = self.books.get(cmd.symbol)
        reason = self._invalid(cmd, book)
        if reason is None and cmd.post_only:
            best = book.opposite(cmd.side).best()  # type: ignore[union-attr]
            if best is not None and book.opposite(cmd.side).crosses(best.price, cmd.price):  # type: ignore[union-attr]
                reason = Reason.POST_ONLY_WOULD_TAKE
        if reason is not None:
            order.status = "rejected"
            order.reason = reason
            # Kept like any finished order: the caller was given this id and may ask about it.
            self.orders[order_id] = order
            return self._remember(cmd, Outcome(seq, state_of(order), None, _NO_TRADES, [], []))
        assert book is not None
        if cmd.tif == "fok" and not self._fok_fillable(book, order):
            order.status = "cancelled"
            order.reason = Reason.FOK_NOT_FILLED
            self.orders[order_id] = order
            return self._remember(cmd, Outcome(seq, state_of(order), None, _NO_TRADES, [], []))
        self.orders[order_id] = order
        touched: list[Level] = []
        fills, trades, updates = self._match(book, order, seq, ts, touched)
        if order.filled == order.qty:
            order.status = "filled"
        elif cmd.type == "limit" and cmd.tif == "gtc":
            order.status = "partially_filled" if order.filled else "new"
            touched.append(book.rest(order))
            self._open(order)
        else:
            order.status = "cancelled"
            order.reason = Reason.IOC_REMAINDER if cmd.type == "limit" else Reason.NO_LIQUIDITY
        return self._remember(
            cmd, Outcome(seq, state_of(order, fills), None, trades, _changes(book, touched), updates)
        )

    def _cancel(self, seq: int, ts: int, cmd: Cancel) -> Outcome:
        order = self.orders.get(cmd.order_id)
        if order is None or order.account != cmd.account:
            return Outcome(seq, None, Reason.UNKNOWN_ORDER, _NO_TRADES, [], [])
        if not order.live:
            return Outcome(seq, state_of(order), Reason.NOT_OPEN, _NO_TRADES, [], [])
        book = self.books[order.symbol]
        level = book.unrest(order)
        self._close(order, "cancelled", Reason.USER_CANCEL, seq, ts)
        return Outcome(seq, state_of(order), None, _NO_TRADES, [book.change(level)], [])

    def _amend(self, seq: int, ts: int, cmd: Amend) -> Outcome:
        order = self.orders.get(cmd.order_id)
        if order is None or order.account != cmd.account:
            return Outcome(seq, None, Reason.UNKNOWN_ORDER, _NO_TRADES, [], [])
        if not order.live:
            return Outcome(seq, state_of(order), Reason.NOT_OPEN, _NO_TRADES, [], [])
        if cmd.qty is None and cmd.price is None:
            return Outcome(seq, state_of(order), Reason.NOTHING_TO_AMEND, _NO_TRADES, [], [])
        qty = order.qty if cmd.qty is None else cmd.qty
        price = order.price if cmd.price is None else cmd.price
        error = None
        if not 0 < qty <= MAX_QTY:
            error = Reason.BAD_QTY
        elif not 0 < price <= MAX_PRICE:
            error = Reason.BAD_PRICE
        elif qty <= order.filled:
            error = Reason.QTY_BELOW_FILLED
        book = self.books[order.symbol]
        opposite = book.opposite(order.side)
        if error is None and order.post_only and price != order.price:
            best = opposite.best()
            if best is not None and opposite.crosses(best.price, price):
                error = Reason.POST_ONLY_WOULD_TAKE
        if error is not None:
            return Outcome(seq, state_of(order), error, _NO_TRADES, [], [])

        if price == order.price and qty <= order.qty:
            # Reducing the quantity keeps the order's place in the queue.
            level = book.side(order.side).levels[order.price]
            level.qty -= order.qty - qty
            order.qty = qty
            order.seq, order.ts = seq, ts
            return Outcome(seq, state_of(order), None, _NO_TRADES, [book.change(level)], [])

        # A new price or a larger quantity loses time priority: the order is re-queued as a new
        # object (the old one stays dead in its old queue) and may trade at its new price.
        touched = [book.unrest(order)]
        moved = Order(
            order.order_id,
            order.client_order_id,
            order.account,
            order.symbol,
            order.side,
            order.type,
            price,
            qty,
            order.tif,
            order.post_only,
            filled=order.filled,
            status=order.status,
            seq=seq,
            ts=ts,
        )
        self.orders[order.order_id] = moved
        self.open_orders[order.account][order.order_id] = moved
        fills, trades, updates = self._match(book, moved, seq, ts, touched)
        if moved.filled == moved.qty:
            self._close(moved, "filled", None, seq, ts)
        else:
            moved.status = "partially_filled" if moved.filled else "new"
            touched.append(book.rest(moved))
        return Outcome(seq, state_of(moved, fills), None, trades, _changes(book, touched), updates)

    # ------------------------------------------------------------------ matching

    def _match(
        self, book: Book, order: Order, seq: int, ts: int, touched: list[Level]
    ) -> tuple[list[Fill], list[Trade], list[OrderState]]:
        """Trade `order` against the opposite side until it is filled or no longer crosses."""
        opposite = book.opposite(order.side)
        want = order.qty - order.filled
        if not want:
            return [], _NO_TRADES, []
        level = opposite.best()
        if level is None:
            return [], _NO_TRADES, []
        buying = order.side == "buy"
        limit = order.price if order.type == "limit" else None
        fills: list[Fill] = []
        trades: list[Trade] = []
        updates: list[OrderState] = []
        account = order.account
        symbol = order.symbol
        open_orders = self.open_orders
        while level is not None:
            price = level.price
            if limit is not None and (price > limit if buying else price < limit):
                break
            queue = level.queue
            while want and level.count:
                maker = queue[0]
                if not maker.live:
                    queue.popleft()
                    continue
                if maker.account == account:
                    # Self-trade prevention: the resting order is cancelled, the incoming one goes on.
                    queue.popleft()
                    maker.live = False
                    level.qty -= maker.qty - maker.filled
                    level.count -= 1
                    self._close(maker, "cancelled", Reason.SELF_TRADE, seq, ts)
                    updates.append(state_of(maker))
                    continue
                n = maker.qty - maker.filled
                if n > want:
                    n = want
                trade_id = self.next_trade_id
                self.next_trade_id = trade_id + 1
                if buying:
                    trade = Trade(trade_id, symbol, price, n, order.order_id, maker.order_id,
                                  account, maker.account, "buy", seq, ts)
                else:
                    trade = Trade(trade_id, symbol, price, n, maker.order_id, order.order_id,
                                  maker.account, account, "sell", seq, ts)
                trades.append(trade)
                fill = Fill(trade_id, price, n)
                fills.append(fill)
                want -= n
                level.qty -= n
                maker.filled += n
                maker.seq = seq
                maker.ts = ts
                if maker.filled == maker.qty:
                    queue.popleft()
                    maker.live = False
                    maker.status = "filled"
                    level.count -= 1
                    del open_orders[maker.account][maker.order_id]
                else:
                    maker.status = "partially_filled"
                updates.append(state_of(maker, [fill]))
            touched.append(level)
            if not level.count:
                opposite.drop(level)
            if not want:
                break
            level = opposite.best()
        order.filled = order.qty - want
        return fills, trades, updates

    def _fok_fillable(self, book: Book, order: Order) -> bool:
        """True when the book holds enough crossing quantity, not counting the account's own orders."""
        opposite: BookSide = book.opposite(order.side)
        need = order.qty
        own = bool(self.open_orders.get(order.account))
        for price, level in opposite.levels.items():
            if order.type == "limit" and not opposite.crosses(price, order.price):
                continue
            if own:
                need -= sum(o.qty - o.filled for o in level.live_orders() if o.account != order.account)
            else:
                need -= level.qty
            if need <= 0:
                return True
        return False

    # ------------------------------------------------------------------ bookkeeping

    def _invalid(self, cmd: NewOrder, book: Book | None) -> str | None:
        if book is None:
            return Reason.UNKNOWN_SYMBOL
        if not 0 < cmd.qty <= MAX_QTY:
            return Reason.BAD_QTY
        if cmd.type == "limit":
            if not 0 < cmd.price <= MAX_PRICE:
                return Reason.BAD_PRICE
        elif cmd.price != 0:
            return Reason.BAD_PRICE
        if cmd.post_only and (cmd.type != "limit" or cmd.tif != "gtc"):
            return Reason.BAD_ORDER
        return None

    def _remember(self, cmd: NewOrder, outcome: Outcome) -> Outcome:
        if cmd.client_order_id is not None:
            self.idempotency[(cmd.account, cmd.client_order_id)] = (cmd, outcome.result)  # type: ignore[assignment]
        return outcome

    def _open(self, order: Order) -> None:
        by_account = self.open_orders.get(order.account)
        if by_account is None:
            by_account = self.open_orders[order.account] = {}
        by_account[order.order_id] = order

    def _close(self, order: Order, status: str, reason: str | None, seq: int, ts: int) -> None:
        order.status = status  # type: ignore[assignment]
        order.reason = reason
        order.seq = seq
        order.ts = ts
        self.open_orders[order.account].pop(order.order_id, None)

    # ------------------------------------------------------------------ queries

    def order_state(self, account: str, order_id: int) -> OrderState | None:
        """The order's current state, or None when it is unknown or belongs to another account."""
        order = self.orders.get(order_id)
        if order is None or order.account != account:
            return None
        return state_of(order)

    def open_order_states(self, account: str) -> list[OrderState]:
        return [state_of(o) for o in sorted(self.open_orders.get(account, {}).values(), key=_by_id)]

    def depth(self, symbol: str, depth: int | None = None) -> tuple[list[Level], list[Level]]:
        """(bids, asks), best first."""
        book = self.books[symbol]
        return book.bids.sorted_levels(depth), book.asks.sorted_levels(depth)

    def state_hash(self) -> str:
        """A digest of everything replay must reproduce: books in queue order, orders, counters."""
        h = hashlib.blake2b(digest_size=16)
        enc = msgspec.msgpack.Encoder()
        h.update(enc.encode([self.next_order_id, self.next_trade_id, self.last_seq, sorted(self.books)]))
        for symbol in sorted(self.books):
            book = self.books[symbol]
            for side in (book.bids, book.asks):
                for level in side.sorted_levels():
                    h.update(enc.encode([level.price, level.qty, level.count,
                                         [o.order_id for o in level.live_orders()]]))
        for order_id in sorted(self.orders):
            h.update(enc.encode(self.orders[order_id]))
        for key in sorted(self.idempotency):
            h.update(enc.encode([key, self.idempotency[key][1]]))
        return h.hexdigest()


def _by_id(order: Order) -> int:
    return order.order_id


def _changes(book: Book, touched: list[Level]) -> list[LevelChange]:
    if len(touched) == 1:
        return [book.change(touched[0])]
    seen: set[int] = set()
    changes = []
    for level in touched:
        if id(level) not in seen:
            seen.add(id(level))
            changes.append(book.change(level))
    return changes
