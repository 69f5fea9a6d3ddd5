"""A deliberately naive twin of the matching engine, and a driver for the real one, for tests.

Every resting order of a (symbol, side) sits in one plain list in time-priority order: a newly
resting or re-queued order is appended, a finished one removed. The best order to trade with is
found by scanning that list: the best price wins and, at equal prices, whichever comes first.
Nothing here is meant to be fast; everything is meant to be easy to check by reading.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from tickflow.core.engine import Engine
from tickflow.core.orders import state_of
from tickflow.core.types import (
    MakerFill,
    MAX_PRICE,
    MAX_QTY,
    AddSymbol,
    Amend,
    Cancel,
    CancelAll,
    Command,
    Fill,
    NewOrder,
    OrderState,
    Outcome,
    Quote,
    Rules,
    Trade,
)

Levels = list[tuple[int, int, int]]
"""A side of a book as (price, qty, orders), best first."""


@dataclass(eq=False)  # identity, so list.remove takes out exactly this order
class RefOrder:
    order_id: int
    client_order_id: str | None
    account: str
    symbol: str
    side: str
    type: str
    price: int
    qty: int
    tif: str
    post_only: bool
    seq: int
    ts: int
    filled: int = 0
    status: str = "new"
    reason: str | None = None
    quote: bool = False

    def state(self, fills: list[Fill] | None = None) -> OrderState:
        return OrderState(
            self.order_id, self.client_order_id, self.account, self.symbol,
            self.side, self.type, self.price, self.qty, self.tif,  # type: ignore[arg-type]
            self.post_only, self.status,  # type: ignore[arg-type]
            self.filled, self.qty - self.filled, list(fills or []), self.reason, self.seq, self.ts,
        )


@dataclass
class RefEngine:
    symbols: list[str] = field(default_factory=list)
    orders: dict[int, RefOrder] = field(default_factory=dict)
    resting: dict[tuple[str, str], list[RefOrder]] = field(default_factory=dict)
    seen: dict[tuple[str, str], tuple[NewOrder, OrderState]] = field(default_factory=dict)
    next_order_id: int = 1
    next_trade_id: int = 1
    max_open_orders: int = 0
    price_band: int = 0
    idempotency_window: int = 0
    """Milliseconds a clientOrderId is remembered (0: for ever)."""
    last: dict[str, int] = field(default_factory=dict)
    """Each symbol's last trade price."""

    @classmethod
    def with_symbols(cls, symbols: Iterable[str]) -> RefEngine:
        engine = cls()
        for s in symbols:
            engine.add_symbol(s)
        return engine

    def add_symbol(self, symbol: str) -> None:
        self.symbols.append(symbol)
        self.resting[(symbol, "buy")] = []
        self.resting[(symbol, "sell")] = []

    # ------------------------------------------------------------------ queries

    def depth(self, symbol: str) -> tuple[Levels, Levels]:
        """(bids, asks) as (price, qty, orders), best first."""
        out = []
        for side in ("buy", "sell"):
            totals: dict[int, list[int]] = {}
            for o in self.resting[(symbol, side)]:
                t = totals.setdefault(o.price, [0, 0])
                t[0] += o.qty - o.filled
                t[1] += 1
            prices = sorted(totals, reverse=side == "buy")
            out.append([(p, totals[p][0], totals[p][1]) for p in prices])
        return out[0], out[1]

    def open_orders(self, account: str) -> list[OrderState]:
        mine = [o for lst in self.resting.values() for o in lst if o.account == account]
        return [o.state() for o in sorted(mine, key=lambda o: o.order_id)]

    # ------------------------------------------------------------------ commands

    def apply(self, seq: int, ts: int, cmd: Command) -> Outcome:
        if not isinstance(cmd, Rules):  # a Rules record forgets under the window it sets
            self.forget(ts)
        if isinstance(cmd, AddSymbol):
            if cmd.symbol in self.symbols:
                return Outcome(seq, None, "symbol_exists", [], [], [])
            self.add_symbol(cmd.symbol)
            return Outcome(seq, None, None, [], [], [])
        if isinstance(cmd, NewOrder):
            return self.new_order(seq, ts, cmd)
        if isinstance(cmd, Cancel):
            return self.cancel(seq, ts, cmd)
        if isinstance(cmd, Amend):
            return self.amend(seq, ts, cmd)
        if isinstance(cmd, CancelAll):
            return self.cancel_all(seq, ts, cmd)
        if isinstance(cmd, Quote):
            return self.quote(seq, ts, cmd)
        if isinstance(cmd, Rules):
            self.max_open_orders = cmd.max_open_orders
            self.price_band = cmd.price_band
            self.idempotency_window = cmd.idempotency_window
            self.forget(ts)
            return Outcome(seq, None, None, [], [], [])
        raise TypeError(cmd)

    def forget(self, ts: int) -> None:
        """Drop every clientOrderId whose window has passed at `ts`."""
        if self.idempotency_window:
            self.seen = {key: (cmd, first) for key, (cmd, first) in self.seen.items()
                         if first.ts + self.idempotency_window > ts}

    def new_order(self, seq: int, ts: int, cmd: NewOrder) -> Outcome:
        if cmd.client_order_id is not None:
            key = (cmd.account, cmd.client_order_id)
            if key in self.seen:
                first, result = self.seen[key]
                error = None if first == cmd else "duplicate_client_order_id"
                return Outcome(result.seq, result, error, [], [], [], replayed=True)
        order = RefOrder(self.next_order_id, cmd.client_order_id, cmd.account, cmd.symbol, cmd.side,
                         cmd.type, cmd.price, cmd.qty, cmd.tif, cmd.post_only, seq, ts)
        self.next_order_id += 1
        outcome = self.place(seq, ts, order)
        if cmd.client_order_id is not None:
            self.seen[(cmd.account, cmd.client_order_id)] = (cmd, outcome.result)  # type: ignore[assignment]
        return outcome

    def banned(self, symbol: str, price: int) -> bool:
        """Outside the price band: more than `price_band` hundredths of a per cent from the last trade."""
        last = self.last.get(symbol, 0)
        return bool(self.price_band and last) and abs(price - last) / last > self.price_band / 10_000

    def open_count(self, account: str) -> int:
        return sum(1 for lst in self.resting.values() for o in lst if o.account == account)

    def place(self, seq: int, ts: int, order: RefOrder) -> Outcome:
        reason = self.rejection(order)
        # The price band, then the open-order limit, come after the order's own terms, before whether a
        # post-only order would take.
        if reason in (None, "post_only_would_take") and order.type == "limit" and self.banned(order.symbol, order.price):
            reason = "outside_price_band"
        elif (reason in (None, "post_only_would_take") and self.max_open_orders and order.type == "limit"
                and order.tif == "gtc" and self.open_count(order.account) >= self.max_open_orders):
            reason = "too_many_open_orders"
        if reason is not None:
            order.status = "rejected"
            order.reason = reason
            self.orders[order.order_id] = order
            return Outcome(seq, order.state(), None, [], [], [])
        self.orders[order.order_id] = order
        if order.tif == "fok" and self.available(order) < order.qty:
            order.status = "cancelled"
            order.reason = "fok_not_filled"
            return Outcome(seq, order.state(), None, [], [], [])
        fills, trades, updates = self.match(seq, ts, order)
        if order.filled == order.qty:
            order.status = "filled"
        elif order.type == "limit" and order.tif == "gtc":
            order.status = "partially_filled" if order.filled else "new"
            self.resting[(order.symbol, order.side)].append(order)
        else:
            order.status = "cancelled"
            order.reason = "ioc_remainder_cancelled" if order.type == "limit" else "no_liquidity"
        return Outcome(seq, order.state(fills), None, trades, [], updates)

    def rejection(self, order: RefOrder) -> str | None:
        if order.symbol not in self.symbols:
            return "unknown_symbol"
        if not 1 <= order.qty <= MAX_QTY:
            return "bad_qty"
        if order.type == "limit" and not 1 <= order.price <= MAX_PRICE:
            return "bad_price"
        if order.type == "market" and order.price != 0:
            return "bad_price"
        if order.post_only and (order.type != "limit" or order.tif != "gtc"):
            return "bad_order"
        if order.post_only and self.crossing(order):
            return "post_only_would_take"
        return None

    def crosses(self, order: RefOrder, resting: RefOrder) -> bool:
        if order.type == "market":
            return True
        return resting.price <= order.price if order.side == "buy" else resting.price >= order.price

    def crossing(self, order: RefOrder) -> list[RefOrder]:
        """Resting orders `order` could trade with, any account, in the list's (time) order."""
        other = "sell" if order.side == "buy" else "buy"
        return [o for o in self.resting[(order.symbol, other)] if self.crosses(order, o)]

    def available(self, order: RefOrder) -> int:
        return sum(o.qty - o.filled for o in self.crossing(order) if o.account != order.account)

    def best(self, order: RefOrder) -> RefOrder | None:
        best = None
        for o in self.crossing(order):
            if best is None or (o.price < best.price if order.side == "buy" else o.price > best.price):
                best = o
        return best

    def match(self, seq: int, ts: int, order: RefOrder) -> tuple[list[Fill], list[Trade], list[OrderState | MakerFill]]:
        fills: list[Fill] = []
        trades: list[Trade] = []
        updates: list[OrderState | MakerFill] = []
        while order.filled < order.qty:
            maker = self.best(order)
            if maker is None:
                break
            maker.seq, maker.ts = seq, ts
            if maker.account == order.account:
                self.resting[(maker.symbol, maker.side)].remove(maker)
                maker.status = "cancelled"
                maker.reason = "self_trade_prevented"
                updates.append(maker.state())
                continue
            qty = min(order.qty - order.filled, maker.qty - maker.filled)
            trade_id = self.next_trade_id
            self.next_trade_id += 1
            buy, sell = (order, maker) if order.side == "buy" else (maker, order)
            self.last[order.symbol] = maker.price
            trades.append(Trade(trade_id, order.symbol, maker.price, qty, buy.order_id, sell.order_id,
                                buy.account, sell.account, order.side, seq, ts))  # type: ignore[arg-type]
            fills.append(Fill(trade_id, maker.price, qty, "taker"))
            order.filled += qty
            maker.filled += qty
            if maker.filled == maker.qty:
                maker.status = "filled"
                self.resting[(maker.symbol, maker.side)].remove(maker)
            else:
                maker.status = "partially_filled"
            updates.append(maker.state([Fill(trade_id, maker.price, qty, "maker")]))
        return fills, trades, updates

    def find(self, account: str, order_id: int) -> RefOrder | None:
        order = self.orders.get(order_id)
        return order if order is not None and order.account == account else None

    def not_found(self, order_id: int) -> str:
        """A cancel or amend of no resting order of the account's: an id given out is "not_live" (finished,
        or another account's: the engine keeps no finished order, so it cannot tell which), else unknown."""
        return "not_live" if 0 < order_id < self.next_order_id else "unknown_order"

    def is_resting(self, order: RefOrder) -> bool:
        return any(o is order for o in self.resting.get((order.symbol, order.side), []))

    def cancel(self, seq: int, ts: int, cmd: Cancel) -> Outcome:
        order = self.find(cmd.account, cmd.order_id)
        if order is None or not self.is_resting(order):
            return Outcome(seq, None, self.not_found(cmd.order_id), [], [], [])
        self.resting[(order.symbol, order.side)].remove(order)
        order.status = "cancelled"
        order.reason = "cancelled_by_user"
        order.seq, order.ts = seq, ts
        return Outcome(seq, order.state(), None, [], [], [])

    def cancel_all(self, seq: int, ts: int, cmd: CancelAll) -> Outcome:
        chosen = [o for (symbol, side), lst in self.resting.items() for o in lst
                  if o.account == cmd.account and cmd.symbol in (None, symbol) and cmd.side in (None, side)]
        updates: list[OrderState | MakerFill] = []
        for order in sorted(chosen, key=lambda o: o.order_id):
            self.resting[(order.symbol, order.side)].remove(order)
            order.status = "cancelled"
            order.reason = "cancelled_by_user"
            order.seq, order.ts = seq, ts
            updates.append(order.state())
        return Outcome(seq, None, None, [], [], updates)

    def amend(self, seq: int, ts: int, cmd: Amend) -> Outcome:
        order = self.find(cmd.account, cmd.order_id)
        if order is None or not self.is_resting(order):
            return Outcome(seq, None, self.not_found(cmd.order_id), [], [], [])
        if cmd.qty in (None, order.qty) and cmd.price in (None, order.price):
            return Outcome(seq, order.state(), "nothing_to_amend", [], [], [])
        qty = order.qty if cmd.qty is None else cmd.qty
        price = order.price if cmd.price is None else cmd.price
        error = None
        if not 1 <= qty <= MAX_QTY:
            error = "bad_qty"
        elif not 1 <= price <= MAX_PRICE:
            error = "bad_price"
        elif qty <= order.filled:
            error = "qty_not_above_filled"
        elif price != order.price and self.banned(order.symbol, price):
            error = "outside_price_band"
        elif order.post_only and price != order.price:
            moved = RefOrder(**{**order.__dict__, "price": price})
            if self.crossing(moved):
                error = "post_only_would_take"
        if error is not None:
            return Outcome(seq, order.state(), error, [], [], [])
        order.seq, order.ts = seq, ts
        if price == order.price and qty <= order.qty:
            order.qty = qty  # stays where it is in the list: keeps its time priority
            return Outcome(seq, order.state(), None, [], [], [])
        self.resting[(order.symbol, order.side)].remove(order)
        order.price, order.qty = price, qty
        fills, trades, updates = self.match(seq, ts, order)
        if order.filled == order.qty:
            order.status = "filled"
        else:
            order.status = "partially_filled" if order.filled else "new"
            self.resting[(order.symbol, order.side)].append(order)
        return Outcome(seq, order.state(fills), None, trades, [], updates)

    def quote(self, seq: int, ts: int, cmd: Quote) -> Outcome:
        """The account's resting quote orders in the symbol become the quote's levels: a price quoted again
        with no more than what is open stays (cut to the new quantity), anything else goes; the levels
        left are placed, bids then asks, best first."""
        if cmd.symbol not in self.symbols:
            return Outcome(seq, None, "unknown_symbol", [], [], [])
        for levels in (cmd.bids, cmd.asks):
            if len(levels) > 64:
                return Outcome(seq, None, "too_many_levels", [], [], [])
            if any(not 1 <= p <= MAX_PRICE for p, _ in levels):
                return Outcome(seq, None, "bad_price", [], [], [])
            if any(not 1 <= q <= MAX_QTY for _, q in levels):
                return Outcome(seq, None, "bad_qty", [], [], [])
            if len(set(p for p, _ in levels)) < len(levels):
                return Outcome(seq, None, "repeated_price", [], [], [])
        if cmd.bids and cmd.asks and max(cmd.bids)[0] >= min(cmd.asks)[0]:
            return Outcome(seq, None, "crossed_quote", [], [], [])
        if any(self.banned(cmd.symbol, p) for p, _ in cmd.bids + cmd.asks):
            return Outcome(seq, None, "outside_price_band", [], [], [])
        mine = sorted((o for side in ("buy", "sell") for o in self.resting[(cmd.symbol, side)]
                       if o.account == cmd.account and o.quote), key=lambda o: o.order_id)
        wanted = {("buy", p): q for p, q in cmd.bids} | {("sell", p): q for p, q in cmd.asks}
        staying = {o.order_id for o in mine if (o.side, o.price) in wanted
                   and wanted[(o.side, o.price)] <= o.qty - o.filled}
        kept_keys = set()
        for o in mine:  # a second order at a kept price goes
            if o.order_id in staying and (o.side, o.price) in kept_keys:
                staying.discard(o.order_id)
            elif o.order_id in staying:
                kept_keys.add((o.side, o.price))
        new_levels = len(wanted) - len(kept_keys)
        going = len(mine) - len(staying)
        if (self.max_open_orders and new_levels
                and self.open_count(cmd.account) - going + new_levels > self.max_open_orders):
            return Outcome(seq, None, "too_many_open_orders", [], [], [])
        gone: list[OrderState] = []
        kept: list[RefOrder] = []
        for order in mine:
            if order.order_id in staying:
                qty = wanted.pop((order.side, order.price))
                if qty < order.qty - order.filled:
                    order.qty = order.filled + qty
                    order.seq, order.ts = seq, ts
                kept.append(order)
            else:
                self.resting[(order.symbol, order.side)].remove(order)
                order.status, order.reason = "cancelled", "replaced_by_quote"
                order.seq, order.ts = seq, ts
                gone.append(order.state())
        quoted = gone + [o.state() for o in kept]
        trades: list[Trade] = []
        updates: list[OrderState | MakerFill] = []
        bids = sorted((p for s, p in wanted if s == "buy"), reverse=True)
        asks = sorted(p for s, p in wanted if s == "sell")
        for side, price in [("buy", p) for p in bids] + [("sell", p) for p in asks]:
            order = RefOrder(self.next_order_id, None, cmd.account, cmd.symbol, side, "limit", price,
                             wanted[(side, price)], "gtc", False, seq, ts, quote=True)
            self.next_order_id += 1
            placed = self.place(seq, ts, order)
            quoted.append(placed.result)  # type: ignore[arg-type]
            trades += placed.trades
            updates += placed.changed
        return Outcome(seq, None, None, trades, [], updates, quoted=quoted)


