"""The browser page (web/) in a real Chromium against a real `tickflow serve`.

Playwright drives Debian's /usr/bin/chromium (it cannot download a browser of its own here); the server
runs in a child process on a free port of 127.0.0.1 with its data in a temp dir. Other clients are plain
aiohttp calls with their own Bearer tokens. `scripts/ci-browser.sh` installs chromium and playwright.

Set TICKFLOW_WEB_ARTIFACTS=DIR to keep the screenshots somewhere other than pytest's tmp dir.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
REPO = Path(__file__).resolve().parents[1]

import aiohttp
from helpers.wait import wait_until
from server_process import ServerProcess

try:
    from playwright.sync_api import Browser, Page, expect, sync_playwright
except ImportError:
    sync_playwright = None  # type: ignore[assignment]  # (need_chromium says what to install)
else:
    expect.set_options(timeout=10_000)


def need_chromium() -> None:
    """Skip, saying what to install, where the browser or Playwright is missing (a user without root)."""
    if not Path(CHROMIUM).exists():
        pytest.skip(f"browser tests need {CHROMIUM}: run scripts/ci-browser.sh as root (apt-get install chromium)")
    if sync_playwright is None:
        pytest.skip("browser tests need playwright: run scripts/ci-browser.sh (pip install playwright into .venv)")

# Chromium itself logs a failed WebSocket or fetch while the server is down; that is the network, not the page.
NETWORK_NOISE = re.compile(r"WebSocket connection to .* failed|Failed to load resource|ERR_CONNECTION_REFUSED")


# ------------------------------------------------------------------ a real server


class Server(ServerProcess):
    """The shared test server (tests/server_process.py), with this file's argument order."""

    def __init__(self, data: Path, symbols: str, extra: list[str] | None = None) -> None:
        super().__init__(data, symbols=symbols, extra=extra)


