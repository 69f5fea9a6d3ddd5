"""The terminal client without a server: coalescing, commands, colours, input checks, the model, the layout
from 80x24 up, the ticket's keys and result line, and what a reconnection brings."""

from __future__ import annotations

import asyncio
import re
from typing import Any, cast

import msgspec
from rich.style import Style
from rich.text import Text
from textual import events
from textual.app import App, ComposeResult
from textual.command import DiscoveryHit
from textual.widgets import Button, Checkbox, Input, Select, Static
from textual.widgets._toast import Toast

from tickflow.net.client import (
    ApiError,
    BookChanged,
    Event,
    Fill,
    GapDetected,
    Level,
    NotConnected,
    Order,
    OrderChanged,
    Resynced,
    ServerChanged,
    ServerError,
    StateChanged,
    Trade,
    TradesReceived,
)
from tickflow.tui import model as m
from tickflow.tui.amend import check_amend
from tickflow.tui.app import TickflowApp
from tickflow.tui.book import BookView, depth_bar
from tickflow.tui.candles import Candle, Cut
from tickflow.tui.chart import PriceChart
from tickflow.tui.commands import ACTIONS, TickflowCommands
from tickflow.tui.fills import MyFills
from helpers.fixed_backend import T0, FixedBackend, book_of, busy_feed, busy_fills, connected, fill, order
from helpers.wait import settle, until
from tickflow.tui.orders import MyOrders
from tickflow.tui.palette import Palette
from tickflow.tui.tape import TradeTape
from tickflow.tui.ticket import OrderRequest, check


def fixed_app(**kw: Any) -> TickflowApp:
    events, bars, mine = busy_feed()
    backend = FixedBackend(events=events, bars={"ACME": bars}, open_orders=mine, **kw)
    return TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)


# ---------------------------------------------------------------- input checks


def test_ticket_checks_input_before_sending() -> None:
    ok = check("ACME", "buy", "limit", "10001", "5", "gtc", False)
    assert ok == OrderRequest("ACME", "buy", "limit", 10001, 5, "gtc", False)
    assert check("ACME", "buy", "limit", "", "5", "gtc", False) == "a limit order needs a price (in ticks)"
    assert "quantity" in check("ACME", "buy", "limit", "1", "", "gtc", False)  # type: ignore[operator]
    assert "whole number" in check("ACME", "buy", "limit", "1", "0", "gtc", False)  # type: ignore[operator]
    assert "whole number" in check("ACME", "buy", "limit", "1", "2000000000", "gtc", False)  # type: ignore[operator]
    assert "post-only" in check("ACME", "buy", "limit", "1", "1", "ioc", True)  # type: ignore[operator]
    assert "post-only" in check("ACME", "buy", "market", "", "1", "gtc", True)  # type: ignore[operator]
    market = check("ACME", "sell", "market", "123", "7", "ioc", False)
    assert isinstance(market, OrderRequest) and market.price is None  # a market order's price is ignored


def test_amend_checks_input() -> None:
    o = order(5, "buy", 100, 10, 4)
    assert check_amend(o, "8", "100") == {"qty": 8}
    assert check_amend(o, "10", "101") == {"price": 101}
    assert "above the 4" in check_amend(o, "4", "")
    assert check_amend(o, "10", "100") == "nothing changed"
    assert "from 1 to 1,000,000,000" in check_amend(o, "1000000001", "")
    assert "from 1 to 1,000,000,000" in check_amend(o, "", "99999999999999999999999")


def test_a_number_that_is_not_plain_digits_is_refused_never_read_as_another() -> None:
    for typed in ("2.5", "1e3", "5.0", "1,000", "-5", "+5", "1_000", "5 0", "²"):
        for qty, price in ((typed, "100"), ("5", typed)):
            said = check("ACME", "buy", "limit", price, qty, "gtc", False)
            assert isinstance(said, str) and "whole number, digits only" in said and typed in said, (qty, price)
        assert "digits only" in check_amend(order(5, "buy", 100, 10), typed, "")
        assert "digits only" in check_amend(order(5, "buy", 100, 10), "", typed)


async def test_ticket_and_amend_fields_keep_what_is_typed_and_send_only_that() -> None:
    """Textual's integer field dropped each key that would make the value invalid: `2.5` became 25 and
    went out ten times too big."""
    app = fixed_app(answer=_accept)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        qty = app.query_one("#qty", Input)
        for typed in ("2.5", "1e3", "5.0", "1,000"):
            qty.value = ""
            await pilot.press("escape", "t", *"100", "tab", *typed, "enter")
            await settle(pilot)
            assert qty.value == typed
            assert f"not sent: quantity must be a whole number, digits only: not “{typed}”" in _result(app)
        await pilot.press("escape", "t", "backspace", "backspace", "backspace", *"9.5", "tab")
        assert app.query_one("#price", Input).value == "9.5"
        assert backend.calls == []
        # Full-width digits are shown as the digits that will be sent.
        app.query_one("#price", Input).value = "100"
        qty.value = ""
        qty.focus()
        await pilot.press(*"００５", "enter")
        await settle(pilot)
        assert qty.value == "005"
        assert backend.calls[-1][1]["qty"] == 5

        await pilot.press("escape", "o", "a")
        await settle(pilot)
        amend_qty = app.screen.query_one("#amend-qty", Input)
        amend_qty.value = ""
        amend_qty.focus()
        await pilot.press(*"2.5", "enter")
        await settle(pilot)
        assert amend_qty.value == "2.5"
        assert "digits only" in str(app.screen.query_one("#amend-error", Static).render())
        assert not [c for c in backend.calls if c[0] == "amend"]


def test_depth_bar_is_drawn_in_eighths() -> None:
    assert depth_bar(1.0, 4) == "████"
    assert depth_bar(0.0, 4) == "    "
    assert depth_bar(0.5 + 1 / 16, 4) == "██▎ "


def test_model_builds_candles_from_trades_and_drops_stale_answers() -> None:
    market = m.Market("ACME", "alice")
    t0 = 1_764_684_000_000
    trades = [Trade(1, "ACME", 100, 2, "buy", 1, t0), Trade(2, "ACME", 104, 1, "sell", 2, t0 + 10_000),
              Trade(3, "ACME", 99, 3, "sell", 3, t0 + 20_000), Trade(4, "ACME", 101, 1, "buy", 4, t0 + 60_000)]
    assert market.apply(TradesReceived("ACME", trades)) == {m.TAPE, m.CHART}
    c = market.bars()
    assert [(x.open, x.high, x.low, x.close, x.volume) for x in c] == [(100, 104, 99, 99, 6), (101, 101, 101, 101, 1)]
    assert market.last_price() == 101
    market.set_order(order(9, "buy", 100, 5, seq=10))
    market.set_order(order(9, "buy", 100, 5, 5, status="filled", seq=12))
    market.set_order(order(9, "buy", 100, 5, 1, seq=11))  # late, older answer: must not revive it
    assert market.open_orders() == []


# ---------------------------------------------------------------- the app


async def test_feed_bursts_are_coalesced_into_few_redraws() -> None:
    app = fixed_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        draws = 0
        view = app.query_one(BookView)
        original = view.show

        def counting_show(*args: Any, **kwargs: Any) -> None:
            nonlocal draws
            draws += 1
            original(*args, **kwargs)

        view.show = counting_show  # type: ignore[method-assign]
        book = app.market.book
        assert book is not None
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        for i in range(1000):  # a burst: 1,000 book updates arrive before the screen gets a turn
            book.apply(book.seq + 1, [Level(9_000 + i % 7, 10 + i, 1)], [])
            backend.emit(BookChanged("ACME", book, book.seq, False))
        await settle(pilot)
        assert 1 <= draws <= 3
        assert str(book.seq) in str(app.query_one("#conn").render()).replace(",", "")


