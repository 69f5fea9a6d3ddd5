"""The terminal client driven by key presses (App.run_test) against a real server started by the test."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import wait
from textual.pilot import Pilot
from textual.widgets import Input, Static
from textual.widgets._toast import Toast

from tickflow.demo import ServerProcess
from tickflow.net.client import Client
from tickflow.tui.amend import AmendScreen
from tickflow.tui.app import TickflowApp
from tickflow.tui.backend import LiveBackend
from tickflow.tui.book import BookView
from tickflow.tui.fills import MyFills
from tickflow.tui.header import TopBar
from tickflow.tui.orders import MyOrders
from tickflow.tui.tape import TradeTape
from tickflow.tui.ticket import OrderTicket

SIZE = (160, 48)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("tui-server"), symbols=["ACME", "BETA"], durability="none")
    proc.start()
    yield proc
    proc.kill()


def live_app(url: str, account: str = "alice", symbol: str = "ACME") -> TickflowApp:
    return TickflowApp(LiveBackend(url, account), symbol, utc=True)  # as a user runs it: frame cap on


async def until(pilot: Pilot[Any], predicate: Callable[[], object], timeout: float = 10.0, what: str = "") -> None:
    """helpers.wait.until with the app's own pause between polls (the screen runs meanwhile)."""
    await wait.until(predicate, timeout, interval=0.02, message=what, pause=pilot.pause)


def screen_text(app: TickflowApp, widget_type: type) -> str:
    return str(app.query_one(widget_type).render())


def result_text(app: TickflowApp) -> str:
    return str(app.query_one("#result", Static).render())


def conn_text(app: TickflowApp) -> str:
    return str(app.query_one(TopBar).query_one("#conn", Static).render())


async def test_ticket_book_orders_tape_amend_and_cancel(server: ServerProcess) -> None:
    app = live_app(server.url)
    async with app.run_test(size=SIZE) as pilot, Client(server.url, "bob") as bob:
        await until(pilot, lambda: app.market.connected and app.market.book is not None
                    and app.market.book.live, what="connected with a snapshot")
        # The screen follows at its next frame (at most FRAME_RATE a second), not with the model.
        await until(pilot, lambda: "connected" in conn_text(app), what="the header saying connected")

        # Type an order into the ticket and send it with enter.
        await pilot.press("t", *"9990", "tab", *"5", "enter")
        await until(pilot, lambda: "new" in result_text(app), what="the ticket's answer")
        assert "buy 5 ACME @ 9990" in result_text(app)
        await until(pilot, lambda: app.market.book is not None and app.market.book.best_bid is not None
                    and app.market.book.best_bid.price == 9990, what="the bid in the book")
        await until(pilot, lambda: "9990" in screen_text(app, BookView), what="the bid on the screen")
        mine = app.query_one(MyOrders)
        await until(pilot, lambda: len(mine.orders) == 1, what="the order in My orders")
        order_id = mine.orders[0].order_id

        # Another account crosses it: the trade reaches the tape, the fill reaches My orders.
        await bob.place_order("ACME", "sell", 2, 9990)
        await until(pilot, lambda: any(t.price == 9990 for t in app.market.tape()), what="the trade")
        await until(pilot, lambda: mine.orders and mine.orders[0].filled_qty == 2, what="the fill")
        await until(pilot, lambda: "9990" in screen_text(app, TradeTape), what="the trade on the tape")
        assert "▼" in screen_text(app, TradeTape)  # a seller took liquidity
        await until(pilot, lambda: "2/5" in str(mine.get_row_at(0)[3]), what="the fill in My orders")

        # Amend from the keyboard: o, a, new quantity, enter.
        await pilot.press("escape", "o", "a")
        await until(pilot, lambda: isinstance(app.screen, AmendScreen), what="the amend dialog")
        app.screen.query_one("#amend-qty", Input).value = "4"
        await pilot.press("enter")
        await until(pilot, lambda: mine.orders and mine.orders[0].qty == 4, what="the amended quantity")

        # Cancel it: c. My orders empties and the server agrees.
        await pilot.press("o", "c")
        await until(pilot, lambda: not mine.orders, what="the cancel")
        async with Client(server.url, "alice") as alice:
            assert (await alice.get_order(order_id)).status == "cancelled"
        await until(pilot, lambda: app.market.book is not None and (app.market.book.best_bid is None
                    or app.market.book.best_bid.price != 9990), what="the level to go")