def off_loop(coro: Any) -> Any:
    """Run a coroutine to the end in its own thread: Playwright's sync API keeps a loop in this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def call(server: Server, method: str, path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
    """One HTTP call from another client: plain aiohttp, its own Bearer token."""
    return off_loop(_calls(server, [(method, path, token, body)]))[0]


def calls(server: Server, requests: Sequence[tuple[str, str, str | None, Any]]) -> list[tuple[int, Any]]:
    """Many HTTP calls at once (a burst)."""
    return off_loop(_calls(server, requests))


async def _calls(server: Server, requests: Sequence[tuple[str, str, str | None, Any]]) -> list[tuple[int, Any]]:
    async with aiohttp.ClientSession() as session:
        async def one(method: str, path: str, token: str | None, body: Any) -> tuple[int, Any]:
            headers = {"Authorization": f"Bearer {token}"} if token else {}
            async with session.request(method, server.url + path, json=body, headers=headers) as r:
                return r.status, await r.json(content_type=None)
        return list(await asyncio.gather(*(one(*req) for req in requests)))


def limit(symbol: str, side: str, price: int, qty: int, **extra: Any) -> dict[str, Any]:
    return {"symbol": symbol, "side": side, "type": "limit", "price": price, "qty": qty, **extra}


# ------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    symbols = ("ACME,GLOBEX,LOAD,TICK,TAPE,GAPS,BURST,PHONE,DBL,COMMA,BIG,SWEEP,OUT,FAT,ARROW,FOCUS,CXL,ANSWER,"
               "CANDLE,FRESH,SWEPT,LOST,KILL,NARROW,SWITCH,STALE,LATE,TALL,AMEND,AMENDX,CXLALL,CXLOTHER,FINGER,CXLHTTP,CXLLATE,"
               "FILLS,FILLS2")
    srv = Server(tmp_path_factory.mktemp("web") / "data", symbols).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    need_chromium()
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    where = os.environ.get("TICKFLOW_WEB_ARTIFACTS")
    path = Path(where) if where else tmp_path
    path.mkdir(parents=True, exist_ok=True)
    return path


class Pages:
    """Opens pages as a given account on a given symbol, and checks none of them logged an error."""

    def __init__(self, browser: Browser, server: Server) -> None:
        self.browser = browser
        self.server = server
        self.opened: list[tuple[Any, Page, list[str]]] = []

    def open(self, account: str | None = "alice", symbol: str = "ACME", width: int = 1440, height: int = 900,
             server: Server | None = None, ws_route: Any = None) -> Page:
        """`ws_route`, when given, handles the page's WebSockets (Playwright's route_web_socket)."""
        context = self.browser.new_context(viewport={"width": width, "height": height})
        if account is not None:
            # What a returning user has in localStorage: set once per tab, so the page's own changes stick.
            context.add_init_script(
                "if (!sessionStorage.getItem('seeded')) { sessionStorage.setItem('seeded', '1');"
                f" localStorage.setItem('tickflow.account', {json.dumps(account)});"
                f" localStorage.setItem('tickflow.symbol', {json.dumps(symbol)}); }}")
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(f"uncaught: {e}"))
        page.console_errors = errors  # type: ignore[attr-defined]
        sent: list[str] = []
        page.on("websocket", lambda ws: ws.on("framesent", lambda f: sent.append(f if isinstance(f, str) else "")))
        page.frames_sent = sent  # type: ignore[attr-defined]
        if ws_route is not None:
            page.route_web_socket(re.compile(r"/ws$"), ws_route)
        page.goto((server or self.server).url + "/")
        wait_for_snapshot(page)
        self.opened.append((context, page, errors))
        return page

    def close(self) -> None:
        problems = []
        for context, page, errors in self.opened:
            context.close()
            problems += errors
        assert problems == [], f"the page logged errors: {problems}"


@pytest.fixture
def pages(browser: Browser, server: Server) -> Iterator[Pages]:
    p = Pages(browser, server)
    yield p
    p.close()


def wait_for_snapshot(page: Page) -> None:
    page.wait_for_function("() => document.getElementById('book').dataset.seq", timeout=10_000)


def sent_ops(page: Page, op: str) -> list[dict[str, Any]]:
    """The messages with this op that the page sent over its WebSockets."""
    out = []
    for frame in page.frames_sent:  # type: ignore[attr-defined]
        try:
            message = json.loads(frame)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("op") == op:
            out.append(message)
    return out


def pump(page: Page) -> Any:
    """The pause for helpers.wait.wait_until while a page runs: Playwright's sync API delivers its events
    (route handlers, WebSocket frames, requests) only while it is called, never during a time.sleep."""
    return lambda seconds: page.wait_for_timeout(seconds * 1000)


def all_handled(page: Page) -> None:
    """A ping, and its pong read back, on the page's own socket: every message the server sent before
    the pong has reached the page and been handled (a socket delivers in order, and the page handles
    each message as it comes). What the page must not do with a message has been left undone by then."""
    page.evaluate("""() => new Promise((resolve, reject) => {
        const conn = window.tickflow.conn, ws = conn.ws;
        if (!ws || ws.readyState !== WebSocket.OPEN) { reject(new Error('the page has no open socket')); return; }
        const timer = setTimeout(() => reject(new Error('no pong within 10 s')), 10000);
        ws.addEventListener('message', function pong(ev) {
            let msg;
            try { msg = JSON.parse(typeof ev.data === 'string' ? ev.data : new TextDecoder().decode(ev.data)); }
            catch { return; }
            if (msg.type !== 'pong') return;
            ws.removeEventListener('message', pong);
            clearTimeout(timer);
            resolve();
        });
        conn.send({op: 'ping'});
    })""")


def size(page: Page, side: str, price: int) -> Any:
    """The size cell of a book level."""
    return level(page, side, price).locator("td").nth(1)


def level(page: Page, side: str, price: int) -> Any:
    return page.locator(f"#{'bids' if side == 'buy' else 'asks'} tr[data-price='{price}']")


def place_from_ticket(page: Page, side: str, price: int | str, qty: int | str, tif: str = "gtc",
                      post_only: bool = False) -> None:
    page.click(f"label[for=t-{side}]")
    page.select_option("#t-type", "limit")
    page.fill("#t-price", str(price))
    page.fill("#t-qty", str(qty))
    page.select_option("#t-tif", tif)
    page.set_checked("#t-postonly", post_only)
    page.click("#t-submit")


# ------------------------------------------------------------------ tests


def test_static_files_are_served_with_their_content_types(server: Server) -> None:
    async def heads() -> dict[str, str]:
        async with aiohttp.ClientSession() as s:
            out = {}
            for path in ("/", "/js/main.js", "/css/app.css", "/vendor/lightweight-charts.js", "/favicon.svg"):
                async with s.get(server.url + path) as r:
                    assert r.status == 200, path
                    out[path] = r.content_type
            return out

    types = off_loop(heads())
    assert types["/"] == "text/html"
    assert types["/js/main.js"] in ("text/javascript", "application/javascript")
    assert types["/vendor/lightweight-charts.js"] in ("text/javascript", "application/javascript")
    assert types["/css/app.css"] == "text/css"
    assert types["/favicon.svg"] == "image/svg+xml"


def test_the_page_shows_a_snapshot_of_the_book_with_depth(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("LOAD", "buy", 998, 30)),
                   ("POST", "/orders", "mm", limit("LOAD", "buy", 999, 10)),
                   ("POST", "/orders", "mm", limit("LOAD", "sell", 1001, 20)),
                   ("POST", "/orders", "mm", limit("LOAD", "sell", 1003, 5))])
    page = pages.open("viewer", "LOAD")
    expect(page.locator("#conn")).to_have_attribute("data-state", "open")
    expect(page.locator("#conn-text")).to_have_text("Live as viewer")
    # Asks above the spread, worst first, so the best ask (1001) sits right above it; bids best first below.
    asks = page.locator("#asks tr[data-price]")
    bids = page.locator("#bids tr[data-price]")
    expect(asks).to_have_count(2)
    expect(bids).to_have_count(2)
    assert [asks.nth(i).get_attribute("data-price") for i in range(2)] == ["1003", "1001"]
    assert [bids.nth(i).get_attribute("data-price") for i in range(2)] == ["999", "998"]
    # Price, size, cumulative total.
    assert level(page, "sell", 1003).inner_text().split() == ["1003", "5", "25"]
    assert level(page, "buy", 998).inner_text().split() == ["998", "30", "40"]
    expect(page.locator("#spread")).to_have_text("Spread 2 · Mid 1000")
    # Depth bars scale with the cumulative total; the deepest level is the full width.
    assert level(page, "buy", 998).evaluate("e => e.style.getPropertyValue('--depth')") == "100.0%"
    assert level(page, "buy", 999).evaluate("e => e.style.getPropertyValue('--depth')") == "25.0%"
    # Asks red, bids green (the default palette), each with its side in its accessible name.
    ask_colour = level(page, "sell", 1001).locator("button").evaluate("e => getComputedStyle(e).color")
    bid_colour = level(page, "buy", 999).locator("button").evaluate("e => getComputedStyle(e).color")
    assert (ask_colour, bid_colour) == ("rgb(248, 81, 73)", "rgb(63, 185, 80)")
    assert level(page, "sell", 1001).locator("button").get_attribute("aria-label").startswith("ask 1001, size 20")
    # Swapping the palette swaps the colours and is remembered.
    page.select_option("#palette", "swapped")
    swapped = level(page, "sell", 1001).locator("button").evaluate("e => getComputedStyle(e).color")
    assert swapped == "rgb(63, 185, 80)"
    assert page.evaluate("localStorage.getItem('tickflow.palette')") == "swapped"


def test_an_order_from_the_ticket_rests_in_the_book_and_cancel_removes_it(pages: Pages) -> None:
    page = pages.open("alice", "TICK")
    place_from_ticket(page, "buy", 990, 7)
    expect(page.locator("#answer")).to_contain_text("buy 7 TICK @ 990, open")
    expect(size(page, "buy", 990)).to_have_text("7")
    expect(level(page, "buy", 990).locator(".mine-mark")).to_have_text("◆")
    row = page.locator("#orders tr")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("990")
    expect(row).to_contain_text("0 / 7")
    # A second user sees it too.
    other = pages.open("bob", "TICK")
    expect(size(other, "buy", 990)).to_have_text("7")
    expect(other.locator("#orders-empty")).to_be_visible()

    row.locator("button.cancel").click()
    expect(page.locator("#orders tr")).to_have_count(0)
    expect(page.locator("#orders-empty")).to_be_visible()
    expect(level(page, "buy", 990)).to_have_count(0)
    expect(level(other, "buy", 990)).to_have_count(0)
    expect(page.locator("#activity")).to_contain_text("Cancelled #")


def test_the_ticket_checks_input_before_sending_and_shows_the_servers_answer(pages: Pages, server: Server) -> None:
    page = pages.open("carol", "TICK")
    before = len(call(server, "GET", "/orders?status=open", "carol")[1]["orders"])

    place_from_ticket(page, "buy", "", 5)
    expect(page.locator("#t-price-err")).to_contain_text("price must be a whole number")
    expect(page.locator("#t-price")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#t-price")).to_be_focused()
    # Keyboard only: Enter in a field sends the ticket, which is checked first.
    page.fill("#t-price", "12x")
    page.press("#t-price", "Enter")
    expect(page.locator("#t-price-err")).to_contain_text("price must be a whole number")
    place_from_ticket(page, "buy", 100, "2.5")
    expect(page.locator("#t-qty-err")).to_contain_text("quantity must be a whole number")
    place_from_ticket(page, "sell", 100, 5, tif="ioc", post_only=True)
    expect(page.locator("#t-postOnly-err")).to_contain_text("post only needs a GTC limit")
    assert sent_ops(page, "order") == []  # nothing reached the server
    assert len(call(server, "GET", "/orders?status=open", "carol")[1]["orders"]) == before

    # The server's own answers: a post-only order that would take is rejected, and the page says why.
    call(server, "POST", "/orders", "mm", limit("TICK", "sell", 1500, 3))
    place_from_ticket(page, "buy", 1500, 1, post_only=True)
    expect(page.locator("#answer")).to_contain_text("rejected, post only would take")
    expect(page.locator("#answer")).to_have_class(re.compile(r"\bbad\b"))
    assert len(sent_ops(page, "order")) == 1
    # A market order with nothing on the other side: cancelled, no liquidity.
    page.select_option("#t-type", "market")
    expect(page.locator("#t-price")).to_be_disabled()
    page.click("label[for=t-sell]")
    page.click("#t-submit")
    expect(page.locator("#answer")).to_contain_text("sell 1 TICK at market")
    expect(page.locator("#answer")).to_contain_text("no liquidity")
    expect(page.locator("#answer")).to_have_text(re.compile(r"^○ "))  # it did nothing: no tick


def test_a_crossing_order_from_another_client_shows_on_the_tape_and_chart(pages: Pages, server: Server) -> None:
    page = pages.open("alice", "TAPE")
    expect(page.locator("#chart-summary")).to_contain_text("no trades yet")
    place_from_ticket(page, "sell", 2010, 5)
    expect(size(page, "sell", 2010)).to_have_text("5")

    status, body = call(server, "POST", "/orders", "bob", limit("TAPE", "buy", 2012, 3))
    assert status == 200 and body["status"] == "filled"

    # The tape: price, qty, coloured by the aggressor (bob bought) with an arrow.
    first = page.locator("#tape tr").first
    expect(first).to_contain_text("▲ 2010")
    expect(first).to_contain_text("3")
    expect(first).to_have_class("buy")
    assert first.locator("td").nth(1).evaluate("e => getComputedStyle(e).color") == "rgb(63, 185, 80)"
    # The chart: one candle with the trade in it, drawn on a canvas and described in text.
    expect(page.locator("#chart-summary")).to_contain_text("close 2010, volume 3")
    assert page.locator("#chart canvas").count() > 0
    # alice's resting order was partly filled: her list and her activity say so; the book shrank.
    expect(page.locator("#orders tr")).to_contain_text("3 / 5")
    expect(page.locator("#activity")).to_contain_text("filled 3 @ 2010")
    expect(size(page, "sell", 2010)).to_have_text("2")
    expect(page.locator("#quote-last")).to_have_text("▲ 2010")

    # A seller hitting a bid: a down arrow, the sell colour, and the candle's close moves.
    call(server, "POST", "/orders", "bob", limit("TAPE", "buy", 2000, 4))
    call(server, "POST", "/orders", "dave", limit("TAPE", "sell", 2000, 4))
    expect(page.locator("#tape tr").first).to_contain_text("▼ 2000")
    expect(page.locator("#tape tr").first).to_have_class("sell")
    expect(page.locator("#chart-summary")).to_contain_text("high 2010, low 2000, close 2000, volume 7")

    # A fresh page builds the same candle from GET /bars and the tape from the snapshot.
    fresh = pages.open("erin", "TAPE")
    expect(fresh.locator("#chart-summary")).to_contain_text("high 2010, low 2000, close 2000, volume 7")
    expect(fresh.locator("#tape tr")).to_have_count(2)


@pytest.mark.parametrize("seen_before", [True, False])
def test_a_trade_during_the_candles_load_is_counted_once(pages: Pages, server: Server, seen_before: bool) -> None:
    """The page holds the trades that arrive while `/bars` loads and adds them on top; one the server had
    already put in the bars must not count twice. The test holds `/bars` until such a trade is in."""
    symbol = "CANDLE" if seen_before else "FRESH"
    if seen_before:  # a trade the page's tape already holds when the candles load
        call(server, "POST", "/orders", "mm", limit(symbol, "sell", 3000, 2))
        call(server, "POST", "/orders", "bob", limit(symbol, "buy", 3000, 2))
    page = pages.open("alice", symbol)
    page.wait_for_function("() => document.getElementById('chart-summary').textContent !== ''")

    held: list[Any] = []

    def hold_the_first(route: Any) -> None:
        if not held:  # the first load only (the page may load again, once it has a trade to cut at)
            held.append(route)
        else:
            route.continue_()

    def server_volume(interval: str) -> int:  # the newest candle's, as the server computes it
        status, bars = call(server, "GET", f"/bars?symbol={symbol}&interval={interval}")
        assert status == 200 and bars
        return bars[-1]["volume"]

    page.route(re.compile(r"/bars\?"), hold_the_first)
    page.select_option("#interval", "1h")  # the candles load again, with the trade in between
    wait_until(lambda: held, pause=pump(page), message="the page to ask for the candles")
    call(server, "POST", "/orders", "mm", limit(symbol, "sell", 3001, 5))
    _, took = call(server, "POST", "/orders", "bob", limit(symbol, "buy", 3001, 5))
    trade_id = took["fills"][0]["tradeId"]
    # The trade reaches the page (held: the bars are loading) and the trade store; then the bars answer.
    page.wait_for_function("() => window.tickflow.chart.held.length > 0")
    wait_until(lambda: any(t["tradeId"] == trade_id for t in call(server, "GET", f"/trades?symbol={symbol}")[1]),
               message="the trade in the trade store")
    held[0].continue_()
    page.wait_for_function("() => window.tickflow.chart.loading === null")  # any second load has landed too
    assert held
    expect(page.locator("#chart-summary")).to_contain_text(f"volume {server_volume('1h')}")
    page.unroute(re.compile(r"/bars\?"))
    page.select_option("#interval", "15m")  # and a plain load agrees
    expect(page.locator("#chart-summary")).to_contain_text(f"volume {server_volume('15m')}")


def newest_candle(page: Page, interval_ms: int) -> dict[str, int]:
    """The newest candle the chart holds, once its load at `interval_ms` has landed."""
    page.wait_for_function("ms => { const c = window.tickflow.chart; return c.loading === null"
                           " && c.candles.intervalMs === ms && c.candles.latest() !== null; }", arg=interval_ms)
    bar = page.evaluate("window.tickflow.chart.candles.latest()")
    return {k: bar[k] for k in ("t", "open", "high", "low", "close", "volume")}


def test_a_sweep_of_more_trades_than_the_tape_holds_in_one_millisecond_is_counted_whole(
        pages: Pages, server: Server) -> None:
    """One market order through 100 levels: 100 trades with one time, more than the tape holds. The
    candles are cut at the newest trade held by id, not by time, so the ones gone from the tape (or never
    in the snapshot) still count, once."""
    watching = pages.open("alice", "SWEPT")
    rests = [limit("SWEPT", "sell", 4000 + i, i % 4 + 1) for i in range(100)]
    assert {status for status, _ in calls(server, [("POST", "/orders", "mm", r) for r in rests])} == {200}
    total = sum(r["qty"] for r in rests)
    status, sweep = call(server, "POST", "/orders", "bob", {"symbol": "SWEPT", "side": "buy", "type": "market",
                                                            "qty": total})
    assert status == 200 and sweep["status"] == "filled" and len(sweep["fills"]) == 100
    whole = {"open": 4000, "high": 4099, "low": 4000, "close": 4099, "volume": total}
    text = ", ".join(f"{k} {v}" for k, v in whole.items()) + "."
    expect(watching.locator("#chart-summary")).to_contain_text(text)  # live: every trade arrived
    assert watching.evaluate("window.tickflow.tape.trades.length") < 100

    watching.select_option("#interval", "5m")  # loaded again, holding only the newest of them
    five = 300_000
    assert newest_candle(watching, five) == {"t": sweep["ts"] - sweep["ts"] % five, **whole}
    expect(watching.locator("#chart-summary")).to_contain_text("5 min candles (1). Latest")
    expect(watching.locator("#chart-summary")).to_contain_text(text)

    fresh = pages.open("erin", "SWEPT")  # its snapshot holds fewer still
    assert fresh.evaluate("window.tickflow.tape.trades.length") < 100
    assert newest_candle(fresh, 60_000) == {"t": sweep["ts"] - sweep["ts"] % 60_000, **whole}
    expect(fresh.locator("#chart-summary")).to_contain_text(text)


def test_clicking_or_pressing_enter_on_a_level_copies_its_price(pages: Pages, server: Server) -> None:
    call(server, "POST", "/orders", "mm", limit("GLOBEX", "sell", 777, 4))
    call(server, "POST", "/orders", "mm", limit("GLOBEX", "buy", 770, 4))
    page = pages.open("alice", "GLOBEX")
    level(page, "sell", 777).click()
    expect(page.locator("#t-price")).to_have_value("777")
    # Keyboard only: tab to the bid's price, press Enter.
    button = level(page, "buy", 770).locator("button")
    button.focus()
    page.keyboard.press("Enter")
    expect(page.locator("#t-price")).to_have_value("770")
    expect(page.locator("#t-submit")).to_have_text("Buy 10 GLOBEX @ 770")
    # Arrow keys step the price.
    page.focus("#t-price")
    page.keyboard.press("ArrowUp")
    page.keyboard.press("Shift+ArrowUp")
    expect(page.locator("#t-price")).to_have_value("781")


def test_a_gap_in_the_feed_is_repaired_from_a_fresh_snapshot(pages: Pages, server: Server) -> None:
    call(server, "POST", "/orders", "mm", limit("GAPS", "buy", 50, 9))
    page = pages.open("alice", "GAPS")
    subscribed = len(sent_ops(page, "subscribe"))
    seq = int(page.locator("#book").get_attribute("data-seq") or "")
    # An update that does not follow the seq the page holds: something was missed.
    page.evaluate("""seq => window.tickflow.conn.receive(JSON.stringify({type: "update", symbol: "GAPS",
        seq: seq + 5, prevSeq: seq + 4, bids: [[49, 1000, 1]], asks: [], trades: []}))""", seq)
    expect(page.locator("#book")).to_have_attribute("data-seq", str(seq))  # the fresh snapshot
    assert page.evaluate("window.tickflow.stats.gaps") == 1
    assert [m["symbols"] for m in sent_ops(page, "subscribe")[subscribed:]] == [["GAPS"]]
    expect(size(page, "buy", 50)).to_have_text("9")
    expect(level(page, "buy", 49)).to_have_count(0)  # the stray update was never applied
    # And the feed goes on from the snapshot.
    call(server, "POST", "/orders", "mm", limit("GAPS", "buy", 51, 2))
    expect(size(page, "buy", 51)).to_have_text("2")


def test_a_burst_is_drawn_once_per_animation_frame(pages: Pages, server: Server) -> None:
    page = pages.open("alice", "BURST")
    # 200 updates in one task: all applied, the book drawn once for all of them.
    drawn = page.evaluate("""() => new Promise(resolve => {
        const t = window.tickflow, before = t.frameStats.renders.book || 0;
        let seq = t.book.seq;
        for (let i = 0; i < 200; i++) {
          t.conn.receive(JSON.stringify({type: "update", symbol: "BURST", seq: seq + 1, prevSeq: seq,
            bids: [[100 + (i % 20), i + 1, 1]], asks: [], trades: []}));
          seq += 1;
        }
        requestAnimationFrame(() => requestAnimationFrame(() =>
          resolve({draws: (t.frameStats.renders.book || 0) - before, updates: t.stats.updates, gaps: t.stats.gaps})));
    })""")
    assert drawn == {"draws": 1, "updates": 200, "gaps": 0}
    expect(size(page, "buy", 119)).to_have_text("200")
    # A real burst from 60 clients at once: every order lands, each frame draws the book at most once.
    page.evaluate("window.location.reload()")
    wait_for_snapshot(page)
    results = calls(server, [("POST", "/orders", f"c{i}", limit("BURST", "sell", 300 + i % 10, 1))
                             for i in range(60)])
    assert all(status == 200 for status, _ in results)
    for price in range(300, 310):
        expect(size(page, "sell", price)).to_have_text("6")
    stats = page.evaluate("({f: window.tickflow.frameStats, s: window.tickflow.stats})")
    assert stats["f"]["renders"]["book"] <= stats["f"]["frames"]
    assert stats["s"]["gaps"] == 0


def test_phone_width_and_the_account_is_remembered(pages: Pages) -> None:
    page = pages.open(None, "PHONE", width=390, height=844)
    # A first visit gets a guest account; choosing one on the page sticks across a reload.
    assert page.input_value("#account").startswith("guest-")
    # In open demo mode (/health says so) the field holds an account name, shown in clear.
    expect(page.locator("#account")).to_have_attribute("type", "text")
    expect(page.locator('label[for="account"]')).to_have_text("Account")
    page.fill("#account", "zoe")
    page.press("#account", "Enter")
    expect(page.locator("#conn-text")).to_have_text("Live as zoe")
    page.reload()
    wait_for_snapshot(page)
    expect(page.locator("#account")).to_have_value("zoe")
    assert page.evaluate("localStorage.getItem('tickflow.account')") == "zoe"
    # Nothing wider than the phone; the ticket is reachable and works.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.select_option("#t-symbol", "PHONE")
    place_from_ticket(page, "sell", 4242, 1)
    expect(size(page, "sell", 4242)).to_have_text("1")
    expect(page.locator("#orders tr")).to_contain_text("4242")
    # An empty one is refused on the page.
    page.fill("#account", "  ")
    page.press("#account", "Enter")
    expect(page.locator("#account")).to_have_attribute("aria-invalid", "true")
    assert page.evaluate("localStorage.getItem('tickflow.account')") == "zoe"


def test_with_server_tokens_an_unknown_token_is_refused_and_a_known_one_trades(
        pages: Pages, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"s3cret-a-0123456789": "alice"}))
    srv = Server(tmp_path / "data", "ACME", ["--tokens", str(tokens)]).start()
    try:
        call(srv, "POST", "/orders", "s3cret-a-0123456789", limit("ACME", "sell", 120, 3))
        page = pages.open("mallory", "ACME", server=srv)
        expect(page.locator("#conn")).to_have_attribute("data-state", "refused")
        expect(page.locator("#conn-text")).to_contain_text("Token refused")
        expect(size(page, "sell", 120)).to_have_text("3")  # market data needs no account
        page.fill("#account", "s3cret-a-0123456789")
        page.press("#account", "Enter")
        expect(page.locator("#conn-text")).to_have_text("Live as alice")
        expect(page.locator("#account")).to_have_value("s3cret-a-0123456789")
        expect(page.locator("#orders tr")).to_contain_text("120")
    finally:
        srv.stop()


def test_the_page_recovers_after_the_server_is_killed_and_restarted(
        pages: Pages, tmp_path: Path, artifacts: Path) -> None:
    srv = Server(tmp_path / "data", "ACME,GLOBEX").start()
    try:
        seed_market(srv)
        page = pages.open("alice", "ACME", server=srv)
        expect(page.locator("#chart-summary")).to_contain_text("volume")
        place_from_ticket(page, "buy", 9980, 11)
        expect(size(page, "buy", 9980)).to_have_text("11")
        page.screenshot(path=str(artifacts / "screenshot.png"))

        srv.kill()
        expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
        expect(page.locator("#conn-text")).to_contain_text("Retrying in")
        expect(page.locator("#book-state")).to_have_text("Waiting for a snapshot…")
        expect(page.locator("#book")).to_have_class(re.compile(r"\bstale\b"))
        # Every price on screen is old, not only the book's: the quote, the tape, the chart and the tab say so.
        expect(page).to_have_title(re.compile(r"^Offline · ACME"))
        expect(page.locator("body")).to_have_attribute("data-feed", "offline")
        for selector in ("#quote-last", "#tape", "#chart", "#chart-summary"):
            assert page.locator(selector).evaluate("e => Number(getComputedStyle(e).opacity)") < 1, selector
        for selector in (".quote", "#tape-title", "#chart-title"):
            marker = page.locator(selector).evaluate("e => getComputedStyle(e, '::after').content")
            assert marker == '"offline"', selector
        # An order sent while the server is down is not lost in silence: the page says it was not confirmed.
        place_from_ticket(page, "buy", 9970, 1)
        expect(page.locator("#answer")).to_contain_text("cannot be reached; nothing was confirmed")
        # A call made on the WebSocket while it is down waits, and is sent once it is back.
        page.evaluate("""() => { window.queued = window.tickflow.conn.request({op: "order", symbol: "ACME",
            side: "buy", type: "limit", price: 9960, qty: 2, clientOrderId: "queued-1"}); }""")
        srv.start()
        expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
        expect(page).to_have_title(re.compile(r"^ACME "))
        expect(page.locator("body")).to_have_attribute("data-feed", "live")
        assert page.locator("#tape").evaluate("e => getComputedStyle(e).opacity") == "1"
        queued = page.evaluate("window.queued")
        assert (queued["status"], queued["body"]["status"], queued["body"]["clientOrderId"]) == (200, "new", "queued-1")
        expect(size(page, "buy", 9960)).to_have_text("2")
        wait_for_snapshot(page)
        # The acknowledged order survived the kill; the page re-authenticated and re-subscribed.
        expect(size(page, "buy", 9980)).to_have_text("11")
        expect(page.locator("#orders tr", has_text="9980")).to_have_count(1)
        assert page.evaluate("window.tickflow.conn.stats.opened") == 2
        # Order entry works again, and the feed flows.
        place_from_ticket(page, "buy", 9981, 4)
        expect(page.locator("#answer")).to_contain_text("buy 4 ACME @ 9981, open")
        expect(size(page, "buy", 9981)).to_have_text("4")
        trades = page.locator("#tape tr").count()
        call(srv, "POST", "/orders", "bob", {"symbol": "ACME", "side": "buy", "type": "market", "qty": 1})
        expect(page.locator("#tape tr")).to_have_count(trades + 1)
        expect(page.locator("#tape tr").first).to_have_class("buy")
        page.screenshot(path=str(artifacts / "screenshot-after-restart.png"))
        errors = page.console_errors  # type: ignore[attr-defined]
        errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]
    finally:
        srv.stop()


def seed_market(srv: Server) -> None:
    """A small two-sided ACME book with a few trades, so the screenshot shows a working screen."""
    orders: list[tuple[str, str, str | None, Any]] = []
    for i in range(10):
        orders.append(("POST", "/orders", "mm1", limit("ACME", "buy", 9999 - i, 10 + (i * 37) % 90)))
        orders.append(("POST", "/orders", "mm2", limit("ACME", "sell", 10002 + i, 12 + (i * 53) % 80)))
    calls(srv, orders)
    for i, (side, qty) in enumerate([("buy", 8), ("sell", 5), ("buy", 3), ("buy", 12), ("sell", 7)]):
        call(srv, "POST", "/orders", f"t{i}", {"symbol": "ACME", "side": side, "type": "market", "qty": qty})


def open_orders(server: Server, token: str, symbol: str) -> list[dict[str, Any]]:
    return [o for o in call(server, "GET", "/orders?status=open", token)[1]["orders"] if o["symbol"] == symbol]


# ------------------------------------------------------------------ order entry: what a trader can get wrong


def test_a_double_click_on_buy_places_one_order_and_a_deliberate_repeat_another(pages: Pages, server: Server) -> None:
    page = pages.open("dora", "DBL")
    page.fill("#t-price", "500")
    page.fill("#t-qty", "3")
    # Two clicks 150 ms apart, the first answered in between: a double click on a quick server.
    page.evaluate("""() => new Promise(resolve => {
        const button = document.getElementById('t-submit'), answer = document.getElementById('answer');
        new MutationObserver((_, watch) => {
            if (!answer.textContent.startsWith('✓')) return;
            watch.disconnect();
            setTimeout(() => { button.click(); resolve(); }, 150);
        }).observe(answer, {childList: true, characterData: true, subtree: true});
        button.click();
    })""")
    expect(page.locator("#answer")).to_contain_text("Not placed again (the same order within 1 s)")
    expect(page.locator("#answer")).to_contain_text("buy 3 DBL @ 500, open")
    sent = sent_ops(page, "order")
    assert len(sent) == 2 and sent[0]["clientOrderId"] == sent[1]["clientOrderId"]
    assert len(open_orders(server, "dora", "DBL")) == 1
    expect(size(page, "buy", 500)).to_have_text("3")
    expect(page.locator("#orders tr")).to_have_count(1)

    # The same order sent deliberately a moment later is a second order.
    page.wait_for_timeout(1100)  # (the moment: past the 1 s in which the same order is taken for a double click)
    page.click("#t-submit")
    expect(page.locator("#orders tr")).to_have_count(2)
    expect(size(page, "buy", 500)).to_have_text("6")
    expect(page.locator("#answer")).not_to_contain_text("Not placed again")
    # So is a changed ticket, at once.
    page.fill("#t-qty", "4")
    page.click("#t-submit")
    expect(size(page, "buy", 500)).to_have_text("10")
    assert len(open_orders(server, "dora", "DBL")) == 3
    assert len({m["clientOrderId"] for m in sent_ops(page, "order")}) == 3


def test_commas_are_read_only_as_thousands_separators(pages: Pages) -> None:
    page = pages.open("erin", "COMMA")
    page.fill("#t-qty", "1")
    for text in ("10,5", "1,0", "1,0000", ",100", "100,", "1_000", "1.000", "10,000,00"):
        page.fill("#t-price", text)
        page.click("#t-submit")
        expect(page.locator("#t-price-err")).to_contain_text("price must be a whole number of ticks")
        expect(page.locator("#t-price")).to_have_attribute("aria-invalid", "true")
    page.fill("#t-price", "10,5")
    page.click("#t-submit")
    expect(page.locator("#t-price-err")).to_contain_text('"10,5" is not one (a comma only separates thousands')
    page.fill("#t-price", "100")
    page.fill("#t-qty", "2,5")
    page.click("#t-submit")
    expect(page.locator("#t-qty-err")).to_contain_text("quantity must be a whole number")
    assert sent_ops(page, "order") == []

    # Well-formed groups are the number they show.
    page.fill("#t-price", "10,000")
    page.fill("#t-qty", "1,500")
    expect(page.locator("#t-submit")).to_have_text("Buy 1,500 COMMA @ 10000")
    page.click("#t-submit")
    expect(page.locator("#answer")).to_contain_text("buy 1,500 COMMA @ 10000, open")
    (sent,) = sent_ops(page, "order")
    assert (sent["price"], sent["qty"]) == (10000, 1500)


OVERFLOWING = """() => {
    // Visible cells of the book, the tape and my orders whose text is cut, tables wider than their panel,
    // and whether each Cancel button is in view.
    const cut = [];
    for (const cell of document.querySelectorAll('.book th, .book td, .tape th, .tape td, .orders th, .orders td')) {
        if (cell.getClientRects().length === 0) continue;
        if (cell.scrollWidth > cell.clientWidth + 1) cut.push(cell.textContent.trim());
    }
    const wide = [];
    for (const table of document.querySelectorAll('.book, .tape, .orders')) {
        const box = table.closest('.panel');
        if (table.getBoundingClientRect().right > box.getBoundingClientRect().right
            - parseFloat(getComputedStyle(box).paddingRight) - parseFloat(getComputedStyle(box).borderRightWidth) + 0.5) {
            wide.push(table.className);
        }
    }
    const panel = document.querySelector('.orders-panel').getBoundingClientRect();
    const buttons = [...document.querySelectorAll('#orders button.cancel')].map(b => b.getBoundingClientRect());
    return {cut, wide,
            cancelInView: buttons.length === 2 && buttons.every(b => b.width > 30 && b.left >= panel.left
                && b.right <= panel.right && b.right <= window.innerWidth),
            pageFits: document.documentElement.scrollWidth <= window.innerWidth};
}"""


def test_the_largest_prices_and_quantities_fit_their_columns(pages: Pages, server: Server, artifacts: Path) -> None:
    big = 999_999_000
    orders = []
    for i in range(12):
        orders.append(("POST", "/orders", "whale", limit("BIG", "sell", 1_000_000_000 - i, 999_999_999 - i)))
        orders.append(("POST", "/orders", "whale", limit("BIG", "buy", big - 10 - i, 987_654_321 + i)))
    calls(server, orders)
    for _ in range(3):
        call(server, "POST", "/orders", "taker", {"symbol": "BIG", "side": "buy", "type": "market", "qty": 123_456_789})
    # Mine: the largest price and quantity the server takes, one of them partly filled.
    call(server, "POST", "/orders", "ivan", limit("BIG", "sell", 1_000_000_000, 1_000_000_000))
    call(server, "POST", "/orders", "ivan", limit("BIG", "buy", big, 1_000_000_000))
    call(server, "POST", "/orders", "whale", limit("BIG", "sell", big, 999_999_998))
    page = pages.open("ivan", "BIG", width=1280, height=800)
    expect(page.locator("#orders tr")).to_have_count(2)
    for width, height in ((1280, 800), (1920, 1080), (400, 800)):
        page.set_viewport_size({"width": width, "height": height})
        try:
            page.wait_for_function(f"""() => {{ const r = ({OVERFLOWING})();
                return r.cut.length === 0 && r.wide.length === 0 && r.cancelInView && r.pageFits; }}""", timeout=5_000)
        except Exception:
            raise AssertionError(f"at {width}x{height}: {page.evaluate(OVERFLOWING)}") from None
        page.screenshot(path=str(artifacts / f"screenshot-big-{width}.png"), full_page=True)
        # Prices in full, always; sizes and totals as wide as their column lets them be.
        expect(page.locator("#asks tr[data-price='1000000000'] button")).to_have_text("1000000000")
        expect(page.locator("#orders tr", has_text="1000000000")).to_have_count(1)
        expect(page.locator("#orders tr", has_text="999999000")).to_have_count(1)
    page.set_viewport_size({"width": 1280, "height": 800})
    expect(level(page, "sell", 999_999_999).locator("td").nth(1)).to_have_text("1.000B")
    expect(level(page, "sell", 999_999_999)).to_have_attribute("title", re.compile(r"^999,999,998 in 1 order,"))
    expect(page.locator("#tape tr").nth(1).locator("td").nth(2)).to_have_text("123.457M")


def test_a_sweep_answer_is_summarised_and_stays_in_its_box(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("SWEEP", "sell", 100 + i, 2)) for i in range(30)])
    page = pages.open("fay", "SWEEP", width=1280, height=800)
    expect(level(page, "sell", 100)).to_have_count(1)
    place_from_ticket(page, "buy", 129, 60, tif="ioc")
    # Far through the best ask and past the levels shown: asked first (see the fat-finger test).
    expect(page.locator("#t-confirm")).to_contain_text("Limit buy 60 SWEEP @ 129 is 29 ticks (29%) above the best ask")
    page.click("#t-confirm-send")
    answer = page.locator("#answer")
    expect(answer).to_contain_text("buy 60 SWEEP @ 129: filled 60 at 30 prices (100 to 129), avg 114.5, filled")
    expect(answer).not_to_contain_text("@ 101")
    expect(page.locator("#activity")).to_contain_text("filled 60 at 30 prices")
    # The answer never draws over the Activity list below it.
    bottom, activity_top = answer.evaluate("""e => [
        e.getBoundingClientRect().top + (getComputedStyle(e).overflowY === 'visible' ? e.scrollHeight : e.clientHeight),
        document.querySelector('.ticket-panel h3').getBoundingClientRect().top]""")
    assert bottom <= activity_top
    # A few prices are listed, each once with what was filled there.
    calls(server, [("POST", "/orders", "mm", limit("SWEEP", "sell", 200, 5)),
                   ("POST", "/orders", "mm", limit("SWEEP", "sell", 200, 5)),
                   ("POST", "/orders", "mm", limit("SWEEP", "sell", 201, 5))])
    expect(size(page, "sell", 201)).to_have_text("5")
    place_from_ticket(page, "buy", 201, 15, tif="ioc")
    expect(answer).to_contain_text("filled 10 @ 200, 5 @ 201, filled")


def test_a_market_order_larger_than_the_book_shown_is_confirmed_first(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("FAT", "sell", 200, 10)),
                   ("POST", "/orders", "mm", limit("FAT", "sell", 201, 20))])
    page = pages.open("gus", "FAT")
    expect(size(page, "sell", 201)).to_have_text("20")
    page.select_option("#t-type", "market")
    page.fill("#t-qty", "100000000")
    page.click("#t-submit")
    confirm = page.locator("#t-confirm")
    expect(confirm).to_be_visible()
    expect(confirm).to_contain_text("Market buy 100,000,000 FAT would sweep the whole ask side: 2 asks, 30 in all, "
                                    "as far as 201; the other 99,999,970 would be cancelled.")
    expect(page.locator("#t-confirm-back")).to_be_focused()  # Enter again does not send it
    page.keyboard.press("Enter")
    expect(confirm).to_be_hidden()
    expect(page.locator("#t-submit")).to_be_focused()
    assert sent_ops(page, "order") == []
    # Changing the ticket drops the question; asking again and confirming sends it.
    page.click("#t-submit")
    expect(confirm).to_be_visible()
    page.fill("#t-qty", "50")
    expect(confirm).to_be_hidden()
    page.click("#t-submit")
    expect(confirm).to_contain_text("Market buy 50 FAT would sweep the whole ask side")
    page.click("#t-confirm-send")
    expect(page.locator("#answer")).to_contain_text("buy 50 FAT at market: filled 10 @ 200, 20 @ 201, cancelled, no liquidity")
    assert len(sent_ops(page, "order")) == 1
    # A market order the book shown can fill goes at one click.
    call(server, "POST", "/orders", "mm", limit("FAT", "sell", 300, 5))
    expect(size(page, "sell", 300)).to_have_text("5")
    page.fill("#t-qty", "2")
    page.click("#t-submit")
    expect(page.locator("#answer")).to_contain_text("buy 2 FAT at market: filled 2 @ 300, filled")
    expect(confirm).to_be_hidden()


def test_switching_symbol_clears_the_price(pages: Pages, server: Server) -> None:
    page = pages.open("hal", "GLOBEX")
    page.fill("#t-price", "777")
    expect(page.locator("#t-submit")).to_have_text("Buy 10 GLOBEX @ 777")
    page.select_option("#t-symbol", "ACME")
    expect(page.locator("#t-price")).to_have_value("")
    expect(page.locator("#t-submit")).to_have_text("Buy 10 ACME")
    expect(page.locator("#book-symbol")).to_have_text("ACME")


def test_arrow_keys_in_an_empty_price_start_at_the_price_the_order_would_meet(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("ARROW", "sell", 5005, 1)),
                   ("POST", "/orders", "mm", limit("ARROW", "buy", 4990, 1))])
    page = pages.open("ida", "ARROW")
    expect(size(page, "buy", 4990)).to_have_text("1")
    page.click("label[for=t-buy]")
    page.focus("#t-price")
    page.keyboard.press("ArrowUp")
    expect(page.locator("#t-price")).to_have_value("5005")  # a buy starts at the best ask
    page.keyboard.press("ArrowUp")
    expect(page.locator("#t-price")).to_have_value("5006")
    page.fill("#t-price", "")
    page.click("label[for=t-sell]")
    page.focus("#t-price")
    page.keyboard.press("ArrowDown")
    expect(page.locator("#t-price")).to_have_value("4990")  # a sell at the best bid


def test_a_new_submit_clears_the_last_answer(pages: Pages) -> None:
    page = pages.open("jay", "ANSWER")
    place_from_ticket(page, "buy", 50, 1)
    expect(page.locator("#answer")).to_contain_text("buy 1 ANSWER @ 50, open")
    place_from_ticket(page, "buy", "5o", 1)
    expect(page.locator("#t-price-err")).to_contain_text("price must be a whole number")
    expect(page.locator("#answer")).to_have_text("")


def test_a_double_click_on_cancel_sends_one_cancel(pages: Pages, server: Server) -> None:
    page = pages.open("kim", "CXL")
    place_from_ticket(page, "sell", 900, 2500)
    expect(page.locator("#orders tr")).to_have_count(1)
    page.locator("#orders button.cancel").dblclick()
    expect(page.locator("#orders tr")).to_have_count(0)
    expect(page.locator("#activity li").first).to_have_text(re.compile(r"^Cancelled #\d+: 2,500 CXL off the book$"))
    assert len(sent_ops(page, "cancel")) == 1
    expect(page.locator("#activity")).not_to_contain_text("refused")


def test_enter_on_the_buy_button_keeps_the_focus_in_the_ticket(pages: Pages) -> None:
    page = pages.open("lou", "FOCUS")
    page.fill("#t-price", "70")
    page.fill("#t-qty", "1")
    page.focus("#t-submit")
    page.keyboard.press("Enter")
    expect(page.locator("#answer")).to_contain_text("buy 1 FOCUS @ 70, open")
    expect(page.locator("#t-submit")).to_be_focused()
    # So the next order is one key away.
    page.keyboard.press("Shift+Tab")
    expect(page.locator("#t-postonly")).to_be_focused()


def test_after_an_outage_the_tape_has_every_trade(pages: Pages, server: Server) -> None:
    call(server, "POST", "/orders", "mm", limit("OUT", "sell", 100, 1000))
    outage: dict[str, Any] = {"on": False, "routes": []}

    def route(ws: Any) -> None:
        if outage["on"]:
            ws.close(reason="test outage")
            return
        ws.connect_to_server()
        outage["routes"].append(ws)

    page = pages.open("max", "OUT", ws_route=route)
    taker = {"symbol": "OUT", "side": "buy", "type": "market", "qty": 1}
    for _ in range(3):
        call(server, "POST", "/orders", "taker", taker)
    expect(page.locator("#tape tr")).to_have_count(3)
    # The page's connection is cut while 120 trades are made, far more than a snapshot carries (50).
    outage["on"] = True
    for ws in outage["routes"]:
        ws.close(reason="test outage")
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
    assert all(status == 200 for status, _ in calls(server, [("POST", "/orders", "taker", taker)] * 120))
    trades = call(server, "GET", "/trades?symbol=OUT&limit=1000")[1]
    assert len(trades) == 123
    newest = sorted((t["tradeId"] for t in trades), reverse=True)[:60]
    outage["on"] = False
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
    # The tape is whole: the newest 60 trades, none missing between the snapshot's and the ones before.
    page.wait_for_function("""ids => JSON.stringify([...document.querySelectorAll('#tape tr[data-trade-id]')]
        .map(r => Number(r.dataset.tradeId))) === JSON.stringify(ids)""", arg=newest, timeout=10_000)
    expect(page.locator("#tape tr.tape-hole")).to_have_count(0)
    errors = page.console_errors  # type: ignore[attr-defined]
    errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]


class WsControl:
    """The page's WebSockets through Playwright's route_web_socket, with switches a test flips: drop the
    server's answers (`results`), the page's cancels (`cancels`), hold answers and order updates back
    (`hold`, released by `release()`), or refuse connections (`down`). `cut()` drops every connection;
    `sent(op)` lists the page's messages with that op that reached the server."""

    def __init__(self) -> None:
        self.to_server: list[Any] = []
        self.down = False
        self.drop_results = False
        self.drop_cancels = False
        self.hold = False
        self.held: list[tuple[Any, str | bytes]] = []
        self.routes: list[Any] = []

    def __call__(self, ws: Any) -> None:
        if self.down:
            ws.close(reason="test outage")
            return
        server = ws.connect_to_server()

        def to_server(message: str | bytes) -> None:
            if self.drop_cancels and self._kind(message, "op") == "cancel":
                return
            try:
                self.to_server.append(json.loads(message))
            except ValueError:
                pass
            server.send(message)

        def to_page(message: str | bytes) -> None:
            kind = self._kind(message, "type")
            if self.drop_results and kind == "result":
                return
            if self.hold and kind in ("result", "order"):
                self.held.append((ws, message))
                return
            ws.send(message)

        ws.on_message(to_server)
        server.on_message(to_page)
        self.routes.append(ws)

    @staticmethod
    def _kind(message: str | bytes, key: str) -> Any:
        try:
            return json.loads(message).get(key)
        except (ValueError, AttributeError):
            return None

    def sent(self, op: str) -> list[dict[str, Any]]:
        return [m for m in self.to_server if isinstance(m, dict) and m.get("op") == op]

    def cut(self) -> None:
        for ws in self.routes:
            ws.close(reason="test outage")
        self.routes.clear()

    def release(self) -> None:
        self.hold = False
        for ws, message in self.held:
            ws.send(message)
        self.held.clear()


