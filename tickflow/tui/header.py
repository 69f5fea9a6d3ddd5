"""The top bar: the symbol switcher, the account, the connection state and how far the feed has got (seq)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Select, Static

from tickflow.net.client import StateChanged


def connection_text(conn: StateChanged, seq: int, gaps: int) -> Text:
    """`● connected` in green, `⟳ reconnecting` in yellow with the backoff, `✕ closed` in red."""
    if conn.state == "connected":
        text = Text("● connected", style="bold green")
    elif conn.state == "connecting":
        text = Text("◌ connecting…", style="bold yellow")
    elif conn.state == "reconnecting":
        wait = f" in {conn.delay:.1f} s" if conn.delay else "…"
        text = Text(f"⟳ reconnecting{wait} (attempt {conn.attempt})", style="bold yellow")
        if conn.error:
            text.append(f" · {conn.error[:48]}", style="yellow")
    else:
        text = Text("✕ disconnected", style="bold red")
        if conn.error:
            text.append(f" · {conn.error[:48]}", style="red")
    text.append(f"  seq {seq:,}", style="dim" if conn.state != "connected" else "")
    if gaps:
        text.append(f"  gaps {gaps}", style="yellow")
    return text


class TopBar(Horizontal):
    """Posts `Select.Changed` (id `symbol`) when the user picks another symbol."""

    def __init__(self, symbol: str, account: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._symbol = symbol
        self._account = account

    def compose(self) -> ComposeResult:
        yield Label("tickflow", id="brand")
        yield Select([(self._symbol, self._symbol)], value=self._symbol, allow_blank=False,
                     compact=True, id="symbol")
        yield Label(f"account {self._account}", id="account")
        yield Static("", id="conn")

    def set_symbols(self, symbols: list[str], current: str) -> None:
        select = self.query_one("#symbol", Select)
        with select.prevent(Select.Changed):
            select.set_options([(s, s) for s in symbols])
            select.value = current

    def set_symbol(self, symbol: str) -> None:
        select = self.query_one("#symbol", Select)
        if select.value != symbol:
            with select.prevent(Select.Changed):
                select.value = symbol

    def set_connection(self, conn: StateChanged, seq: int, gaps: int) -> None:
        # One line of fixed size: no layout pass (which would redraw every panel) for a new seq.
        self.query_one("#conn", Static).update(connection_text(conn, seq, gaps), layout=False)
