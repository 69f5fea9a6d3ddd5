"""Ticket fields that leave enter to the ticket, so enter sends the order from any field."""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.widgets import Checkbox, Input, Select


class TicketInput(Input):
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