def activity(page: Page) -> list[str]:
    return page.locator("#activity li").all_inner_texts()


def test_a_cancel_whose_answer_was_lost_says_what_became_of_the_order(pages: Pages, server: Server) -> None:
    """The cancel's answer is lost and the connection drops; the page sends the cancel again and gets 409
    "not open any more" with the order as it is: cancelled (the first attempt worked) or filled first."""
    ws = WsControl()
    page = pages.open("nora", "LOST", ws_route=ws)
    place_from_ticket(page, "sell", 900, 3)
    expect(page.locator("#orders tr")).to_have_count(1)
    (first,) = open_orders(server, "nora", "LOST")
    ws.drop_results = True  # the cancel reaches the server; its answer never comes back
    page.locator("#orders button.cancel").click()
    wait_until(lambda: call(server, "GET", f"/orders/{first['orderId']}", "nora")[1]["status"] == "cancelled",
               interval=0.05, pause=pump(page), message="the cancel to reach the server")
    ws.drop_results = False
    ws.cut()  # the page reconnects and sends the cancel again: 409, the order already cancelled
    expect(page.locator("#activity li").first).to_have_text(
        f"Cancelled #{first['orderId']}: 3 LOST off the book (confirmed after a reconnect; the first answer was lost)")
    expect(page.locator("#activity li").first).to_have_class("ok")
    expect(page.locator("#orders tr")).to_have_count(0)

    # Now the cancel itself is lost and the order fills before it is sent again: too late, and it filled.
    place_from_ticket(page, "sell", 901, 1200)
    expect(page.locator("#orders tr")).to_have_count(1)
    (second,) = open_orders(server, "nora", "LOST")
    ws.drop_cancels = True
    page.locator("#orders button.cancel").click()
    expect(page.locator("#orders button.cancel")).to_have_text("Cancelling…")
    call(server, "POST", "/orders", "bob", limit("LOST", "buy", 901, 1200))
    expect(page.locator("#orders tr")).to_have_count(0)  # the fill's private update
    ws.drop_cancels = False
    ws.cut()
    expect(page.locator("#activity li").first).to_have_text(
        f"Cancel #{second['orderId']} too late: sell 1,200 LOST @ 901 had already filled (1,200 of 1,200)")
    assert not any("refused" in line for line in activity(page)), activity(page)
    errors = page.console_errors  # type: ignore[attr-defined]
    errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]


