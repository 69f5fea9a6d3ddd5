"""Amend an open order: a new total quantity and/or a new price, checked before it is sent."""

from __future__ import annotations

from rich.text import Text
from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from tickflow.net.client import Order
from tickflow.tui.fields import NumberInput, type_into
from tickflow.tui.ticket import MAX_PRICE, MAX_QTY, whole_number


def check_amend(order: Order, qty_text: str, price_text: str) -> dict[str, int] | str:
    """The amend to send (only the fields that change), or what is wrong."""
    change: dict[str, int] = {}
    qty_text, price_text = qty_text.strip(), price_text.strip()
    if qty_text:
        qty = whole_number(qty_text, "quantity", MAX_QTY)
        if isinstance(qty, str):
            return qty
        if qty <= order.filled_qty:
            return f"quantity must be above the {order.filled_qty} already filled"
        if qty != order.qty:
            change["qty"] = qty
    if price_text and order.type == "limit":
        price = whole_number(price_text, "price (in ticks)", MAX_PRICE)
        if isinstance(price, str):
            return price
        if price != order.price:
            change["price"] = price
    if not change:
        return "nothing changed"
    return change


class AmendScreen(ModalScreen[dict[str, int] | None]):
    """Dismisses with `{"qty": ..., "price": ...}` (the fields that change) or None."""

    BINDINGS = [Binding("escape", "dismiss_none", "Close")]

    def __init__(self, order: Order) -> None:
        super().__init__()
        self.order = order

    def compose(self) -> ComposeResult:
        o = self.order
        with Vertical(id="amend-box"):
            yield Static(Text(f"Amend #{o.order_id} · {o.side} {o.symbol} · filled {o.filled_qty}/{o.qty}",
                              style="bold"))
            with Horizontal(classes="row"):
                yield Label("Qty", classes="label")
                yield NumberInput(str(o.qty), compact=True, id="amend-qty")
            with Horizontal(classes="row"):
                yield Label("Price", classes="label")
                yield NumberInput(str(o.price or ""), compact=True, id="amend-price",
                            disabled=o.type != "limit")
            yield Static(Text("A lower quantity at the same price keeps the queue place; a new price or a "
                              "larger quantity goes to the back of the level.", style="dim"))
            yield Static("", id="amend-error")
            with Horizontal(classes="buttons"):
                yield Button("Amend", id="amend-ok", variant="primary", compact=True)
                yield Button("Close", id="amend-cancel", compact=True)

    def on_key(self, event: events.Key) -> None:
        """A character that reaches the dialog itself while a field has the focus was typed fast behind
        the `a` that opened it, before the field had the focus (a field keeps the characters it is
        given): it goes into that field, in the field's turn, so after the focus selected its text.
        (An enter typed so comes here too, and from here to the field's binding: it sends.)"""
        field = self.focused
        if isinstance(field, Input) and event.character is not None and event.is_printable:
            event.stop()
            field.call_later(type_into, field, event.character)

    @on(Input.Submitted)
    @on(Button.Pressed, "#amend-ok")
    def _ok(self) -> None:
        result = check_amend(self.order, self.query_one("#amend-qty", Input).value,
                             self.query_one("#amend-price", Input).value)
        if isinstance(result, str):
            self.query_one("#amend-error", Static).update(Text(f"✘ {result}", style="bold red"))
            return
        self.dismiss(result)

    @on(Button.Pressed, "#amend-cancel")
    def action_dismiss_none(self) -> None:
        self.dismiss(None)
