"""The WebSocket endpoint: one connection's sign-in, subscriptions and order entry correlated by id, and
the writer that drains its subscriber's buffers into the socket."""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Coroutine

import msgspec
from aiohttp import WSMsgType, web

from tickflow.core.types import CancelAll
from tickflow.net.exchange.service import Subscriber
from tickflow.net.gateway import inputs
from tickflow.net.gateway.context import GATEWAY, Gateway
from tickflow.net.gateway.orders import execute, execute_batch, execute_commands
from tickflow.net.gateway.responses import error
from tickflow.net.gateway.security import origin_allowed
from tickflow.net.wire import answers, batches, requests
from tickflow.net.wire.answers import encode
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import MAX_BODY, MAX_WS_ID, MAX_WS_IN_FLIGHT, MAX_WS_REPLY

log = logging.getLogger("tickflow.net.gateway")

HEARTBEAT = float(os.environ.get("TICKFLOW_WS_HEARTBEAT") or 30.0)
"""Seconds between the pings that find a silent peer, whose pong must come within half of that. The
environment variable TICKFLOW_WS_HEARTBEAT sets it: a test seam, so a test finds a silent peer at once."""
CLOSE_WAIT = float(os.environ.get("TICKFLOW_WS_CLOSE_WAIT") or 1.0)
"""Seconds a peer the server drops (one that does not read) gets to take the close frame before the
connection is aborted. TICKFLOW_WS_CLOSE_WAIT sets it: a test seam, so a test reading such a peer's last
frames on a busy machine is not cut off before it reaches the close."""


AUTH_FIELDS = ("token", "updates", "cancelOnDisconnect")
SUBSCRIBE_FIELDS = ("symbols",)


async def websocket(request: web.Request) -> web.StreamResponse:
    ex = request.app[GATEWAY]
    if not origin_allowed(request):
        # A page from another site, run by a browser that can reach this server (in open mode, the
        # account name is the token): it must not trade through that browser.
        ex.counters["ws_origin_refused"] += 1
        return error(403, f"a WebSocket from the origin {brief(request.headers.get('Origin'))} is refused: only "
                          "the server's own page, and the origins of --allow-origin, may open one")
    inputs.only_params(request, "GET /ws", AUTH_FIELDS)
    token = request.query.get("token")
    account = ex.account(token) if token is not None else None
    refusal: str | None
    if ex.websockets >= ex.max_websockets:
        status, refusal = 503, f"too many WebSocket connections ({ex.websockets} open, the server's limit): try again later"
    else:
        # Connections that are not signed in have a cap below the total: however many a peer holds open,
        # signed-in traders still get in. An account over its own cap is told so (its doing: 429).
        status, refusal = (503 if account is None else 429), ex.room.refusal(account)
    if refusal is not None:
        ex.counters["ws_refused"] += 1
        response = error(status, refusal)
        response.headers["Retry-After"] = "5"
        return response
    ex.websockets += 1
    try:
        return await _websocket(request, ex)
    finally:
        ex.websockets -= 1


async def _websocket(request: web.Request, ex: Gateway) -> web.WebSocketResponse:
    # aiohttp refuses a message of max_msg_size bytes or more; HTTP bodies may be MAX_BODY bytes.
    ws = web.WebSocketResponse(max_msg_size=MAX_BODY + 1, heartbeat=HEARTBEAT)
    await ws.prepare(request)
    transport = request.transport

    def close(code: int, why: bytes) -> None:
        asyncio.ensure_future(_drop(ws, transport, code, why))

    sub = ex.service.attach(close)
    ex.open_sockets.add(ws)
    writer = asyncio.create_task(write_loop(sub, ws))
    session = _WsSession(ex, sub, request.remote)
    token = request.query.get("token")
    deadline = asyncio.get_running_loop().call_later(ex.auth_timeout, session.deadline)
    if token is not None:
        flags = {"true": True, "false": False}
        updates = request.query.get("updates", "true")
        cancel = request.query.get("cancelOnDisconnect", "false")
        session.auth(token, flags.get(updates, updates), flags.get(cancel, cancel))
    try:
        async for msg in ws:
            ex.counters["ws_messages"] += 1
            if msg.type is WSMsgType.TEXT:
                try:
                    session.handle(msg.data)
                except Exception:  # a bug must cost one message, not the connection (or a 500 into it)
                    log.exception("unhandled error in a WebSocket message")
                    session.error("internal error handling the message")
            elif msg.type is WSMsgType.BINARY:
                session.error("binary frames are not supported: send JSON text")
            elif msg.type is WSMsgType.ERROR:
                break
    finally:
        deadline.cancel()
        ex.room.release(session.slot)
        ex.open_sockets.discard(ws)
        ex.service.detach(sub)
        writer.cancel()
        ex.accounts.watchers.discard(session.tokens_changed)
        session.disconnected()
    return ws