async def test_every_binding_has_a_palette_entry_and_help() -> None:
    app = fixed_app(symbols=["ACME", "BETA"])
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        palette_actions = {action for _, action, _ in ACTIONS}
        for binding in app.BINDINGS:
            action = binding.action  # type: ignore[union-attr]
            if action in ("leave_field", "jump_next(1)", "jump_next(-1)"):  # escape, tab: not commands
                continue
            # A command key acts unless typed in a field: key('goto', 'book') is the palette's goto('book').
            if action.startswith("key("):
                name, *args = action[4:-1].replace("'", "").split(", ")
                action = f"{name}({', '.join(repr(a) for a in args)})" if args else name
            assert action in palette_actions, action
        provider = TickflowCommands(app.screen)
        titles = [cast(DiscoveryHit, hit).display async for hit in provider.discover()]
        assert "Switch to BETA" in [str(t) for t in titles]
        await pilot.press("question_mark")
        assert type(app.screen).__name__ == "HelpScreen"
        await pilot.press("escape")
        assert type(app.screen).__name__ == "Screen"


async def test_swapping_colours_repaints_both_sides() -> None:
    app = fixed_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        view = app.query_one(BookView)
        before = view.render()
        await pilot.press("x")
        await settle(pilot)
        after = view.render()
        assert app.palette.swapped
        styles_before = {str(s.style) for s in before.spans}
        styles_after = {str(s.style) for s in after.spans}
        assert any(Palette(False).sell in s for s in styles_before)
        assert any(Palette(True).sell in s for s in styles_after)  # asks now drawn in green
        assert "▼" in str(after) and "▲" in str(after)  # the arrows stay


class _ChartApp(App[None]):
    def compose(self) -> ComposeResult:
        yield PriceChart(interval=0)


def _body_colours(chart: PriceChart) -> set[str]:
    """The colours the candles' bodies are drawn in."""
    text = chart.render()
    assert isinstance(text, Text)
    colours = set()
    for span in text.spans:
        if "█" in text.plain[span.start:span.end]:
            assert isinstance(span.style, Style), span
            if span.style.color is not None:
                assert span.style.color.triplet is not None, span
                colours.add(str(span.style.color.triplet.hex))
    return colours


async def test_a_doji_candle_is_drawn_in_the_up_colour_as_on_the_web_page() -> None:
    """web/js/chart.js colours a candle up when close >= open; plotext on its own only when close > open."""
    t0 = 1_764_684_000_000
    up, down = Palette().buy, Palette().sell
    async with _ChartApp().run_test(size=(60, 20)) as pilot:
        chart = pilot.app.query_one(PriceChart)
        for candles, colours in (([Candle(t0, 100, 102, 98, 100, 5), Candle(t0 + 60_000, 99, 99, 99, 99, 1)], {up}),
                                 ([Candle(t0, 100, 103, 97, 102, 5)], {up}),
                                 ([Candle(t0, 100, 101, 96, 97, 5)], {down}),
                                 ([Candle(t0, 100, 100, 95, 96, 5), Candle(t0 + 60_000, 96, 99, 96, 96, 2)], {up, down})):
            chart.show("ACME", candles)
            await pilot.pause()
            assert _body_colours(chart) == colours, candles


async def test_gap_and_reconnect_are_shown() -> None:
    app = fixed_app()
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        book = app.market.book
        assert book is not None
        book.live = False
        backend.emit(GapDetected("ACME", 560, 570, 575))
        await settle(pilot)
        assert "gaps 1" in str(app.query_one("#conn").render())
        assert any("gap on ACME" in str(toast.render()) for toast in app.screen.query(Toast))
        assert "stale" in str(app.query_one(BookView).render())
        fresh = book_of("ACME", 600, [(9_000, 1, 1)], [(9_100, 2, 1)])
        backend.emit(BookChanged("ACME", fresh, 600, True))
        await settle(pilot)
        assert not app.query_one(BookView).stale
        backend.emit(StateChanged("reconnecting", attempt=1, delay=0.4, error="connection closed"))
        await settle(pilot)
        assert "reconnecting in 0.4 s" in str(app.query_one("#conn").render())
        assert app.query_one("#main").has_class("-offline")
        backend.emit(connected())
        await settle(pilot)
        assert not app.query_one("#main").has_class("-offline")


async def test_a_resync_and_a_server_refusal_are_told_once() -> None:
    app = fixed_app()
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        backend.emit(Resynced("slow consumer"))
        backend.emit(ServerError({"error": "unknown op 'frobnicate'"}))
        await settle(pilot)
        toasts = [str(toast.render()) for toast in app.screen.query(Toast)]
        assert sum("resync: slow consumer" in t for t in toasts) == 1
        assert sum("server: unknown op 'frobnicate'" in t for t in toasts) == 1
        backend.emit(connected())  # an event without news adds no toast
        await settle(pilot)
        assert len(app.screen.query(Toast)) == len(toasts)


async def test_market_order_disables_the_price_field_and_offers_no_gtc() -> None:
    app = fixed_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        tif = app.query_one("#tif", Select)
        app.query_one("#type").value = "market"  # type: ignore[attr-defined]
        await settle(pilot)
        assert app.query_one("#price", Input).disabled
        assert "at market IOC" in str(app.query_one("#submit").label)  # type: ignore[attr-defined]
        assert tif.value == "ioc" and [v for _, v in tif._options] == ["ioc", "fok"]  # the server makes it IOC
        await pilot.press("s")
        await settle(pilot)
        assert "Sell" in str(app.query_one("#submit", Button).label)
        app.query_one("#type", Select).value = "limit"  # back to limit: GTC again, as it was
        await settle(pilot)
        assert tif.value == "gtc" and [v for _, v in tif._options] == ["gtc", "ioc", "fok"]


async def test_switching_symbol_clears_the_price_but_a_repaint_keeps_it() -> None:
    """A price belongs to one book: carried over to another symbol, one enter could cross that book."""
    app = fixed_app(symbols=["ACME", "BETA"])
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        app.query_one("#price", Input).value = "5990"
        await pilot.press("x")  # colours swapped: the same symbol, so the ticket keeps its price
        await settle(pilot)
        assert app.query_one("#price", Input).value == "5990"
        app.action_switch_symbol("BETA")
        await settle(pilot)
        assert app.query_one("#price", Input).value == ""
        assert "BETA @ ?" in str(app.query_one("#submit").label)  # type: ignore[attr-defined]


async def test_reconnecting_header_says_why_in_plain_words() -> None:
    app = fixed_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        refused = ("ClientConnectorError: Cannot connect to host 127.0.0.1:8080 ssl:default "
                   "[Connect call failed ('127.0.0.1', 8080)]")
        backend.emit(StateChanged("reconnecting", attempt=3, delay=1.6, error=refused))
        await settle(pilot)
        text = str(app.query_one("#conn").render())
        assert "reconnecting in 1.6 s (attempt 3): connection refused" in text
        assert "Error" not in text and "ssl" not in text
        lost = "ServerDisconnectedError: Server disconnected"
        backend.emit(StateChanged("reconnecting", attempt=4, delay=3.2, error=lost))
        await settle(pilot)
        assert "(attempt 4): connection lost" in str(app.query_one("#conn").render())
    async with fixed_app().run_test(size=(80, 24)) as pilot:  # the same, in fewer words, at 80 columns
        await settle(pilot)
        pilot.app.backend.emit(StateChanged("reconnecting", attempt=3, delay=1.6,  # type: ignore[attr-defined]
                                            error="TimeoutError"))
        await settle(pilot)
        conn = pilot.app.query_one("#conn")
        text = str(conn.render())
        assert "retry 3 in 1.6 s: no answer in time" in text and "seq 560" in text
        assert len(text) <= conn.content_size.width


