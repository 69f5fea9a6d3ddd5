"""The order ticket: side, type, price, quantity, time in force, post-only; submit with enter or the button.

Input is checked as it is typed and again on submit: a ticket that would be refused says why before
anything is sent. The answer (accepted, filled, rejected with its reason, or the server's error) is
shown at once under the button.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from tickflow.net.client import Order
from tickflow.tui import format as fmt
from tickflow.tui.palette import BUY_ARROW, SELL_ARROW, Palette

MAX_PRICE = 1_000_000_000
MAX_QTY = 1_000_000_000


@dataclass(frozen=True)
class OrderRequest:
    symbol: str
    side: str
    type: str
    price: int | None
    qty: int
    tif: str
    post_only: bool


def check(symbol: str, side: str, type_: str, price_text: str, qty_text: str, tif: str,
          post_only: bool) -> OrderRequest | str:
    """The order the ticket describes, or a sentence saying what is wrong with it."""
    qty_text, price_text = qty_text.strip(), price_text.strip()
    if not qty_text:
        return "enter a quantity"
    if not qty_text.isdigit() or not 1 <= int(qty_text) <= MAX_QTY:
        return f"quantity must be a whole number from 1 to {MAX_QTY:,}"
    price: int | None = None
    if type_ == "limit":
        if not price_text:
            return "a limit order needs a price (in ticks)"
        if not price_text.isdigit() or not 1 <= int(price_text) <= MAX_PRICE:
            return f"price must be a whole number of ticks from 1 to {MAX_PRICE:,}"
        price = int(price_text)
    if post_only and (type_ != "limit" or tif != "gtc"):
        return "post-only needs a GTC limit order"
    return OrderRequest(symbol, side, type_, price, int(qty_text), tif, post_only)


def describe(order: Order) -> Text:
    """One line about an order result: what happened to it, and why when it did not rest or fill."""
    ok = order.status in ("new", "partially_filled", "filled")
    mark, style = ("✔", "bold green") if ok else ("✘", "bold red")
    where = f" @ {order.price}" if order.type == "limit" else " at market"
    text = Text(f"{mark} #{order.order_id} {order.side} {order.qty}{where}: {order.status}", style=style)
    if order.filled_qty:
        avg = sum(f.price * f.qty for f in order.fills) / max(1, sum(f.qty for f in order.fills))
        text.append(f" · filled {order.filled_qty}/{order.qty}", style="")
        if order.fills:
            text.append(f" avg {fmt.price(round(avg, 1))}", style="")
    if order.reason:
        text.append(f" ({order.reason.replace('_', ' ')})", style="")
    return text


class OrderTicket(Vertical):
    """Posts `OrderTicket.Submit` with a checked `OrderRequest`; the app sends it and calls `show_result`."""

    BINDINGS = [
        Binding("enter", "submit", "Send order", tooltip="Send the ticket's order"),
        Binding("escape", "app.goto('book')", "Leave ticket"),
    ]

    class Submit(Message):
        def __init__(self, request: OrderRequest) -> None:
            super().__init__()
            self.request = request

    def __init__(self, symbol: str, *, id: str | None = None, blink: bool = True) -> None:
        super().__init__(id=id)
        self.symbol = symbol
        self._blink = blink

    def compose(self) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Label("Side", classes="label")
            yield Select([(f"{BUY_ARROW} buy", "buy"), (f"{SELL_ARROW} sell", "sell")], value="buy",
                         allow_blank=False, compact=True, id="side")
        with Horizontal(classes="row"):
            yield Label("Type", classes="label")
            yield Select([("limit", "limit"), ("market", "market")], value="limit", allow_blank=False,
                         compact=True, id="type")
        with Horizontal(classes="row"):
            yield Label("Price", classes="label")
            yield Input(placeholder="ticks", type="integer", compact=True, id="price")
        with Horizontal(classes="row"):
            yield Label("Qty", classes="label")
            yield Input(placeholder="quantity", type="integer", compact=True, id="qty")
        with Horizontal(classes="row"):
            yield Label("TIF", classes="label")
            yield Select([("GTC good till cancel", "gtc"), ("IOC immediate or cancel", "ioc"),
                          ("FOK fill or kill", "fok")], value="gtc", allow_blank=False, compact=True,
                         id="tif")
        yield Checkbox("Post-only (never take)", compact=True, id="post-only")
        yield Button("", id="submit", compact=True)
        yield Static("", id="hint")
        yield Static("", id="result")

    def on_mount(self) -> None:
        self.border_title = f"Order ticket · {self.symbol}"
        if not self._blink:
            for box in self.query(Input):
                box.cursor_blink = False
        self._refresh_form()

    # ---- state

    @property
    def side(self) -> str:
        return str(self.query_one("#side", Select).value)

    def set_side(self, side: str) -> None:
        self.query_one("#side", Select).value = side

    def set_price(self, price: int) -> None:
        self.query_one("#type", Select).value = "limit"
        self.query_one("#price", Input).value = str(price)

    def set_symbol(self, symbol: str) -> None:
        if symbol != self.symbol:
            # A price belongs to one book: carried to another it could cross it by accident.
            self.query_one("#price", Input).value = ""
            self.query_one("#result", Static).update("")
        self.symbol = symbol
        self.border_title = f"Order ticket · {symbol}"
        self._refresh_form()

    def request(self) -> OrderRequest | str:
        return check(self.symbol, self.side, str(self.query_one("#type", Select).value),
                     self.query_one("#price", Input).value, self.query_one("#qty", Input).value,
                     str(self.query_one("#tif", Select).value), self.query_one("#post-only", Checkbox).value)

    def _refresh_form(self) -> None:
        palette: Palette = getattr(self.app, "palette", Palette())
        order_type = self.query_one("#type", Select).value
        price = self.query_one("#price", Input)
        price.disabled = order_type == "market"
        button = self.query_one("#submit", Button)
        side = self.side
        arrow = BUY_ARROW if side == "buy" else SELL_ARROW
        qty = self.query_one("#qty", Input).value.strip() or "?"
        where = f"@ {price.value.strip() or '?'}" if order_type == "limit" else "at market"
        button.label = f"{arrow} {side.capitalize()} {qty} {self.symbol} {where}"
        button.styles.background = palette.side(side)
        button.styles.color = "black"
        req = self.request()
        hint = self.query_one("#hint", Static)
        hint.update(Text(f"  {req}", style="dim italic") if isinstance(req, str) else "")

    @on(Select.Changed)
    @on(Input.Changed)
    @on(Checkbox.Changed)
    def _changed(self) -> None:
        self._refresh_form()

    # ---- submitting

    def action_submit(self) -> None:
        self.submit()

    @on(Input.Submitted)
    @on(Button.Pressed, "#submit")
    def submit(self) -> None:
        req = self.request()
        if isinstance(req, str):
            self.show_error(f"not sent: {req}")
            return
        self.query_one("#result", Static).update(Text("… sending", style="italic"))
        self.post_message(self.Submit(req))

    def show_error(self, message: str) -> None:
        self.query_one("#hint", Static).update("")  # the error says it; no need to say it twice
        self.query_one("#result", Static).update(Text(f"✘ {message}", style="bold red"))

    def show_result(self, order: Order | None, error: str | None = None) -> None:
        if order is not None:
            self.query_one("#result", Static).update(describe(order))
        else:
            self.show_error(error or "failed")
