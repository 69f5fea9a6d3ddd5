"""The top bar: the symbol switcher, the account, the connection state and how far the feed has got (seq)."""

from __future__ import annotations

import re
import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Label, Select, Static

from tickflow.net.client import StateChanged

COMPACT_WIDTH = 100
"""Below this many columns the bar drops the brand and says the connection state in fewer words."""

# The session reports a failure as "ExceptionName: message"; a user wants to know what happened.
_REASONS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"name or service not known|nodename nor servname|name resolution|getaddrinfo|DNSError", re.I),
     "host not found"),
    (re.compile(r"before auth|token|unauthori[sz]ed", re.I), "token refused"),
    (re.compile(r"refused|connect call failed", re.I), "connection refused"),
    (re.compile(r"unreachable|no route to host", re.I), "network unreachable"),
    (re.compile(r"timeout|timed out", re.I), "no answer in time"),
    (re.compile(r"SSLError|certificate", re.I), "TLS error"),
    (re.compile(r"reset by peer|disconnected|connection lost|broken pipe|connection closed|EOF", re.I),
     "connection lost"),
    (re.compile(r"websocket error", re.I), "WebSocket error"),
]
_HANDSHAKE = re.compile(r"WSServerHandshakeError: (\d{3})")
_EXCEPTION_NAME = re.compile(r"^[A-Za-z_.]*(Error|Exception)\b:?\s*")
_OS_MESSAGE = re.compile(r"\[(?:Errno -?\d+\] )?([^\[\]]+)\]")


def reason(error: str | None) -> str:
    """A few plain words for the session's error text (`ClientConnectorError: ... [Connect call failed
    ...]` is "connection refused")."""
    if not error:
        return ""
    handshake = _HANDSHAKE.search(error)
    if handshake:
        return f"server refused the connection ({handshake.group(1)})"
    for pattern, words in _REASONS:
        if pattern.search(error):
            return words
    os_message = _OS_MESSAGE.search(error)  # aiohttp wraps the system's words in [...]
    if os_message:
        text = os_message.group(1)
    else:
        text = re.split(r"[(\n]", _EXCEPTION_NAME.sub("", error), maxsplit=1)[0]
    text = text.strip(" :,.") or "connection failed"
    text = text[0].lower() + text[1:]
    return text if len(text) <= 32 else text[:31].rsplit(" ", 1)[0] + "…"


def connection_text(conn: StateChanged, seq: int, gaps: int, *, compact: bool = False,
                    waited: float = 0.0) -> Text:
    """`● connected` in green, `⟳ reconnecting in 1.6 s (attempt 3): connection refused` in yellow,
    `✕ disconnected` in red; `compact` says the same in fewer columns. `waited` seconds of the
    reconnection's delay have passed."""
    why = reason(conn.error)
    if conn.state == "connected":
        text = Text("● connected", style="bold green")
    elif conn.state == "connecting":
        text = Text("◌ connecting…", style="bold yellow")
    elif conn.state == "reconnecting":
        left = conn.delay - waited
        wait = f" in {left:.1f} s" if conn.delay and left >= 0.05 else ""
        words = f"⟳ retry {conn.attempt}{wait}" if compact else f"⟳ reconnecting{wait} (attempt {conn.attempt})"
        text = Text(words, style="bold yellow")
        if why:
            text.append(f": {why}", style="yellow")
    else:
        text = Text("✕ disconnected", style="bold red")
        if why:
            text.append(f": {why}", style="red")
    text.append(f"  seq {seq:,}", style="dim" if conn.state != "connected" else "")
    if gaps:
        text.append(f"  gaps {gaps}", style="yellow")
    return text


class TopBar(Horizontal):
    """Posts `Select.Changed` (id `symbol`) when the user picks another symbol."""

    def __init__(self, symbol: str, account: str, *, id: str | None = None, countdown: bool = True) -> None:
        super().__init__(id=id)
        self._symbol = symbol
        self._account = account
        self._conn: tuple[StateChanged, int, int] = (StateChanged("connecting"), 0, 0)
        self._countdown = countdown
        """Count the reconnection's delay down (off for fixed screenshots, which have no clock)."""
        self._since = time.monotonic()

    def compose(self) -> ComposeResult:
        yield Label("tickflow", id="brand")
        yield Select([(self._symbol, self._symbol)], value=self._symbol, allow_blank=False,
                     compact=True, id="symbol")
        yield Label(f"account {self._account}", id="account")
        yield Static("", id="conn")

    @property
    def compact(self) -> bool:
        return 0 < self.size.width < COMPACT_WIDTH

    def set_symbols(self, symbols: list[str], current: str) -> None:
        select = self.query_one("#symbol", Select)
        with select.prevent(Select.Changed):
            select.set_options([(s, s) for s in symbols])
            select.value = current

    def set_symbol(self, symbol: str) -> None:
        select = self.query_one("#symbol", Select)
        if select.value != symbol:
            with select.prevent(Select.Changed):
                select.value = symbol

    def on_mount(self) -> None:
        if self._countdown:
            self.set_interval(0.1, self._tick)

    def set_connection(self, conn: StateChanged, seq: int, gaps: int) -> None:
        if conn is not self._conn[0]:
            self._since = time.monotonic()
        self._conn = (conn, seq, gaps)
        self._draw()

    def _tick(self) -> None:
        if self._conn[0].state == "reconnecting":
            self._draw()

    def _draw(self) -> None:
        conn, seq, gaps = self._conn
        waited = time.monotonic() - self._since if self._countdown else 0.0
        # One line of fixed size: no layout pass (which would redraw every panel) for a new seq.
        self.query_one("#conn", Static).update(
            connection_text(conn, seq, gaps, compact=self.compact, waited=waited), layout=False)

    def on_resize(self) -> None:
        self.query_one("#brand").display = not self.compact
        self.query_one("#account", Label).update(self._account if self.compact else f"account {self._account}")
        self.set_connection(*self._conn)