def test_a_market_fill_or_kill_larger_than_the_book_is_said_to_fill_nothing(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("KILL", "sell", 200, 10)),
                   ("POST", "/orders", "mm", limit("KILL", "sell", 201, 20))])
    page = pages.open("gil", "KILL")
    expect(size(page, "sell", 201)).to_have_text("20")
    page.select_option("#t-type", "market")
    page.select_option("#t-tif", "fok")
    page.fill("#t-qty", "1030")
    page.click("#t-submit")
    confirm = page.locator("#t-confirm")
    expect(confirm).to_contain_text("Market buy 1,030 KILL fill or kill would not fill at all: the whole ask side "
                                    "holds 30 (2 asks, as far as 201), less than 1,030, so the order would be "
                                    "cancelled with nothing traded.")
    expect(confirm).not_to_contain_text("sweep")
    expect(page.locator("#t-confirm-send")).to_have_text("Send buy 1,030 at market FOK anyway")
    page.click("#t-confirm-send")
    # Nothing happened: a neutral mark, not a tick.
    expect(page.locator("#answer")).to_have_text(re.compile(r"^○ #\d+ buy 1,030 KILL at market, cancelled, fok not filled$"))
    expect(size(page, "sell", 201)).to_have_text("20")
    # A FOK the book can fill goes at one click.
    page.fill("#t-qty", "30")
    page.click("#t-submit")
    expect(page.locator("#answer")).to_contain_text("buy 30 KILL at market: filled 10 @ 200, 20 @ 201, filled")
    expect(page.locator("#answer")).to_have_text(re.compile(r"^✓ "))
    expect(confirm).to_be_hidden()