async def test_symbols_are_read_again_after_a_reconnect() -> None:
    """A server restarted with other --symbols: the switcher offers its symbols, and a symbol it no
    longer trades gives way to one it does."""
    app = fixed_app(symbols=["ACME", "BETA"])
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        assert app.market.symbols == ["ACME", "BETA"]
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        backend.emit(StateChanged("reconnecting", attempt=1, delay=0.2, error="connection closed"))
        backend.symbol_list = ["ACME", "GAMMA"]
        backend.emit(connected())
        await settle(pilot)
        assert app.market.symbols == ["ACME", "GAMMA"]
        select = app.query_one("#symbol", Select)
        assert [str(prompt) for prompt, _ in select._options] == ["ACME", "GAMMA"]
        await pilot.press("right_square_bracket")
        assert app.market.symbol == "GAMMA"

        backend.symbol_list = ["DELTA", "EPSILON"]
        backend.emit(connected())
        await settle(pilot)
        assert app.market.symbols == ["DELTA", "EPSILON"]
        assert app.market.symbol == "DELTA" and select.value == "DELTA"
        assert ("switch", {"old": "GAMMA", "new": "DELTA"}) in backend.calls


def _trade(trade_id: int, price: int, qty: int, ts: int) -> Trade:
    return Trade(trade_id, "ACME", price, qty, "buy", 100 + trade_id, ts)


def _chart_volumes(app: TickflowApp) -> list[tuple[int, int]]:
    return [(c.t, c.volume) for c in app.market.bars()]


async def test_chart_counts_each_trade_once_whatever_arrives_first() -> None:
    """After a reconnection the bars and the trades missed meanwhile race: each order gives the same
    candles, equal to the server's bars over every trade."""
    t0 = 1_764_684_000_000
    before = [_trade(1, 100, 5, t0 + 1_000), _trade(2, 104, 7, t0 + 2_000), _trade(3, 99, 2, t0 + 61_000)]
    away = [_trade(4, 102, 11, t0 + 62_000), _trade(5, 98, 13, t0 + 125_000)]
    every = [(t0, 12), (t0 + 60_000, 13), (t0 + 120_000, 13)]
    for bars_first in (True, False):
        backend = FixedBackend(events=[connected(), BookChanged("ACME", book_of("ACME", 9, [], []), 9, True),
                                       TradesReceived("ACME", before)])
        app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
        async with app.run_test(size=(140, 40)) as pilot:
            await settle(pilot)
            assert _chart_volumes(app) == [(t0, 12), (t0 + 60_000, 2)]
            backend.emit(StateChanged("reconnecting", attempt=1, delay=0.2, error="connection closed"))
            backend.print_trades("ACME", away)  # traded while the screen was away
            backend.emit(connected())  # the screen asks for the bars again
            if bars_first:
                await settle(pilot)
            backend.emit(TradesReceived("ACME", away))  # the session's backfill
            await settle(pilot)
            assert _chart_volumes(app) == every, f"bars first: {bars_first}"
            candles = app.market.bars()
            assert [(c.open, c.high, c.low, c.close) for c in candles] == [(100, 104, 100, 104), (99, 102, 99, 102),
                                                                           (98, 98, 98, 98)]
            await pilot.press("r")  # a reload asks again, up to the newest trade: still each trade once
            await settle(pilot)
            assert _chart_volumes(app) == every
            assert "vol 38" in (app.query_one(PriceChart).border_subtitle or "")


async def test_chart_counts_a_millisecond_of_trades_the_snapshot_holds_only_part_of() -> None:
    """A market order through 100 levels: 100 trades in one millisecond, the snapshot holds the newest
    50. The bars are cut by trade id after the newest seen, so the other 50 come from the bars, and a
    trade of the same millisecond stored while they load is added once, from the feed."""
    t0 = 1_764_684_000_000
    sweep = [_trade(i, 100 + i, i, t0 + 5) for i in range(1, 101)]
    later = [_trade(101, 50, 7, t0 + 5), _trade(102, 300, 9, t0 + 5)]
    backend = FixedBackend(events=[connected(), BookChanged("ACME", book_of("ACME", 9, [], []), 9, True),
                                   TradesReceived("ACME", sweep[50:])])
    backend.print_trades("ACME", sweep[:50])  # in the store, never on this feed
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        assert app.market.bars() == [Candle(t0, 101, 200, 101, 200, 5050)]
        backend.print_trades("ACME", later)  # stored, not yet sent on the feed
        await pilot.press("r")  # the bars again, cut after trade 100: not 101 and 102
        await settle(pilot)
        assert app.market.bars() == [Candle(t0, 101, 200, 101, 200, 5050)]
        backend.emit(TradesReceived("ACME", later))
        await settle(pilot)
        assert app.market.bars() == [Candle(t0, 101, 300, 50, 300, 5066)]
        await pilot.press("r")
        await settle(pilot)
        assert app.market.bars() == [Candle(t0, 101, 300, 50, 300, 5066)]


def _column_ends(line: str) -> list[int]:
    return [m.end() for m in re.finditer(r"\S+", line)]


async def test_book_columns_hold_the_largest_prices_and_quantities() -> None:
    """10-digit prices (MAX_PRICE) and quantities (MAX_QTY, and totals beyond it) keep every column in line."""
    bids = [(999_999_999, 1_000_000_000, 3), (12, 7, 1), (1, 999_999_999, 2)]
    asks = [(1_000_000_000, 1_000_000_000, 1)]
    trades = [_trade(1, 1_000_000_000, 1_000_000_000, 1_764_684_000_000), _trade(2, 12, 7, 1_764_684_001_000)]
    events: list[Event] = [connected(), BookChanged("ACME", book_of("ACME", 9, bids, asks), 9, True),
                           TradesReceived("ACME", trades)]
    for size in ((80, 24), (120, 40), (200, 50)):
        app = TickflowApp(FixedBackend(events=events), "ACME", utc=True, live=False, chart_interval=0)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            view = app.query_one(BookView)
            lines = str(view.render()).splitlines()
            rows = [line for line in lines if line.startswith(("▲", "▼"))]
            assert len(rows) == 4, lines
            header = _column_ends(lines[0])[:3]  # where Price, Size and Total end
            for row in rows:
                assert _column_ends(row)[1:4] == header, (size, row, lines[0])
                assert len(row) <= view.content_size.width
            prices = [row.split()[1] for row in rows]
            assert prices == ["1000000000", "999999999", "12", "1"]  # prices are never abbreviated
            assert rows[2].split()[2] == "7"
            assert rows[0].split()[2] in ("1,000,000,000", "1.000B")  # in full, or in B where it cannot be
            tape = str(app.query_one(TradeTape).render()).splitlines()
            assert [_column_ends(line)[1:3] for line in tape[1:]] == [_column_ends(tape[0])[1:3]] * 2, tape
            assert [line.split()[1] for line in tape[1:]] == ["12", "1000000000"]


# ---------------------------------------------------------------- the ticket


def _accept(call: str, args: dict[str, Any]) -> Order:
    """A server that takes every order: it rests, new."""
    o = order(90, args["side"], args["price"], args["qty"], symbol=args["symbol"], post_only=args["postOnly"])
    return msgspec.structs.replace(o, tif=args["tif"])


def _result(app: TickflowApp) -> str:
    return str(app.query_one("#result", Static).render())


