"""The trade tape: time, price, quantity and an arrow for the aggressor's side, newest first."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.widget import Widget

from tickflow.net.client import Trade
from tickflow.tui import format as fmt
from tickflow.tui.book import PRICE_W
from tickflow.tui.palette import Palette


_QTY_W = 9


class TradeTape(Widget):
    """Draws the most recent trades that fit; colour and arrow both say who took liquidity
    (▲ a buyer lifted an ask, ▼ a seller hit a bid)."""

    def __init__(self, *, id: str | None = None, utc: bool = False) -> None:
        super().__init__(id=id)
        self.trades: Sequence[Trade] = ()
        self.utc = utc

    def show(self, symbol: str, trades: Sequence[Trade]) -> None:
        self.trades = trades
        self.border_title = f"Trades · {symbol}"
        self.refresh()

    def render(self) -> Text:
        palette: Palette = getattr(self.app, "palette", Palette())
        rows = max(0, self.content_size.height - 1)
        out = Text(no_wrap=True, overflow="crop")
        out.append(f"{'Time':<9}{'Price':>{PRICE_W}}{'Qty':>{_QTY_W}}", style="bold")
        if not self.trades:
            out.append("\n\n  no trades yet", style="italic dim")
            return out
        n = len(self.trades)
        for i in range(min(rows, n)):
            t = self.trades[n - 1 - i]
            colour = palette.side(t.aggressor)
            out.append("\n")
            out.append(f"{fmt.clock(t.ts, self.utc):<9}", style="dim")
            out.append(f"{t.price:>{PRICE_W}}", style=f"bold {colour}")
            out.append(f"{fmt.qty_fit(t.qty, _QTY_W - 1):>{_QTY_W}}")
            out.append(f" {palette.arrow(t.aggressor)}", style=colour)
        return out
