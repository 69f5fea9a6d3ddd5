"""The order ticket: side, type, price, quantity, time in force, post-only; enter (from any field) or the
button sends.

Input is checked as it is typed and again on submit: a ticket that would be refused says why before
anything is sent. The answer (accepted, filled, rejected with its reason, or the server's error) is
shown at once under the button, naming the order it is about; it stays until the ticket is edited or
the symbol changes, and then the line says what the new order still needs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container, Horizontal, Vertical
from textual.message import Message
from textual.widgets import Button, Input, Label, Select, Static

from tickflow.net.wire.limits import MAX_PRICE, MAX_QTY
from tickflow.net.client import Order
from tickflow.tui import format as fmt
from tickflow.tui.fields import TickBox, TicketInput, TicketSelect
from tickflow.tui.palette import BUY_ARROW, SELL_ARROW, Palette


@dataclass(frozen=True)
class OrderRequest:
    symbol: str
    side: str
    type: str
    price: int | None
    qty: int
    tif: str
    post_only: bool

    @property
    def summary(self) -> str:
        """`buy 25 ACME @ 10002`, as the answer will name it."""
        return f"{self.side} {self.qty} {self.symbol} " + (f"@ {self.price}" if self.price is not None else "at market")


_DIGITS = re.compile(r"[0-9]+")


def whole_number(text: str, what: str, highest: int, lowest: int = 1) -> int | str:
    """`text` (stripped) as a number from `lowest` to `highest`, or why it is not one. Only digits count:
    `2.5`, `1e3` or `1,000` is refused rather than read as some other number."""
    if not _DIGITS.fullmatch(text):
        shown = text if len(text) <= 12 else text[:11] + "…"
        return f"{what} must be a whole number, digits only: not “{shown}”"
    value = int(text)
    if not lowest <= value <= highest:
        return f"{what} must be a whole number from {lowest} to {highest:,}"
    return value


def check(symbol: str, side: str, type_: str, price_text: str, qty_text: str, tif: str,
          post_only: bool) -> OrderRequest | str:
    """The order the ticket describes, or a sentence saying what is wrong with it."""
    qty_text, price_text = qty_text.strip(), price_text.strip()
    if not qty_text:
        return "enter a quantity"
    qty = whole_number(qty_text, "quantity", MAX_QTY)
    if isinstance(qty, str):
        return qty
    price: int | None = None
    if type_ == "limit":
        if not price_text:
            return "a limit order needs a price (in ticks)"
        checked = whole_number(price_text, "price (in ticks)", MAX_PRICE)
        if isinstance(checked, str):
            return checked
        price = checked
    if post_only and (type_ != "limit" or tif != "gtc"):
        return "post-only needs a GTC limit order"
    return OrderRequest(symbol, side, type_, price, qty, tif, post_only)


def describe(order: Order) -> Text:
    """One line about an order result: what happened to it, and why when it did not rest or fill."""
    ok = order.status in ("new", "partially_filled", "filled")
    mark, style = ("✔", "bold green") if ok else ("✘", "bold red")
    where = f" @ {order.price}" if order.type == "limit" else " at market"
    text = Text(f"{mark} #{order.order_id} {order.side} {order.qty} {order.symbol}{where}: "
                f"{order.status.replace('_', ' ')}", style=style)
    if order.filled_qty:
        avg = sum(f.price * f.qty for f in order.fills) / max(1, sum(f.qty for f in order.fills))
        text.append(f" · filled {order.filled_qty}/{order.qty}", style="")
        if order.fills:
            text.append(f" avg {fmt.price(round(avg, 1))}", style="")
    if order.reason:
        text.append(f" ({order.reason.replace('_', ' ')})", style="")
    return text


LIMIT_TIFS = [("GTC", "gtc"), ("IOC", "ioc"), ("FOK", "fok")]
MARKET_TIFS = LIMIT_TIFS[1:]
"""A market order never rests: the server makes it IOC unless FOK is asked for."""


class OrderTicket(Vertical):
    """Posts `OrderTicket.Submit` with a checked `OrderRequest`; the app sends it and calls `show_result`."""

    BINDINGS = [
        Binding("enter", "submit", "Send order", tooltip="Send the ticket's order"),
        Binding("escape", "app.leave_field", "Leave ticket", priority=True),  # shown in the ticket
    ]

    class Submit(Message):
        def __init__(self, request: OrderRequest) -> None:
            super().__init__()
            self.request = request

    def __init__(self, symbol: str, *, id: str | None = None, blink: bool = True) -> None:
        super().__init__(id=id)
        self.symbol = symbol
        self._blink = blink
        self._result: Text | None = None
        """The answer to the last send, shown until the ticket is edited; None shows what the form needs."""
        self._limit_tif = "gtc"
        """The TIF chosen for limit orders, given back when the type goes from market to limit again."""

    def compose(self) -> ComposeResult:
        with Container(id="ticket-fields"):  # a grid (app.tcss): two columns, or one in the wide layout
            with Horizontal(classes="field"):
                yield Label("Side", classes="label")
                yield TicketSelect([(f"{BUY_ARROW} buy", "buy"), (f"{SELL_ARROW} sell", "sell")], value="buy",
                                   allow_blank=False, compact=True, id="side")
            with Horizontal(classes="field"):
                yield Label("Type", classes="label")
                yield TicketSelect([("limit", "limit"), ("market", "market")], value="limit",
                                   allow_blank=False, compact=True, id="type")
            with Horizontal(classes="field"):
                yield Label("Price", classes="label")
                yield TicketInput(placeholder="ticks", compact=True, id="price")
            with Horizontal(classes="field"):
                yield Label("Qty", classes="label")
                yield TicketInput(placeholder="quantity", compact=True, id="qty")
            with Horizontal(classes="field"):
                yield Label("TIF", classes="label")
                yield TicketSelect(LIMIT_TIFS, value="gtc",
                                   allow_blank=False, compact=True, id="tif",
                                   tooltip="GTC good till cancel · IOC immediate or cancel · FOK fill or kill")
            with Horizontal(classes="field"):
                yield TickBox("post-only", compact=True, id="post-only",
                              tooltip="Rest on the book or be rejected: never take liquidity")
        yield Button("", id="submit", compact=True)
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
            self._result = None
        self.symbol = symbol
        self.border_title = f"Order ticket · {symbol}"
        self._refresh_form()

    def request(self) -> OrderRequest | str:
        return check(self.symbol, self.side, str(self.query_one("#type", Select).value),
                     self.query_one("#price", Input).value, self.query_one("#qty", Input).value,
                     str(self.query_one("#tif", Select).value), self.query_one("#post-only", TickBox).value)

    def _refresh_form(self) -> None:
        palette: Palette = getattr(self.app, "palette", Palette())
        order_type = self.query_one("#type", Select).value
        price = self.query_one("#price", Input)
        if price.disabled != (order_type == "market"):
            price.disabled = order_type == "market"
            self._offer_tifs(market=price.disabled)
        button = self.query_one("#submit", Button)
        side = self.side
        arrow = BUY_ARROW if side == "buy" else SELL_ARROW
        qty = self.query_one("#qty", Input).value.strip() or "?"
        where = f"@ {price.value.strip() or '?'}" if order_type == "limit" else "at market"
        tif = str(self.query_one("#tif", Select).value)
        extra = (f" {tif.upper()}" if tif != "gtc" else "") + (" post-only" if self.query_one(TickBox).value else "")
        button.label = f"{arrow} {side.capitalize()} {qty} {self.symbol} {where}{extra}"
        button.styles.background = palette.side(side)
        button.styles.color = "black"
        if self._result is not None:
            self.query_one("#result", Static).update(self._result)
            return
        req = self.request()
        self.query_one("#result", Static).update(Text(f"  {req}", style="dim italic") if isinstance(req, str) else "")

    def _offer_tifs(self, *, market: bool) -> None:
        tif = self.query_one("#tif", Select)
        held = str(tif.value)
        with tif.prevent(Select.Changed):
            if market:
                self._limit_tif = held
                tif.set_options(MARKET_TIFS)
                tif.value = held if held != "gtc" else "ioc"
            else:
                tif.set_options(LIMIT_TIFS)
                tif.value = self._limit_tif if held == "ioc" else held

    @on(Select.Changed)
    @on(Input.Changed)
    @on(TickBox.Changed)
    def _changed(self) -> None:
        self._result = None  # a new order is being made: the last answer is no longer about it
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
        self._show(Text(f"… sending {req.summary}", style="italic"))
        self.post_message(self.Submit(req))

    def show_error(self, message: str) -> None:
        self._show(Text(f"✘ {message}", style="bold red"))

    def show_result(self, order: Order | None, error: str | None = None) -> None:
        self._show(describe(order) if order is not None else Text(f"✘ {error or 'failed'}", style="bold red"))

    def _show(self, result: Text) -> None:
        self._result = result
        self.query_one("#result", Static).update(result)