def test_on_a_phone_the_market_confirmation_counts_the_levels_shown(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("NARROW", "sell", 300 + i, 1)) for i in range(10)])
    page = pages.open("hana", "NARROW", width=390, height=844)
    expect(size(page, "sell", 309)).to_have_text("1")
    assert page.locator("#asks tr[data-price]:visible").count() == 8
    page.select_option("#t-type", "market")
    page.fill("#t-qty", "9")
    page.click("#t-submit")
    expect(page.locator("#t-confirm")).to_contain_text(
        "Market buy 9 NARROW goes past the 8 asks shown (8, to 307) and would trade as far as 308.")
    # The same order on a wide screen, where all 10 levels show, goes at one click.
    page.set_viewport_size({"width": 1440, "height": 900})
    page.fill("#t-qty", "2")
    page.click("#t-submit")
    expect(page.locator("#answer")).to_contain_text("buy 2 NARROW at market: filled 1 @ 300, 1 @ 301, filled")


def test_a_new_account_starts_with_an_empty_activity(pages: Pages, server: Server) -> None:
    call(server, "POST", "/orders", "mm", limit("SWITCH", "sell", 700, 50))
    page = pages.open("leo", "SWITCH")
    page.select_option("#t-type", "market")
    page.fill("#t-qty", "5")
    page.click("#t-submit")
    expect(page.locator("#activity")).to_contain_text("buy 5 SWITCH at market: filled 5 @ 700")
    page.fill("#account", "mia")
    page.press("#account", "Enter")
    expect(page.locator("#conn-text")).to_have_text("Live as mia")
    expect(page.locator("#activity li")).to_have_count(0)
    expect(page.locator("#answer")).to_have_text("")


def test_my_orders_are_marked_stale_offline_and_what_changed_meanwhile_is_said(
        pages: Pages, server: Server, artifacts: Path) -> None:
    ws = WsControl()
    page = pages.open("ivy", "STALE", ws_route=ws)
    results = [call(server, "POST", "/orders", "ivy", o)[1] for o in (
        limit("STALE", "buy", 500, 200), limit("STALE", "buy", 499, 10), limit("STALE", "sell", 600, 5))]
    big, small, sell = (r["orderId"] for r in results)
    expect(page.locator("#orders tr")).to_have_count(3)
    expect(page.locator("#orders-stale")).to_be_hidden()
    ws.down = True
    ws.cut()
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
    # The panels are marked on the next frame, by body[data-feed].
    expect(page.locator("body")).to_have_attribute("data-feed", "offline")
    # Marked like the other panels: dimmed, OFFLINE by the title, and a line saying what that means.
    marker = page.locator("#orders-title").evaluate("e => getComputedStyle(e, '::after').content")
    assert marker == '"offline"'
    row = page.locator(f"#orders tr[data-order-id='{big}']")
    assert float(row.locator("td.filled").evaluate("e => getComputedStyle(e).opacity")) < 1
    expect(page.locator("#orders-stale")).to_be_visible()
    expect(page.locator("#orders-stale")).to_contain_text("may be out of date")
    # A cancel that cannot reach the server was not sent; nothing was refused.
    page.route(re.compile(r"/orders/\d+$"), lambda route: route.abort())
    row.locator("button.cancel").click()
    expect(page.locator("#activity li").first).to_have_text(
        f"Cancel #{big} not sent: the server cannot be reached. Try again once Live.")
    expect(row.locator("button.cancel")).to_be_enabled()
    page.unroute(re.compile(r"/orders/\d+$"))
    page.screenshot(path=str(artifacts / "screenshot-orders-offline.png"))

    # Meanwhile on the server: half the big order fills, the small one is cancelled elsewhere, the sell fills.
    call(server, "POST", "/orders", "bob", limit("STALE", "sell", 500, 100))
    call(server, "DELETE", f"/orders/{small}", "ivy")
    call(server, "POST", "/orders", "bob", limit("STALE", "buy", 600, 5))
    ws.down = False
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
    expect(row.locator("td.filled")).to_have_text("100 / 200")
    expect(page.locator("#orders tr")).to_have_count(1)
    expect(page.locator("#orders-stale")).to_be_hidden()
    expect(page.locator("#activity")).to_contain_text(
        f"While offline: #{big} buy 200 STALE @ 500 filled 100 more (100 of 200 now)")
    expect(page.locator("#activity")).to_contain_text(
        f"While offline: #{small} buy 10 STALE @ 499 was cancelled (by you, elsewhere)")
    expect(page.locator("#activity")).to_contain_text(f"While offline: #{sell} sell 5 STALE @ 600 filled (5 of 5)")
    page.screenshot(path=str(artifacts / "screenshot-orders-back.png"))
    # Said once: the fills' own updates, if any arrive late, are not news.
    all_handled(page)
    assert sum("While offline" in line for line in activity(page)) == 3, activity(page)
    errors = page.console_errors  # type: ignore[attr-defined]
    errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]


def test_a_late_answer_replaces_the_no_answer_line(pages: Pages, server: Server) -> None:
    """A frozen server: no answer within the page's wait (20 s, shortened here), then the answer comes."""
    ws = WsControl()
    page = pages.open("otto", "LATE", ws_route=ws)
    page.evaluate("window.tickflow.conn.requestTimeoutMs = 600")
    ws.hold = True
    place_from_ticket(page, "buy", 77, 4)
    expect(page.locator("#answer")).to_have_text(
        "… no answer from the server yet: check My open orders; a late answer will show here")
    expect(page.locator("#answer")).not_to_have_class(re.compile(r"\bbad\b"))
    ws.release()
    expect(page.locator("#answer")).to_have_text(re.compile(r"^✓ Answered late: #\d+ buy 4 LATE @ 77, open$"))
    expect(page.locator("#activity")).to_contain_text("Answered late: #")
    expect(page.locator("#orders tr")).to_have_count(1)
    # A cancel answered late is said too.
    ws.hold = True
    page.locator("#orders button.cancel").click()
    expect(page.locator("#activity li").first).to_contain_text("no answer from the server yet")
    ws.release()
    expect(page.locator("#activity li").first).to_have_text(
        re.compile(r"^Cancelled #\d+: 4 LATE off the book \(the answer came late\)$"))
    expect(page.locator("#orders tr")).to_have_count(0)


def test_at_tablet_width_the_tape_scrolls_inside_its_panel(pages: Pages, server: Server) -> None:
    call(server, "POST", "/orders", "mm", limit("TALL", "sell", 100, 1000))
    calls(server, [("POST", "/orders", "taker", {"symbol": "TALL", "side": "buy", "type": "market", "qty": 1})] * 65)
    page = pages.open("tia", "TALL", width=768, height=1024)
    expect(page.locator("#tape tr")).to_have_count(50)  # a snapshot carries 50
    panel, scroll = page.evaluate("""() => [document.querySelector('.tape-panel').getBoundingClientRect().height,
        (s => s.scrollHeight > s.clientHeight)(document.querySelector('.tape-panel .scroll'))]""")
    assert panel <= 440 and scroll, panel
    assert page.evaluate("document.documentElement.scrollHeight") < 1700


# ------------------------------------------------------------------ tokens and reconnects


@pytest.fixture(scope="module")
def token_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    root = tmp_path_factory.mktemp("tokens")
    (root / "tokens.json").write_text(json.dumps({
        "tok+/=-0123456789": "bob", "a" * 80: "carl-" + "x" * 59, "clé-ü€ 1-0123456789": "dora", "s3cret-a-0123456789": "alice", "mm-token-0123456789": "mm",
    }))
    srv = Server(root / "data", "ACME", ["--tokens", str(root / "tokens.json")]).start()
    yield srv
    srv.stop()


def test_any_token_the_server_knows_works_and_is_never_shown(pages: Pages, token_server: Server) -> None:
    page = pages.open("tok+/=-0123456789", "ACME", width=400, height=800, server=token_server)
    expect(page.locator("#conn-text")).to_have_text("Live as bob")
    expect(page.locator("#account")).to_have_attribute("type", "password")
    expect(page.locator('label[for="account"]')).to_have_text("Token")
    place_from_ticket(page, "buy", 42, 1)
    expect(page.locator("#orders tr")).to_contain_text("42")
    for token, account in (("a" * 80, "carl-" + "x" * 59), ("clé-ü€ 1-0123456789", "dora")):
        page.fill("#account", token)
        page.press("#account", "Enter")
        expect(page.locator("#conn-text")).to_have_text(f"Live as {account}")
        place_from_ticket(page, "sell", 4200, 1)
        expect(page.locator("#orders tr")).to_contain_text("4200")  # my orders, read over HTTP with the token
        text = page.locator("body").inner_text()
        assert "tok+/=-0123456789" not in text and "a" * 80 not in text and "clé" not in text
        # The long account name wraps in the header rather than widen the page.
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.reload()
    wait_for_snapshot(page)
    expect(page.locator("#conn-text")).to_have_text("Live as dora")
    expect(page.locator("#orders tr")).to_contain_text("4200")


def test_a_refused_token_sends_nothing_and_a_good_one_clears_the_ticket(pages: Pages, token_server: Server) -> None:
    page = pages.open("mallory", "ACME", server=token_server)
    expect(page.locator("#conn")).to_have_attribute("data-state", "refused")
    assert "mallory" not in page.locator("body").inner_text()
    place_from_ticket(page, "buy", 43, 1)
    expect(page.locator("#t-form-err")).to_have_text(
        "The server refused your token, so nothing was sent: enter a valid one in the field at the top.")
    assert sent_ops(page, "order") == []
    assert "authenticate" not in page.locator("body").inner_text()
    page.fill("#account", "s3cret-a-0123456789")
    page.press("#account", "Enter")
    expect(page.locator("#conn-text")).to_have_text("Live as alice")
    expect(page.locator("#t-form-err")).to_have_text("")
    expect(page.locator("#answer")).to_have_text("")
    expect(page.locator("#activity")).not_to_contain_text("refused")  # the refusal was the other token's
    page.click("#t-submit")
    expect(page.locator("#answer")).to_contain_text("buy 1 ACME @ 43, open")


