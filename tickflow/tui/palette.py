"""Colours for the two sides of the market, always paired with an arrow or a sign.

The convention (green up / buy, red down / sell) can be swapped for users who read it the other way or
cannot tell the two apart: `Palette(swapped=True)`. Widgets read `app.palette` when they render.
"""

from __future__ import annotations

from dataclasses import dataclass

BUY_ARROW = "▲"
SELL_ARROW = "▼"

_GREEN = "#3fb950"
_RED = "#f85149"
_GREEN_BAR = "#1d4a2a"
_RED_BAR = "#5a1f1f"


@dataclass(frozen=True)
class Palette:
    swapped: bool = False

    @property
    def buy(self) -> str:
        """Colour of bids, buy-aggressor trades and up moves."""
        return _RED if self.swapped else _GREEN

    @property
    def sell(self) -> str:
        """Colour of asks, sell-aggressor trades and down moves."""
        return _GREEN if self.swapped else _RED

    @property
    def buy_bar(self) -> str:
        return _RED_BAR if self.swapped else _GREEN_BAR

    @property
    def sell_bar(self) -> str:
        return _GREEN_BAR if self.swapped else _RED_BAR

    def side(self, side: str) -> str:
        return self.buy if side == "buy" else self.sell

    @staticmethod
    def arrow(side: str) -> str:
        return BUY_ARROW if side == "buy" else SELL_ARROW
