"""A backend that replays a fixed feed: for snapshot tests and screenshots, no network and no clock.

`FixedBackend` hands the app a prepared list of events, answers order calls from a script, and then
waits. `busy_feed()` builds a deterministic ACME market (a deep book, a run of trades, an hour of
minute bars) from a seed; `busy_fills()` alice's fills in it.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from typing import Any

import msgspec

from tickflow.net.client import (
    AccountFill,
    ApiError,
    Bar,
    BookChanged,
    Event,
    Level,
    Liquidity,
    LocalBook,
    Order,
    OrderChanged,
    Side,
    Status,
    StateChanged,
    SymbolInfo,
    Tif,
    Trade,
    TradesReceived,
)

T0 = 1_764_684_000_000
"""A fixed moment (2025-12-02 14:00 UTC) so screens never depend on today's date."""


class FixedBackend:
    def __init__(self, account: str = "alice", events: list[Event] | None = None, *,
                 symbols: list[str] | None = None, bars: dict[str, list[Bar]] | None = None,
                 open_orders: list[Order] | None = None, fills: list[AccountFill] | None = None,
                 answer: Callable[[str, dict], Order | list[Order] | Exception] | None = None) -> None:
        self.account = account
        self.events = list(events or [])
        self.symbol_list = symbols or ["ACME"]
        self._bars = bars or {}
        self.store: dict[str, list[Trade]] = {}
        """The server's trade store: the feed's trades, and any added with `print_trades`."""
        for event in self.events:
            if isinstance(event, TradesReceived):
                self.print_trades(event.symbol, event.trades)
        self._open = open_orders or []
        self.fill_store: list[AccountFill] = list(fills or [])
        """The server's record of the account's fills (`GET /fills`)."""
        self._answer = answer
        self.calls: list[tuple[str, dict]] = []
        """The order calls made, in order."""
        self.fills_asked: list[str] = []
        """The symbols `GET /fills` was asked for, in order."""
        self.listener: Callable[[Event], None] | None = None

    async def run(self, symbol: str, listener: Callable[[Event], None]) -> None:
        self.listener = listener
        for event in self.events:
            listener(event)
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass

    def emit(self, event: Event) -> None:
        """Push one more event, as if it had just arrived (its trades were stored first, as on a server)."""
        assert self.listener is not None
        if isinstance(event, TradesReceived):
            self.print_trades(event.symbol, [t for t in event.trades if t not in self.store.get(event.symbol, [])])
        self.listener(event)

    def print_trades(self, symbol: str, trades: list[Trade]) -> None:
        """Trades that reach the store, whether or not the feed has sent them yet."""
        self.store.setdefault(symbol, []).extend(trades)

    async def switch(self, old: str | None, new: str) -> None:
        self.calls.append(("switch", {"old": old, "new": new}))

    async def symbols(self) -> list[SymbolInfo]:
        return [SymbolInfo(s) for s in self.symbol_list]

    async def bars(self, symbol: str, to_ms: int | None = None, before: int | None = None) -> list[Bar]:
        """As the server answers: the fixed bars, and the stored trades before `to_ms` with ids below
        `before` (all by default)."""
        return bars_upto(self._bars.get(symbol, []), self.store.get(symbol, []), to_ms, before)

    async def open_orders(self) -> list[Order]:
        return list(self._open)

    async def fills(self, symbol: str, limit: int) -> list[AccountFill]:
        self.fills_asked.append(symbol)
        mine = sorted((f for f in self.fill_store if f.symbol == symbol), key=lambda f: f.trade_id, reverse=True)
        return mine[:limit]

    def _reply(self, call: str, args: dict) -> Any:
        """The script's answer to `call` (a list of orders for cancel_all), raised when it is an exception."""
        self.calls.append((call, args))
        if self._answer is None:
            raise ApiError(503, {"error": "fixed feed: no server"})
        result = self._answer(call, args)
        if isinstance(result, Exception):
            raise result
        return result

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None, *,
                          tif: Tif = "gtc", post_only: bool = False) -> Order:
        return self._reply("place", {"symbol": symbol, "side": side, "qty": qty, "price": price,
                                     "tif": tif, "postOnly": post_only})

    async def cancel_order(self, order_id: int) -> Order:
        return self._reply("cancel", {"orderId": order_id})

    async def cancel_all(self, symbol: str) -> list[Order]:
        return self._reply("cancel_all", {"symbol": symbol})

    async def amend_order(self, order_id: int, *, qty: int | None = None, price: int | None = None) -> Order:
        return self._reply("amend", {"orderId": order_id, "qty": qty, "price": price})


