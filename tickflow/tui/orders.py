"""My orders: the account's open orders with fill progress; cancel and amend from the keyboard."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from tickflow.net.client import Order
from tickflow.tui import format as fmt
from tickflow.tui.palette import Palette

_BAR = 5


def progress(filled: int, qty: int) -> Text:
    """`▰▰▰▱▱▱▱▱  3/8`: how much of the order has traded."""
    done = round(_BAR * filled / qty) if qty else 0
    text = Text("▰" * done, style="bold cyan")
    text.append("▱" * (_BAR - done), style="dim")
    text.append(f" {fmt.qty(filled)}/{fmt.qty(qty)}")
    return text


class MyOrders(DataTable):
    """A row per open order, oldest first. The cursor stays on the same order while rows come and go."""

    COLUMNS = ("Order", "Side", "Price", "Filled", "Status", "TIF", "Sym")

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.orders: list[Order] = []

    def on_mount(self) -> None:
        self.border_title = "My orders"
        self.add_columns(*self.COLUMNS)
        self._empty_row()

    def _empty_row(self) -> None:
        self.add_row("", Text("no open orders", style="italic dim"), "", "", "", "", "", key="-")

    @property
    def selected(self) -> Order | None:
        if not self.orders or self.cursor_row < 0 or self.cursor_row >= len(self.orders):
            return None
        return self.orders[self.cursor_row]

    def show(self, orders: list[Order]) -> None:
        palette: Palette = getattr(self.app, "palette", Palette())
        keep = self.selected.order_id if self.selected else None
        self.orders = orders
        self.border_title = f"My orders · {len(orders)} open"
        self.clear(columns=True)  # columns shrink back when wide rows go
        self.add_columns(*self.COLUMNS)
        if not orders:
            self._empty_row()
            return
        for o in orders:
            colour = palette.side(o.side)
            self.add_row(
                Text(f"#{o.order_id}"),
                Text(f"{palette.arrow(o.side)} {o.side}", style=colour),
                Text(fmt.price(o.price), style=f"bold {colour}", justify="right"),
                progress(o.filled_qty, o.qty),
                "partial" if o.status == "partially_filled" else o.status,
                o.tif.upper() + (" PO" if o.post_only else ""),
                o.symbol,
                key=str(o.order_id),
            )
        row = next((i for i, o in enumerate(orders) if o.order_id == keep), 0)
        self.move_cursor(row=row, animate=False)