def _post_keys(app: TickflowApp, keys: str) -> None:
    """Keys queued at once, as a paste without bracketed-paste mode, a fast typist or a busy screen
    delivers them: the app takes each before any widget has handled the one before."""
    for key in keys:
        name = {"\t": "tab", "\n": "enter", "\x1b": "escape", ".": "full_stop", "-": "minus", ",": "comma"
                }.get(key, key)
        app.post_message(events.Key(name, key if key.isprintable() else None))


async def test_digits_typed_fast_after_t_land_in_the_price_whole() -> None:
    app = fixed_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        for start, before in (("#book", ""), ("#orders", ""), ("#book", "123")):
            app.query_one("#price", Input).value = before  # what was there is replaced, as on focusing it
            app.query_one(start).focus()
            await settle(pilot)
            _post_keys(app, "t9990")
            await settle(pilot)
            assert (app.focused, app.query_one("#price", Input).value) == (app.query_one("#price"), "9990"), start
        for start in ("#book", "#orders"):  # there, a digit starts the price
            app.query_one("#price", Input).value = "5"
            app.query_one(start).focus()
            await settle(pilot)
            _post_keys(app, "10")
            await settle(pilot)
            assert (app.focused, app.query_one("#price", Input).value) == (app.query_one("#price"), "10"), start
        app.query_one("#book").focus()
        await settle(pilot)
        await pilot.press("５", "0")  # a digit of another script too, shown as the digit that will be sent
        assert app.query_one("#price", Input).value == "50"


async def test_keys_typed_fast_behind_a_focus_move_land_where_they_were_typed() -> None:
    """`t-5` typed fast or pasted key by key on the book read as a price of 5: `t` moved the focus only
    once it had bubbled up to the app's binding, and the `-` queued behind it reached the book first and
    was lost. A tab in the price field likewise moved on after the keys behind it had gone into the
    price (`t100` tab `2.5` read 1002.5). Every key that moves the focus now acts as the app takes it."""
    app = fixed_app(answer=_accept)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        price, qty = app.query_one("#price", Input), app.query_one("#qty", Input)

        async def typed(start: str, *bursts: str) -> tuple[str, str]:
            price.value = qty.value = ""
            app.query_one(start).focus()
            await settle(pilot)
            for burst in bursts:  # each burst queued at once; the screen settles between them
                _post_keys(app, burst)
                await settle(pilot)
            return price.value, qty.value

        for start in ("#book", "#orders", "#side", "#post-only"):
            assert await typed(start, "t-5") == ("-5", ""), start
        for start in ("#book", "#orders"):
            assert await typed(start, "t,5") == (",5", ""), start
            assert await typed(start, "t100\t2.5") == ("100", "2.5"), start
            assert await typed(start, "t100", "\t2.5") == ("100", "2.5"), start  # tab after the focus moved
        assert await typed("#book", "t-5\t10\n") == ("-5", "10")
        assert "not sent: price (in ticks) must be a whole number, digits only: not “-5”" in _result(app)
        assert await typed("#book", "t100\t5", "\x1bo") == ("100", "5")  # escape, o: out of the field
        assert app.focused is app.query_one("#orders")
        assert await typed("#book", "t9", "\x1bd5") == ("5", "")  # escape, d, then a digit on the book
        assert await typed("#book", "t100\t2", "\t\t\t\t", "\x1b") == ("100", "2")  # round the ticket
        assert app.focused is app.query_one("#book")
        assert backend.calls == []
        assert await typed("#book", "t100\t25\n") == ("100", "25")
        assert [args["qty"] for _, args in backend.calls] == [25]
        # Letters in a field are text, escape in an open list closes only the list.
        assert await typed("#book", "t", "1tdo") == ("1tdo", "")
        assert app.focused is price
        app.query_one("#tif", Select).focus()
        await pilot.press("space")
        assert app.query_one("#tif", Select).expanded
        await pilot.press("escape")
        assert not app.query_one("#tif", Select).expanded
        assert app.focused is app.query_one("#tif")


async def test_a_paste_is_text_handled_like_typed_text() -> None:
    """Pasted into a number field, `10,000`, `2.5` or `-5` is kept and refused as typing it is; pasted
    on the book or my orders it starts the price as a typed digit does (never read as commands)."""
    app = fixed_app(answer=_accept)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        price, qty = app.query_one("#price", Input), app.query_one("#qty", Input)
        for field, other, text, what in (("#price", "#qty", "-5", "price (in ticks)"),
                                         ("#price", "#qty", "2.5", "price (in ticks)"),
                                         ("#qty", "#price", "10,000", "quantity"),
                                         ("#qty", "#price", "2.5", "quantity"),
                                         ("#qty", "#price", "1e3", "quantity")):
            app.query_one(other, Input).value = "7"
            app.query_one(field, Input).value = "123"
            await pilot.press("escape", "t")
            if field == "#qty":
                await pilot.press("tab")
            app.post_message(events.Paste(text))  # replaces what focusing selected, as typing would
            await settle(pilot)
            assert app.query_one(field, Input).value == text
            assert f"{what} must be a whole number, digits only: not “{text}”" in _result(app)
            await pilot.press("enter")
            await settle(pilot)
            assert f"not sent: {what} must be a whole number" in _result(app)
        assert backend.calls == []
        qty.value = "7"
        for start in ("#book", "#orders"):
            for text, shown in (("t-5", "t-5"), ("10002", "10002"), ("１０００３", "10003"), ("9\nq", "9")):
                price.value = "1"
                app.query_one(start).focus()
                await settle(pilot)
                app.post_message(events.Paste(text))
                await settle(pilot)
                assert (app.focused, price.value) == (price, shown), (start, text)
            await pilot.press("enter")
            await settle(pilot)
        assert [(args["price"], args["qty"]) for _, args in backend.calls] == [(9, 7), (9, 7)]
        assert app.is_running  # the `q` pasted was text, not quit
        # In the amend dialog as well.
        await pilot.press("escape", "o", "a")
        await settle(pilot)
        amend_qty = app.screen.query_one("#amend-qty", Input)
        amend_qty.focus()
        await settle(pilot)
        app.post_message(events.Paste("2.5"))
        await settle(pilot)
        await pilot.press("enter")
        await settle(pilot)
        assert amend_qty.value == "2.5"
        assert "digits only" in str(app.screen.query_one("#amend-error", Static).render())
        assert not [c for c in backend.calls if c[0] == "amend"]


async def test_enter_sends_from_every_ticket_field_and_space_toggles_post_only() -> None:
    app = fixed_app(answer=_accept)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        await pilot.press("t", *"9990", "tab", *"5", "tab", "tab")  # price, qty, past TIF to post-only
        box = app.query_one("#post-only", Checkbox)
        assert app.focused is box and not box.value
        await pilot.press("space")
        assert box.value
        await pilot.press("enter")  # sends; does not untick
        await settle(pilot)
        assert box.value
        assert backend.calls == [("place", {"symbol": "ACME", "side": "buy", "qty": 5, "price": 9990,
                                            "tif": "gtc", "postOnly": True})]
        # From each other field, enter sends too; a select does not open its menu.
        await pilot.press("space")
        assert not box.value
        sent = 1
        for field in ("#side", "#type", "#price", "#qty", "#tif", "#submit"):
            app.query_one(field).focus()
            await pilot.press("enter")
            await settle(pilot)
            sent += 1
            assert len(backend.calls) == sent, field
            assert not any(s.expanded for s in app.query(Select)), field
        assert all(args["postOnly"] is False for _, args in backend.calls[1:])
        for field in ("#side", "#price", "#qty", "#post-only"):  # the footer says what enter does
            app.query_one(field).focus()
            await settle(pilot)
            enter = app.active_bindings["enter"].binding
            assert (enter.description, enter.show) == ("Send order", True), field
        app.query_one("#tif", Select).focus()
        await pilot.press("space")  # space (or an arrow) opens a select's menu
        assert app.query_one("#tif", Select).expanded