async def test_symbol_switch_and_palette_price_pick(server: ServerProcess) -> None:
    async with Client(server.url, "carol") as carol:
        await carol.place_order("BETA", "sell", 3, 777)
    app = live_app(server.url)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: app.market.connected and "BETA" in app.market.symbols, what="symbols")
        await pilot.press("right_square_bracket")
        assert app.market.symbol == "BETA"
        await until(pilot, lambda: app.market.book is not None and app.market.book.live
                    and app.market.book.best_ask is not None, what="BETA's snapshot")
        # Choose the best ask on the book with the keyboard: its price goes into the ticket.
        await pilot.press("d", "enter")
        await pilot.pause()
        assert app.query_one("#price", Input).value == "777"
        assert app.query_one(OrderTicket).symbol == "BETA"


def candles(app: TickflowApp) -> list[tuple[int, ...]]:
    return [(c.t, c.open, c.high, c.low, c.close, c.volume) for c in app.market.bars()]


async def server_bars(url: str) -> list[tuple[int, ...]]:
    async with Client(url, "eve") as eve:
        return [(b.t, b.open, b.high, b.low, b.close, b.volume) for b in await eve.bars("ACME")]


async def test_screen_recovers_after_kill_9_and_restart(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="group")
    proc.start()
    try:
        async with Client(proc.url, "dora") as dora, Client(proc.url, "bob") as bob:
            await dora.place_order("ACME", "sell", 11, 10_050)
            await dora.place_order("ACME", "sell", 5, 10_060)
            await bob.place_order("ACME", "buy", 3, 10_060)  # a trade: 3 @ 10050
        app = live_app(proc.url)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.market.connected and app.market.book is not None
                        and app.market.book.live and app.market.book.best_ask is not None, what="snapshot")
            seq_before = app.market.seq
            assert app.market.symbols == ["ACME"]

            await asyncio.to_thread(proc.kill)
            await until(pilot, lambda: app.market.conn.state == "reconnecting", what="reconnecting")
            # The status line repaints on its own refresh, a moment after the state changes.
            await until(pilot, lambda: "reconnecting" in conn_text(app), what="the screen to say reconnecting")
            assert app.query_one(BookView).stale
            assert "stale" in screen_text(app, BookView)
            # Once the port is closed, the header says so in words, not as an exception.
            await until(pilot, lambda: "connection refused" in conn_text(app), what="connection refused")
            assert "Error" not in conn_text(app)

            proc.symbols = ["ACME", "GAMMA"]  # back with one more symbol
            await asyncio.to_thread(proc.restart)
            await until(pilot, lambda: app.market.connected and app.market.book is not None
                        and app.market.book.live, timeout=15, what="reconnected with a fresh snapshot")
            await until(pilot, lambda: "connected" in conn_text(app) and "reconnecting" not in conn_text(app)
                        and not app.query_one(BookView).stale, what="the screen to say connected again")
            assert app.market.book is not None and app.market.book.best_ask is not None
            assert app.market.book.best_ask.price == 10_050
            assert app.market.seq >= seq_before
            await until(pilot, lambda: app.market.symbols == ["ACME", "GAMMA"], what="the new symbol list")

            # The chart, rebuilt from /bars and the trades since, counts every trade once.
            async with Client(proc.url, "bob") as bob:
                await bob.place_order("ACME", "buy", 4, 10_055)  # 4 @ 10050
            expected = await server_bars(proc.url)
            assert sum(bar[5] for bar in expected) == 7
            await until(pilot, lambda: candles(app) == expected, what=f"the candles to be {expected}")

            # The feed flows again: a new order after the restart shows up.
            async with Client(proc.url, "dora") as dora:
                await dora.place_order("ACME", "sell", 4, 10_040)
            await until(pilot, lambda: app.market.book is not None and app.market.book.best_ask is not None
                        and app.market.book.best_ask.price == 10_040, what="an update after the restart")
            await pilot.pause()
            assert "10040" in screen_text(app, BookView)
    finally:
        proc.kill()


async def test_a_sweep_of_more_trades_than_the_snapshot_holds_in_one_millisecond_is_counted_whole(
        tmp_path: Path) -> None:
    """One market order through 100 levels makes 100 trades with one time; the feed's snapshot holds
    only the newest of them. The bars are cut at the newest trade seen by id, so the rest still count."""
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="none")
    proc.start()
    try:
        async with Client(proc.url, "mm") as mm, Client(proc.url, "bob") as bob:
            rests = await asyncio.gather(*(mm.place_order("ACME", "sell", i % 4 + 1, 4000 + i) for i in range(100)))
            total = sum(o.qty for o in rests)
            sweep = await bob.place_order("ACME", "buy", total, type="market")
            assert sweep.status == "filled" and len(sweep.fills) == 100
        expected = await server_bars(proc.url)
        assert [bar[1:] for bar in expected] == [(4000, 4099, 4000, 4099, total)]
        app = live_app(proc.url)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.market.connected and app.market.tape(), what="the snapshot's trades")
            assert len(app.market.tape()) < 100
            await until(pilot, lambda: candles(app) == expected, what=f"the candles to be {expected}")
    finally:
        proc.kill()


