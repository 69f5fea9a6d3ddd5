"""One symbol's minute candles: `GET /bars` up to a cut-off time, and the trades seen from it on.

The bars are asked for the trades before `cutoff`, the time of the newest trade already seen (so every
earlier trade is in the server's store when it answers: the feed only sends durable trades, `/bars` waits
for the store to hold them, and the log's time never runs backwards). Every trade at or after the
cut-off is folded in here, once per trade id. The two parts are kept apart and merged when read, so
the candles are the same whether the bars arrive before, after or between the trades.
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


def _bucket(ts: int) -> int:
    return ts - ts % MINUTE


class Candles:
    def __init__(self) -> None:
        self.cutoff: int | None = None
        """The bars hold the trades before this time (ms); None until bars arrive."""
        self.newest: Trade | None = None
        self._bars: dict[int, Candle] = {}
        self._trades: dict[int, Trade] = {}  # by trade id: those at or after the cut-off
        self._live: dict[int, _Live] = {}

    def add_trades(self, trades: list[Trade]) -> None:
        for t in trades:
            if self.newest is None or (t.ts, t.trade_id) > (self.newest.ts, self.newest.trade_id):
                self.newest = t
            if t.trade_id in self._trades or (self.cutoff is not None and t.ts < self.cutoff):
                continue  # counted already, here or in the bars
            self._trades[t.trade_id] = t
            self._fold(t)
        self._forget_old()

    def set_bars(self, bars: list[Bar], cutoff: int) -> None:
        """The server's bars over the trades before `cutoff`; an answer older than the one held is dropped."""
        if self.cutoff is not None and cutoff < self.cutoff:
            return  # its trades from `cutoff` on were let go when the newer bars came
        self.cutoff = cutoff
        self._bars = {b.t: Candle(b.t, b.open, b.high, b.low, b.close, b.volume) for b in bars if b.t < cutoff}
        self._trades = {i: t for i, t in self._trades.items() if t.ts >= cutoff}
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