async def test_post_only_reads_without_colour() -> None:
    app = fixed_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        box = app.query_one("#post-only", Checkbox)
        submit = app.query_one("#submit", Button)
        off = str(box.render())
        assert "[ ]" in off and "✓" not in off
        assert "post-only" not in str(submit.label)
        box.focus()
        await pilot.press("space")
        on = str(box.render())
        assert "[✓]" in on and on != off
        assert "post-only" in str(submit.label)  # the button says what enter will send


async def test_result_line_names_its_order_and_gives_way_to_a_new_one() -> None:
    """The answer names the order it is about; editing the ticket or changing symbol clears it."""
    gate = asyncio.Event()

    class SlowServer(FixedBackend):
        async def place_order(self, *args: Any, **kwargs: Any) -> Order:
            await asyncio.wait_for(gate.wait(), 10)
            return await super().place_order(*args, **kwargs)

    events, bars, mine = busy_feed()
    backend = SlowServer(events=events, bars={"ACME": bars}, open_orders=mine, symbols=["ACME", "BETA"],
                         answer=_accept)
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        gate.set()
        await pilot.press("t", *"9990", "tab", *"5", "enter")
        await settle(pilot)
        assert "✔ #90 buy 5 ACME @ 9990: new" in _result(app)
        await pilot.press("backspace", "7")  # a new order begins: the old answer goes
        await settle(pilot)
        assert "#90" not in _result(app)
        await pilot.press("enter")
        await settle(pilot)
        assert "buy 7 ACME @ 9990" in _result(app)
        await pilot.press("escape", "right_square_bracket")  # another symbol: the answer goes too
        await settle(pilot)
        assert app.market.symbol == "BETA"
        assert "#90" not in _result(app) and "ACME" not in _result(app)
        # An answer that comes after the symbol changed still says which order it is about.
        gate.clear()
        await pilot.press("left_square_bracket", "t", *"9991", "enter")
        await pilot.pause()
        assert "sending buy 7 ACME @ 9991" in _result(app)
        await pilot.press("escape", "right_square_bracket")
        await pilot.pause()
        assert "sending" not in _result(app)
        gate.set()
        await settle(pilot)
        assert "✔ #90 buy 7 ACME @ 9991: new" in _result(app)
        # So does an error.
        backend._answer = lambda call, args: ApiError(503, {"error": "overloaded"})
        await pilot.press("escape", "left_square_bracket", "t", *"9992", "enter")
        await settle(pilot)
        assert "✘ buy 7 ACME @ 9992: 503: overloaded" in _result(app)


# ---------------------------------------------------------------- the layout

PANELS = ("#book", "#chart", "#ticket", "#tape", "#orders")
TICKET_PARTS = ("#side", "#type", "#price", "#qty", "#tif", "#post-only", "#submit", "#result")


async def test_every_panel_is_usable_from_80x24_up() -> None:
    for size in ((80, 24), (120, 40), (160, 24), (220, 60)):
        app = fixed_app()
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            panels = {name: app.query_one(name).region for name in PANELS}
            main = app.query_one("#main").region
            for name, region in panels.items():
                assert main.contains_region(region), (size, name, region)
                assert region.width >= 30 and region.height >= 7, (size, name, region)
            names = list(panels)
            for i, a in enumerate(names):
                for b in names[i + 1:]:
                    assert not panels[a].overlaps(panels[b]), (size, a, b)
            assert app.query_one(BookView).depth >= 5  # levels a side
            assert len(str(app.query_one(TradeTape).render()).splitlines()) >= 4  # header and 3 trades

            # The ticket: every field whole, none over another, and room for a 10-digit price and quantity.
            ticket = app.query_one("#ticket").region
            parts = {name: app.query_one(name).region for name in TICKET_PARTS}
            for name, region in parts.items():
                assert ticket.contains_region(region) and region.width >= 12, (size, name, region)
            for i, a in enumerate(TICKET_PARTS):
                for b in TICKET_PARTS[i + 1:]:
                    assert not parts[a].overlaps(parts[b]), (size, a, b)
            await pilot.press("t", *"1000000000", "tab", *"1000000000")
            for name in ("#price", "#qty"):
                assert "1000000000" in str(app.query_one(name, Input).render_line(0).text), (size, name)
            assert "[ ] post-only" in str(app.query_one("#post-only").render())

            # My orders: every column in view, without scrolling sideways.
            table = app.query_one(MyOrders)
            assert table.virtual_size.width <= table.scrollable_content_region.width, size
            assert len(table.orders) == 2 and table.row_count == 2
            for o in list(table.orders):  # all cancelled: the table says none, still without scrolling
                app.backend.emit(OrderChanged(order(o.order_id, o.side, o.price or 0, o.qty,  # type: ignore[attr-defined]
                                                    status="cancelled", seq=999)))
            await settle(pilot)
            assert table.orders == [] and "none" in str(table.get_row_at(0)[0])
            assert table.virtual_size.width <= table.scrollable_content_region.width, size
            conn = app.query_one("#conn")
            assert len(str(conn.render())) <= conn.content_size.width



# ---------------------------------------------------------------- my orders, the book's cursor, news


def _cancel_answer(call: str, args: dict[str, Any]) -> Order:
    return order(args["orderId"], "buy", 9_990, 10, status="cancelled", reason="cancelled_by_user", seq=900)


async def test_cancel_and_amend_keys_act_only_in_my_orders() -> None:
    """`o`, a GLOBEX order chosen, `d`, `c`: that order was cancelled from the book, unseen, unasked."""
    events, bars, mine = busy_feed()
    globex = order(43, "sell", 77, 5, symbol="GLOBEX", seq=495)
    backend = FixedBackend(events=[*events, OrderChanged(globex)], bars={"ACME": bars}, open_orders=[*mine, globex],
                           answer=_cancel_answer)
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        orders = app.query_one(MyOrders)
        await pilot.press("o", "down", "down")
        assert orders.selected == globex
        for key in ("c", "delete", "a"):
            for where in ("#book", "#side", "#submit"):  # the book, and the ticket where keys are not text
                app.query_one(where).focus()
                await settle(pilot)
                shown = {b.binding.key for b in app.active_bindings.values() if b.binding.show}
                assert not {"c", "a", "delete"} & shown, where  # the footer offers no cancel or amend here
                await pilot.press(key)
                await settle(pilot)
                assert backend.calls == [] and app.screen is app.screen_stack[0], (key, where)
                assert app.focused is orders and orders.selected == globex  # My orders says what to do
                if key == "c":  # (looked for at once: the toast goes after 4 s, and a busy machine takes longer)
                    assert any("then c" in str(toast.render()) for toast in app.screen.query(Toast))
        footer = {b.binding.key: b.binding.description for b in app.active_bindings.values() if b.binding.show}
        assert footer["c"] == "Cancel" and footer["a"] == "Amend"
        await pilot.press("c")
        await settle(pilot)
        assert backend.calls == [("cancel", {"orderId": 43})]


