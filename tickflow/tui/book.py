"""The order book: asks above in red, bids below in green, spread and mid between.

Every row has a fixed place: the best ask sits just above the spread line and the best bid just below,
each side always draws the same number of rows (blank when the book is thinner), and the columns have
fixed widths, so a busy book changes its numbers without moving. Depth bars are drawn to one scale, the
largest cumulative total on screen. Up/down move a cursor over the levels; enter or a click puts the
level's price into the order ticket.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.reactive import reactive
from textual.widget import Widget

from tickflow.net.wire.limits import MAX_PRICE
from tickflow.net.client import Level, LocalBook
from tickflow.tui import format as fmt
from tickflow.tui.fields import DIGIT_KEYS, key_to_price, paste_to_price
from tickflow.tui.messages import PriceSelected
from tickflow.tui.palette import BUY_ARROW, SELL_ARROW, Palette

_EIGHTHS = " ▏▎▍▌▋▊▉"
PRICE_W = len(str(MAX_PRICE))
"""Every price the server accepts fits, so a level far from the rest never pushes its row out of line."""


def columns(width: int) -> tuple[int, int]:
    """Widths of the size and total columns for a book `width` cells wide; a quantity wider than its
    column is shown in K/M/B (`fmt.qty_fit`), so every row keeps the same columns."""
    if width >= 56:
        return 14, 15  # MAX_QTY in full, with a space before it
    if width >= 38:
        return 10, 11
    return 7, 8


def depth_bar(fraction: float, width: int) -> str:
    """A bar `fraction` (0..1) of `width` cells long, in eighths of a cell."""
    eighths = round(max(0.0, min(1.0, fraction)) * width * 8)
    full, part = divmod(eighths, 8)
    return ("█" * full + (_EIGHTHS[part] if part else "")).ljust(width)


def cumulative(levels: list[Level]) -> list[int]:
    total, out = 0, []
    for lv in levels:
        total += lv.qty
        out.append(total)
    return out


class BookView(Widget, can_focus=True):
    """Draws a `LocalBook`. The app hands it the book with `show()`; it never fetches anything."""

    BINDINGS = [
        Binding("up,k", "move(-1)", "Level up", show=False),
        Binding("down,j", "move(1)", "Level down", show=False),
        Binding("enter,space", "select", "Use price", tooltip="Put the level's price in the ticket"),
        *DIGIT_KEYS,
    ]

    cursor: reactive[int] = reactive(-1)
    """Offset from the spread line: -1 is the best ask, 1 the best bid."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.book: LocalBook | None = None
        self.symbol = ""
        self.stale = False
        self.status = ""
        self._cols = columns(0)

    def show(self, symbol: str, book: LocalBook | None, *, stale: bool, status: str = "") -> None:
        self.symbol, self.book, self.stale, self.status = symbol, book, stale, status
        self.border_title = f"Order book · {symbol}"
        self.set_class(stale, "-stale")
        self.cursor = self._nearest_level(self.cursor)  # a level that went keeps the cursor on one that is
        self.refresh()

    # ---- geometry

    @property
    def depth(self) -> int:
        """Rows per side: what fits under the header line, around the spread line."""
        return max(1, (self.content_size.height - 2) // 2)

    def _level_at(self, offset: int) -> tuple[Level, str] | None:
        if self.book is None or offset == 0:
            return None
        levels = self.book.asks(-offset) if offset < 0 else self.book.bids(offset)
        index = abs(offset) - 1
        if index >= len(levels):
            return None
        return levels[index], "sell" if offset < 0 else "buy"

    # ---- drawing

    def render(self) -> Text:
        palette: Palette = getattr(self.app, "palette", Palette())
        self._cols = columns(self.content_size.width)
        size_w, total_w = self._cols
        fixed_w = 2 + PRICE_W + size_w + total_w + 1
        width = max(self.content_size.width, fixed_w + 1)
        bar_w = width - fixed_w
        depth = self.depth
        book = self.book
        asks = book.asks(depth) if book else []
        bids = book.bids(depth) if book else []
        ask_tot, bid_tot = cumulative(asks), cumulative(bids)
        scale = max(ask_tot[-1:] + bid_tot[-1:] + [1])
        dim = "dim" if self.stale else ""

        out = Text(no_wrap=True, overflow="crop")
        depth_label = " Depth" if bar_w >= 5 else ""
        out.append(f"  {'Price':>{PRICE_W}}{'Size':>{size_w}}{'Total':>{total_w}}{depth_label}".ljust(width),
                   style="bold")
        out.append("\n")
        for row in range(depth):  # worst shown ask at the top, best ask just above the spread
            index = depth - 1 - row
            offset = -(index + 1)
            if index < len(asks):
                self._line(out, asks[index], ask_tot[index], scale, bar_w, SELL_ARROW, palette.sell,
                           palette.sell_bar, offset, dim)
            else:
                self._blank(out, width, offset)
        out.append(self._spread_line(width, palette))
        out.append("\n")
        for index in range(depth):
            if index < len(bids):
                self._line(out, bids[index], bid_tot[index], scale, bar_w, BUY_ARROW, palette.buy,
                           palette.buy_bar, index + 1, dim)
            else:
                self._blank(out, width, index + 1)
        out.rstrip()
        return out

    def _cursor_style(self, offset: int) -> str:
        return "reverse" if self.has_focus and offset == self.cursor else ""

    def _line(self, out: Text, lv: Level, total: int, scale: int, bar_w: int, arrow: str, colour: str,
              bar_colour: str, offset: int, dim: str) -> None:
        cursor = self._cursor_style(offset)
        size_w, total_w = self._cols
        out.append(f"{arrow} ", style=f"{colour} {dim} {cursor}")
        out.append(f"{lv.price:>{PRICE_W}}", style=f"bold {colour} {dim} {cursor}")
        out.append(f"{fmt.qty_fit(lv.qty, size_w - 1):>{size_w}}", style=f"{dim} {cursor}")
        out.append(f"{fmt.qty_fit(total, total_w - 1):>{total_w}} ", style=f"{dim} {cursor}")
        out.append(depth_bar(total / scale, bar_w), style=f"{bar_colour} {dim}")
        out.append("\n")

    def _blank(self, out: Text, width: int, offset: int) -> None:
        out.append("\n")

    def _spread_line(self, width: int, palette: Palette) -> Text:
        book = self.book
        if book is None:
            label, style = f" waiting for {self.symbol} snapshot… ", "italic"
        elif self.stale:
            label, style = f" {self.status or 'stale'} ", "bold yellow"
        elif book.spread is not None:
            label, style = f" spread {book.spread} · mid {fmt.price(book.mid)} ", "bold"
        elif book.best_bid or book.best_ask:
            label, style = " one-sided book ", "italic"
        else:
            label, style = " empty book ", "italic"
        return Text(label.center(width, "─"), style=style, no_wrap=True, overflow="crop")

    # ---- interaction

    def _shown(self) -> tuple[int, int]:
        """How many ask and bid levels are drawn."""
        if self.book is None:
            return 0, 0
        depth = self.depth
        return len(self.book.asks(depth)), len(self.book.bids(depth))

    def _nearest_level(self, offset: int) -> int:
        """`offset` if a level is drawn there, else the nearest drawn level on its side, else the best
        level of the other side (-1 when there is none at all)."""
        asks, bids = self._shown()
        if offset < 0 and asks:
            return max(offset, -asks)
        if offset > 0 and bids:
            return min(offset, bids)
        return -1 if asks or not bids else 1

    def action_move(self, step: int) -> None:
        asks, bids = self._shown()
        offset = self.cursor + step
        if offset == 0:
            offset += step
        if -asks <= offset <= bids:  # never onto a blank row: at the last level the cursor stays
            self.cursor = offset

    def action_select(self) -> None:
        if self.screen.focused is self:  # an enter typed fast behind `t` and queued here is not for the book
            self._use_level()

    def _use_level(self) -> None:
        found = self._level_at(self.cursor)
        if found is not None:
            level, side = found
            self.post_message(PriceSelected(level.price, side))

    def watch_cursor(self) -> None:
        self.refresh()

    def on_key(self, event: events.Key) -> None:
        key_to_price(self, event)

    def on_paste(self, event: events.Paste) -> None:
        paste_to_price(self, event)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()

    def on_resize(self) -> None:
        self.cursor = self._nearest_level(self.cursor)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        depth = self.depth
        row = offset.y - 1  # the header line
        if row < 0 or row == depth or row > 2 * depth or self._level_at(row - depth) is None:
            return
        self.cursor = row - depth
        self._use_level()