# ---------------------------------------------------------------- driving the real engine


class Driver:
    """Feeds commands to an Engine with increasing seq/ts and checks every outcome's book events."""

    def __init__(self, symbols: tuple[str, ...] = ("ACME",)) -> None:
        self.engine = Engine(symbols)
        self.seq = 0
        # (symbol, side) -> {price: (qty, orders)}, built only from outcome.book events.
        self.mirror: dict[tuple[str, str], dict[int, tuple[int, int]]] = {}

    def apply(self, command: Command) -> Outcome:
        self.seq += 1
        outcome = self.engine.apply(self.seq, 1000 + self.seq, command)
        for change in outcome.book:
            levels = self.mirror.setdefault((change.symbol, change.side), {})
            if change.qty:
                levels[change.price] = (change.qty, change.orders)
            else:
                assert change.orders == 0
                levels.pop(change.price, None)
        return outcome

    def new(self, account: str, side: str, price: int, qty: int, *, symbol: str = "ACME",
            type: str = "limit", tif: str = "gtc", post_only: bool = False,
            client_order_id: str | None = None) -> Outcome:
        command = NewOrder(account, symbol, side, type, price, qty, tif, post_only,  # type: ignore[arg-type]
                           client_order_id)
        return self.apply(command)

    def market(self, account: str, side: str, qty: int, *, tif: str = "ioc", symbol: str = "ACME") -> Outcome:
        return self.new(account, side, 0, qty, symbol=symbol, type="market", tif=tif)

    def cancel(self, account: str, order_id: int) -> Outcome:
        return self.apply(Cancel(account, order_id))

    def amend(self, account: str, order_id: int, qty: int | None = None, price: int | None = None) -> Outcome:
        return self.apply(Amend(account, order_id, qty, price))

    def cancel_all(self, account: str, symbol: str | None = None, side: str | None = None) -> Outcome:
        return self.apply(CancelAll(account, symbol, side))  # type: ignore[arg-type]

    def add_symbol(self, symbol: str) -> Outcome:
        return self.apply(AddSymbol(symbol))

    def quote(self, account: str, bids: list[tuple[int, int]], asks: list[tuple[int, int]], *,
              symbol: str = "ACME") -> Outcome:
        return self.apply(Quote(account, symbol, bids, asks))

    def depth(self, symbol: str = "ACME") -> tuple[Levels, Levels]:
        book = self.engine.books[symbol]
        bids, asks = book.bids.sorted_levels(), book.asks.sorted_levels()
        return [(lv.price, lv.qty, lv.count) for lv in bids], [(lv.price, lv.qty, lv.count) for lv in asks]

    def mirror_depth(self, symbol: str = "ACME") -> tuple[Levels, Levels]:
        out = []
        for side in ("buy", "sell"):
            levels = self.mirror.get((symbol, side), {})
            prices = sorted(levels, reverse=side == "buy")
            out.append([(p, *levels[p]) for p in prices])
        return out[0], out[1]


def open_order_states(engine: Engine, account: str) -> list[OrderState]:
    """`account`'s open orders in the engine, oldest first, as states."""
    return [state_of(o) for o in sorted(engine.open_orders.get(account, {}).values(), key=lambda o: o.order_id)]