def test_my_fills_say_a_refused_token_cannot_read_them(pages: Pages, token_server: Server) -> None:
    page = pages.open("mallory", "ACME", server=token_server)
    expect(page.locator("#conn")).to_have_attribute("data-state", "refused")
    page.click("#tab-fills")
    expect(page.locator("#fills-empty")).to_have_text("Your fills need a token the server knows (top right).")
    page.fill("#account", "s3cret-a-0123456789")
    page.press("#account", "Enter")
    expect(page.locator("#conn-text")).to_have_text("Live as alice")
    expect(page.locator("#fills-empty")).not_to_contain_text("token")


def test_symbols_are_read_again_after_a_reconnect(pages: Pages, tmp_path: Path) -> None:
    old = Server(tmp_path / "old", "ACME,OLD").start()
    # Another server on the same port: a symbol went away (a server keeps those of its data), one came.
    srv = Server(tmp_path / "new", "ACME,NEW")
    srv.port = old.port
    try:
        page = pages.open("ned", "OLD", server=old)
        page.fill("#t-price", "99")
        old.kill()
        expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
        srv.start()
        call(srv, "POST", "/orders", "mm", limit("ACME", "buy", 321, 4))
        expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
        expect(page.locator("#activity")).to_contain_text("OLD is no longer traded on this server: switched to ACME")
        expect(page.locator("#t-symbol option")).to_have_text(["ACME", "NEW"])
        expect(page.locator("#book-symbol")).to_have_text("ACME")
        expect(size(page, "buy", 321)).to_have_text("4")
        expect(page.locator("#t-price")).to_have_value("")
        expect(page.locator("#activity")).not_to_contain_text("Server:")
        errors = page.console_errors  # type: ignore[attr-defined]
        errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]
    finally:
        old.stop()
        srv.stop()


# ------------------------------------------------------------------ a frozen server, amend, cancel all, fat fingers


def test_a_frozen_server_is_said_within_seconds_and_live_again_by_itself(
        pages: Pages, tmp_path: Path, artifacts: Path) -> None:
    """SIGSTOP: the socket stays open but nothing comes. The page pings, says the server is not answering,
    and goes back to Live when it answers; frozen for longer, the socket is given up and opened again."""
    srv = Server(tmp_path / "data", "ACME").start()
    assert srv.proc is not None
    pid = srv.proc.pid
    try:
        call(srv, "POST", "/orders", "mm", limit("ACME", "sell", 101, 5))
        page = pages.open("sam", "ACME", server=srv)
        # The page's 5 s / 8 s / 18 s shortened: a ping after 0.3 s of silence, "no answer" at 1 s (and a
        # handshake given up after 1 s). The socket is not given up during the first freeze, however long
        # the checks of the stalled page take on a busy machine; the second freeze gives it up at 2.5 s.
        page.evaluate("Object.assign(window.tickflow.conn.timing,"
                      " {pingAfterMs: 300, staleAfterMs: 1000, closeAfterMs: 3_600_000, connectTimeoutMs: 1000})")
        page.evaluate("""() => { window.connStates = [];
            window.tickflow.conn.addEventListener('state', e => window.connStates.push(e.detail)); }""")
        # A quiet market is not a frozen server: its pongs keep the page Live. Four pings, each sent after
        # 0.3 s of silence that followed the last one's pong: past the 1 s at which it would say otherwise.
        wait_until(lambda: len(sent_ops(page, "ping")) >= 4, pause=pump(page), message="four pings")
        expect(page.locator("#conn")).to_have_attribute("data-state", "open")
        assert len(sent_ops(page, "ping")) >= 2
        assert page.evaluate("window.connStates") == [], "it stayed Live all along"

        os.kill(pid, signal.SIGSTOP)
        try:
            expect(page.locator("#conn")).to_have_attribute("data-state", "stalled", timeout=3_000)
            said = page.evaluate("window.connStates.find(s => s.state === 'stalled').text")
            assert re.fullmatch(r"No answer for [1-3] s", said), said  # as soon as it said so
            expect(page.locator("#conn-text")).to_have_text(re.compile(r"^No answer for \d+ s$"))  # and counting
            expect(page).to_have_title(re.compile(r"^No answer · ACME"))
            for selector in (".quote", "#book-title", "#tape-title", "#orders-title"):
                marker = page.locator(selector).evaluate("e => getComputedStyle(e, '::after').content")
                assert marker == '"no answer"', selector
            expect(page.locator("#book")).to_have_class(re.compile(r"\bstale\b"))
            expect(page.locator("#book-state")).to_have_text("The server is not answering: this book may be old.")
            expect(page.locator("#orders-stalled")).to_be_visible()
            expect(page.locator("#t-stalled")).to_contain_text("an order sent now may not be confirmed until it answers")
            # An order sent now waits for its answer.
            place_from_ticket(page, "buy", 99, 3)
            expect(page.locator("#answer")).to_have_text("Sending buy 3 ACME…")
            page.screenshot(path=str(artifacts / "screenshot-not-answering.png"))
        finally:
            os.kill(pid, signal.SIGCONT)
        # Any message is life: Live again on the same socket, and the order's answer is shown.
        expect(page.locator("#conn-text")).to_have_text("Live as sam")
        expect(page.locator("#answer")).to_contain_text("buy 3 ACME @ 99, open")
        expect(page.locator("body")).to_have_attribute("data-feed", "live")
        expect(page.locator("#t-stalled")).to_be_hidden()
        expect(page.locator("#book")).not_to_have_class(re.compile(r"\bstale\b"))
        assert page.evaluate("window.tickflow.conn.stats.opened") == 1

        # Frozen past the limit: the socket is closed and opened again once the server answers.
        page.evaluate("window.tickflow.conn.timing.closeAfterMs = 2500")
        os.kill(pid, signal.SIGSTOP)
        try:
            expect(page.locator("#conn")).to_have_attribute("data-state", re.compile("^(offline|connecting)$"),
                                                            timeout=10_000)
            expect(page).to_have_title(re.compile(r"^Offline · "))
        finally:
            os.kill(pid, signal.SIGCONT)
        expect(page.locator("#conn-text")).to_have_text("Live as sam", timeout=10_000)
        assert page.evaluate("window.tickflow.conn.stats.opened") >= 2
        call(srv, "POST", "/orders", "mm", limit("ACME", "sell", 102, 4))
        expect(size(page, "sell", 102)).to_have_text("4")
        errors = page.console_errors  # type: ignore[attr-defined]
        errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]
    finally:
        os.kill(pid, signal.SIGCONT)
        srv.stop()


def test_an_order_is_amended_from_my_open_orders(pages: Pages, server: Server, artifacts: Path) -> None:
    ws = WsControl()
    page = pages.open("amy", "AMEND", ws_route=ws)
    oid = call(server, "POST", "/orders", "amy", limit("AMEND", "buy", 9990, 200))[1]["orderId"]
    call(server, "POST", "/orders", "bob", limit("AMEND", "sell", 9990, 50))  # 50 of it fills
    row = page.locator(f"#orders tr[data-order-id='{oid}']")
    expect(row.locator("td.filled")).to_have_text("50 / 200")
    row.locator("button.amend").click()
    form = page.locator("#amend-form")
    expect(form).to_be_visible()
    expect(page.locator("#a-price")).to_be_focused()
    expect(page.locator("#a-price")).to_have_value("9990")
    expect(page.locator("#a-qty")).to_have_value("200")
    expect(page.locator("#a-title")).to_have_text(f"Amend #{oid}: buy 200 AMEND @ 9990, 50 filled")
    note = page.locator("#a-note")
    expect(note).to_have_text("A new price or a larger quantity loses the order's place in the queue; "
                              "a smaller quantity at the same price keeps it.")
    # Checked like the ticket before anything is sent; Enter submits.
    page.fill("#a-qty", "50")
    page.press("#a-qty", "Enter")
    expect(page.locator("#a-qty-err")).to_have_text(
        "quantity is the new total, filled part included: it must be above the 50 already filled")
    expect(page.locator("#a-qty")).to_be_focused()
    page.fill("#a-qty", "1.5")
    page.press("#a-qty", "Enter")
    expect(page.locator("#a-qty-err")).to_contain_text("quantity must be a whole number")
    page.fill("#a-qty", "200")
    page.press("#a-qty", "Enter")
    expect(page.locator("#a-form-err")).to_contain_text("nothing to amend: it already is 200 @ 9990")
    assert ws.sent("amend") == []
    # What the amend does to the order's place in the queue is said before it is sent.
    page.fill("#a-qty", "150")
    expect(note).to_have_text("Keeps its place in the queue: a smaller quantity at the same price.")
    page.fill("#a-qty", "250")
    expect(note).to_have_text("Loses its place in the queue: a larger quantity goes to the back of the queue at 9990.")
    page.fill("#a-qty", "150")
    page.fill("#a-price", "9,995")
    expect(note).to_have_text("Loses its place in the queue: a new price goes to the back of the queue at 9995.")
    expect(page.locator("#a-submit")).to_have_text("Amend to 150 @ 9995")
    page.screenshot(path=str(artifacts / "screenshot-amend.png"))
    # At phone width the form fits, its buttons in view.
    page.set_viewport_size({"width": 390, "height": 844})
    page.locator("#a-close").scroll_into_view_if_needed()
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    assert page.evaluate("""() => ['a-price', 'a-qty', 'a-submit', 'a-close'].every(id => {
        const r = document.getElementById(id).getBoundingClientRect();
        return r.width > 30 && r.left >= 0 && r.right <= window.innerWidth; })""")
    page.screenshot(path=str(artifacts / "screenshot-amend-390.png"), full_page=True)
    page.set_viewport_size({"width": 1440, "height": 900})

    # One request per click: the button is disabled while the answer is out.
    ws.hold = True
    page.click("#a-submit")
    expect(page.locator("#a-submit")).to_have_text("Amending…")
    expect(page.locator("#a-submit")).to_be_disabled()
    page.click("#a-submit", force=True)
    page.press("#a-price", "Enter")
    ws.release()
    expect(page.locator("#activity li").first).to_have_text(f"Amended #{oid}: buy 200 AMEND @ 9990 → 150 @ 9995")
    assert [(m["orderId"], m.get("qty"), m.get("price")) for m in ws.sent("amend")] == [(oid, 150, 9995)]
    now = call(server, "GET", f"/orders/{oid}", "amy")[1]
    assert (now["qty"], now["price"], now["filledQty"], now["status"]) == (150, 9995, 50, "partially_filled")
    expect(form).to_have_count(0)
    expect(row.locator("td.filled")).to_have_text("50 / 150")
    expect(row.locator("button.amend")).to_be_focused()
    # Keyboard only: Enter opens the form, Escape closes it and puts the focus back.
    page.keyboard.press("Enter")
    expect(page.locator("#a-price")).to_be_focused()
    page.keyboard.press("Escape")
    expect(form).to_have_count(0)
    expect(row.locator("button.amend")).to_be_focused()
    assert len(ws.sent("amend")) == 1


def test_an_amend_refused_or_too_late_says_why_and_goes_over_http_when_offline(
        pages: Pages, server: Server) -> None:
    ws = WsControl()
    page = pages.open("abe", "AMENDX", ws_route=ws)
    first = call(server, "POST", "/orders", "abe", limit("AMENDX", "buy", 500, 30))[1]["orderId"]
    post_only = call(server, "POST", "/orders", "abe", limit("AMENDX", "sell", 600, 10, postOnly=True))[1]["orderId"]
    expect(page.locator("#orders tr")).to_have_count(2)
    activity_first = page.locator("#activity li").first

    # Too late: the order filled before the amend reached it, and the page had not heard yet.
    ws.hold = True
    call(server, "POST", "/orders", "bob", limit("AMENDX", "sell", 500, 30))
    page.locator(f"#orders tr[data-order-id='{first}'] button.amend").click()
    page.fill("#a-qty", "40")
    page.press("#a-qty", "Enter")
    expect(page.locator("#a-submit")).to_have_text("Amending…")
    ws.release()
    expect(activity_first).to_have_text(f"Amend #{first} too late: buy 30 AMENDX @ 500 had already filled (30 of 30)")
    expect(page.locator("#amend-form")).to_have_count(0)
    expect(page.locator("#orders tr")).to_have_count(1)

    # Post-only at a price that would take: the form says so first, the server refuses, the form stays.
    call(server, "POST", "/orders", "mm", limit("AMENDX", "buy", 550, 5))
    expect(size(page, "buy", 550)).to_have_text("5")
    row = page.locator(f"#orders tr[data-order-id='{post_only}']")
    row.locator("button.amend").click()
    page.fill("#a-price", "550")
    expect(page.locator("#a-note")).to_contain_text("It is post-only: at 550 it would take liquidity")
    page.press("#a-price", "Enter")
    expect(activity_first).to_have_text(
        f"Amend #{post_only} refused: it is post-only, and at 550 it would take liquidity; it stays 10 @ 600")
    expect(page.locator("#a-price-err")).to_contain_text("it is post-only")
    expect(page.locator("#a-price")).to_be_focused()
    # Nothing to amend, as the server says it (the page's list is out of date: amended elsewhere).
    ws.hold = True
    call(server, "PATCH", f"/orders/{post_only}", "abe", {"qty": 8})
    page.fill("#a-price", "600")
    page.fill("#a-qty", "8")
    page.press("#a-qty", "Enter")
    ws.release()
    expect(activity_first).to_have_text(f"Amend #{post_only}: nothing to amend, it already is 8 @ 600")

    # With the WebSocket down, an amend goes over HTTP (PATCH).
    ws.down = True
    ws.cut()
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
    row.locator("button.amend").click()
    page.fill("#a-qty", "6")
    page.press("#a-qty", "Enter")
    expect(activity_first).to_have_text(f"Amended #{post_only}: sell 8 AMENDX @ 600 → 6 @ 600")
    assert call(server, "GET", f"/orders/{post_only}", "abe")[1]["qty"] == 6
    assert ws.sent("amend") == [] or all(m.get("qty") != 6 for m in ws.sent("amend"))
    ws.down = False
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
    errors = page.console_errors  # type: ignore[attr-defined]
    errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]


