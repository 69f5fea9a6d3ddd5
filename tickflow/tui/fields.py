"""Ticket fields: number fields that keep what is typed, and fields that leave enter to the ticket, so
enter sends the order from any field."""

from __future__ import annotations

import unicodedata

from textual import events
from textual.binding import Binding
from textual.content import Content
from textual.widget import Widget
from textual.widgets import Checkbox, Input, Select


def ascii_digits(text: str) -> str:
    """`text` with every decimal digit of any script (full-width `５`, Arabic-Indic `٥`, ...) as 0-9."""
    return "".join(str(unicodedata.decimal(c)) if not c.isascii() and unicodedata.decimal(c, None) is not None
                   else c for c in text)


def pass_to_ticket(widget: Widget, event: events.Key) -> None:
    """A key typed on the book or my orders that belongs in the ticket goes there: a digit starts the
    ticket's price, and a key typed fast behind one that took the focus into a field (`t100`, tab,
    `2.5`, enter, pasted or typed while the screen is busy: queued here before the focus moved) does
    there what it would have done: types, moves to the next field, sends.

    Handled at once, in this widget's turn, not as a message (nor left to bubble up to the bindings):
    by the time the app read it, a later key could have moved the focus on, into the wrong field."""
    screen = widget.screen
    field = screen.focused
    if field is not widget and isinstance(field, Input) and not field.disabled:  # typed behind
        if event.key in ("tab", "shift+tab"):
            screen.focus_next() if event.key == "tab" else screen.focus_previous()
        elif event.key == "enter":
            field.call_later(field.action_submit)
        elif event.character is not None and event.is_printable:
            field.call_later(_type_into, field, event.character)
        else:
            return
        event.stop()
        event.prevent_default()
        return
    if event.character is None or not event.character.isdigit():
        return
    event.stop()
    price = screen.query_one("#price", Input)
    if price.disabled:  # a market order has no price
        return
    price.value = ""  # as focusing it would select it all: the digit starts a new price
    screen.set_focus(price)
    # In the price's own queue, so it comes before any key typed after it.
    price.call_later(_type_into, price, event.character)


def _type_into(field: Input, text: str) -> None:
    """As if typed: replaces what is selected (all of it, just after focusing), else goes in at the cursor."""
    start, end = sorted(field.selection)
    field.replace(text, start, end)


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
