"""My orders: the account's open orders with fill progress; cancel and amend from the keyboard."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import DataTable

from tickflow.net.client import Order
from tickflow.tui import format as fmt
from tickflow.tui.fields import DIGIT_KEYS, key_to_price, paste_to_price
from tickflow.tui.palette import Palette

_BAR = 5
BAR_WIDTH = 50
"""Narrower than this, the fill is shown as numbers only, so every column stays in view."""


def progress(filled: int, qty: int, bar: bool = True) -> Text:
    """`▰▰▱▱▱ 3/8`: how much of the order has traded (`3/8` alone without the bar)."""
    text = Text()
    if bar:
        done = round(_BAR * filled / qty) if qty else 0
        text.append("▰" * done, style="bold cyan")
        text.append("▱" * (_BAR - done) + " ", style="dim")
        text.append(f"{fmt.qty(filled)}/{fmt.qty(qty)}")
    else:
        text.append(f"{fmt.qty_fit(filled, 6)}/{fmt.qty_fit(qty, 6)}")
    return text


class MyOrders(DataTable):
    """A row per open order, oldest first. The cursor stays on the same order while rows come and go.
    Only GTC limit orders rest, so no column for the type or TIF; the Filled column tells new from
    partly filled, and PO marks post-only."""

    COLUMNS = ("Order", "Side", "Price", "Filled", "PO", "Sym")
    BINDINGS = [
        # Priority, as the app's own (which act first): so that the footer shows these.
        Binding("c,delete", "app.cancel_selected", "Cancel", id="cancel", tooltip="Cancel the chosen order",
                priority=True),
        Binding("a", "app.amend_selected", "Amend", id="amend", tooltip="Amend the chosen order", priority=True),
        *DIGIT_KEYS,
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.orders: list[Order] = []
        self._bar = True

    def on_key(self, event: events.Key) -> None:
        key_to_price(self, event)

    def on_paste(self, event: events.Paste) -> None:
        paste_to_price(self, event)

    def on_mount(self) -> None:
        self.border_title = "My orders"
        self.border_subtitle = "f: my fills"  # the footer has no room for it at 80x24
        self.add_columns(*self.COLUMNS)
        self._empty_row()

    def on_resize(self) -> None:
        bar = self.content_size.width >= BAR_WIDTH
        if bar != self._bar:
            self._bar = bar
            self.show(self.orders)

    def _empty_row(self) -> None:
        self.add_row(Text("none", style="italic dim"), "", "", "", "", "", key="-")  # (narrow: no column grows)

    @property
    def selected(self) -> Order | None:
        if not self.orders or self.cursor_row < 0 or self.cursor_row >= len(self.orders):
            return None
        return self.orders[self.cursor_row]

    def show(self, orders: list[Order]) -> None:
        palette: Palette = getattr(self.app, "palette", Palette())
        keep = self.selected.order_id if self.selected else None
        keep_row = max(0, self.cursor_row)
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
                progress(o.filled_qty, o.qty, self._bar),
                "✓" if o.post_only else "",
                o.symbol,
                key=str(o.order_id),
            )
        # The chosen order, or when it is gone the row it was on (the next order), so `c` works down the list.
        row = next((i for i, o in enumerate(orders) if o.order_id == keep), min(keep_row, len(orders) - 1))
        self.move_cursor(row=row, animate=False)