def commands_sequenced(server: Server) -> int:
    """The server's tickflow_commands_total: one per order, cancel, amend or cancel-all it sequenced."""
    async def metrics() -> str:
        async with aiohttp.ClientSession() as s:
            async with s.get(server.url + "/metrics") as r:
                return await r.text()

    text = off_loop(metrics())
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("tickflow_commands_total ")))


def test_cancel_all_asks_then_cancels_every_order_of_the_symbol_in_one_command(
        pages: Pages, server: Server, artifacts: Path) -> None:
    ws = WsControl()
    page = pages.open("cal", "CXLALL", ws_route=ws)
    button = page.locator("#cancel-all")
    expect(button).to_have_text("Cancel all CXLALL")
    expect(button).to_be_disabled()  # nothing to cancel
    ids = [call(server, "POST", "/orders", "cal", o)[1]["orderId"] for o in (
        limit("CXLALL", "buy", 400, 100), limit("CXLALL", "buy", 401, 50), limit("CXLALL", "sell", 500, 30))]
    call(server, "POST", "/orders", "cal", limit("CXLOTHER", "buy", 7, 1))  # another symbol: it stays
    expect(button).to_have_text("Cancel all CXLALL (3)")
    expect(button).to_be_enabled()
    # One of them fills, and another is placed elsewhere; the page has not heard yet (its private updates
    # are held back), so the question lists three.
    ws.hold = True
    call(server, "POST", "/orders", "bob", limit("CXLALL", "sell", 401, 50))
    unseen = call(server, "POST", "/orders", "cal", limit("CXLALL", "buy", 399, 100))[1]["orderId"]
    button.click()
    confirm = page.locator("#cancel-all-confirm")
    expect(confirm).to_contain_text("Cancel all 3 open CXLALL orders: 2 buys (150 left, 400 to 401) and 1 sell "
                                    "(30 left, @ 500)? Your 1 open order in other symbols stays open.")
    expect(page.locator("#cancel-all-send")).to_have_text("Cancel 3 CXLALL orders")
    expect(page.locator("#cancel-all-back")).to_be_focused()  # Enter again cancels nothing
    page.keyboard.press("Enter")
    expect(confirm).to_be_hidden()
    expect(button).to_be_focused()
    assert ws.sent("cancelAll") == []
    before = commands_sequenced(server)
    button.click()
    page.click("#cancel-all-send")
    # One cancelAll for the symbol on screen, no cancel per order; the button is disabled while it runs.
    expect(button).to_have_text("Cancelling 3 CXLALL…")
    expect(button).to_be_disabled()
    page.wait_for_function("() => window.tickflow.conn.pending.size === 1")
    assert [{k: v for k, v in m.items() if k != "id"} for m in ws.sent("cancelAll")] == [
        {"op": "cancelAll", "symbol": "CXLALL"}]
    assert ws.sent("cancel") == []
    ws.release()
    line = page.locator("#activity li").first
    expect(line).to_have_text(f"Cancelled 2 of 3 orders on CXLALL (230 off the book); #{ids[1]} had already filled; "
                              f"#{unseen} was also cancelled (not listed when you confirmed)")
    expect(line).to_have_class("warn")
    assert commands_sequenced(server) == before + 1  # one command, however many orders
    expect(page.locator("#orders tr")).to_have_count(1)
    page.screenshot(path=str(artifacts / "screenshot-cancel-all.png"))
    states = [call(server, "GET", f"/orders/{oid}", "cal")[1] for oid in (ids[0], ids[2], unseen)]
    assert {(o["status"], o["reason"]) for o in states} == {("cancelled", "cancelled_by_user")}
    assert len({o["seq"] for o in states}) == 1  # one log record
    expect(page.locator("#orders tr")).to_have_count(1)
    expect(page.locator("#orders tr")).to_contain_text("CXLOTHER")
    assert open_orders(server, "cal", "CXLALL") == []
    assert len(open_orders(server, "cal", "CXLOTHER")) == 1
    expect(button).to_have_text("Cancel all CXLALL")
    expect(button).to_be_disabled()
    # Every order listed cancelled, nothing else: a plain line.
    for price in (410, 411):
        call(server, "POST", "/orders", "cal", limit("CXLALL", "buy", price, 5))
    expect(button).to_have_text("Cancel all CXLALL (2)")
    button.click()
    page.click("#cancel-all-send")
    expect(line).to_have_text("Cancelled 2 of 2 orders on CXLALL (10 off the book)")
    expect(line).to_have_class("ok")
    expect(page.locator("#orders tr")).to_have_count(1)
    assert len(ws.sent("cancelAll")) == 2 and ws.sent("cancel") == []


def test_cancel_all_goes_over_http_when_offline_and_says_a_refusal(pages: Pages, server: Server) -> None:
    ws = WsControl()
    page = pages.open("cid", "CXLHTTP", ws_route=ws)
    for o in (limit("CXLHTTP", "sell", 700, 20), limit("CXLHTTP", "sell", 701, 5), limit("CXLOTHER", "buy", 8, 1)):
        call(server, "POST", "/orders", "cid", o)
    button = page.locator("#cancel-all")
    expect(button).to_have_text("Cancel all CXLHTTP (2)")
    ws.down = True
    ws.cut()
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
    # Over HTTP, DELETE /orders?symbol=: first refused (a server not taking orders), said like any refusal.
    deletes: list[str] = []

    def refuse(route: Any) -> None:
        if route.request.method != "DELETE":
            route.continue_()
            return
        deletes.append(route.request.url)
        route.fulfill(status=503, content_type="application/json",
                      body=json.dumps({"error": "not accepting orders: the log device failed"}))

    page.route(re.compile(r"/orders\?"), refuse)
    button.click()
    page.click("#cancel-all-send")
    line = page.locator("#activity li").first
    expect(line).to_have_text("Cancel all CXLHTTP refused: not accepting orders: the log device failed (503)")
    expect(line).to_have_class("bad")
    assert [u.split("/", 3)[3] for u in deletes] == ["orders?symbol=CXLHTTP"]
    expect(page.locator("#orders tr")).to_have_count(3)
    expect(button).to_have_text("Cancel all CXLHTTP (2)")
    expect(button).to_be_enabled()
    # Then through to the server.
    page.unroute(re.compile(r"/orders\?"), refuse)
    before = commands_sequenced(server)
    button.click()
    page.click("#cancel-all-send")
    expect(line).to_have_text("Cancelled 2 of 2 orders on CXLHTTP (25 off the book)")
    assert commands_sequenced(server) == before + 1
    expect(page.locator("#orders tr")).to_have_count(1)
    expect(page.locator("#orders tr")).to_contain_text("CXLOTHER")
    assert open_orders(server, "cid", "CXLHTTP") == []
    assert ws.sent("cancelAll") == []
    ws.down = False
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
    errors = page.console_errors  # type: ignore[attr-defined]
    errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]


def test_a_cancel_all_answered_late_is_said_when_its_answer_comes(pages: Pages, server: Server) -> None:
    ws = WsControl()
    page = pages.open("cil", "CXLLATE", ws_route=ws)
    for price in (300, 301):
        call(server, "POST", "/orders", "cil", limit("CXLLATE", "buy", price, 40))
    button = page.locator("#cancel-all")
    expect(button).to_have_text("Cancel all CXLLATE (2)")
    page.evaluate("window.tickflow.conn.requestTimeoutMs = 600")
    ws.hold = True
    button.click()
    page.click("#cancel-all-send")
    line = page.locator("#activity li").first
    expect(line).to_have_text(
        "Cancel all CXLLATE: no answer from the server yet; check My open orders (a late answer is said here)")
    expect(line).to_have_class("warn")
    ws.release()
    expect(line).to_have_text("Cancelled 2 of 2 orders on CXLLATE (80 off the book) (the answer came late)")
    expect(page.locator("#orders tr")).to_have_count(0)
    expect(button).to_have_text("Cancel all CXLLATE")


def test_the_cancel_all_line_names_what_became_of_each_order_listed(pages: Pages) -> None:
    """describeCancelAll() alone, in the page: the outcomes a real server is slow to stage."""
    page = pages.open("cin", "CXLALL")
    lines = page.evaluate("""async () => {
        const { describeCancelAll } = await import('/js/cancelall.js');
        const order = (orderId, extra) => ({ orderId, symbol: 'ACME', side: 'buy', price: 100, qty: 10,
            remainingQty: 10, filledQty: 0, status: 'new', reason: null, seq: 1, ...extra });
        const list = [1, 2, 3, 4, 5, 6].map((id) => order(id));
        const cancelled = { ...order(1), status: 'cancelled', reason: 'cancelled_by_user', seq: 9 };
        const fates = new Map([
            [2, order(2, { status: 'cancelled', reason: 'cancelled_by_user' })],
            [3, order(3, { status: 'cancelled', reason: 'cancelled_by_user' })],
            [4, order(4, { status: 'cancelled', reason: 'self_trade_prevented', remainingQty: 0 })],
            [5, order(5, { status: 'filled', filledQty: 10, remainingQty: 0 })],
            [6, null],
        ]);
        const said = (res) => { const { text, kind } = describeCancelAll('ACME', list, res, fates); return [text, kind]; };
        return [
            said({ status: 200, body: { orders: [cancelled], seq: 9 } }),
            said({ status: 200, body: { orders: [cancelled], seq: 9 }, resent: true }),
            said({ status: 0, body: { error: 'x' } }),
            said({ status: 401, body: { error: 'unknown token' } }),
        ];
    }""")
    assert lines == [
        ["Cancelled 1 of 6 orders on ACME (10 off the book); #2 and #3 were already cancelled; "
         "#4 was already cancelled (self trade prevented); #5 had already filled; #6 was no longer open", "warn"],
        # Resent after a reconnect: what the lost first attempt cancelled counts as cancelled.
        ["Cancelled 3 of 6 orders on ACME (30 off the book); #4 was already cancelled (self trade prevented); "
         "#5 had already filled; #6 was no longer open", "warn"],
        ["Cancel all ACME not sent: the server cannot be reached. Try again once Live.", "bad"],
        ["Cancel all ACME refused: unknown token (401)", "bad"],
    ]


def test_a_limit_order_far_through_the_book_is_confirmed_first(pages: Pages, server: Server) -> None:
    calls(server, [("POST", "/orders", "mm", limit("FINGER", "sell", 1000 + i, 10)) for i in range(3)] +
          [("POST", "/orders", "mm", limit("FINGER", "buy", 990 - i, 10)) for i in range(14)])
    page = pages.open("fin", "FINGER")
    expect(size(page, "sell", 1002)).to_have_text("10")
    expect(size(page, "buy", 979)).to_have_text("10")
    confirm = page.locator("#t-confirm")
    # A buy limit 500 ticks through the best ask: asked first, and Don't send has the focus.
    place_from_ticket(page, "buy", 1500, 5)
    expect(page.locator("#t-confirm-text")).to_have_text(re.compile(
        r"^Limit buy 5 FINGER @ 1500 is 500 ticks \(50%\) above the best ask \(1000\): it would buy 5 at 1000\.$"))
    expect(page.locator("#t-confirm-send")).to_have_text("Send buy 5 @ 1500")
    expect(page.locator("#t-confirm-back")).to_be_focused()
    page.keyboard.press("Enter")
    expect(confirm).to_be_hidden()
    assert sent_ops(page, "order") == []
    # An ordinary marketable limit at the best ask goes at one click; so does one 1% through it.
    place_from_ticket(page, "buy", 1000, 5)
    expect(page.locator("#answer")).to_contain_text("buy 5 FINGER @ 1000: filled 5 @ 1000, filled")
    place_from_ticket(page, "buy", 1010, 5)
    expect(page.locator("#answer")).to_contain_text("buy 5 FINGER @ 1010: filled 5 @ 1000, filled")
    expect(confirm).to_be_hidden()
    assert len(sent_ops(page, "order")) == 2
    # A sell near the bid that would take more levels than the book shows (12) asks too.
    place_from_ticket(page, "sell", 977, 140)
    expect(page.locator("#t-confirm-text")).to_have_text(re.compile(
        r"^Limit sell 140 FINGER @ 977 goes past the 12 bids shown \(120, to 979\): it would sell 140 at 990 to 977\.$"))
    page.click("#t-confirm-send")
    expect(page.locator("#answer")).to_contain_text("sell 140 FINGER @ 977: filled 140 at 14 prices (977 to 990)")


