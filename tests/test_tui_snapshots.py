"""Snapshots of the main screens, fed a fixed market instead of the network.

Deterministic: the feed, bars and answers are fixed (`helpers.fixed_backend`), times are shown in UTC from
a fixed epoch, no input cursor blinks, the chart redraws at once, and the terminal size is fixed.
Update with `pytest tests/test_tui_snapshots.py --snapshot-update` after checking the new SVGs by eye.
"""

from __future__ import annotations

from typing import Any, Callable

from textual.pilot import Pilot
from textual.widgets import Checkbox, Input

from tickflow.net.client import BookChanged, StateChanged
from tickflow.tui.app import TickflowApp
from helpers.fixed_backend import FixedBackend, book_of, busy_feed, busy_fills, connected, rejected
from helpers.wait import settle
from tickflow.tui.ticket import OrderTicket

SnapCompare = Callable[..., bool]
"""pytest-textual-snapshot's snap_compare fixture."""
SIZE = (140, 40)
DEFAULT = (80, 24)
"""A terminal's default size: every panel must still be there and readable."""
MEDIUM = (120, 40)


def busy_app(**backend_args: Any) -> TickflowApp:
    events, bars, mine = busy_feed()
    backend = FixedBackend(events=events, bars={"ACME": bars}, open_orders=mine, symbols=["ACME", "BETA"],
                           fills=busy_fills(events), **backend_args)
    return TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)


def test_empty_book(snap_compare: SnapCompare) -> None:
    """A connected screen on a market with nothing in it: blank rows hold their places."""
    backend = FixedBackend(events=[connected(), BookChanged("ACME", book_of("ACME", 1, [], []), 1, True)])
    app = TickflowApp(backend, "ACME", utc=True, live=False, chart_interval=0)
    assert snap_compare(app, terminal_size=SIZE, run_before=settle)


def test_busy_book_with_trades_and_chart(snap_compare: SnapCompare) -> None:
    """Twenty levels a side with depth bars, the tape, an hour of candles and two open orders."""
    assert snap_compare(busy_app(), terminal_size=SIZE, run_before=settle)


def test_busy_screen_at_80x24(snap_compare: SnapCompare) -> None:
    """The default terminal: book over the tape on the left; chart, a two-column ticket and my orders
    on the right."""
    assert snap_compare(busy_app(), terminal_size=DEFAULT, run_before=settle)


def test_busy_screen_at_120x40(snap_compare: SnapCompare) -> None:
    assert snap_compare(busy_app(), terminal_size=MEDIUM, run_before=settle)


async def _reject_post_only(pilot: Pilot) -> None:
    await settle(pilot)
    ticket = pilot.app.query_one(OrderTicket)
    ticket.query_one("#price", Input).value = "10002"
    ticket.query_one("#qty", Input).value = "25"
    ticket.query_one("#post-only", Checkbox).value = True
    await pilot.pause()
    ticket.submit()
    await settle(pilot)


def test_ticket_shows_a_rejection(snap_compare: SnapCompare) -> None:
    """A post-only buy at the best ask comes back rejected, with its reason, under the button."""
    app = busy_app(answer=lambda call, args: rejected(args))
    assert snap_compare(app, terminal_size=SIZE, run_before=_reject_post_only)


def test_ticket_shows_a_rejection_at_80x24(snap_compare: SnapCompare) -> None:
    """The same in the two-column ticket: the answer wraps under the button, the chart gives up a row."""
    app = busy_app(answer=lambda call, args: rejected(args))
    assert snap_compare(app, terminal_size=DEFAULT, run_before=_reject_post_only)


def test_ticket_explains_bad_input_before_sending(snap_compare: SnapCompare) -> None:
    """A limit order without a price is not sent; the ticket says what is missing."""

    async def fill_and_send(pilot: Pilot) -> None:
        await settle(pilot)
        await pilot.press("t", "tab", "4", "0", "enter")
        await settle(pilot)

    app = busy_app()
    assert snap_compare(app, terminal_size=SIZE, run_before=fill_and_send)
    assert app.backend.calls == []  # type: ignore[attr-defined]


def test_my_fills(snap_compare: SnapCompare) -> None:
    """`f`: My fills in the place of My orders, newest first: three taker fills on the tape, three maker
    fills of the resting buy #41; the footer says `f` goes back to My orders."""
    assert snap_compare(busy_app(), terminal_size=SIZE, press=["f"], run_before=settle)


def test_my_fills_at_80x24(snap_compare: SnapCompare) -> None:
    """The same in the 42 columns the panel has at 80x24: one space between columns, every word kept."""
    assert snap_compare(busy_app(), terminal_size=DEFAULT, press=["f"], run_before=settle)


def test_help_screen(snap_compare: SnapCompare) -> None:
    assert snap_compare(busy_app(), terminal_size=SIZE, press=["question_mark"], run_before=settle)


async def _lose_server(pilot: Pilot) -> None:
    await settle(pilot)
    app = pilot.app
    assert isinstance(app, TickflowApp) and isinstance(app.backend, FixedBackend)
    app.backend.emit(StateChanged("reconnecting", attempt=3, delay=1.6,
                              error="ClientConnectorError: Cannot connect to host 127.0.0.1:8080 "
                              "ssl:default [Connect call failed ('127.0.0.1', 8080)]"))
    await settle(pilot)


def test_reconnecting_state(snap_compare: SnapCompare) -> None:
    """The server went away: the header counts the backoff and says why, the book is marked stale."""
    assert snap_compare(busy_app(), terminal_size=SIZE, run_before=_lose_server)


def test_reconnecting_state_at_80x24(snap_compare: SnapCompare) -> None:
    """The same header in fewer words, so it fits beside the symbol and the account."""
    assert snap_compare(busy_app(), terminal_size=DEFAULT, run_before=_lose_server)
