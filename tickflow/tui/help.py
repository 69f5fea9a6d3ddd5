"""`?`: every key, what the colours and arrows mean, and where the command palette is."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from tickflow.tui.palette import BUY_ARROW, SELL_ARROW, Palette

KEYS: list[tuple[str, str]] = [
    ("enter", "in the ticket (any field): send the order · on the book: put the level's price in the ticket"),
    ("space", "in the ticket: tick or untick post-only, open a list (side, type, TIF)"),
    ("b / s", "ticket side: buy / sell"),
    ("t", "go to the ticket (price field)"),
    ("0-9", "on the book, my orders or my fills: start typing the ticket's price"),
    ("d", "go to the order book; ↑ ↓ move over the levels"),
    ("o", "go to my orders; ↑ ↓ choose one"),
    ("f", "my fills in this symbol, newest first, where my orders are; f again: back"),
    ("c / delete", "in my orders: cancel the chosen order"),
    ("a", "in my orders: amend the chosen order (new quantity and/or price)"),
    ("C", "cancel all my open orders in this symbol"),
    ("[ / ]", "previous / next symbol"),
    ("r", "reload bars and my orders, re-subscribe"),
    ("x", "swap the red and green colours"),
    ("ctrl+p", "command palette: every action by name"),
    ("escape", "leave a field"),
    ("? / f1", "this help"),
    ("q", "quit"),
]


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        palette: Palette = getattr(self.app, "palette", Palette())
        keys = Table.grid(padding=(0, 2))
        keys.add_column(style="bold cyan", no_wrap=True)
        keys.add_column()
        for key, what in KEYS:
            keys.add_row(key, what)
        legend = Text()
        legend.append(f"{BUY_ARROW} buy", style=f"bold {palette.buy}")
        legend.append(": bids, trades where a buyer took liquidity, rising candles\n")
        legend.append(f"{SELL_ARROW} sell", style=f"bold {palette.sell}")
        legend.append(": asks, trades where a seller took liquidity, falling candles\n")
        legend.append("Prices are integer ticks. The header shows the connection and the last seq seen;\n"
                      "when the server goes away the book is marked stale until a fresh snapshot.",
                      style="dim")
        with VerticalScroll(id="help-body"):
            yield Static(Text("tickflow · keys", style="bold"), classes="help-title")
            yield Static(keys)
            yield Static(Text("\nColours (always with an arrow)", style="bold"))
            yield Static(legend)
            yield Static(Text("\nescape closes this help", style="dim italic"))

    def action_dismiss(self, result: None = None) -> None:  # type: ignore[override]
        self.dismiss(result)