async def test_another_server_at_the_same_address_is_shown_afresh(tmp_path: Path) -> None:
    """kill -9, then a fresh server (a new data directory) on the same port: its order ids, trade ids and
    seqs start again. The screen kept the old server's: My orders refused orders whose ids it had seen
    closed, the tape every trade, the chart cut its bars at the old trade id, the header the old seq."""
    first = ServerProcess(tmp_path / "one", symbols=["ACME"], durability="none")
    first.start()
    second = ServerProcess(tmp_path / "two", port=first.port, symbols=["ACME"], durability="none")
    try:
        async with Client(first.url, "bob") as bob, Client(first.url, "alice") as alice:
            for i in range(6):  # ids 1-12 closed: alice's orders filled, bob's taking
                await alice.place_order("ACME", "sell", 1, 100 + i)
                await bob.place_order("ACME", "buy", 1, 100 + i)
        app = live_app(first.url)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.market.connected and len(app.market.tape()) == 6, what="the trades")
            old_seq = app.market.seq
            await asyncio.to_thread(first.kill)
            await until(pilot, lambda: app.market.conn.state == "reconnecting", what="reconnecting")
            await asyncio.to_thread(second.start)
            await until(pilot, lambda: app.market.connected and app.market.book is not None and app.market.book.live,
                        timeout=15, what="connected to the new server")
            async with Client(second.url, "alice") as alice:
                now = (await alice.health()).seq
            assert now < old_seq
            await until(pilot, lambda: app.market.seq == now and f"seq {now}" in conn_text(app), what=f"seq {now}")
            async with Client(second.url, "bob") as bob, Client(second.url, "alice") as alice:
                for i in range(7):  # alice's orders 1-14 rest; 1 is filled in part by bob's 15
                    await alice.place_order("ACME", "sell", 2, 200 + i)
                    await alice.place_order("ACME", "buy", 1, 10 + i)
                await bob.place_order("ACME", "buy", 1, 200, tif="ioc")
                listed = sorted(o.order_id for o in await alice.open_orders())
            assert len(listed) == 14
            mine = app.query_one(MyOrders)
            await until(pilot, lambda: [o.order_id for o in mine.orders] == listed, timeout=15,
                        what=f"My orders to list {listed}")
            await until(pilot, lambda: mine.orders[0].filled_qty == 1, what="the fill of order 1")
            await until(pilot, lambda: [t.trade_id for t in app.market.tape()] == [1], what="the new trade")
            expected = await server_bars(second.url)
            await until(pilot, lambda: candles(app) == expected, what=f"the candles to be {expected}")
            # Cancel all reaches them.
            await pilot.press("C")
            await until(pilot, lambda: not mine.orders, what="every order cancelled")
            async with Client(second.url, "alice") as alice:
                assert await alice.open_orders() == []
    finally:
        first.kill()
        second.kill()


async def test_cancel_all_takes_every_order_in_the_symbol_in_one_command(server: ServerProcess) -> None:
    async with Client(server.url, "ursula") as ursula, Client(server.url, "victor") as victor:
        acme = [await ursula.place_order("ACME", "buy", 2, p) for p in (101, 102, 102)]
        acme.append(await ursula.place_order("ACME", "sell", 2, 99_000))
        beta = await ursula.place_order("BETA", "buy", 2, 101)  # below the BETA ask an earlier test leaves
        theirs = await victor.place_order("ACME", "buy", 1, 102)
        app = live_app(server.url, "ursula")
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            mine = app.query_one(MyOrders)
            await until(pilot, lambda: len(mine.orders) == 5, what="the five orders in My orders")
            await pilot.press("C")
            await until(pilot, lambda: [o.order_id for o in mine.orders] == [beta.order_id],
                        what="only the BETA order left")
            await until(pilot, lambda: any("cancel all: 4 ACME orders cancelled" in str(t.render())
                                           for t in app.screen.query(Toast)), what="the summary")
            now = [await ursula.get_order(o.order_id) for o in acme]
            assert {(o.status, o.reason) for o in now} == {("cancelled", "cancelled_by_user")}
            assert len({o.seq for o in now}) == 1  # one command: nothing could trade in between
            assert [o.order_id for o in await ursula.open_orders()] == [beta.order_id]
            assert [o.order_id for o in await victor.open_orders()] == [theirs.order_id]

            def levels() -> tuple[dict[int, int], dict[int, int]]:
                book = app.market.book
                if book is None:
                    return {}, {}
                return {lv.price: lv.qty for lv in book.bids()}, {lv.price: lv.qty for lv in book.asks()}

            await until(pilot, lambda: levels()[0].get(102) == 1 and 101 not in levels()[0]
                        and 99_000 not in levels()[1], what="only victor's bid left of those levels")
        await ursula.cancel_all()
        await victor.cancel_all()