async def write_loop(sub: Subscriber, ws: web.WebSocketResponse) -> None:
    """Drain one subscriber's buffers into its socket; only this connection waits on its socket."""
    send = ws.send_frame
    text = WSMsgType.TEXT
    try:
        while not sub.closed:
            await sub.wake.wait()
            sub.wake.clear()
            while (message := sub.next_message()) is not None:
                # Encoded once as UTF-8 JSON bytes, shared by every subscriber, sent as a text frame.
                # send_frame only suspends when the transport is over its high-water mark.
                sub.blocked = True
                if isinstance(message, tuple):  # a message in parts: nothing comes between them
                    for part in message:
                        await send(part, text)
                else:
                    await send(message if isinstance(message, bytes) else message.encode(), text)
                sub.blocked = False
                sub.sent += 1
                if sub.deeper:  # a deep snapshot's slices: one per turn of the loop, not all in one
                    await asyncio.sleep(0)
    except (ConnectionError, RuntimeError, asyncio.CancelledError):
        pass
    finally:
        sub.closed = True


async def _drop(ws: web.WebSocketResponse, transport: asyncio.Transport | None, code: int, why: bytes) -> None:
    """Close with `code`; a peer that does not read cannot take the close frame either, so abort."""
    try:
        await asyncio.wait_for(ws.close(code=code, message=why), CLOSE_WAIT)
    except (asyncio.TimeoutError, ConnectionError, RuntimeError):
        pass
    if transport is not None:
        transport.abort()