async def test_an_amend_or_cancel_typed_fast_acts_on_the_chosen_order_not_the_ticket() -> None:
    """`a12` enter typed fast in My orders: the `a` opened the dialog only once it had bubbled up to the
    app, so the `12` started the ticket's price (a digit there does) and the enter sent a new order at
    12 instead of amending the chosen one to 12. Likewise `c5` cancelled nothing."""
    def answer(call: str, args: dict[str, Any]) -> Order | Exception:
        if call == "amend":
            return order(args["orderId"], "buy", 9_995, args["qty"] or 100, 40, seq=901)
        if call == "cancel":
            return _cancel_answer(call, args)
        return ApiError(400, {"error": "no new orders here"})

    app = fixed_app(answer=answer)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        orders, price = app.query_one(MyOrders), app.query_one("#price", Input)
        await pilot.press("o")
        assert orders.selected is not None and orders.selected.order_id == 41
        _post_keys(app, "a120\n")
        await settle(pilot)
        assert backend.calls == [("amend", {"orderId": 41, "qty": 120, "price": None})]
        assert app.screen is app.screen_stack[0] and app.focused is orders and price.value == ""
        _post_keys(app, "aq2")  # a `q` behind `a` is text in the dialog, not quit
        await settle(pilot)
        assert app.is_running and app.screen.query_one("#amend-qty", Input).value == "q2"
        await pilot.press("escape")
        await settle(pilot)
        _post_keys(app, "c5")  # cancels the chosen order, then the digit starts the price
        await settle(pilot)
        assert backend.calls[1:] == [("cancel", {"orderId": 41})]
        assert (app.focused, price.value) == (price, "5")


async def test_cancelling_keeps_the_cursor_on_the_next_order() -> None:
    events, bars, _ = busy_feed()
    mine = [order(i, "buy", 9_990 - i, 10, seq=400 + i) for i in range(51, 56)]
    backend = FixedBackend(events=[*events[:3], *[OrderChanged(o) for o in mine]], bars={"ACME": bars},
                           open_orders=mine, answer=_cancel_answer)
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        orders = app.query_one(MyOrders)
        await pilot.press("o", "down")
        assert orders.selected is not None and orders.selected.order_id == 52
        for expected in (53, 54, 55):
            await pilot.press("c")
            await settle(pilot)
            assert orders.selected is not None and orders.selected.order_id == expected
        await pilot.press("c")  # the last row goes: the cursor goes to the row left above it
        await settle(pilot)
        assert orders.selected is not None and orders.selected.order_id == 51
        assert [c[1]["orderId"] for c in backend.calls] == [52, 53, 54, 55]


async def test_cancel_all_is_one_call_for_the_symbol_on_screen() -> None:
    """C: one cancel-all for ACME (it was a cancel per order), told in one line with how many; the GLOBEX
    order stays. Not connected: one error, and the orders stay listed."""
    events, bars, mine = busy_feed()
    globex = order(43, "sell", 77, 5, symbol="GLOBEX", seq=495)
    cancelled = [msgspec.structs.replace(o, status="cancelled", reason="cancelled_by_user", remaining_qty=0, seq=900)
                 for o in mine]
    answers: list[list[Order] | Exception] = [NotConnected("not connected"), cancelled]
    backend = FixedBackend(events=[*events, OrderChanged(globex)], bars={"ACME": bars}, open_orders=[*mine, globex],
                           answer=lambda call, args: answers.pop(0))
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)

    def toasts() -> list[str]:
        return [str(toast.render()) for toast in app.screen.query(Toast)]

    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        await pilot.press("C")
        await settle(pilot)
        assert backend.calls == [("cancel_all", {"symbol": "ACME"})]
        assert toasts() == ["cancel all ACME: not connected: the cancel was not sent"]
        assert [o.order_id for o in app.query_one(MyOrders).orders] == [41, 42, 43]
        assert app.market.asked == set()

        app.clear_notifications()
        await pilot.press("C")
        await settle(pilot)
        assert backend.calls[1:] == [("cancel_all", {"symbol": "ACME"})]
        assert [o.order_id for o in app.query_one(MyOrders).orders] == [43]
        for o in cancelled:  # the private updates of the same cancels: not news
            backend.emit(OrderChanged(o))
        await settle(pilot)
        assert toasts() == ["cancel all: 2 ACME orders cancelled"]

        app.clear_notifications()
        await pilot.press("C")
        await settle(pilot)
        assert len(backend.calls) == 2 and toasts() == ["no open orders in ACME"]


async def test_book_cursor_stays_on_levels_that_exist() -> None:
    backend = FixedBackend(events=[connected(), BookChanged("ACME", book_of(
        "ACME", 9, [(99, 1, 1), (98, 2, 1), (97, 3, 1)], [(101, 4, 1), (102, 5, 1)]), 9, True)])
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        view = app.query_one(BookView)
        assert view.depth > 3
        await pilot.press(*["up"] * 6)
        assert view.cursor == -2  # the worst ask, not a blank row above it
        await pilot.press("enter")
        assert app.query_one("#price", Input).value == "102"
        await pilot.press("d", *["down"] * 9)
        assert view.cursor == 3
        await pilot.press("enter")
        assert app.query_one("#price", Input).value == "97"
        thinner = book_of("ACME", 10, [(99, 1, 1)], [(101, 4, 1), (102, 5, 1)])
        backend.emit(BookChanged("ACME", thinner, 10, True))  # the level under the cursor goes
        await settle(pilot)
        assert view.cursor == 1
        backend.emit(BookChanged("ACME", book_of("ACME", 11, [], [(101, 4, 1)]), 11, True))
        await settle(pilot)
        assert view.cursor == -1  # no bids left: the best ask


async def test_my_orders_filled_or_cancelled_by_others_are_told() -> None:
    """A fill by someone else and a self-trade cancel used to make the row vanish without a word."""
    app = fixed_app(answer=_cancel_answer)
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        filled = msgspec.structs.replace(order(41, "buy", 9_995, 100, 43, seq=600),
                                         fills=[Fill(2_000, 9_995, 3, "maker")])
        backend.emit(OrderChanged(filled))
        backend.emit(OrderChanged(filled))  # the same state again (a catch-up) is no news
        backend.emit(OrderChanged(order(42, "sell", 10_010, 50, status="cancelled",
                                        reason="self_trade_prevented", seq=601)))
        await settle(pilot)
        toasts = [str(toast.render()) for toast in app.screen.query(Toast)]
        assert sum("#41 buy ACME: filled 3 @ 9995 (43/100)" in t for t in toasts) == 1, toasts
        assert sum("#42 sell ACME: cancelled: self-trade prevented" in t for t in toasts) == 1, toasts
        assert [o.order_id for o in app.market.open_orders()] == [41]
        # My own cancel is answered once, not told again as news.
        await pilot.press("o", "c")
        backend.emit(OrderChanged(order(41, "buy", 9_995, 100, 43, status="cancelled",
                                        reason="cancelled_by_user", seq=650)))
        await settle(pilot)
        toasts = [str(toast.render()) for toast in app.screen.query(Toast)]
        assert sum("#41" in t for t in toasts) == 2, toasts  # the fill, and "#41 cancel: cancelled"


async def test_another_server_at_the_address_starts_the_screen_afresh() -> None:
    """Its seqs, trade ids and order ids start again: an order id seen closed was refused, the header
    kept the old seq, and the bars were cut at the old server's trade id."""
    app = fixed_app()
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        backend.emit(OrderChanged(order(41, "buy", 9_995, 100, 100, status="filled", seq=700)))
        backend.emit(StateChanged("reconnecting", attempt=1, delay=0.2, error="connection refused"))
        await settle(pilot)
        assert app.market.seq == 700

        backend.store.clear()
        backend._bars = {}
        backend._open = [order(41, "sell", 12_000, 5, seq=4)]
        backend.emit(ServerChanged("its log is at seq 3, behind the 700 seen"))
        backend.emit(connected())
        backend.emit(BookChanged("ACME", book_of("ACME", 3, [(11_990, 1, 1)], [(12_000, 5, 1)]), 3, True))
        backend.emit(TradesReceived("ACME", [_trade(1, 12_000, 2, T0 + 3_600_000)]))
        backend.emit(OrderChanged(order(41, "sell", 12_000, 5, 2, seq=5)))
        await settle(pilot)
        assert [(o.order_id, o.filled_qty) for o in app.market.open_orders()] == [(41, 2)]
        assert "seq 5" in str(app.query_one("#conn").render())
        assert [t.trade_id for t in app.market.tape()] == [1]
        assert _chart_volumes(app) == [(T0 + 3_600_000, 2)]
        assert app.market.bars_cut("ACME") == Cut(T0 + 3_600_001, 2)
        said = "another exchange at this address: its log began at 2026-12-05 03:21:39 UTC, not 2026-12-05 03:20:21 UTC"
        backend.emit(ServerChanged(said))
        await settle(pilot)
        told = " ".join(str(toast.render()) for toast in app.screen.query(Toast)).replace("\n", " ")
        assert "(its log is at seq 3, behind the 700 seen): reloading" in told
        assert "log began at 2026-12-05 03:21:39 UTC, not 2026-12-05 03:20:21 UTC: reloading" in told
        assert told.count("another") == 2  # said once each