def bars_upto(bars: list[Bar], trades: list[Trade], to_ms: int | None, before: int | None = None) -> list[Bar]:
    """Minute bars over `bars` and `trades` before `to_ms` with ids below `before`, as
    `GET /bars?to=&before=` computes them."""
    end = to_ms if to_ms is not None else 1 << 62
    last = before if before is not None else 1 << 62
    out = {b.t: b for b in bars if b.t < end}
    for t in sorted((t for t in trades if t.ts < end and t.trade_id < last), key=lambda t: (t.ts, t.trade_id)):
        bucket = t.ts - t.ts % 60_000
        b = out.get(bucket)
        out[bucket] = (Bar(bucket, t.price, t.price, t.price, t.price, t.qty) if b is None else
                       msgspec.structs.replace(b, high=max(b.high, t.price), low=min(b.low, t.price),
                                               close=t.price, volume=b.volume + t.qty))
    return [out[t] for t in sorted(out)]


def book_of(symbol: str, seq: int, bids: list[tuple[int, int, int]], asks: list[tuple[int, int, int]]) -> LocalBook:
    book = LocalBook(symbol)
    book.load(seq, [Level(*b) for b in bids], [Level(*a) for a in asks])
    return book


def connected(account: str = "alice") -> StateChanged:
    return StateChanged("connected", account=account)


def order(order_id: int, side: Side, price: int, qty: int, filled: int = 0, *, status: Status | None = None,
          symbol: str = "ACME", account: str = "alice", seq: int = 1, reason: str | None = None,
          post_only: bool = False) -> Order:
    status = status or ("partially_filled" if filled else "new")
    return Order(order_id, account, symbol, side, "limit", qty, status, price, None, "gtc", post_only,
                 filled, qty - filled if status in ("new", "partially_filled") else 0, [], reason, seq,
                 T0 + 3_540_000)


def busy_feed(seed: int = 7, symbol: str = "ACME") -> tuple[list[Event], list[Bar], list[Order]]:
    """A deterministic busy market: 20 levels a side around 10,000, 60 trades, 60 minute bars and
    two open orders of alice's."""
    rng = random.Random(seed)
    bids = [(10_000 - i, rng.randint(5, 60) * 10, rng.randint(1, 6)) for i in range(20)]
    asks = [(10_002 + i, rng.randint(5, 60) * 10, rng.randint(1, 6)) for i in range(20)]
    steps = [rng.randint(-6, 7) for _ in range(59)]
    price = 10_001 - sum(steps)  # the walk ends where the trades below begin
    bars: list[Bar] = []
    for i, step in enumerate(steps):
        o, c = price, price + step
        bars.append(Bar(T0 + i * 60_000, o, max(o, c) + rng.randint(0, 4), min(o, c) - rng.randint(0, 4), c,
                        rng.randint(100, 900), None))
        price = c
    trades = []
    for i in range(60):
        side: Side = "buy" if rng.random() < 0.5 else "sell"
        trades.append(Trade(1_000 + i, symbol, 10_001 + (1 if side == "buy" else -1) * rng.randint(0, 2),
                            rng.randint(1, 40), side, 500 + i, T0 + 3_540_000 + i * 700))
    mine = [order(41, "buy", 9_995, 100, 40, seq=480), order(42, "sell", 10_010, 50, seq=490)]
    events: list[Event] = [
        connected(),
        BookChanged(symbol, book_of(symbol, 560, bids, asks), 560, True),
        TradesReceived(symbol, trades),
        *[OrderChanged(o) for o in mine],
    ]
    return events, bars, mine


def fill(trade_id: int, order_id: int, side: Side, price: int, qty: int,
         liquidity: Liquidity = "maker", *, symbol: str = "ACME", seq: int = 1,
         ts: int = T0) -> AccountFill:
    """One of the account's fills as `GET /fills` lists it."""
    return AccountFill(trade_id, symbol, order_id, side, price, qty, liquidity, seq, ts)


def busy_fills(events: list[Event]) -> list[AccountFill]:
    """alice's fills in `busy_feed()`'s market: the 40 of her resting buy #41 (maker, before the tape),
    and three orders of hers that crossed the spread (taker, trades on the tape)."""
    tape = next(e.trades for e in events if isinstance(e, TradesReceived))
    made = [fill(940 + 11 * i, 41, "buy", 9_995, qty, seq=400 + 20 * i, ts=T0 + 3_300_000 + 60_000 * i)
            for i, qty in enumerate((15, 20, 5))]
    for order_id, i in ((45, 12), (47, 33), (52, 54)):
        t = tape[i]
        made.append(fill(t.trade_id, order_id, t.aggressor, t.price, t.qty, "taker", seq=t.seq, ts=t.ts))
    return made


def rejected(req: dict, order_id: int = 77) -> Order:
    """The answer the server gives a post-only order that would take."""
    return msgspec.structs.replace(
        order(order_id, req["side"], req["price"], req["qty"], status="rejected",
              reason="post_only_would_take", post_only=True), remaining_qty=0)
