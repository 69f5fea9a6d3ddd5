"""One symbol's minute candles: `GET /bars` up to the newest trade seen, and the trades seen after it.

The bars are asked for every trade up to the newest one already seen, cut by trade id (`before`), not
by time: one order sweeping many levels makes many trades in one millisecond, and the feed's snapshot
holds only the latest of them. Every earlier trade is in the server's store when it answers: the feed
only sends durable trades, and `/bars` waits for the store to hold them. Every trade after the cut is
folded in here, once per trade id. The two parts are kept apart and merged when read, so the candles are
the same whether the bars arrive before, after or between the trades.
"""

from __future__ import annotations

from dataclasses import dataclass

from tickflow.net.client import Bar, Trade

MINUTE = 60_000
KEEP = 60 * MINUTE
"""Trades and bars older than this, before the newest trade, are dropped: the chart shows the last hour."""


@dataclass
class Candle:
    t: int
    open: int
    high: int
    low: int
    close: int
    volume: int


@dataclass
class _Live:
    """A candle folded from trades, with the (ts, trade id) of its open and close, so that a trade
    arriving out of order still lands in its place."""

    candle: Candle
    first: tuple[int, int]
    last: tuple[int, int]

    def add(self, trade: Trade) -> None:
        c, key = self.candle, (trade.ts, trade.trade_id)
        c.high, c.low, c.volume = max(c.high, trade.price), min(c.low, trade.price), c.volume + trade.qty
        if key < self.first:
            self.first, c.open = key, trade.price
        if key > self.last:
            self.last, c.close = key, trade.price


@dataclass(frozen=True)
class Cut:
    """Where `GET /bars` is cut: just after a trade. The bars hold the trades with ids below `before`;
    they all came before `to` (ms), since trade times never run backwards in trade-id order."""

    to: int
    before: int

    @classmethod
    def after(cls, trade: Trade) -> Cut:
        return cls(trade.ts + 1, trade.trade_id + 1)


def _bucket(ts: int) -> int:
    return ts - ts % MINUTE


class Candles:
    def __init__(self) -> None:
        self.before: int | None = None
        """The bars hold the trades with ids below this; None until bars arrive."""
        self.newest: Trade | None = None
        self._bars: dict[int, Candle] = {}
        self._trades: dict[int, Trade] = {}  # by trade id: those at or after the cut
        self._live: dict[int, _Live] = {}

    def cut(self) -> Cut | None:
        """Where to ask `GET /bars` up to: just after the newest trade seen; None before any trade."""
        return Cut.after(self.newest) if self.newest is not None else None

    def add_trades(self, trades: list[Trade]) -> None:
        for t in trades:
            if self.newest is None or (t.ts, t.trade_id) > (self.newest.ts, self.newest.trade_id):
                self.newest = t
            if t.trade_id in self._trades or (self.before is not None and t.trade_id < self.before):
                continue  # counted already, here or in the bars
            self._trades[t.trade_id] = t
            self._fold(t)
        self._forget_old()

    def set_bars(self, bars: list[Bar], before: int) -> None:
        """The server's bars over the trades with ids below `before`; an answer older than the one held is
        dropped."""
        if self.before is not None and before < self.before:
            return  # its trades from `before` on were let go when the newer bars came
        self.before = before
        self._bars = {b.t: Candle(b.t, b.open, b.high, b.low, b.close, b.volume) for b in bars}
        self._trades = {i: t for i, t in self._trades.items() if i >= before}
        self._live = {}
        for t in self._trades.values():
            self._fold(t)
        self._forget_old()

    def candles(self) -> list[Candle]:
        """Oldest first: each minute's bar and its later trades as one candle."""
        out = []
        for t in sorted(self._bars.keys() | self._live.keys()):
            bar, live = self._bars.get(t), self._live.get(t)
            if bar is None or live is None:
                source = bar or live.candle  # type: ignore[union-attr]
                out.append(Candle(t, source.open, source.high, source.low, source.close, source.volume))
            else:  # the bar's trades all came before the live ones
                lc = live.candle
                out.append(Candle(t, bar.open, max(bar.high, lc.high), min(bar.low, lc.low), lc.close,
                                  bar.volume + lc.volume))
        return out

    def _fold(self, t: Trade) -> None:
        bucket = _bucket(t.ts)
        live = self._live.get(bucket)
        key = (t.ts, t.trade_id)
        if live is None:
            self._live[bucket] = _Live(Candle(bucket, t.price, t.price, t.price, t.price, t.qty), key, key)
        else:
            live.add(t)

    def _forget_old(self) -> None:
        if self.newest is None:
            return
        oldest = _bucket(self.newest.ts) - KEEP
        if self._live and min(self._live) < oldest:
            self._live = {b: c for b, c in self._live.items() if b >= oldest}
            self._trades = {i: t for i, t in self._trades.items() if t.ts >= oldest}
        if self._bars and min(self._bars) < oldest:
            self._bars = {b: c for b, c in self._bars.items() if b >= oldest}