async def test_reconnecting_delay_counts_down() -> None:
    backend = FixedBackend(events=[connected()])
    app = TickflowApp(backend, "ACME", utc=True, live=True, chart_interval=0)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        backend.emit(StateChanged("reconnecting", attempt=2, delay=2.0, error="connection refused"))
        await settle(pilot)
        shown: list[float] = []

        def counted_down() -> bool:
            """Note each figure the countdown shows, until it has run out."""
            text = str(app.query_one("#conn").render())
            found = re.search(r"reconnecting in ([0-9.]+) s", text)
            if found is None:
                return "⟳ reconnecting (attempt 2): connection refused" in text
            if not shown or shown[-1] != float(found.group(1)):
                shown.append(float(found.group(1)))
            return False

        await until(counted_down, interval=0.05, pause=pilot.pause, message=lambda: f"the countdown to end ({shown})")
        assert shown == sorted(shown, reverse=True) and shown[0] - shown[-1] >= 0.3, shown
        assert "⟳ reconnecting (attempt 2): connection refused" in str(app.query_one("#conn").render())


# ---------------------------------------------------------------- my fills


def _fill_rows(app: TickflowApp) -> list[list[str]]:
    """My fills as shown: each row's cells as plain text."""
    table = app.query_one(MyFills)
    return [[str(cell).strip() for cell in table.get_row_at(i)] for i in range(table.row_count)]


def _fills_app(**kw: Any) -> TickflowApp:
    events, bars, mine = busy_feed()
    backend = FixedBackend(events=events, bars={"ACME": bars}, open_orders=mine, fills=busy_fills(events), **kw)
    return TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)


def test_model_shows_each_live_fill_with_its_own_maker_or_taker() -> None:
    """The role is the fill's own, as the server tells it in the answer and the update: also for an order
    first seen with fills, or a state older than the one held, where the order's state before says
    nothing. One row a trade id; the server's list replaces what is held."""
    market = m.Market("ACME", "alice")
    market.set_order(order(5, "buy", 100, 10, seq=10), news=True)
    hit = msgspec.structs.replace(order(5, "buy", 100, 10, 3, seq=11), fills=[Fill(1, 100, 3, "maker")])
    assert market.apply(OrderChanged(hit)) == {m.ORDERS, m.FILLS, m.CONN}
    moved = msgspec.structs.replace(order(5, "buy", 103, 10, 5, seq=12), fills=[Fill(2, 102, 2, "taker")])
    market.set_order(moved)  # its amend's answer
    # Placed from another screen of the account and crossing at once: its update is the first word of it.
    elsewhere = msgspec.structs.replace(order(6, "sell", 99, 4, 4, status="filled", seq=13),
                                        fills=[Fill(3, 100, 4, "taker")])
    market.apply(OrderChanged(elsewhere))
    # A resting order the screen had not seen yet, hit by someone else's.
    unseen = msgspec.structs.replace(order(8, "sell", 104, 6, 1, seq=14), fills=[Fill(4, 104, 1, "maker")])
    market.apply(OrderChanged(unseen))
    assert [(f.trade_id, f.order_id, f.side, f.qty, f.liquidity) for f in market.my_fills()] == [
        (4, 8, "sell", 1, "maker"), (3, 6, "sell", 4, "taker"), (2, 5, "buy", 2, "taker"), (1, 5, "buy", 3, "maker")]
    market.apply(OrderChanged(hit))  # the same fill again (a late duplicate): still once
    market.apply(OrderChanged(moved))  # the amend's own update, after its answer
    assert [f.trade_id for f in market.my_fills()] == [4, 3, 2, 1]
    # An older state arriving after a newer one still brings its fills (they are not in the newer one).
    late = msgspec.structs.replace(order(5, "buy", 103, 10, 4, seq=11), fills=[Fill(9, 103, 1, "maker")])
    market.set_order(late)
    assert market.fills["ACME"][9].liquidity == "maker" and market.orders[5].seq == 12
    # The server's list replaces what is held; fills seen live since stay.
    market.set_fills("ACME", [fill(3, 6, "sell", 100, 4, "taker", seq=13, ts=T0), fill(9, 5, "buy", 103, 1, "maker")])
    assert market.fills["ACME"][3].ts == T0 and market.fills_loaded == {"ACME"}
    assert len(market.my_fills()) == 5 and market.my_fills("BETA") == []


def test_model_keeps_the_newest_fills_of_a_symbol() -> None:
    market = m.Market("ACME", "alice")
    market.set_fills("ACME", [fill(i, 5, "buy", 100, 1, "maker") for i in range(1, m.FILLS_KEPT + 1)])
    newer = msgspec.structs.replace(order(6, "sell", 99, 3, 3, status="filled", seq=900),
                                    fills=[Fill(m.FILLS_KEPT + i, 99, 1, "taker") for i in (1, 2, 3)])
    market.set_order(newer)
    kept = market.my_fills()
    assert len(kept) == m.FILLS_KEPT and kept[0].trade_id == m.FILLS_KEPT + 3 and kept[-1].trade_id == 4
    assert kept[0].liquidity == "taker" and kept[-1].liquidity == "maker"


async def test_my_fills_are_loaded_and_shown_newest_first() -> None:
    """f: the backend's fills of the symbol on screen in the place of My orders, with side and role."""
    app = _fills_app()
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        assert backend.fills_asked == ["ACME"]  # when the screen connected
        table, orders = app.query_one(MyFills), app.query_one(MyOrders)
        assert not table.display and orders.display
        where = orders.region
        await pilot.press("f")
        await settle(pilot)
        assert table.display and not orders.display and app.focused is table
        assert table.region == where  # My orders' place
        rows = _fill_rows(app)
        assert [r[2:] for r in rows] == [["21 @ 9999", "#52", "taker"], ["36 @ 10000", "#47", "taker"],
                                         ["19 @ 10001", "#45", "taker"], ["5 @ 9995", "#41", "maker"],
                                         ["20 @ 9995", "#41", "maker"], ["15 @ 9995", "#41", "maker"]]
        assert [r[1] for r in rows] == ["▼ sell", "▼ sell", "▲ buy", "▲ buy", "▲ buy", "▲ buy"]
        assert rows[0][0] == "14:59:37" and rows[-1][0] == "14:55:00"  # UTC, as the tape
        assert table.border_title == "My fills · ACME · 6"


