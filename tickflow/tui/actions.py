"""Order calls made from the screen: send, cancel, cancel all in a symbol, amend. Each runs in a worker
and answers with a message, so the screen never waits on the network."""

from __future__ import annotations

from textual import work
from textual.app import App

from tickflow.net.client import ApiError, NotConnected, Order, TickflowError
from tickflow.tui import model as m
from tickflow.tui.amend import AmendScreen
from tickflow.tui.backend import Backend
from tickflow.tui.messages import AllCancelled, OrderAnswered
from tickflow.tui.orders import MyOrders
from tickflow.tui.ticket import OrderRequest, OrderTicket


def explain(error: Exception, what: str = "order") -> str:
    """A short sentence for the user about a failed call (`what` was sent: an order, a cancel, ...)."""
    if isinstance(error, ApiError):
        return f"{error.status}: {error.message}"
    if isinstance(error, NotConnected):
        return f"not connected: the {what} was not sent"
    if isinstance(error, TickflowError):
        return str(error)
    return f"{type(error).__name__}: {error}"


class OrderActions(App[None]):
    """The app's actions and workers that change orders: the app (app.py) derives from this class and
    provides what is declared here, so this module needs nothing of app.py."""

    backend: Backend
    market: m.Market

    @property
    def ready(self) -> bool:
        """False while starting or closing, when the main screen's widgets are not there."""
        raise NotImplementedError

    def mark(self, *parts: str) -> None:
        """Redraw these parts of the screen (model.BOOK, model.ORDERS, ...)."""
        raise NotImplementedError

    def action_goto(self, where: str) -> None:
        """Move the focus to a panel: "ticket", "book", "orders" or "fills"."""
        raise NotImplementedError

    def on_order_ticket_submit(self, message: OrderTicket.Submit) -> None:
        self.send_order(message.request)

    @work(group="order-entry")
    async def send_order(self, req: OrderRequest) -> None:
        try:
            order = await self.backend.place_order(req.symbol, req.side, req.qty, req.price,  # type: ignore[arg-type]
                                                   tif=req.tif, post_only=req.post_only)  # type: ignore[arg-type]
        except Exception as e:
            self.post_message(OrderAnswered("place", None, f"{req.summary}: {explain(e)}"))
        else:
            self.post_message(OrderAnswered("place", order))

    def action_submit(self) -> None:
        self.query_one(OrderTicket).submit()

    def _selected(self, key: str) -> Order | None:
        """The order chosen in My orders, only while My orders has the focus: from the book or the
        ticket, a stray key must not act on a row out of sight. Elsewhere it goes to My orders."""
        orders = self.query_one(MyOrders)
        if self.focused is not orders:
            self.action_goto("orders")
            self.notify(f"choose the order here (↑ ↓), then {key}", title="My orders", timeout=4)
            return None
        order = orders.selected
        if order is None:
            self.notify("no open order to choose", severity="warning", timeout=3)
        return order

    def action_cancel_selected(self) -> None:
        order = self._selected("c")
        if order is not None:
            self.market.asked.add(order.order_id)
            self._cancel(order.order_id)

    def action_cancel_all(self) -> None:
        symbol = self.market.symbol
        ids = [o.order_id for o in self.market.open_orders() if o.symbol == symbol]
        if ids:
            self.market.asked.update(ids)
            self._cancel_all(symbol, ids)
        else:
            self.notify(f"no open orders in {symbol}", timeout=3)

    @work(group="order-entry")
    async def _cancel_all(self, symbol: str, ids: list[int]) -> None:
        """One command for all of them: nothing can trade between the first cancel and the last."""
        try:
            orders = await self.backend.cancel_all(symbol)
        except Exception as e:
            self.post_message(AllCancelled(symbol, ids, [], f"cancel all {symbol}: {explain(e, 'cancel')}"))
        else:
            self.post_message(AllCancelled(symbol, ids, orders))

    @work(group="order-entry")
    async def _cancel(self, order_id: int) -> None:
        try:
            order = await self.backend.cancel_order(order_id)
        except Exception as e:
            self.post_message(OrderAnswered("cancel", None, f"cancel #{order_id}: {explain(e, 'cancel')}", order_id))
        else:
            self.post_message(OrderAnswered("cancel", order, order_id=order_id))

    def action_amend_selected(self) -> None:
        order = self._selected("a")
        if order is None:
            return

        def done(change: dict[str, int] | None) -> None:
            if change:
                self.amend(order.order_id, change)

        self.push_screen(AmendScreen(order), done)

    @work(group="order-entry")
    async def amend(self, order_id: int, change: dict[str, int]) -> None:
        try:
            order = await self.backend.amend_order(order_id, qty=change.get("qty"), price=change.get("price"))
        except Exception as e:
            self.post_message(OrderAnswered("amend", None, f"amend #{order_id}: {explain(e, 'amend')}"))
        else:
            self.post_message(OrderAnswered("amend", order))

    def on_all_cancelled(self, message: AllCancelled) -> None:
        self.market.asked.difference_update(message.asked)
        if not self.ready:
            return
        if message.error:
            self.notify(message.error, severity="error", timeout=4)
            return
        for order in message.orders:
            self.market.set_order(order)
        self.mark(m.ORDERS)
        n = len(message.orders)
        said = f"{n} {message.symbol} order{'s' if n != 1 else ''} cancelled" if n else \
            f"no {message.symbol} order was open any more"
        self.notify(f"cancel all: {said}", timeout=3)

    def on_order_answered(self, message: OrderAnswered) -> None:
        if message.order_id is not None:
            self.market.asked.discard(message.order_id)
        if not self.ready:
            return
        if message.order is not None:
            self.market.set_order(message.order)
            self.mark(m.ORDERS, m.FILLS)
        if message.action == "place":
            self.query_one(OrderTicket).show_result(message.order, message.error)
        elif message.error:
            self.notify(message.error, severity="error", timeout=4)
        elif message.order is not None:
            o = message.order
            self.notify(f"#{o.order_id} {message.action}: {o.status.replace('_', ' ')}", timeout=2)