def fill_rows(app: TickflowApp) -> list[list[str]]:
    """My fills as shown: each row's cells as plain text."""
    table = app.query_one(MyFills)
    return [[str(cell).strip() for cell in table.get_row_at(i)] for i in range(table.row_count)]


def deals(app: TickflowApp) -> list[tuple[str, ...]]:
    """My fills as shown, without the time: side, qty @ price, order, role."""
    return [tuple(row[1:]) for row in fill_rows(app)]


async def test_my_fills_from_before_the_start_and_live_each_once(server: ServerProcess) -> None:
    """wendy's fills made before the screen started come from GET /fills with their side and role; one
    made while it runs (someone hits her resting order) and one of her own from the ticket show once
    each, also after a reload."""
    async with Client(server.url, "wendy") as wendy, Client(server.url, "xavier") as xavier:
        rest = await wendy.place_order("ACME", "sell", 4, 50_000)
        await xavier.place_order("ACME", "buy", 3, 50_000)  # wendy's resting sell: maker
        await xavier.place_order("ACME", "buy", 2, 49_000)
        took = await wendy.place_order("ACME", "sell", 2, 49_000)  # wendy crosses: taker
        assert took.status == "filled"
        app = live_app(server.url, "wendy")
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.market.connected, what="connected")
            await pilot.press("f")
            assert app.focused is app.query_one(MyFills)
            before = [("▼ sell", "2 @ 49000", f"#{took.order_id}", "taker"),
                      ("▼ sell", "3 @ 50000", f"#{rest.order_id}", "maker")]
            await until(pilot, lambda: deals(app) == before, what=f"My fills to be {before}")

            # xavier hits the last 1 of her resting sell while the screen runs.
            await xavier.place_order("ACME", "buy", 1, 50_000)
            now = [("▼ sell", "1 @ 50000", f"#{rest.order_id}", "maker"), *before]
            await until(pilot, lambda: deals(app) == now, what=f"the new fill on top: {now}")

            # Her own buy from the ticket crosses xavier's sell: its answer and its update, one row.
            await xavier.place_order("ACME", "sell", 5, 50_200)
            await pilot.press("t", *"50200", "tab", "5", "enter")
            await until(pilot, lambda: "filled" in result_text(app), what="the ticket's answer")
            await until(pilot, lambda: len(deals(app)) == 4 and deals(app)[0][1] == "5 @ 50200",
                        what="the ticket's fill")
            mine = deals(app)[0]
            assert mine[0] == "▲ buy" and mine[3] == "taker"
            await pilot.press("escape", "r")
            await wait.settle(pilot)  # the reload's reads are in and shown
            await until(pilot, lambda: len(deals(app)) == 4, what="the reload")
            assert deals(app) == [mine, *now]
            server_says = await wendy.fills("ACME", newest_first=True)
            assert [(f.side, f.qty, f.price, f.liquidity) for f in server_says] == [
                ("buy", 5, 50_200, "taker"), ("sell", 1, 50_000, "maker"), ("sell", 2, 49_000, "taker"),
                ("sell", 3, 50_000, "maker")]
            assert [int(row[2][1:]) for row in deals(app)] == [f.order_id for f in server_says]

            await pilot.press("f", "f")  # from the book to My fills, then back to My orders
            assert app.focused is app.query_one(MyOrders) and not app.query_one(MyFills).display


async def test_my_fills_after_a_restart_hold_each_fill_once(tmp_path: Path) -> None:
    """kill -9 and a restart: the fills are asked for again once the screen is back; those seen before
    stay once, and one made meanwhile is there, with its role."""
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="group")
    proc.start()
    try:
        async with Client(proc.url, "alice") as alice, Client(proc.url, "bob") as bob:
            rest = await alice.place_order("ACME", "buy", 10, 700)
            await bob.place_order("ACME", "sell", 4, 700)
        app = live_app(proc.url)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: app.market.connected, what="connected")
            await pilot.press("f")
            first = [("▲ buy", "4 @ 700", f"#{rest.order_id}", "maker")]
            await until(pilot, lambda: deals(app) == first, what=f"My fills to be {first}")
            await asyncio.to_thread(proc.kill)
            await until(pilot, lambda: app.market.conn.state == "reconnecting", what="reconnecting")
            await asyncio.to_thread(proc.restart)
            async with Client(proc.url, "bob") as bob:
                await bob.place_order("ACME", "sell", 3, 700)  # as the screen comes back, or just after
            both = [("▲ buy", "3 @ 700", f"#{rest.order_id}", "maker"), *first]
            await until(pilot, lambda: app.market.connected and deals(app) == both, timeout=15,
                        what=f"My fills to be {both}")
            await pilot.press("r")
            await wait.settle(pilot)  # the reload's reads are in and shown
            assert deals(app) == both
    finally:
        proc.kill()
