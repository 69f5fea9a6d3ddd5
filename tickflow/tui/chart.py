"""The price chart: minute candles from `/bars`, kept live from the trades (textual-plotext)."""

from __future__ import annotations

import time

from textual_plotext import PlotextPlot

from tickflow.tui import format as fmt
from tickflow.tui.model import Candle
from tickflow.tui.palette import Palette

MAX_CANDLES = 60


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

    def show(self, symbol: str, candles: list[Candle]) -> None:
        self.symbol = symbol
        self.candles = candles[-MAX_CANDLES:]
        wait = self._last_draw + self.interval - time.monotonic()
        if wait <= 0:
            self.replot()
        elif not self._pending:
            self._pending = True
            self.set_timer(wait, self.replot)

    def replot(self) -> None:
        self._pending = False
        self._last_draw = time.monotonic()
        palette: Palette = getattr(self.app, "palette", Palette())
        plt = self.plt
        plt.clear_data()
        plt.clear_figure()
        candles = self.candles
        self.border_title = f"{self.symbol} · 1m candles"
        if not candles:
            plt.title("no trades in the last hour")
        else:
            xs = list(range(len(candles)))
            data = {"Open": [c.open for c in candles], "High": [c.high for c in candles],
                    "Low": [c.low for c in candles], "Close": [c.close for c in candles]}
            plt.candlestick(xs, data, colors=[_plotext_colour(palette.buy), _plotext_colour(palette.sell)])
            step = max(1, len(candles) // 6)
            ticks = xs[::step]
            plt.xticks(ticks, [fmt.minute(candles[i].t, self.utc) for i in ticks])
            first, last = candles[0].open, candles[-1].close
            change = last - first
            sign = "▲ +" if change > 0 else ("▼ " if change < 0 else "■ ")
            pct = 100 * change / first if first else 0.0
            plt.title(f"last {last}  {sign}{change} ({pct:+.2f}%)  vol {sum(c.volume for c in candles):,}")
        self.refresh()


def _plotext_colour(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return (int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16))
