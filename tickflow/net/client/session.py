"""`Session`: one WebSocket to the server that keeps itself up, around the sans-I/O `ClientState`.

The session does the I/O: it connects (and reconnects with `Backoff`), signs in, subscribes, and
carries out what the state asks (subscribe again after a gap, fetch missed trades, read the orders
again: catchup.py). What the messages mean is decided in state.py; order entry with answers matched
by request id is calls.py's; the events go out through fanout.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping
from typing import Any

import aiohttp
import msgspec

from tickflow.net.client.backoff import Backoff
from tickflow.net.client.catchup import missed_trades, orders_now, other_server, read_log_started
from tickflow.net.client.calls import MAX_IN_FLIGHT, OrderEntry
from tickflow.net.client.errors import AuthFailed, ConnectionLost, NotConnected, TickflowError
from tickflow.net.client.fanout import Fanout
from tickflow.net.client.http import Client, base_url, encode, new_http_session, ws_url
from tickflow.net.client.state import (
    ClientState,
    Event,
    FetchTrades,
    LocalBook,
    Out,
    ReadOrders,
    Resubscribe,
    ServerError,
    StateChanged,
)
from tickflow.net.wire.messages import (
    AuthMsg,
    ConnState,
    ErrorMsg,
    Order,
    Pong,
    Result,
    Results,
    Trade,
    Updates,
    server_message,
)

__all__ = ["Session", "Backoff", "MAX_IN_FLIGHT", "MAX_MESSAGE"]

log = logging.getLogger("tickflow.client")
MAX_MESSAGE = 4 * 1024 * 1024
"""The largest WebSocket message a session takes (aiohttp's default, named): a bound, so that a server
cannot make a client hold any amount of memory for one message. Market data comes in parts of at most
1 MiB whatever the book's size (the server's PART_LEVELS); only the answer to an order that fills
against some 100,000 orders at once (and its own-order update) is bigger, and ends the connection (1009),
as does the answer to a cancel-all of some 13,000 orders or more (`Client.cancel_all` has no such bound)."""
_json = msgspec.json.Decoder()


class Session(OrderEntry):
    """One WebSocket session that keeps itself connected.

    `start()` (or `async with`) begins connecting in a background task; calls made while the session
    is not connected raise `NotConnected`, and calls in flight when the connection drops raise
    `ConnectionLost` (`RequestTimeout` when no answer came in time: the outcome is unknown either way,
    and a retry with the same `clientOrderId` is safe). At most MAX_IN_FLIGHT order-entry requests are
    on the wire at once; more wait their turn. After every (re)connection the session authenticates
    (when it has a token), subscribes again to `symbols` (each on its own, so an unknown one costs only
    itself: it is reported as a `ServerError`) and waits for fresh snapshots; trades missed while away
    are fetched over HTTP (beside the socket, so order answers are not held up) so `TradesReceived` has
    no holes, and after a reconnection or a slow-consumer resync the account's orders are read again, so
    an order that changed meanwhile (a fill, say) gives an `OrderChanged`. `updates=False` asks the
    server for no private updates (no `OrderChanged`): for a script that needs only its own answers;
    `updates="lists"` for the same updates gathered, one message per durable batch (for batches and quotes).

    `cancel_on_disconnect=True` (needs a token) asks the server to cancel every open order of the
    account (in every symbol, also those placed over HTTP or other connections) when this connection
    goes away, however it goes: `close()` (the cancel may still be on its way when it returns), the
    process dying, the network dropping it, the server closing it for not reading. Not when the server
    stops or crashes: the orders are still there after its restart. It lasts one connection, so the
    session asks for it with every sign-in. A connection that dies silently is noticed by the server's
    pings (within some 45 s), possibly after the session is back on a new one: what was placed
    meanwhile is cancelled too (each an `OrderChanged`). A server that does not confirm it stops the
    session with `AuthFailed`.

    `client_state` is the `ClientState` the session drives (books, orders, trades seen); `feed()` hands it a
    message as if it came from the socket.
    """

    def __init__(self, url: str, token: str | None = None, *, symbols: Iterable[str] = (),
                 updates: Updates = True, cancel_on_disconnect: bool = False, reconnect: bool = True,
                 backoff: Backoff | None = None, heartbeat: float = 5.0, request_timeout: float = 10.0,
                 connect_timeout: float = 5.0, http: aiohttp.ClientSession | None = None) -> None:
        super().__init__(request_timeout)
        self.url = base_url(url)
        if cancel_on_disconnect and not token:
            raise ValueError("cancel_on_disconnect needs a token: it is armed by signing in as the account")
        self.token = token
        self.updates = updates
        self.cancel_on_disconnect = cancel_on_disconnect
        self.symbols: list[str] = list(dict.fromkeys(symbols))
        self.client_state = ClientState()
        """The sans-I/O state this session drives: books, orders and trades seen, the exchange followed."""
        self.state: ConnState = "closed"
        self.account: str | None = None
        self.last_error: str | None = None
        """Why the last connection attempt failed or the last connection ended (None once connected)."""
        self.reconnects = 0
        self._reconnect = reconnect
        self._backoff = backoff or Backoff()
        self._heartbeat = heartbeat
        self._connect_timeout = connect_timeout
        self._http = http
        self._own_http = http is None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        """Work beside the connection loop (catching up orders, fetching missed trades)."""
        self._closers: set[asyncio.Task[None]] = set()
        """Closing handshakes of connections let go of."""
        self._fanout = Fanout(lambda: self._stopped or self._closing)
        self._emit = self._fanout.emit
        self._connected = asyncio.Event()
        self._closing = False
        self._fatal: AuthFailed | None = None
        self._http_client: Client | None = None
        self._was_connected = False
        self._stopped = False
        """The connection loop ended for good (closed, refused token, or no reconnecting)."""

    # ---- what the client state holds

    @property
    def books(self) -> dict[str, LocalBook]:
        """The books of the symbols followed, by symbol (`LocalBook.live` says whether one is current)."""
        return self.client_state.books

    @property
    def orders(self) -> Mapping[int, Order]:
        """This account's open orders as last seen by this session (answers to its calls and private
        updates), by id: never an older state over a newer one, never a closed order again."""
        return self.client_state.orders.open

    @property
    def last_seq(self) -> int:
        """The highest `seq` seen on any message: how far this client has followed the log."""
        return self.client_state.last_seq

    @last_seq.setter
    def last_seq(self, seq: int) -> None:
        self.client_state.last_seq = seq

    @property
    def log_started(self) -> int | None:
        """When the log of the exchange followed began (`GET /health`'s logStarted), once known."""
        return self.client_state.log_started

    @log_started.setter
    def log_started(self, started: int | None) -> None:
        self.client_state.log_started = started

    @property
    def gaps(self) -> int:
        """Gaps detected in the feed so far (each re-subscribed)."""
        return self.client_state.gaps

    # ---- life cycle

    async def __aenter__(self) -> Session:
        try:
            await self.start()
        except BaseException:
            await self.close()  # no session left reconnecting in the background with no one to close it
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def start(self, *, wait: bool = True, timeout: float | None = 10.0) -> None:
        """Start connecting (again, if the session stopped by itself); with `wait`, return once connected.

        With `wait` it raises `AuthFailed` when the token is refused (the session has stopped) or
        `NotConnected` after `timeout` (the session keeps trying: `wait_connected()` again, or `close()`)."""
        if self._task is None or self._task.done():
            self._closing = False
            self._stopped = False
            self._fatal = None
            if self._http is None or self._http.closed:
                self._http = new_http_session()
                self._own_http = True
            self._task = asyncio.create_task(self._run(), name="tickflow-session")
        if wait:
            await self.wait_connected(timeout)

    async def wait_connected(self, timeout: float | None = None) -> None:
        """Wait until the session is connected (and authenticated); `NotConnected` says why not."""
        if self._task is None:
            raise NotConnected("the session was not started")
        # Let the session run first: a caller that retries in a loop after NotConnected must not
        # starve it when the socket has just dropped and the loop has not noticed yet.
        await asyncio.sleep(0)
        if not self._connected.is_set():
            waiter = asyncio.ensure_future(self._connected.wait())
            try:
                await asyncio.wait({waiter, self._task}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiter.cancel()
        if self._fatal is not None:
            raise self._fatal
        if not self._connected.is_set():
            why = f": {self.last_error}" if self.last_error else ""
            if self._task.done():
                raise NotConnected(f"not connected to {self.url}: the session has stopped{why}")
            raise NotConnected(f"not connected to {self.url} after {timeout} s{why}")

    async def close(self) -> None:
        """Close the connection, stop reconnecting and end the work beside it; safe to call again."""
        self._closing = True
        try:
            if self._task is not None:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._task
                self._task = None
            await self._cancel_tasks()
            self._disconnect()
            await asyncio.gather(*self._closers, return_exceptions=True)
        finally:
            if self._own_http and self._http is not None:
                http, self._http = self._http, None
                await http.close()
            self._http_client = None
            if self.state != "closed":
                self._set_state("closed")

    @property
    def connected(self) -> bool:
        return self.state == "connected"

    @property
    def http(self) -> Client:
        """An HTTP `Client` with the same address, token and connection pool."""
        if self._http_client is None:
            if self._http is None or self._http.closed:
                self._http = new_http_session()
                self._own_http = True
            self._http_client = Client(self.url, self.token, session=self._http)
        return self._http_client

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        """Run `coro` beside the connection loop (kept here: asyncio holds tasks weakly); close() ends it."""
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _cancel_tasks(self) -> None:
        tasks = [t for t in self._tasks if t is not asyncio.current_task()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # ---- events

    def add_listener(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call `listener(event)` for every event, in the session's task; returns a remover."""
        return self._fanout.add_listener(listener)

    def events(self, maxsize: int = 10_000) -> AsyncIterator[Event]:
        """Iterate over the events from this call on; the iteration ends once the session has stopped
        for good (closed, its token refused, or the connection lost with `reconnect=False`). A
        consumer that falls `maxsize` behind loses the oldest (books stay right: each `BookChanged`
        carries the live `LocalBook`)."""
        return self._fanout.events(maxsize)

    async def _carry_out(self, outs: list[Out]) -> None:
        """Report the state's events and do what it asks, in its order."""
        for out in outs:
            if isinstance(out, Resubscribe):
                await self._send_quietly({"op": "subscribe", "symbols": [out.symbol]})
            elif isinstance(out, FetchTrades):
                self._spawn(self._backfill(out.symbol, out.after))
            elif isinstance(out, ReadOrders):
                self._catch_up()
            else:
                self._emit(out)

    def _set_state(self, state: ConnState, attempt: int = 0, delay: float = 0.0,
                   error: str | None = None) -> None:
        self.state = state
        if state == "connected":
            self._connected.set()
        else:
            self._connected.clear()
        self._emit(StateChanged(state, attempt, delay, error, self.account))

    # ---- market data

    async def subscribe(self, *symbols: str) -> None:
        """Follow these symbols (also after reconnecting); a snapshot of each follows."""
        for s in symbols:
            if s not in self.symbols:
                self.symbols.append(s)
        if self.connected and symbols:  # otherwise the next connection subscribes to them
            await self._send_quietly({"op": "subscribe", "symbols": list(symbols)})

    async def unsubscribe(self, *symbols: str) -> None:
        """Stop following these symbols; their books stay as they were, marked not live."""
        for s in symbols:
            if s in self.symbols:
                self.symbols.remove(s)
        self.client_state.unsubscribed(symbols)
        if self.connected and symbols:
            await self._send_quietly({"op": "unsubscribe", "symbols": list(symbols)})

    async def _backfill(self, symbol: str, after: int) -> None:
        """Fetch the trades printed while we were away (after trade id `after`, up to the snapshot's
        oldest), then deliver them with those that arrived meanwhile, each once and in order."""
        missed: list[Trade] = []
        try:
            missed = await missed_trades(self.http, self.client_state, symbol, after, self._request_timeout)
        finally:
            for event in self.client_state.backfilled(symbol, missed, deliver=not self._closing):
                self._emit(event)

    async def drop_connection(self) -> None:
        """Close the current WebSocket as a lost network would: the session then reconnects, signs in,
        re-subscribes and catches up as after any loss (for a bot that wants a fresh connection, and
        for tests of the reconnect)."""
        ws = self._ws
        if ws is not None and not ws.closed:
            await ws.close()

    # ---- the connection loop

    def _can_send(self) -> bool:
        return self._ws is not None and not self._ws.closed and self.connected

    async def _send(self, message: dict[str, Any]) -> None:
        """Send one message: `NotConnected` when there is no connection, `ConnectionLost` when it fails."""
        ws = self._ws
        if ws is None or ws.closed:
            raise NotConnected(f"not connected to {self.url} ({self.state})")
        try:
            await ws.send_str(encode(message).decode())
        except (aiohttp.ClientError, ConnectionError, OSError, RuntimeError) as e:
            # The frame may have left in part: the outcome of what it asked is unknown.
            raise ConnectionLost(f"connection to {self.url} lost while sending: {e}; outcome unknown") from e

    async def _send_quietly(self, message: dict[str, Any]) -> None:
        with contextlib.suppress(TickflowError):
            await self._send(message)

    async def _run(self) -> None:
        attempt = 0
        try:
            self._set_state("connecting")  # later attempts are announced with their delay and reason
            while True:
                await self._connect_once()
                if self._was_connected:
                    attempt = 0
                    self.reconnects += 1
                if self._fatal is not None or not self._reconnect or self._closing:
                    break
                delay = self._backoff.delay(attempt)
                attempt += 1
                self._set_state("reconnecting", attempt, delay, self.last_error)
                await asyncio.sleep(delay)
        finally:
            self._disconnect()
            self._stopped = True
            self._set_state("closed", error=None if self._closing else self.last_error)

    async def _connect_once(self) -> None:
        """One connection from its start to its end; `last_error` says why it ended."""
        try:
            self.last_error = await self._connect_and_serve()
        except AuthFailed as e:
            self._fatal = e
            self.last_error = str(e)
        except (aiohttp.ClientError, OSError, asyncio.TimeoutError, TickflowError) as e:
            self.last_error = f"{type(e).__name__}: {e}".rstrip(": ")
        except Exception as e:  # a bug in handling a message must not end the session
            log.exception("session error; reconnecting")
            self.last_error = f"{type(e).__name__}: {e}"
        finally:
            self._disconnect()

    async def _connect_and_serve(self) -> str:
        """Connect, authenticate and handle messages until the connection ends; return why it ended."""
        self._was_connected = False
        assert self._http is not None
        held = self.client_state
        if held.last_seq or held.newest_trade is not None or held.log_started is not None:
            other = await self._other_server()
            if other:
                for event in held.forget_server(other):
                    self._emit(event)
        ws = await asyncio.wait_for(
            self._http.ws_connect(ws_url(self.url), heartbeat=self._heartbeat, autoping=True,
                                  max_msg_size=MAX_MESSAGE),
            self._connect_timeout)
        self._ws = ws
        if held.log_started is None:  # the first connection, or a log that had no record yet
            held.log_started = await read_log_started(self.http, self._request_timeout)
        if self.token:
            auth: dict[str, Any] = {"op": "auth", "token": self.token}
            if self.updates is not True:
                auth["updates"] = self.updates
            if self.cancel_on_disconnect:
                auth["cancelOnDisconnect"] = True
            await self._send(auth)
        else:
            await self._on_connected()
        while True:
            msg = await ws.receive()
            if msg.type == aiohttp.WSMsgType.TEXT:
                await self._on_text(msg.data)
            elif msg.type == aiohttp.WSMsgType.ERROR:
                raise ConnectionError(f"websocket error: {ws.exception()}")
            elif msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSING, aiohttp.WSMsgType.CLOSED):
                reason = msg.extra if msg.type == aiohttp.WSMsgType.CLOSE and isinstance(msg.extra, str) else ""
                return self._why_closed(ws.close_code, reason)

    async def _other_server(self) -> str | None:
        """Why the server now at the address is not the exchange followed so far, or None (catchup.py)."""
        return await other_server(self.http, self.client_state, self._connect_timeout, self._request_timeout)

    def _why_closed(self, code: int | None, reason: str) -> str:
        """Words for a closed connection (1001 server shutting down, 1013 too slow, ...)."""
        # A server refusing a token at the door closes with a policy or application code; any other
        # close before the answer to auth (a restart, an overload) is worth another attempt.
        if not self._was_connected and self.token and (code == 1008 or 4000 <= (code or 0) < 5000):
            raise AuthFailed(f"server closed the session before auth (code {code}{': ' + reason if reason else ''})")
        if reason:
            return f"connection closed by the server ({code}: {reason})"
        return "connection closed" if code in (None, 1000, 1006) else f"connection closed (code {code})"

    async def _on_connected(self) -> None:
        self._was_connected = True
        self.last_error = None
        self.client_state.stale()
        self._set_state("connected")
        for symbol in list(self.symbols):
            await self._send_quietly({"op": "subscribe", "symbols": [symbol]})
        if self.reconnects:
            self._catch_up()

    def _catch_up(self) -> None:
        """Read the account's orders again (beside the socket), when it receives their updates."""
        if self.account is not None and self.updates:
            self._spawn(self._catch_up_orders())

    async def _catch_up_orders(self) -> None:
        """After a reconnection or a resync: read the account's orders again; report any that changed
        (`ClientState.orders_read` tells which)."""
        before = dict(self.client_state.orders.open)
        try:
            read = await orders_now(self.http, before)
        except TickflowError as e:
            log.warning("could not read the orders again: %s", e)
            return
        for event in self.client_state.orders_read(before, read):
            self._emit(event)

    def _disconnect(self) -> None:
        """Let go of the connection at once (no await: no call may find it half gone); it closes beside."""
        self._fail_waiters()
        self.client_state.stale()
        ws, self._ws = self._ws, None
        if ws is not None and not ws.closed:
            task = asyncio.ensure_future(self._close_ws(ws))
            self._closers.add(task)
            task.add_done_callback(self._closers.discard)

    async def _close_ws(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        with contextlib.suppress(Exception):  # a server that does not answer the close is let go
            await asyncio.wait_for(ws.close(), self._connect_timeout)

    # ---- messages

    async def _on_text(self, data: str) -> None:
        try:
            msg = server_message(data)
        except msgspec.DecodeError:  # ValidationError included
            log.warning("unrecognised message: %.200s", data)
            return
        if isinstance(msg, (Result, Results)):
            self._answered(msg)
        elif isinstance(msg, AuthMsg):
            if self.cancel_on_disconnect and not msg.cancel_on_disconnect:
                # Carrying on would leave orders in the book that the caller counts on going with it.
                raise AuthFailed("the server did not arm cancel on disconnect (a server too old to know it?)")
            self.account = msg.account
            await self._on_connected()
        elif isinstance(msg, ErrorMsg):
            self._on_error(msg, data)
        elif isinstance(msg, Pong):
            self._pong()
        else:
            await self._carry_out(self.client_state.receive(msg))

    def _on_error(self, msg: ErrorMsg, data: str) -> None:
        body = _json.decode(data)
        if not self._was_connected and self.token and msg.op in ("auth", None):
            raise AuthFailed(str(body.get("error") or body))
        self._answer(msg.id, 400, encode(body))
        self._emit(ServerError(body))

    async def feed(self, data: str | bytes) -> None:
        """Handle one server message as if it had arrived on the socket (for tests and replays)."""
        await self._on_text(data if isinstance(data, str) else data.decode())
