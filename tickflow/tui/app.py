"""`tickflow-tui`: the terminal client. Composes the widgets, wires the feed to them, owns the keys.

The feed arrives through a `Backend` (the client library's WebSocket session, or a fixed feed in
tests). Each event is folded into the `Market` model at once and marks the widgets it touches dirty;
one `FeedChanged` message then redraws whatever is dirty, so a burst of updates costs one redraw.
Network calls run in workers and post their results back as messages.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from textual import on, work
from textual.app import App, ComposeResult
from textual.actions import SkipAction
from textual.binding import Binding
from textual.containers import Container
from textual.widgets import Footer, Input, OptionList, Select

from tickflow.net.wire.args import server_url
from tickflow.net.client import Event, StateChanged, TradesReceived
from tickflow.tui import model as m
from tickflow.tui.actions import OrderActions
from tickflow.tui.backend import Backend, LiveBackend
from tickflow.tui.book import BookView
from tickflow.tui.candles import Cut
from tickflow.tui.chart import PriceChart
from tickflow.tui.commands import TickflowCommands
from tickflow.tui.fields import start_price
from tickflow.tui.fills import MyFills
from tickflow.tui.header import TopBar
from tickflow.tui.help import HelpScreen
from tickflow.tui.messages import (
    BarsLoaded,
    FeedChanged,
    FillsLoaded,
    OpenOrdersLoaded,
    PriceSelected,
    SymbolsLoaded,
)
from tickflow.tui.orders import MyOrders
from tickflow.tui.palette import Palette
from tickflow.tui.tape import TradeTape
from tickflow.tui.ticket import OrderTicket

FILLS_PAGE = 100
"""Fills asked for at a time: the newest of the symbol on screen."""


class TickflowApp(OrderActions, App[None]):
    CSS_PATH = "app.tcss"
    FRAME_RATE = 20
    TITLE = "tickflow"
    COMMANDS = App.COMMANDS | {TickflowCommands}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-medium"), (140, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (32, "-tall")]
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="help", tooltip="Keys, colours and arrows"),
        Binding("f1", "help", "Help", show=False, priority=True),
        Binding("b", "side('buy')", "Buy", id="buy", tooltip="Ticket side: buy"),
        Binding("s", "side('sell')", "Sell", id="sell", tooltip="Ticket side: sell"),
        # Keys that move the focus or open a dialog are priority bindings: the app acts on one as it
        # takes it, before it hands the next key to whichever widget has the focus, so keys typed fast
        # or pasted behind it (`t-5`, `t100` tab `2.5`, `a12` enter) land where they would at typing
        # speed. (Acted on once they had bubbled up to here, the `-` of `t-5` reached the book first and
        # was lost: the price read 5; and the `12` enter of `a12` went to the ticket and sent an order.)
        Binding("t", "key('goto', 'ticket')", "Ticket", id="ticket", priority=True),
        Binding("d", "key('goto', 'book')", "Book", id="book", priority=True),
        Binding("o", "key('goto', 'orders')", "Orders", id="orders", priority=True),
        Binding("f", "key('toggle_fills')", "Fills", id="fills", priority=True, tooltip="My fills in this symbol"),
        Binding("tab", "jump_next(1)", show=False, priority=True),
        Binding("shift+tab", "jump_next(-1)", show=False, priority=True),
        # Shown (and acting) in My orders, whose bindings say so; from elsewhere they only point there.
        Binding("c,delete", "key('cancel_selected')", "Cancel", show=False, priority=True),
        Binding("a", "key('amend_selected')", "Amend", show=False, priority=True),
        Binding("C", "cancel_all", "Cancel all", show=False, id="cancel-all"),
        Binding("left_square_bracket", "cycle_symbol(-1)", "Prev sym", show=False),
        Binding("right_square_bracket", "cycle_symbol(1)", "Symbol", key_display="[ ]", id="symbol"),
        Binding("r", "reload", "Reload", show=False, id="reload"),
        Binding("x", "swap_colors", "Swap colours", id="swap", tooltip="Swap red and green"),
        Binding("escape", "leave_field", "Leave field", show=False, priority=True),
        Binding("q", "quit", "Quit", id="quit"),
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, backend: Backend, symbol: str, *, swap_colors: bool = False, utc: bool = False,
                 live: bool = True, chart_interval: float = 0.5) -> None:
        super().__init__()
        self.backend = backend
        self.market = m.Market(symbol, backend.account)
        self.palette = Palette(swap_colors)
        self._utc = utc
        self._live = live  # False for fixed screenshots and tests: no cursor blink, no frame timer
        self._chart_interval = chart_interval
        self._dirty: set[str] = set()
        self._posted = False
        self._frame_pending = False
        self._last_redraw = 0.0
        self._bars_wanted: set[str] = set()

    def compose(self) -> ComposeResult:
        yield TopBar(self.market.symbol, self.market.account, id="top", countdown=self._live)
        with Container(id="main"):  # a grid laid out by app.tcss: this order fills it at every size
            yield BookView(id="book")
            yield PriceChart(id="chart", utc=self._utc, interval=self._chart_interval)
            yield OrderTicket(self.market.symbol, id="ticket", blink=self._live)
            yield TradeTape(id="tape", utc=self._utc)
            yield MyOrders(id="orders")
            yield MyFills(id="fills", utc=self._utc)  # in the same cell, shown instead of My orders (f)
        yield Footer()

    def on_mount(self) -> None:
        self._dirty = {m.BOOK, m.TAPE, m.CHART, m.ORDERS, m.FILLS, m.CONN}
        self.redraw()
        self.query_one(BookView).focus()
        self.run_feed()  # "connected" loads the symbols, the bars, my open orders and my fills

    async def on_unmount(self) -> None:
        await self.backend.close()

    # ---- the feed

    @work(exclusive=True, group="feed")
    async def run_feed(self) -> None:
        await self.backend.run(self.market.symbol, self.on_feed_event)

    def on_feed_event(self, event: Event) -> None:
        """Called for every feed event (in the session's task): fold it in, ask for one redraw."""
        self._dirty |= self.market.apply(event)
        for text, severity in self.market.notices:  # a fill, a gap, a refusal: worth the trader's eye
            self.notify(text, severity=severity, timeout=8)
        self.market.notices.clear()
        if isinstance(event, StateChanged) and event.state == "connected":
            self.load_open_orders()  # private updates missed while away
            self.load_fills(self.market.symbol)  # fills made while away come only from the server's list
            self.load_symbols()  # a restarted server may list other symbols
            self.load_bars(self.market.symbol)
        elif isinstance(event, TradesReceived) and event.symbol in self._bars_wanted:
            self.load_bars(event.symbol)
        if self._dirty and not self._posted:
            self._posted = True
            self.post_message(FeedChanged())

    def on_feed_changed(self, _: FeedChanged) -> None:
        # At most FRAME_RATE redraws a second: a later burst waits for the next frame, then costs one.
        self._posted = False
        wait = self._last_redraw + 1 / self.FRAME_RATE - time.monotonic()
        if wait > 0 and self._live:
            if not self._frame_pending:
                self._frame_pending = True
                self.set_timer(wait, self._frame)
            return
        self.redraw()

    def _frame(self) -> None:
        self._frame_pending = False
        self.redraw()

    @property
    def ready(self) -> bool:
        """False while starting or closing, when the main screen's widgets are not there."""
        return bool(self.query(BookView))

    def redraw(self) -> None:
        if not self.ready:
            return  # keep the dirty marks for the first redraw
        self._last_redraw = time.monotonic()
        dirty, self._dirty = self._dirty, set()
        market = self.market
        if m.BOOK in dirty:
            stale = not market.connected or market.book is None or not market.book.live
            status = "⟳ stale: reconnecting" if not market.connected else "⟳ stale: waiting for snapshot"
            self.query_one(BookView).show(market.symbol, market.book, stale=stale, status=status)
        if m.TAPE in dirty:
            self.query_one(TradeTape).show(market.symbol, market.tape())
        if m.CHART in dirty:
            self.query_one(PriceChart).show(market.symbol, market.bars())
        if m.ORDERS in dirty:
            self.query_one(MyOrders).show(market.open_orders())
        if m.FILLS in dirty:
            loaded = market.symbol in market.fills_loaded
            self.query_one(MyFills).show(market.symbol, market.my_fills(), loaded=loaded)
        if m.CONN in dirty:
            self.query_one(TopBar).set_connection(market.conn, market.seq, market.gaps)
        self.query_one("#main").set_class(not market.connected, "-offline")

    def mark(self, *parts: str) -> None:
        self._dirty.update(parts)
        self.redraw()

    # ---- loading

    @work(group="load")
    async def load_symbols(self) -> None:
        try:
            self.post_message(SymbolsLoaded(await self.backend.symbols()))
        except Exception as e:  # the connection state already says the server is away
            self.log.warning(f"symbols: {e}")

    def load_bars(self, symbol: str) -> None:
        """Ask for the bars up to the newest trade seen; with none seen yet, when the first arrives."""
        cut = self.market.bars_cut(symbol)
        if cut is None:
            self._bars_wanted.add(symbol)
        else:
            self._bars_wanted.discard(symbol)
            self.fetch_bars(symbol, cut)

    @work(group="bars", exclusive=True)
    async def fetch_bars(self, symbol: str, cut: Cut) -> None:
        try:
            self.post_message(BarsLoaded(symbol, await self.backend.bars(symbol, cut.to, cut.before), cut.before))
        except Exception as e:
            self.log.warning(f"bars: {e}")

    @work(group="orders-load", exclusive=True)
    async def load_open_orders(self) -> None:
        try:
            self.post_message(OpenOrdersLoaded(await self.backend.open_orders()))
        except Exception as e:
            self.log.warning(f"open orders: {e}")

    @work(group="fills-load")
    async def load_fills(self, symbol: str) -> None:
        epoch = self.market.epoch
        try:
            self.post_message(FillsLoaded(symbol, await self.backend.fills(symbol, FILLS_PAGE), epoch))
        except Exception as e:
            self.log.warning(f"fills: {e}")

    def on_symbols_loaded(self, message: SymbolsLoaded) -> None:
        if not self.ready:
            return
        names = [s.symbol for s in message.symbols]
        current = self.market.symbol
        if not names:
            names = [current]
        self.market.symbols = names
        if current in names:
            self.query_one(TopBar).set_symbols(names, current)
            return
        # The server no longer trades it (restarted with other --symbols): a book that never comes is no use.
        self.query_one(TopBar).set_symbols(names, names[0])
        self.action_switch_symbol(names[0])
        self.notify(f"{current} is not traded on this server: showing {names[0]}", severity="warning", timeout=6)

    def on_bars_loaded(self, message: BarsLoaded) -> None:
        self.market.set_bars(message.symbol, message.bars, message.before)
        if message.symbol == self.market.symbol:
            self.mark(m.CHART)

    def on_open_orders_loaded(self, message: OpenOrdersLoaded) -> None:
        self.market.set_open_orders(message.orders)
        self.mark(m.ORDERS)

    def on_fills_loaded(self, message: FillsLoaded) -> None:
        if message.epoch != self.market.epoch:
            return  # the list of an exchange no longer at the address: its trade ids mean nothing here
        self.market.set_fills(message.symbol, message.fills)
        if message.symbol == self.market.symbol:
            self.mark(m.FILLS)

    # ---- symbols

    @on(Select.Changed, "#symbol")
    def _symbol_picked(self, event: Select.Changed) -> None:
        if isinstance(event.value, str):
            self.action_switch_symbol(event.value)

    def action_switch_symbol(self, symbol: str) -> None:
        old = self.market.symbol
        if symbol == old:
            return
        self.market.symbol = symbol
        if symbol not in self.market.symbols:
            self.market.symbols.append(symbol)
        self.query_one(TopBar).set_symbol(symbol)
        self.query_one(OrderTicket).set_symbol(symbol)
        self.resubscribe(old, symbol)
        self.load_bars(symbol)
        self.load_fills(symbol)
        self.mark(m.BOOK, m.TAPE, m.CHART, m.FILLS)

    def action_cycle_symbol(self, step: int) -> None:
        symbols = self.market.symbols
        index = symbols.index(self.market.symbol) if self.market.symbol in symbols else 0
        self.action_switch_symbol(symbols[(index + step) % len(symbols)])

    @work(group="subscribe")
    async def resubscribe(self, old: str | None, new: str) -> None:
        try:
            await self.backend.switch(old, new)
        except Exception as e:
            self.log.warning(f"subscribe: {e}")

    def action_reload(self) -> None:
        self.resubscribe(None, self.market.symbol)
        self.load_bars(self.market.symbol)
        self.load_open_orders()
        self.load_fills(self.market.symbol)
        self.load_symbols()

    # ---- screen-wide actions

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_swap_colors(self) -> None:
        self.palette = Palette(not self.palette.swapped)
        self.query_one(OrderTicket).set_symbol(self.market.symbol)
        self.mark(m.BOOK, m.TAPE, m.CHART, m.ORDERS, m.FILLS)
        self.notify("buy ▲ is now " + ("red" if self.palette.swapped else "green"), timeout=2)

    def action_side(self, side: str) -> None:
        self.query_one(OrderTicket).set_side(side)

    def action_goto(self, where: str) -> None:
        target = {"ticket": "#price", "book": "#book", "orders": "#orders", "fills": "#fills"}[where]
        if where in ("orders", "fills"):
            self.show_fills(where == "fills")
        widget = self.query_one(target)
        if isinstance(widget, Input) and widget.disabled:
            widget = self.query_one("#qty")
        # At once, not after the keys already queued (widget.focus() waits its turn): "t9990" typed
        # fast or pasted puts 9990 in the price, not into the book.
        self.screen.set_focus(widget)

    def show_fills(self, fills: bool) -> None:
        """My fills or My orders in their shared place."""
        self.query_one(MyFills).display = fills
        self.query_one(MyOrders).display = not fills

    def action_toggle_fills(self) -> None:
        """f: to My fills (in the place of My orders); in My fills, back to My orders."""
        self.action_goto("orders" if self.focused is self.query_one(MyFills) else "fills")

    def _focused_takes(self, key: str) -> bool:
        """Whether a priority key is for the focused widget instead: another screen is up (help,
        amend, the palette), an open list takes its escape and letters (to search), a field its letters."""
        if self.screen is not self.screen_stack[0]:
            return True
        if key == "tab":
            return False
        return isinstance(self.focused, OptionList) or (key == "letter" and isinstance(self.focused, Input))

    def action_key(self, action: str, *args: object) -> None:
        """A key's command (`t` `d` `o` `f` `c` `a`, delete), unless the focused widget takes the key: then it
        goes on to it (a letter typed in a field is text; delete there edits)."""
        if self._focused_takes("letter"):
            raise SkipAction()
        getattr(self, f"action_{action}")(*args)

    def action_leave_field(self) -> None:
        """escape: to the book, unless an open list or another screen takes it (to close)."""
        if self._focused_takes("escape"):
            raise SkipAction()
        self.action_goto("book")

    def action_jump_next(self, step: int) -> None:
        """tab and shift+tab on this screen."""
        if self._focused_takes("tab"):
            raise SkipAction()
        self.screen.focus_next() if step > 0 else self.screen.focus_previous()

    def action_start_price(self, digit: str) -> None:
        start_price(self.screen, digit)

    def on_price_selected(self, message: PriceSelected) -> None:
        self.query_one(OrderTicket).set_price(message.price)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickflow-tui", description="tickflow's terminal trading screen")
    parser.add_argument("--url", type=server_url, default="http://127.0.0.1:8080",
                        help="the server, http(s)://host[:port] (default %(default)s)")
    parser.add_argument("--account", default="alice", help="account to trade as (default %(default)s)")
    parser.add_argument("--token", help="bearer token, when the server was started with --tokens "
                        "(default: the account name, as in open demo mode)")
    parser.add_argument("--symbol", default="ACME", help="symbol to show first (default %(default)s)")
    parser.add_argument("--swap-colors", action="store_true", help="show buy in red and sell in green")
    parser.add_argument("--utc", action="store_true", help="show times in UTC instead of local time")
    args = parser.parse_args(argv)
    backend = LiveBackend(args.url, args.account, args.token)
    TickflowApp(backend, args.symbol, swap_colors=args.swap_colors, utc=args.utc).run()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