class _WsSession:
    """One connection's requests: auth, subscriptions and order entry correlated by id."""

    def __init__(self, ex: Gateway, sub: Subscriber, peer: str | None = None) -> None:
        self.ex = ex
        self.sub = sub
        self.peer = peer
        self.in_flight = 0
        self.cancel_on_disconnect: str | None = None
        """The account whose open orders are all cancelled when this connection goes away."""
        self.token: str | None = None
        """The token the connection signed in with: when the tokens change (SIGHUP), it must still name its account."""
        self.slot: str | None = None
        """Whose room the connection takes (`ex.room`): its account's once signed in, else the anonymous one."""
        ex.room.take(None)
        self.purposeful = False
        """Signed in or subscribed once: a connection that has done neither by the deadline is closed."""

    def deadline(self) -> None:
        """The sign-in deadline has passed: a connection that neither signed in nor subscribed only holds
        a slot (1,000 of them that answer pings held every slot), so it is closed."""
        if self.purposeful or self.sub.closed:
            return
        self.ex.counters["ws_auth_timeouts"] += 1
        self.sub.close(1008, f"neither signed in nor subscribed within {self.ex.auth_timeout:g} s "
                             "(--auth-timeout)".encode())

    def _occupy(self, account: str | None) -> None:
        """Move the connection to `account`'s room (None: the anonymous one), which the caller checked."""
        if account != self.slot:
            self.ex.room.release(self.slot)
            self.ex.room.take(account)
            self.slot = account

    def error(self, message: str, **extra: Any) -> None:
        self.sub.reply(encode({"type": "error", "error": message, **extra}))

    def auth(self, token: Any, updates: Any = True, cancel_on_disconnect: Any = False) -> None:
        """Sign the connection in; a failed attempt leaves it signed out, never as the account it had,
        and disarms cancel on disconnect (which belongs to a sign-in)."""
        account = self.ex.account(token) if isinstance(token, str) else None
        updates_ok = isinstance(updates, bool) or updates == "lists"
        if account is None or not updates_ok or not isinstance(cancel_on_disconnect, bool):
            self._sign_out()
            if account is None:
                if isinstance(token, str) and token:
                    self.ex.sign_in_failures.failed(self.peer, "WebSocket auth")
                self.error("unknown token", op="auth")
            elif not updates_ok:
                self.error('updates must be true, false or "lists"', op="auth", field="updates")
            else:
                self.error("cancelOnDisconnect must be true or false", op="auth", field="cancelOnDisconnect")
            return
        if account != self.slot:
            refusal = self.ex.room.refusal(account)
            if refusal is not None:
                self._sign_out()
                self.error(refusal, op="auth")
                return
            self._occupy(account)
        self.purposeful = True
        self.ex.service.authenticate(self.sub, account, updates)
        self.cancel_on_disconnect = account if cancel_on_disconnect else None
        self.token = token
        self.ex.accounts.watchers.add(self.tokens_changed)
        self.sub.reply(encode({"type": "auth", "account": account, "updates": updates,
                               "cancelOnDisconnect": cancel_on_disconnect}))

    def _sign_out(self) -> None:
        """No account any more, and no cancel on disconnect (which belongs to a sign-in)."""
        if self.sub.account is not None:
            self.ex.service.authenticate(self.sub, None)
        self.cancel_on_disconnect = None
        self.token = None
        self.ex.accounts.watchers.discard(self.tokens_changed)
        if self.slot is not None:
            self._occupy(None)
            room = self.ex.room
            if room.anonymous > room.max_anonymous:  # else signing in and out would get round the cap
                self.sub.close(1013, b"signed out, and no room for a connection that is not signed in: try again later")

    def tokens_changed(self) -> bool:
        """The tokens file was read again: a sign-in whose token no longer names its account ends."""
        if self.sub.account is None or self.ex.account(self.token) == self.sub.account:
            return False
        self._sign_out()
        self.error("signed out: the server's tokens changed, and this connection's token no longer names its "
                   "account", op="auth")
        return True

    def disconnected(self) -> None:
        """The connection is gone: with cancel on disconnect armed, cancel its account's open orders.
        Not when the server is stopping: it closed the connection, and the orders stay for the restart."""
        account = self.cancel_on_disconnect
        if account is None or self.ex.closing:
            return
        self.ex.counters["cancel_on_disconnect"] += 1
        log.info("a WebSocket of %s with cancel on disconnect closed: cancelling its open orders", account)
        task = asyncio.ensure_future(self._cancel_all_of(account))
        self.ex.chores.add(task)
        task.add_done_callback(self.ex.chores.discard)

    async def _cancel_all_of(self, account: str) -> None:
        status, body = await execute(self.ex.service, CancelAll(account))
        if status != 200:  # nobody waits for this answer: the operator is told instead
            log.error("cancel on disconnect of %s was not carried out (%d): %s", account, status,
                      body.decode(errors="replace"))

    def handle(self, raw: str) -> None:
        if "\"batch\"" in raw and self.sub.account is not None and self._fast_batch(raw):
            return
        try:
            message = requests.decode_json(raw)
        except BadRequest as e:
            self.error(e.message, **({"field": e.field} if e.field else {}))
            return
        if not isinstance(message, dict):
            self.error("expected a JSON object with an 'op'")
            return
        op = message.pop("op", None)
        if op == "ping":
            self.sub.reply(b'{"type":"pong"}')
        elif op == "auth":
            extra = _unknown(message, AUTH_FIELDS)
            if extra is not None:  # a misspelt cancelOnDisconnect must not sign in without the switch armed
                self._sign_out()
                self.error(f"unknown field {brief(extra)} for auth: it takes {', '.join(AUTH_FIELDS)}", op="auth",
                           field=cut(extra))
                return
            self.auth(message.get("token"), message.get("updates", True), message.get("cancelOnDisconnect", False))
        elif op in ("subscribe", "unsubscribe"):
            extra = _unknown(message, SUBSCRIBE_FIELDS)
            if extra is not None:
                self.error(f"unknown field {brief(extra)} for {op}: it takes symbols", op=op, field=cut(extra))
                return
            self.subscription(op, message.get("symbols"))
        elif op in ("order", "cancel", "amend", "cancelAll", "quote"):
            self.request(op, message)
        elif op == "batch":
            self.batch(message)
        else:
            self.error(f"unknown op {brief(op)}: expected auth, subscribe, unsubscribe, order, cancel, "
                       "amend, cancelAll, batch, quote, ping")

    def subscription(self, op: str, symbols: Any) -> None:
        service = self.ex.service
        if not isinstance(symbols, list) or not symbols or not all(isinstance(s, str) for s in symbols):
            self.error("symbols must be a non-empty list of symbol names", op=op)
            return
        unknown = [s for s in symbols if s not in service.book_symbols]
        if unknown:
            self.error(f"unknown symbols: {', '.join(brief(s) for s in unknown[:10])}", op=op, field="symbols")
            return
        self.purposeful = self.purposeful or op == "subscribe"
        for symbol in dict.fromkeys(symbols):
            if op == "subscribe":
                service.subscribe(self.sub, symbol)
            else:
                service.unsubscribe(self.sub, symbol)

    def request(self, op: str, message: dict[str, Any]) -> None:
        request_id = self._request_id(op, message)
        if request_id is None or not self._may_send(request_id, 1):
            return
        try:
            command = self._command(op, self.sub.account, message)  # type: ignore[arg-type]
            if op in batches.RATED:
                self.ex.order_rate.take(self.sub.account)  # type: ignore[arg-type]
        except BadRequest as e:
            self._result(request_id, e.status, encode(e.body()))
            return
        self.in_flight += 1
        asyncio.ensure_future(self._submit(request_id, command))

    def batch(self, message: dict[str, Any]) -> None:
        """Up to 256 order operations, sequenced one after another and answered together (`results`)."""
        request_id = self._request_id("batch", message)
        if request_id is None:
            return
        try:
            ops = batches.batch_ops(message.pop("ops", None))
            extra = _unknown(message, ())
            if extra is not None:
                raise BadRequest(f"unknown field {brief(extra)} for batch: it takes id and ops", cut(extra))
        except BadRequest as e:
            if self.sub.account is None:  # signed out is the first thing to say
                self._may_send(request_id, 1)
            else:
                self._result(request_id, e.status, encode(e.body()))
            return
        if self._may_send(request_id, len(ops)):
            account: str = self.sub.account  # type: ignore[assignment]
            self._start_batch(request_id, len(ops), batches.rated(ops),
                              execute_batch(self.ex.service, account, ops))

    def _fast_batch(self, raw: str) -> bool:
        """A well-formed batch of valid ops, decoded the fast way (batches.fast_batch); False, with nothing
        done, for anything else, which `handle` then reads the general way."""
        account: str = self.sub.account  # type: ignore[assignment]
        decoded = batches.fast_batch(raw, account, self.ex.service.order_symbols)
        if decoded is None:
            return False
        request_id, commands, rated = decoded
        if self._may_send(request_id, len(commands)):
            self._start_batch(request_id, len(commands), rated, execute_commands(self.ex.service, commands))
        return True

    def _start_batch(self, request_id: str | int, count: int, rated: int,
                     answering: Coroutine[Any, Any, list[tuple[int, bytes]]]) -> None:
        """Take `count` ops of the connection's room in flight and `rated` of its account's order rate, and
        send `answering`'s results when they come; a 429 over the rate, with nothing taken."""
        try:
            self.ex.order_rate.take(self.sub.account, rated)  # type: ignore[arg-type]
        except BadRequest as e:
            answering.close()
            self._result(request_id, e.status, encode(e.body()))
            return
        self.in_flight += count
        asyncio.ensure_future(self._submit_batch(request_id, count, answering))

    def _request_id(self, op: str, message: dict[str, Any]) -> str | int | None:
        """The request's `id` (taken out of `message`); None, with an error message, if it has none usable."""
        request_id = message.pop("id", None)
        if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
            self.error("every order, cancel, amend, cancelAll, batch and quote needs an 'id' (string or integer)",
                       op=op)
            return None
        too_long = len(request_id) > MAX_WS_ID if isinstance(request_id, str) else not -(1 << 63) <= request_id < 1 << 63
        if too_long:
            self.error(f"an 'id' is a string of at most {MAX_WS_ID} characters or a 64-bit integer", op=op)
            return None
        return request_id

    def _may_send(self, request_id: str | int, count: int) -> bool:
        """False, once answered, for a connection not signed in or with no room for `count` more in flight."""
        if self.sub.account is None:
            self._result(request_id, 401, encode({"error": "authenticate first: {\"op\": \"auth\", \"token\": ...}"}))
            return False
        if self.in_flight + count > MAX_WS_IN_FLIGHT:
            self._result(request_id, 429, encode({"error": f"more than {MAX_WS_IN_FLIGHT} requests in flight"}))
            return False
        return True

    def _command(self, op: str, account: str, message: dict[str, Any]) -> Any:
        symbols = self.ex.service.order_symbols
        if op == "quote":
            return batches.quote(account, message.pop("symbol", None), message, symbols)
        return batches.command(op, account, message, symbols)

    async def _submit(self, request_id: str | int, command: Any) -> None:
        try:
            status, body = await execute(self.ex.service, command)
        except Exception:
            log.exception("order entry over WebSocket failed")
            status, body = 500, encode({"error": "internal error"})
        finally:
            self.in_flight -= 1
        self._result(request_id, status, body)

    async def _submit_batch(self, request_id: str | int, count: int,
                            answering: Coroutine[Any, Any, list[tuple[int, bytes]]]) -> None:
        try:
            results = await answering
        except Exception:
            log.exception("a batch over WebSocket failed")
            self._result(request_id, 500, encode({"error": "internal error"}))
            return
        finally:
            self.in_flight -= count
        joined = answers.results(results)
        if len(joined) > MAX_WS_REPLY:
            self._result(request_id, 200, joined)  # replaced by the too-large answer, which says it was done
            return
        self.sub.reply(b'{"type":"results","id":%s,"results":%s}' % (encode(request_id), joined))

    def _result(self, request_id: str | int, status: int, body: bytes) -> None:
        if len(body) > MAX_WS_REPLY:
            # Checked before it is queued: one answer (a cancel-all of many thousand orders, an order that
            # swept as many) could otherwise hold any amount of memory, and be more than a client reads.
            self.ex.counters["ws_replies_too_large"] += 1
            log.warning("a WebSocket answer of %d bytes (status %d) was replaced: over the %d one may be",
                        len(body), status, MAX_WS_REPLY)
            status, body = 413, encode({
                "error": f"the answer is {len(body)} bytes, over the {MAX_WS_REPLY} one WebSocket answer may be. "
                         f"The command WAS carried out (it answered {status}): read what it did over HTTP "
                         "(GET /orders/{id}, GET /orders?status=open, GET /fills), and send such commands "
                         "over HTTP, or smaller (a cancel-all by symbol)",
                "code": "answer_too_large", "status": status, "bytes": len(body)})
        self.sub.reply(encode({"type": "result", "id": request_id, "status": status, "body": msgspec.Raw(body)}))


def _unknown(message: dict[str, Any], takes: tuple[str, ...]) -> str | None:
    """The first field of `message` (its `op` taken out) that is not one of `takes`, or None."""
    return next((name for name in message if name not in takes), None)
