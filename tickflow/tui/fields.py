"""Ticket fields: number fields that keep what is typed, and fields that leave enter to the ticket, so
enter sends the order from any field; and the way a digit typed, or text pasted, on the book or my orders
reaches the ticket's price."""

from __future__ import annotations

import unicodedata

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Select


def ascii_digits(text: str) -> str:
    """`text` with every decimal digit of any script (full-width `５`, Arabic-Indic `٥`, ...) as 0-9."""
    return "".join(str(unicodedata.decimal(c)) if not c.isascii() and unicodedata.decimal(c, None) is not None
                   else c for c in text)


def start_price(screen: Screen[object], text: str) -> bool:
    """A digit typed, or text pasted, on the book or my orders starts the ticket's price: the field is
    emptied and focused at once, and `text` typed into it in its own turn, so a key handed to it after
    this comes after `text`. False (nothing done) when the order is a market order, which has no price."""
    price = screen.query_one("#price", Input)
    if price.disabled:
        return False
    price.value = ""  # as focusing it would select it all: the text starts a new price
    screen.set_focus(price)
    price.call_later(type_into, price, text)
    return True


def type_into(field: Input, text: str) -> None:
    """As if typed: replaces what is selected (all of it, just after focusing), else goes in at the cursor."""
    start, end = sorted(field.selection)
    field.replace(text, start, end)


DIGIT_KEYS = [Binding(d, f"app.start_price('{d}')", show=False, priority=True) for d in "0123456789"]
"""On the book and my orders a digit starts the ticket's price. A priority binding, like every key that
moves the focus: the app acts on it as it takes the key, before it hands on the next one, so `9990`
typed fast lands whole in the price."""


def key_to_price(widget: Widget, event: events.Key) -> None:
    """On the book or my orders: a digit of another script (full-width `５`, ...) starts the price too
    (0-9 are DIGIT_KEYS)."""
    if event.character is not None and event.character.isdigit():
        event.stop()
        start_price(widget.screen, event.character)


def paste_to_price(widget: Widget, event: events.Paste) -> None:
    """On the book or my orders, where keys are commands, pasted text goes to the ticket's price as a
    typed digit does: a paste is text, never commands (a `C` or `q` in it neither cancels nor quits).
    Its first line, as a field takes it."""
    event.stop()
    lines = event.text.splitlines()
    if lines and lines[0] and not start_price(widget.screen, lines[0]):
        widget.notify("a market order has no price: paste the quantity into its field", severity="warning",
                      timeout=4)


class NumberInput(Input):
    """A field for a whole number that keeps every character typed, so a `2.5` or `1e3` stays on screen
    to be refused with a reason (Textual's integer field drops each keystroke that would make the value
    invalid: `2.5` became 25). Digits of other scripts are shown and kept as 0-9, as they will be sent."""

    def replace(self, text: str, start: int, end: int) -> None:
        super().replace(ascii_digits(text), start, end)


class TicketInput(NumberInput):
    """A number field whose enter shows in the footer as what it does: send the ticket's order."""

    BINDINGS = [Binding("enter", "submit", "Send order", tooltip="Send the ticket's order")]


class TicketSelect(Select[str], inherit_bindings=False):
    """A select that opens with space or the arrows; enter goes on to the ticket (send)."""

    BINDINGS = [Binding("down,space,up", "show_overlay", "Show menu", show=False)]


class TickBox(Checkbox, inherit_bindings=False):
    """A checkbox whose state reads without colour: `[✓]` when on, `[ ]` when off.
    Space toggles it; enter goes on to the ticket (send)."""

    BINDINGS = [Binding("space", "toggle_button", "Toggle", show=False)]
    DEFAULT_CSS = """
    TickBox > .toggle--button {
        color: $text-muted;
        background: transparent;
    }
    TickBox.-on > .toggle--button {
        color: $text-success;
        text-style: bold;
    }
    """

    @property
    def _button(self) -> Content:
        return Content.styled("[✓]" if self.value else "[ ]", self.get_visual_style("toggle--button"))