# ------------------------------------------------------------------ my fills


def fill_rows(page: Page) -> list[tuple[str, ...]]:
    """My fills as shown, newest first: (trade id, side, qty, price, order, maker or taker) for each row."""
    rows = page.evaluate("""() => [...document.querySelectorAll('#fills tr')].map(tr =>
        [tr.dataset.tradeId, ...[...tr.cells].slice(1).map(td => td.textContent.trim())])""")
    return [tuple(r) for r in rows]


def server_fills(server: Server, token: str, symbol: str) -> list[tuple[str, ...]]:
    """The same, as GET /fills has them."""
    status, body = call(server, "GET", f"/fills?symbol={symbol}&order=desc&limit=50", token)
    assert status == 200, body
    arrows = {"buy": "▲", "sell": "▼"}
    return [(str(f["tradeId"]), f"{arrows[f['side']]} {f['side']}", f"{f['qty']:,}", f"@ {f['price']}",
             f"#{f['orderId']}", f["liquidity"]) for f in body]


def expect_fills_as_the_server_has_them(page: Page, server: Server, token: str, symbol: str, count: int) -> None:
    want = server_fills(server, token, symbol)
    assert len(want) == count, want
    wait_until(lambda: fill_rows(page) == want, interval=0.05, pause=pump(page),
               message=lambda: f"My fills to be {want}, not {fill_rows(page)}")
    assert fill_rows(page) == want


def test_my_fills_are_read_on_load_and_kept_live_each_once(pages: Pages, server: Server, artifacts: Path) -> None:
    """Fills made before the page loaded come from GET /fills; later ones live, from the answers and the
    private updates, each once (also after a reload and a reconnect), maker or taker as each fill says it
    (no GET /fills asked to tell which); another symbol's on switching to it."""
    rest = call(server, "POST", "/orders", "fay", limit("FILLS", "sell", 1010, 10))[1]["orderId"]
    call(server, "POST", "/orders", "bob", limit("FILLS", "buy", 1010, 4))  # hits fay's resting sell
    call(server, "POST", "/orders", "bob", limit("FILLS", "buy", 1000, 5))
    took = call(server, "POST", "/orders", "fay", limit("FILLS", "sell", 1000, 3))[1]  # fay takes bob's bid
    assert took["status"] == "filled"
    call(server, "POST", "/orders", "mm", limit("FILLS2", "sell", 50, 7))
    other = call(server, "POST", "/orders", "fay", limit("FILLS2", "buy", 50, 2))[1]["orderId"]

    ws = WsControl()
    page = pages.open("fay", "FILLS", ws_route=ws)
    expect(page.locator("#fills-view")).to_be_hidden()  # My open orders is shown first
    page.click("#tab-fills")
    expect(page.locator("#tab-fills")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#tab-fills")).to_have_text("My fills FILLS")
    expect(page.locator("#orders-view")).to_be_hidden()
    expect(page.locator("#cancel-all")).to_be_hidden()  # it acts on the open orders
    rows = page.locator("#fills tr")
    expect(rows).to_have_count(2)
    assert [r[1:] for r in fill_rows(page)] == [
        ("▼ sell", "3", "@ 1000", f"#{took['orderId']}", "taker"),
        ("▼ sell", "4", "@ 1010", f"#{rest}", "maker")]
    expect_fills_as_the_server_has_them(page, server, "fay", "FILLS", 2)
    reads: list[str] = []
    page.on("request", lambda r: reads.append(r.url) if "/fills?" in r.url else None)

    # Live, each once and as the server says it: bob hits the resting sell again (maker) ...
    call(server, "POST", "/orders", "bob", limit("FILLS", "buy", 1010, 2))
    expect(rows).to_have_count(3)
    assert fill_rows(page)[0][1:] == ("▼ sell", "2", "@ 1010", f"#{rest}", "maker")
    expect(rows.first).to_have_attribute("title", re.compile(r"; maker: your resting order was hit$"))
    # ... a buy from the ticket takes dave's offer (its answer and its update both list the fill) ...
    call(server, "POST", "/orders", "dave", limit("FILLS", "sell", 1005, 5))
    place_from_ticket(page, "buy", 1005, 2)
    expect(page.locator("#answer")).to_contain_text("filled 2 @ 1005")
    expect(rows).to_have_count(4)
    assert fill_rows(page)[0][1:3] == ("▲ buy", "2") and fill_rows(page)[0][5] == "taker"
    # ... a sell placed elsewhere (over HTTP) takes bob's bid, and the resting sell, amended elsewhere down
    # to 1000, takes the rest of it: both taker, though the amended order had only made maker fills.
    sold = call(server, "POST", "/orders", "fay", limit("FILLS", "sell", 1000, 1))[1]["orderId"]
    expect(rows).to_have_count(5)
    assert fill_rows(page)[0][1:] == ("▼ sell", "1", "@ 1000", f"#{sold}", "taker")
    status, amended = call(server, "PATCH", f"/orders/{rest}", "fay", {"price": 1000})
    assert status == 200 and [f["qty"] for f in amended["fills"]] == [1]
    expect(rows).to_have_count(6)
    assert fill_rows(page)[0][1:] == ("▼ sell", "1", "@ 1000", f"#{rest}", "taker")
    all_handled(page)  # any late duplicate, or a read of GET /fills, would be in by now
    assert reads == []
    expect_fills_as_the_server_has_them(page, server, "fay", "FILLS", 6)
    page.screenshot(path=str(artifacts / "screenshot-fills.png"))

    # A reload reads them again: the same rows, once each, and the tab is remembered.
    page.reload()
    wait_for_snapshot(page)
    expect(page.locator("#tab-fills")).to_have_attribute("aria-selected", "true")
    expect_fills_as_the_server_has_them(page, server, "fay", "FILLS", 6)

    # A fill made while the page is offline comes in with the reconnect's read.
    ws.down = True
    ws.cut()
    expect(page.locator("#conn")).to_have_attribute("data-state", "offline")
    expect(page.locator("#fills-view .stale-note")).to_be_visible()
    assert float(rows.first.locator("td.qty").evaluate("e => getComputedStyle(e).opacity")) < 1
    listing: list[Any] = []
    page.route(re.compile(r"/orders\?status=open"), lambda route: listing.append(route))  # held: see below
    call(server, "POST", "/orders", "bob", limit("FILLS", "buy", 1000, 2))
    ws.down = False
    expect(page.locator("#conn")).to_have_attribute("data-state", "open", timeout=15_000)
    expect(rows).to_have_count(7)
    assert fill_rows(page)[0][1:] == ("▼ sell", "2", "@ 1000", f"#{rest}", "maker")
    # While My open orders is being read, the updates still say maker or taker: shown at once, none asked.
    wait_until(lambda: listing, interval=0.05, pause=pump(page), message="the page to read My open orders")
    before = len(reads)
    call(server, "POST", "/orders", "bob", limit("FILLS", "buy", 1000, 1))  # hits the resting sell
    expect(rows).to_have_count(8)
    assert fill_rows(page)[0][1:] == ("▼ sell", "1", "@ 1000", f"#{rest}", "maker")
    call(server, "POST", "/orders", "bob", limit("FILLS", "buy", 990, 3))
    took_here = call(server, "POST", "/orders", "fay", limit("FILLS", "sell", 990, 1))[1]["orderId"]
    expect(rows).to_have_count(9)
    assert fill_rows(page)[0][1:] == ("▼ sell", "1", "@ 990", f"#{took_here}", "taker")
    all_handled(page)  # any read of GET /fills those updates made would have begun by now
    assert len(reads) == before
    for route in listing:
        route.continue_()
    page.unroute(re.compile(r"/orders\?status=open"))
    expect_fills_as_the_server_has_them(page, server, "fay", "FILLS", 9)

    # Another symbol: its own fills; and back.
    page.select_option("#t-symbol", "FILLS2")
    expect(page.locator("#tab-fills")).to_have_text("My fills FILLS2")
    expect(rows).to_have_count(1)
    assert [r[1:] for r in fill_rows(page)] == [("▲ buy", "2", "@ 50", f"#{other}", "taker")]
    page.select_option("#t-symbol", "FILLS")
    expect_fills_as_the_server_has_them(page, server, "fay", "FILLS", 9)

    # At phone width the table fits its panel.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("""() => document.getElementById('fills-table').getBoundingClientRect().width <=
        document.getElementById('fills-view').getBoundingClientRect().width
        && document.documentElement.scrollWidth <= window.innerWidth""")
    page.set_viewport_size({"width": 1440, "height": 900})
    # Another account: none of fay's, and an empty list says so.
    page.fill("#account", "gus")
    page.press("#account", "Enter")
    expect(page.locator("#conn-text")).to_have_text("Live as gus")
    expect(rows).to_have_count(0)
    expect(page.locator("#fills-empty")).to_have_text("No fills in FILLS yet.")
    # The tabs from the keyboard: only the selected one is in the Tab order; the arrows move and select.
    page.focus("#tab-fills")
    page.keyboard.press("ArrowLeft")
    expect(page.locator("#tab-orders")).to_be_focused()
    expect(page.locator("#tab-orders")).to_have_attribute("aria-selected", "true")
    expect(page.locator("#tab-fills")).to_have_attribute("tabindex", "-1")
    expect(page.locator("#orders-view")).to_be_visible()
    expect(page.locator("#cancel-all")).to_be_visible()
    page.keyboard.press("End")
    expect(page.locator("#fills-view")).to_be_visible()
    errors = page.console_errors  # type: ignore[attr-defined]
    errors[:] = [e for e in errors if not NETWORK_NOISE.search(e)]


def test_my_fills_take_maker_or_taker_from_each_fill_and_the_server_record_from_get_fills(pages: Pages) -> None:
    """MyFills alone, in the page: the liquidity shown is each fill's own, a live fill seen again is one row,
    and a GET /fills record replaces the row held."""
    page = pages.open("lou", "ACME")
    shown = page.evaluate("""async () => {
        const { MyFills, fillsOf } = await import('/js/fills.js');
        const fills = new MyFills({ tbody: document.createElement('tbody'), empty: document.createElement('p'),
            label: document.createElement('span'), columns: { get: (i, n) => n }, read: async () => ({ status: 500 }) });
        fills.show('lou', 'ACME');
        const order = (orderId, extra) => ({ orderId, symbol: 'ACME', side: 'sell', type: 'limit', tif: 'gtc',
            postOnly: false, price: 100, qty: 10, seq: 9, ts: 1764685000123, ...extra });
        const fill = (tradeId, liquidity) => ({ tradeId, price: 100, qty: 2, liquidity });
        // A resting order hit twice by one command, then my own order's answer and the update repeating it.
        fills.seen(order(1, { fills: [fill(11, 'maker'), fill(12, 'maker')] }));
        const answer = order(2, { type: 'market', tif: 'ioc', fills: [fill(13, 'taker')] });
        fills.seen(answer);
        fills.seen({ ...answer, fills: [{ ...fill(13, 'maker'), qty: 5 }] });
        fills.seen(order(3, { symbol: 'OTHER', fills: [fill(14, 'maker')] }));  // another symbol's
        const live = fills.list().map((f) => [f.tradeId, f.qty, f.liquidity]);
        fills.merge([{ ...fillsOf(order(1, { fills: [fill(12, 'taker')] }))[0], seq: 9 }], true);
        fills.render();
        const cells = [...fills.tbody.querySelectorAll('tr')].map((tr) =>
            [tr.dataset.tradeId, tr.querySelector('td.liq').className, tr.querySelector('td.liq').textContent]);
        return { live, cells, served: fills.fills.get(12).seq,
                 of: fillsOf(order(4, { fills: [fill(15, 'maker'), fill(16, 'taker')] })).map((f) => f.liquidity) };
    }""")
    assert shown["of"] == ["maker", "taker"]
    assert sorted(shown["live"]) == [[11, 2, "maker"], [12, 2, "maker"], [13, 2, "taker"]]
    assert shown["served"] == 9
    assert shown["cells"] == [["13", "liq taker", "taker"], ["12", "liq taker", "taker"], ["11", "liq maker", "maker"]]
