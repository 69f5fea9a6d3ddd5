"""The price chart: minute candles from `/bars`, kept live from the trades (textual-plotext)."""

from __future__ import annotations

import time
from itertools import groupby

from textual.app import RenderResult
from textual_plotext import PlotextPlot
from textual_plotext.plot import Plot

from tickflow.tui import format as fmt
from tickflow.tui.candles import Candle
from tickflow.tui.palette import Palette

MAX_CANDLES = 60
MIN_SLOTS = 30
"""The chart has room for at least this many minutes, newest at the right, so a young market's first
candles do not stretch across the whole width."""


class PriceChart(PlotextPlot):
    """Redraws at most `interval` seconds apart: plotting is the costliest thing on the screen, and a
    candle chart a few frames late reads the same."""

    def __init__(self, *, id: str | None = None, utc: bool = False, interval: float = 0.5) -> None:
        super().__init__(id=id)
        self.utc = utc
        self.interval = interval
        self.symbol = ""
        self.candles: list[Candle] = []
        self._last_draw = 0.0
        self._pending = False
        self._version = 0
        self._cache: tuple[tuple[int, int, int, str], RenderResult] | None = None

    def render(self) -> RenderResult:
        """Build the plot only when the data, the size or the theme changed, not on every repaint."""
        key = (self._version, self.size.width, self.size.height, self.app.theme)
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, super().render())
        return self._cache[1]

    def show(self, symbol: str, candles: list[Candle]) -> None:
        self.symbol = symbol
        self.candles = candles[-MAX_CANDLES:]
        wait = self._last_draw + self.interval - time.monotonic()
        if wait <= 0:
            self.replot()
        elif not self._pending:
            self._pending = True
            self.set_timer(wait, self.replot)

    def on_resize(self) -> None:
        if self.candles:
            self.replot()

    def replot(self) -> None:
        self._pending = False
        self._last_draw = time.monotonic()
        palette: Palette = getattr(self.app, "palette", Palette())
        plt = self.plt
        self._version += 1
        plt.clear_data()
        plt.clear_figure()
        candles = self.candles
        self.border_title = f"{self.symbol} · 1m candles"
        self.border_subtitle = ""
        plt.xaxes(True, False)  # no frame line above or to the right: a short chart keeps its rows
        plt.yaxes(True, False)
        if not candles:
            self.border_subtitle = "no trades in the last hour"
        else:
            # x is minutes before the newest candle: quiet minutes stay gaps, as on a real time axis.
            newest = candles[-1].t
            candles = [c for c in candles if newest - c.t < MAX_CANDLES * 60_000]
            offsets = [(c.t - newest) // 60_000 for c in candles]
            slots = max(MIN_SLOTS, 1 - offsets[0])
            xs = [slots - 1 + off for off in offsets]
            plt.xlim(-0.5, slots - 0.5)
            _draw_candles(plt, xs, candles, palette)
            picks = _label_picks(xs, slots, self.size.width)
            plt.xticks([xs[i] for i in picks], [fmt.minute(candles[i].t, self.utc) for i in picks])
            low, high = min(c.low for c in candles), max(c.high for c in candles)
            plt.yticks(_price_ticks(low, high, self.size.height - 2))
            first, last = candles[0].open, candles[-1].close
            change = last - first
            sign = "▲ +" if change > 0 else ("▼ " if change < 0 else "■ ")
            pct = 100 * change / first if first else 0.0
            # On the frame, not in the plot: the candles get every row.
            self.border_subtitle = f"last {last}  {sign}{change} ({pct:+.2f}%)  vol {sum(c.volume for c in candles):,}"
        self.refresh()


def _draw_candles(plt: Plot, xs: list[int], candles: list[Candle], palette: Palette) -> None:
    """Up candles (close at or above open, as the web page has it) in the buy colour, the others in the
    sell colour. plotext calls a candle up only when close > open, so a doji would come out in the sell
    colour: each run of same-coloured candles is drawn on its own, in its one colour, oldest first (where
    candles share a column, the newer is drawn over the older, as in one call)."""
    runs = groupby(zip(xs, candles), key=lambda pair: pair[1].close >= pair[1].open)
    for up, run in runs:
        pairs = list(run)
        rgb = _plotext_colour(palette.buy if up else palette.sell)
        data = {"Open": [c.open for _, c in pairs], "High": [c.high for _, c in pairs],
                "Low": [c.low for _, c in pairs], "Close": [c.close for _, c in pairs]}
        # The stub types the x values as str; plotext takes numbers as well, as here.
        plt.candlestick([x for x, _ in pairs], data, colors=[rgb, rgb])  # type: ignore[misc]


def _label_picks(xs: list[int], slots: int, width: int) -> list[int]:
    """Indexes of the candles to label: the newest, then older ones far enough apart that no two
    labels ("HH:MM") collide at this width, so plotext never has to drop one."""
    max_labels = max(2, (width - 10) // 9)
    gap = slots / max_labels
    picks: list[int] = []
    for i in range(len(xs) - 1, -1, -1):
        if not picks or xs[picks[-1]] - xs[i] >= gap:
            picks.append(i)
    return picks[::-1]


def _price_ticks(low: int, high: int, rows: int) -> list[float]:
    """Up to six prices to label, at most one per two rows: more than fit and plotext picks which to
    drop, not always the same ones."""
    count = max(2, min(6, rows // 2))
    step = max(1, -(-(high - low) // (count - 1)))
    return list(range(low, high + 1, step))


def _plotext_colour(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