async def test_a_fill_while_running_shows_once() -> None:
    """A resting order filled by someone else (maker), then the same fill again in an update and in the
    server's list; then an order of this screen's that crosses (its update comes before its answer); then
    a resting order the screen had not seen. Each shows its own role at once, with no `GET /fills` asked."""
    def answer(call: str, args: dict[str, Any]) -> Order:
        return msgspec.structs.replace(order(60, "buy", 10_002, 4, 4, status="filled", seq=700),
                                       fills=[Fill(2_001, 10_002, 4, "taker")])

    app = _fills_app(answer=answer)
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        await pilot.press("f")
        hit = msgspec.structs.replace(order(41, "buy", 9_995, 100, 43, seq=600), fills=[Fill(2_000, 9_995, 3, "maker")])
        backend.emit(OrderChanged(hit))
        backend.emit(OrderChanged(hit))
        await settle(pilot)
        assert _fill_rows(app)[0][2:] == ["3 @ 9995", "#41", "maker"] and len(_fill_rows(app)) == 7
        assert backend.fills_asked == ["ACME"]
        backend.fill_store.append(fill(2_000, 41, "buy", 9_995, 3, "maker", seq=600))
        await pilot.press("r")
        await settle(pilot)
        assert len(backend.fills_asked) == 2
        assert [r[3] for r in _fill_rows(app)].count("#41") == 4 and len(_fill_rows(app)) == 7

        # The screen's own buy crosses: the private update first (the order not seen before), then the answer.
        backend.emit(OrderChanged(answer("place", {})))
        await settle(pilot)
        assert _fill_rows(app)[0][1:] == ["▲ buy", "4 @ 10002", "#60", "taker"] and len(_fill_rows(app)) == 8
        await pilot.press("t", *"10002", "tab", "4", "enter")
        await settle(pilot)
        assert backend.calls[-1][0] == "place"
        assert _fill_rows(app)[0][1:] == ["▲ buy", "4 @ 10002", "#60", "taker"] and len(_fill_rows(app)) == 8
        assert [f.trade_id for f in app.market.my_fills()].count(2_001) == 1

        # A resting sell placed from another screen of the account, hit before this one saw it rest.
        unseen = msgspec.structs.replace(order(59, "sell", 10_003, 9, 2, seq=710),
                                         fills=[Fill(2_002, 10_003, 2, "maker")])
        backend.emit(OrderChanged(unseen))
        await settle(pilot)
        assert _fill_rows(app)[0][1:] == ["▼ sell", "2 @ 10003", "#59", "maker"] and len(_fill_rows(app)) == 9
        assert len(backend.fills_asked) == 2  # only the r above: each role came with its fill


async def test_f_toggles_my_fills_and_the_other_keys_still_work() -> None:
    app = _fills_app(answer=_cancel_answer)
    async with app.run_test(size=(140, 40), notifications=True) as pilot:
        await settle(pilot)
        fills, orders = app.query_one(MyFills), app.query_one(MyOrders)
        await pilot.press("f")
        assert app.focused is fills
        footer = {b.binding.key: b.binding.description for b in app.active_bindings.values() if b.binding.show}
        assert footer["f"] == "My orders"  # where f goes from here
        await pilot.press("f")  # back
        assert app.focused is orders and orders.display and not fills.display
        assert {b.binding.key: b.binding.description for b in app.active_bindings.values()
                if b.binding.show}["f"] == "Fills"
        await pilot.press("d", "f", "o")  # o from My fills: My orders again
        assert app.focused is orders and not fills.display
        await pilot.press("f", "d", "f")  # f from elsewhere goes to My fills, shown or not
        assert app.focused is fills
        # c and a in My fills bring My orders back to choose one; nothing is cancelled unseen.
        await pilot.press("c")
        await settle(pilot)
        assert app.focused is orders and orders.display and app.backend.calls == []  # type: ignore[attr-defined]
        await pilot.press("f", "down", "down")
        assert fills.cursor_row == 2
        # A digit starts the ticket's price, as on the book and in My orders; an f typed there is text.
        await pilot.press("9")
        assert app.focused is app.query_one("#price") and app.query_one("#price", Input).value == "9"
        await pilot.press("f")
        assert app.query_one("#price", Input).value == "9f" and app.focused is app.query_one("#price")
        await pilot.press("escape", "f", "escape")
        assert app.focused is app.query_one(BookView) and fills.display  # escape: to the book
        await pilot.press("C")  # cancel all still works from anywhere
        await settle(pilot)
        assert [c[0] for c in app.backend.calls] == ["cancel_all"]


async def test_my_fills_follow_the_symbol_and_come_back_after_a_reconnect() -> None:
    """The fills of the symbol on screen, loaded again on a switch; those made while away come from the
    server's list after the reconnection; another exchange at the address starts them afresh."""
    app = _fills_app(symbols=["ACME", "BETA"])
    async with app.run_test(size=(140, 40)) as pilot:
        await settle(pilot)
        backend: FixedBackend = app.backend  # type: ignore[assignment]
        backend.fill_store.append(fill(3_000, 70, "sell", 501, 2, "maker", symbol="BETA", seq=650, ts=T0 + 3_600_000))
        await pilot.press("f", "right_square_bracket")
        await settle(pilot)
        assert backend.fills_asked == ["ACME", "BETA"]
        assert _fill_rows(app) == [["15:00:00", "▼ sell", "2 @ 501", "#70", "maker"]]
        assert app.query_one(MyFills).border_title == "My fills · BETA · 1"
        await pilot.press("left_square_bracket")
        await settle(pilot)
        assert len(_fill_rows(app)) == 6

        backend.emit(StateChanged("reconnecting", attempt=1, delay=0.2, error="connection closed"))
        backend.fill_store.append(fill(3_001, 41, "buy", 9_995, 7, "maker", seq=660, ts=T0 + 3_601_000))
        backend.emit(connected())
        await settle(pilot)
        rows = _fill_rows(app)
        assert rows[0] == ["15:00:01", "▲ buy", "7 @ 9995", "#41", "maker"] and len(rows) == 7

        backend.fill_store = []
        backend.emit(ServerChanged("its log is at seq 3, behind the 700 seen"))
        await settle(pilot)
        assert "none in ACME yet" in _fill_rows(app)[0][0] or "loading" in _fill_rows(app)[0][0]
        backend.emit(connected())
        await settle(pilot)
        assert _fill_rows(app)[0][0] == "none in ACME yet"


async def test_my_fills_fit_from_80x24_up() -> None:
    """Every column in view without scrolling sideways, in the place My orders has, at every size."""
    big = [fill(9_000 + i, 123_456, "sell", 10_000 + i, 250, "taker", ts=T0 + i) for i in range(8)]
    for size in ((80, 24), (120, 40), (140, 40), (160, 24), (220, 60)):
        events, bars, mine = busy_feed()
        backend = FixedBackend(events=events, bars={"ACME": bars}, open_orders=mine, fills=big)
        app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
        async with app.run_test(size=size) as pilot:
            await settle(pilot)
            where = app.query_one(MyOrders).region
            await pilot.press("f")
            await settle(pilot)
            table = app.query_one(MyFills)
            assert table.region == where, size
            assert table.virtual_size.width <= table.scrollable_content_region.width, size
            assert "#123456" in _fill_rows(app)[0] and "250 @ 10007" in _fill_rows(app)[0], size


async def test_a_fill_that_arrives_while_my_orders_are_shown_is_drawn_in_full_once_shown() -> None:
    """Drawn while hidden (no width), the rows fell back to the narrowest form (the side as an arrow alone)
    and stayed so once shown."""
    app = _fills_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert _fill_rows(app)[0][1] == "▼ sell"
        await pilot.press("f")
        hit = msgspec.structs.replace(order(41, "buy", 9_995, 100, 43, seq=600), fills=[Fill(2_000, 9_995, 3, "maker")])
        app.backend.emit(OrderChanged(hit))  # type: ignore[attr-defined]
        await settle(pilot)
        await pilot.press("f")
        await settle(pilot)
        assert [row[1] for row in _fill_rows(app)[:2]] == ["▲ buy", "▼ sell"]
