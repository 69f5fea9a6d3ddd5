"""My fills: the account's trades in the symbol on screen, newest first, in the place of My orders (`f`)."""

from __future__ import annotations

from typing import NamedTuple

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.widgets import DataTable

from tickflow.net.client import AccountFill
from tickflow.tui import format as fmt
from tickflow.tui.fields import DIGIT_KEYS, key_to_price, paste_to_price
from tickflow.tui.palette import Palette


class Fit(NamedTuple):
    """How the rows are drawn in the width there is."""

    gap: str
    """Between columns."""
    words: bool
    """The side as `▲ buy`, else the arrow alone."""
    qty_w: int
    """Quantities wider than this in K/M/B (0: always in full)."""


FITS = (Fit("  ", True, 0), Fit(" ", True, 0), Fit(" ", False, 0), Fit(" ", False, 5))
"""Roomiest first; the first that the fills on screen fit in is used (the last whatever: at 80x24 it holds
a 6-digit order id, a 5-digit price and any quantity)."""


class MyFills(DataTable):
    """A row per fill: time, side, `qty @ price`, the order it filled and whether that order was resting
    (maker) or took liquidity (taker). No cell padding (two spaces between columns, too many at 80x24):
    the cells carry their own gaps."""

    COLUMNS = ("Time", "Side", "Qty @ Price", "Order", "Role")
    BINDINGS = [
        # Priority, as the app's `f` (which acts first): so that the footer says where `f` goes from here.
        Binding("f", "app.toggle_fills", "My orders", id="back-to-orders", tooltip="Back to my open orders",
                priority=True),
        *DIGIT_KEYS,
    ]

    def __init__(self, *, id: str | None = None, utc: bool = False) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False, cell_padding=0)
        self.utc = utc
        self.fills: list[AccountFill] = []
        self.symbol = ""
        self.loaded = False
        self._width = 0

    def on_key(self, event: events.Key) -> None:
        key_to_price(self, event)

    def on_paste(self, event: events.Paste) -> None:
        paste_to_price(self, event)

    def on_mount(self) -> None:
        self.border_subtitle = "f: my orders"
        self.show(self.symbol, self.fills, loaded=self.loaded)

    def on_resize(self) -> None:
        if self.content_size.width != self._width:
            self._width = self.content_size.width
            self.show(self.symbol, self.fills, loaded=self.loaded)

    @property
    def selected(self) -> AccountFill | None:
        if not self.fills or not 0 <= self.cursor_row < len(self.fills):
            return None
        return self.fills[self.cursor_row]

    def show(self, symbol: str, fills: list[AccountFill], *, loaded: bool = True) -> None:
        """`fills` newest first. The cursor stays on its fill, or on the newest while it is there (so
        new fills come into view at the top)."""
        palette: Palette = getattr(self.app, "palette", Palette())
        keep = self.selected.trade_id if self.selected and self.cursor_row > 0 else None
        self.fills, self.symbol, self.loaded = fills, symbol, loaded
        self.border_title = f"My fills · {symbol}" + (f" · {len(fills)}" if fills else "")
        self.clear(columns=True)  # columns shrink back when wide rows go
        if not fills:
            self.add_columns(*_spaced(" ", [Text(c, style="bold") for c in self.COLUMNS]))
            said = f"none in {symbol} yet" if loaded else "loading…"
            self.add_row(Text(f" {said}", style="italic dim"), "", "", "", "", key="-")
            return
        self._width = self.content_size.width  # 0 while hidden: drawn again when shown (on_resize)
        room = self._width - 1  # less the scrollbar
        for way in FITS:
            cells = self._rows(fills, way, palette)
            if _width(cells) <= room:
                break
        self.add_columns(*_spaced(way.gap, [Text(c, style="bold") for c in self.COLUMNS]))
        for f, row in zip(fills, cells[1:]):
            self.add_row(*row, key=str(f.trade_id))
        at = next((i for i, f in enumerate(fills) if f.trade_id == keep), 0)
        self.move_cursor(row=at, animate=False)

    def _rows(self, fills: list[AccountFill], way: Fit, palette: Palette) -> list[list[Text]]:
        """The header's cells and then each fill's, drawn `way`."""
        qtys = [fmt.qty_fit(f.qty, way.qty_w) if way.qty_w else fmt.qty(f.qty) for f in fills]
        qty_w = max(map(len, qtys))
        out = [_spaced(way.gap, [Text(c) for c in self.COLUMNS])]
        for f, qty in zip(fills, qtys):
            colour = palette.side(f.side)
            deal = Text(f"{qty:>{qty_w}} @ ")
            deal.append(fmt.price(f.price), style=f"bold {colour}")
            out.append(_spaced(way.gap, [
                Text(fmt.clock(f.ts, self.utc), style="dim"),
                Text(f"{palette.arrow(f.side)} {f.side}" if way.words else palette.arrow(f.side), style=colour),
                deal,
                Text(f"#{f.order_id}"),
                Text(f.liquidity, style="bold" if f.liquidity == "taker" else ""),
            ]))
        return out


def _spaced(gap: str, cells: list[Text]) -> list[Text]:
    """One space before the first column, as the table's cell padding gives My orders, and `gap` before
    each of the others."""
    return [Text(" " if i == 0 else gap).append_text(c) for i, c in enumerate(cells)]


def _width(rows: list[list[Text]]) -> int:
    """The width of a table of these rows, each column as wide as its widest cell."""
    return sum(max(row[i].cell_len for row in rows) for i in range(len(rows[0])))
