"""The HTTP API and the WebSocket endpoint: parse, validate, submit, answer."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable

import msgspec
from aiohttp import WSMsgType, web
from aiohttp.http_exceptions import HttpProcessingError

from tickflow.core.engine import Engine
from tickflow.core.types import CancelAll, Command, Outcome, Reason
from tickflow.net.wire import answers, requests
from tickflow.net.exchange.feed import Feed, Subscriber
from tickflow.net.gateway.metrics import render_metrics
from tickflow.net.wire.openapi import OPENAPI
from tickflow.net.wire.answers import encode
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import ACCOUNT_PATTERN, DIGITS, INTERVALS, MAX_BODY, MAX_WS_ID, MAX_WS_IN_FLIGHT
from tickflow.net.exchange.sequencer import BadCommand, Sequencer, SequencerStopped
from tickflow.net.exchange.trade_writer import TradeWriter
from tickflow.store.trades import TradeStore

log = logging.getLogger(__name__)

CODINGS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}
"""The Content-Encodings a body may come in (zlib's window bits for each); aiohttp's own decoding is off, as
it passes a coding it does not know (or several) through as if the body were plain."""
WEB_DIR = Path(__file__).resolve().parents[3] / "web"
BODY_TIMEOUT = 10.0
MAX_WEBSOCKETS = 1000
"""WebSockets open at once by default (`serve --max-websockets`): each may hold megabytes of queued
market data before it is resynced, and a file descriptor."""


@dataclass
class Exchange:
    """Everything the handlers share."""

    engine: Engine
    sequencer: Sequencer
    feed: Feed
    store: TradeStore
    trade_writer: TradeWriter
    tokens: dict[str, str] | None = None
    """token -> account; None is open demo mode, where the token is the account."""
    started: float = field(default_factory=time.time)
    web_dir: Path = WEB_DIR
    body_timeout: float = BODY_TIMEOUT
    """Seconds a request body may take to arrive once its headers have."""
    max_websockets: int = MAX_WEBSOCKETS
    websockets: int = 0
    """WebSocket requests being served, from before the handshake to the close."""
    counters: dict[str, int] = field(
        default_factory=lambda: {"ws_messages": 0, "ws_refused": 0, "cancel_on_disconnect": 0})
    closing: bool = False
    """Set once the server is stopping: the WebSockets it closes then did not go away by themselves."""
    chores: set[asyncio.Task[Any]] = field(default_factory=set)
    """Commands the server sends on its own (cancel on disconnect), kept until they are answered."""

    def account(self, token: str | None) -> str | None:
        if not token:
            return None
        if self.tokens is not None:
            return self.tokens.get(token)
        return token if ACCOUNT_PATTERN.match(token) else None


EXCHANGE = web.AppKey("exchange", Exchange)


def _json(body: Any, status: int = 200) -> web.Response:
    data = body if isinstance(body, bytes) else encode(body)
    return web.Response(body=data, status=status, content_type="application/json")


def _error(status: int, message: str, field: str | None = None) -> web.Response:
    body: dict[str, Any] = {"error": message}
    if field:
        body["field"] = field
    return _json(body, status)


def _http_error(e: web.HTTPException) -> web.Response:
    """aiohttp's own error (404, 405, ...) as a JSON body, keeping the headers it set (405's Allow)."""
    detail = e.text or ""
    # Its text is "404: Not Found" unless it says more ("No WebSocket UPGRADE hdr ..."): say that, on one line.
    message = e.reason if detail == f"{e.status}: {e.reason}" or not detail else " ".join(detail.split())
    response = _error(e.status, message)
    if "Allow" in e.headers:
        response.headers["Allow"] = e.headers["Allow"]
    return response


@web.middleware
async def errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                 ) -> web.StreamResponse:
    """Every failure becomes a JSON error body with a status that says whose fault it is."""
    try:
        response = await handler(request)
        if isinstance(response, web.HTTPException) and response.status >= 400:
            return _http_error(response)  # e.g. the static files' own 404
        return response
    except BadRequest as e:
        response = _json(e.body(), e.status)
        if e.status == 415:
            response.headers["Accept-Encoding"] = ", ".join(("identity", *CODINGS))
        if e.status == 408:  # the rest of that body may still come: answer, then close at once
            response.force_close()
            await response.prepare(request)
            await response.write_eof()
            request.protocol.force_close()  # rather than linger up to 10 s reading what is left
        return response
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"body over {MAX_BODY} bytes")
    except web.HTTPException as e:
        if e.status < 400:
            raise
        return _http_error(e)
    except (asyncio.TimeoutError, TimeoutError):
        return _error(503, "timed out waiting for the log to become durable")
    except asyncio.CancelledError:
        raise
    except ConnectionError:  # the client went away mid-request: nothing went wrong here
        log.debug("%s %s: the client disconnected", request.method, request.path)
        return _error(400, "the connection was lost before the request was read")
    except Exception:
        log.exception("unhandled error in %s %s", request.method, request.path)
        return _error(500, "internal error")


def _account(request: web.Request) -> str:
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else None
    account = request.app[EXCHANGE].account(token)
    if account is None:
        raise BadRequest("missing or unknown token: send Authorization: Bearer <token>", None, 401)
    return account


async def _body(request: web.Request) -> Any:
    if request.content_length is not None and request.content_length > MAX_BODY:
        raise BadRequest(f"body over {MAX_BODY} bytes", None, 413)
    try:
        if request.content.is_eof():  # the whole body came with the headers: the usual case, no timer
            body = await request.read()
        else:
            timeout = request.app[EXCHANGE].body_timeout
            try:
                async with asyncio.timeout(timeout):
                    body = await request.read()
            except TimeoutError:
                raise BadRequest(f"the body did not arrive within {timeout:g} s", None, 408) from None
    except web.RequestPayloadError as e:  # e.g. chunks that do not add up
        why = str(e.__cause__.message if isinstance(e.__cause__, HttpProcessingError) else e).strip()
        raise BadRequest(f"cannot read the body: {why}", None) from None
    coding = request.headers.get("Content-Encoding")
    return requests.decode_json(_decoded(body, coding.strip().lower()) if coding else body)


def _decoded(body: bytes, coding: str) -> bytes:
    """`body` undone from its Content-Encoding, or refused: never taken as plain if it says otherwise."""
    if coding == "identity":
        return body
    wbits = CODINGS.get(coding)
    if wbits is None:
        raise BadRequest(f"Content-Encoding {brief(coding)} is not supported: send the body as it is, "
                         "or in gzip or deflate", None, 415)
    # Some clients send "deflate" without zlib's header: raw deflate is tried after zlib's.
    for bits in (wbits, -zlib.MAX_WBITS) if coding == "deflate" else (wbits,):
        inflater = zlib.decompressobj(bits)
        try:
            plain = inflater.decompress(body, MAX_BODY + 1)
        except zlib.error:
            continue
        if len(plain) > MAX_BODY:
            raise BadRequest(f"body over {MAX_BODY} bytes once decoded", None, 413)
        if inflater.eof and not inflater.unused_data:
            return plain
    raise BadRequest(f"cannot read the body: it is not the {coding} its Content-Encoding says", None)


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query.get(name)
    if text is None:
        return default
    negative = text.startswith("-")
    if not DIGITS.match(text[negative:]):
        raise BadRequest(f"{name} must be an integer, not {brief(text)}", name)
    value = -int(text[1:]) if negative else int(text)
    if not low <= value <= high:
        raise BadRequest(f"{name} must be between {low} and {high}", name)
    return value


# ------------------------------------------------------------------ orders


async def execute(ex: Exchange, command: Command,
                  answer: Callable[[Outcome], tuple[int, bytes]] = answers.answer) -> tuple[int, bytes]:
    """Sequence a command: the status and JSON body that HTTP and WebSocket order entry both answer."""
    try:
        return answer(await ex.sequencer.submit(command))
    except SequencerStopped as e:
        return 503, encode({"error": f"not accepting orders: {e}"})
    except BadCommand as e:  # validation should have caught it; still the caller's input, never logged
        return 400, encode({"error": str(e)})


async def post_order(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    account = _account(request)
    command = requests.new_order(account, await _body(request), ex.engine.books)
    status, body = await execute(ex, command)
    return _json(body, status)


async def delete_order(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    account = _account(request)
    command = requests.cancel(account, requests.order_id(request.match_info["order_id"]))
    status, body = await execute(ex, command)
    return _json(body, status)


async def cancel_orders(request: web.Request) -> web.Response:
    """DELETE /orders?symbol=S&side=buy: every open order of the caller's (in S, on that side) at once."""
    ex = request.app[EXCHANGE]
    account = _account(request)
    query = request.query
    if len(query) != len(set(query)):
        name = next(k for k in query if len(query.getall(k)) > 1)
        raise BadRequest(f"{brief(name)} is given more than once", cut(name))
    command = requests.cancel_all(account, dict(query), ex.engine.books, "query parameters")
    status, body = await execute(ex, command, answers.answer_cancel_all)
    return _json(body, status)


async def patch_order(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    account = _account(request)
    order_id = requests.order_id(request.match_info["order_id"])
    command = requests.amend(account, order_id, await _body(request))
    status, body = await execute(ex, command)
    return _json(body, status)


async def get_order(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    account = _account(request)
    order_id = requests.order_id(request.match_info["order_id"])
    seq = ex.engine.last_seq
    state = ex.engine.order_state(account, order_id)
    await _durable(ex, seq)
    if state is None:
        status, body = answers.refusal(Reason.UNKNOWN_ORDER)
        return _json(body, status)
    return _json(state)


async def _trades_caught_up(ex: Exchange) -> None:
    """Wait until SQLite holds every durable trade, so a read never misses a fill that was answered."""
    try:
        await ex.trade_writer.caught_up(ex.feed.durable_seq)
    except (asyncio.TimeoutError, TimeoutError):
        why = ex.trade_writer.error or "it is behind"
        raise BadRequest(f"timed out waiting for SQLite to hold the latest trades ({why})", None, 503) from None


async def _durable(ex: Exchange, seq: int) -> None:
    """Wait until the engine state read at `seq` is durable; a failed log never gets there."""
    if ex.sequencer.failed and seq > ex.feed.durable_seq:
        raise BadRequest(f"the order state is not durable and the log has failed: {ex.sequencer.failed}", None, 503)
    await ex.feed.wait_durable(seq)


async def list_orders(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    account = _account(request)
    query = dict(request.query)
    if query.pop("status", "open") != "open":
        raise BadRequest("status must be 'open'", "status")
    wanted = requests.order_filter(query, ex.engine.books, "query parameters",
                                   "GET /orders takes status=open, symbol and side, all optional")
    symbol, side = wanted.symbol, wanted.side
    seq = ex.engine.last_seq
    orders = ex.engine.open_order_states(account)
    if symbol is not None or side is not None:
        orders = [o for o in orders if symbol in (None, o.symbol) and side in (None, o.side)]
    await _durable(ex, seq)
    return _json({"orders": orders})


# ------------------------------------------------------------------ market data


def _symbol(request: web.Request, name: str | None) -> str:
    ex = request.app[EXCHANGE]
    if not name:
        raise BadRequest("symbol is required", "symbol")
    if name not in ex.feed.mirrors:
        raise BadRequest(f"unknown symbol {brief(name)}", "symbol", 404 if "symbol" in request.match_info else 400)
    return name


async def get_book(request: web.Request) -> web.Response:
    symbol = _symbol(request, request.match_info["symbol"])
    depth = _int_param(request, "depth", 20, 1, 1000)
    return _json(request.app[EXCHANGE].feed.book(symbol, depth))


@dataclass
class _TradePage:
    """The paging parameters /trades and /fills share."""

    symbol: str | None
    after: int
    before: int
    limit: int
    newest_first: bool


def _trade_page(request: web.Request) -> _TradePage:
    symbol = request.query.get("symbol")
    if symbol is not None:
        _symbol(request, symbol)
    after = _int_param(request, "after", 0, 0, 1 << 62)
    before = _int_param(request, "before", 1 << 62, 1, 1 << 62)
    limit = _int_param(request, "limit", 100, 1, 1000)
    order = request.query.get("order", "asc")
    if order not in ("asc", "desc"):
        raise BadRequest(f"order must be asc or desc, not {brief(order)}", "order")
    return _TradePage(symbol, after, before, limit, order == "desc")


async def get_trades(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    page = _trade_page(request)
    await _trades_caught_up(ex)
    return _json(await ex.store.trades(page.symbol, page.after, page.limit, before=page.before,
                                       newest_first=page.newest_first))


async def get_fills(request: web.Request) -> web.Response:
    """The caller's side of its trades: the paging of /trades, plus its order, side and maker or taker."""
    ex = request.app[EXCHANGE]
    account = _account(request)
    page = _trade_page(request)
    await _trades_caught_up(ex)
    return _json(await ex.store.fills(account, page.symbol, page.after, page.limit, before=page.before,
                                      newest_first=page.newest_first))


async def get_bars(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    symbol = _symbol(request, request.query.get("symbol"))
    interval = request.query.get("interval", "1m")
    if interval not in INTERVALS:
        raise BadRequest(f"interval must be one of {', '.join(INTERVALS)}", "interval")
    now = int(time.time() * 1000)
    to = _int_param(request, "to", now + 1, 0, 1 << 50)
    start = _int_param(request, "from", to - 3_600_000, 0, 1 << 50)
    # A trade id, as in /trades: many trades can share the millisecond `to` would cut at.
    before = _int_param(request, "before", 1 << 62, 1, 1 << 62) if "before" in request.query else None
    if start >= to:  # an empty range has no bars (OpenAPI cannot say from < to, so this is no error)
        return _json([])
    await _trades_caught_up(ex)
    return _json(await ex.store.bars(symbol, INTERVALS[interval], start, to, before=before))


async def get_symbols(request: web.Request) -> web.Response:
    feed = request.app[EXCHANGE].feed
    symbols = []
    for name in sorted(feed.mirrors):
        mirror = feed.mirrors[name]
        bid, ask = mirror.best()
        symbols.append({"symbol": name, "bestBid": bid, "bestAsk": ask, "last": mirror.last})
    return _json({"symbols": symbols})


async def get_health(request: web.Request) -> web.Response:
    ex = request.app[EXCHANGE]
    body = {
        "status": "ok" if not ex.sequencer.failed else "failed",
        "seq": ex.feed.durable_seq,
        # Names the exchange: the same across restarts, another for a fresh data directory. Only
        # once durable: a first record lost in a crash is written again with another time.
        "logStarted": ex.sequencer.log_started if ex.feed.durable_seq >= 1 else None,
        "durability": ex.sequencer.durability.value,
        "symbols": sorted(ex.feed.mirrors),
        "accounts": "open" if ex.tokens is None else "tokens",
        "uptimeSeconds": round(time.time() - ex.started, 3),
    }
    if ex.sequencer.failed:
        body["error"] = ex.sequencer.failed
        return _json(body, 503)
    if ex.trade_writer.error:  # orders still flow; /trades and /bars wait for SQLite to take trades again
        body["status"] = "degraded"
        body["error"] = ex.trade_writer.error
    return _json(body)


async def get_metrics(request: web.Request) -> web.Response:
    return web.Response(text=render_metrics(request.app[EXCHANGE]), content_type="text/plain",
                        charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})


async def get_openapi(request: web.Request) -> web.Response:
    return _json(OPENAPI)


async def get_static(request: web.Request) -> web.StreamResponse:
    """The browser page: every file of web/ at its own path, index.html at `/`.

    Routed for every method, so that a path no route knows answers 404 whatever the method; a path
    some route knows, asked with a method it does not take, still answers 405 with `Allow`."""
    if request.method not in ("GET", "HEAD"):
        allowed: set[str] = set()
        for resource in request.app.router.resources():
            if resource is not request.match_info.route.resource:
                allowed |= (await resource.resolve(request))[1]
        if allowed:
            raise web.HTTPMethodNotAllowed(request.method, allowed)
    root = request.app[EXCHANGE].web_dir.resolve()
    name = request.match_info.get("path") or "index.html"
    try:
        path = (root / name).resolve()
        found = path.is_relative_to(root) and path.is_file()
    except (OSError, ValueError):  # a NUL byte, a name too long for the file system
        found = False
    if not found:
        return _error(404, f"not found: {brief('/' + name)}")
    if request.method not in ("GET", "HEAD"):
        raise web.HTTPMethodNotAllowed(request.method, ("GET", "HEAD"))
    return web.FileResponse(path, headers={"Cache-Control": "no-cache"})


# ------------------------------------------------------------------ WebSocket


async def websocket(request: web.Request) -> web.StreamResponse:
    ex = request.app[EXCHANGE]
    if ex.websockets >= ex.max_websockets:
        ex.counters["ws_refused"] += 1
        response = _error(503, f"too many WebSocket connections ({ex.websockets} open, the server's limit): "
                               "try again later")
        response.headers["Retry-After"] = "5"
        return response
    ex.websockets += 1
    try:
        return await _websocket(request, ex)
    finally:
        ex.websockets -= 1


async def _websocket(request: web.Request, ex: Exchange) -> web.WebSocketResponse:
    # aiohttp refuses a message of max_msg_size bytes or more; HTTP bodies may be MAX_BODY bytes.
    ws = web.WebSocketResponse(max_msg_size=MAX_BODY + 1, heartbeat=30.0)
    await ws.prepare(request)
    sub = Subscriber(ex.feed, ws, request.transport)
    ex.feed.attach(sub)
    writer = asyncio.create_task(sub.write_loop())
    session = _WsSession(ex, sub)
    token = request.query.get("token")
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
        ex.feed.detach(sub)
        writer.cancel()
        session.disconnected()
    return ws


class _WsSession:
    """One connection's requests: auth, subscriptions and order entry correlated by id."""

    def __init__(self, ex: Exchange, sub: Subscriber) -> None:
        self.ex = ex
        self.sub = sub
        self.in_flight = 0
        self.cancel_on_disconnect: str | None = None
        """The account whose open orders are all cancelled when this connection goes away."""

    def error(self, message: str, **extra: Any) -> None:
        self.sub.reply(encode({"type": "error", "error": message, **extra}))

    def auth(self, token: Any, updates: Any = True, cancel_on_disconnect: Any = False) -> None:
        """Sign the connection in; a failed attempt leaves it signed out, never as the account it had,
        and disarms cancel on disconnect (which belongs to a sign-in)."""
        account = self.ex.account(token) if isinstance(token, str) else None
        if account is None or not isinstance(updates, bool) or not isinstance(cancel_on_disconnect, bool):
            if self.sub.account is not None:
                self.ex.feed.authenticate(self.sub, None)
            self.cancel_on_disconnect = None
            if account is None:
                self.error("unknown token", op="auth")
            elif not isinstance(updates, bool):
                self.error("updates must be true or false", op="auth", field="updates")
            else:
                self.error("cancelOnDisconnect must be true or false", op="auth", field="cancelOnDisconnect")
            return
        self.ex.feed.authenticate(self.sub, account, updates)
        self.cancel_on_disconnect = account if cancel_on_disconnect else None
        self.sub.reply(encode({"type": "auth", "account": account, "updates": updates,
                               "cancelOnDisconnect": cancel_on_disconnect}))

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
        status, body = await execute(self.ex, CancelAll(account), answers.answer_cancel_all)
        if status != 200:  # nobody waits for this answer: the operator is told instead
            log.error("cancel on disconnect of %s was not carried out (%d): %s", account, status,
                      body.decode(errors="replace"))

    def handle(self, raw: str) -> None:
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
            self.auth(message.get("token"), message.get("updates", True), message.get("cancelOnDisconnect", False))
        elif op in ("subscribe", "unsubscribe"):
            self.subscription(op, message.get("symbols"))
        elif op in ("order", "cancel", "amend", "cancelAll"):
            self.request(op, message)
        else:
            self.error(f"unknown op {brief(op)}: expected auth, subscribe, unsubscribe, order, cancel, "
                       "amend, cancelAll, ping")

    def subscription(self, op: str, symbols: Any) -> None:
        feed = self.ex.feed
        if not isinstance(symbols, list) or not symbols or not all(isinstance(s, str) for s in symbols):
            self.error("symbols must be a non-empty list of symbol names", op=op)
            return
        unknown = [s for s in symbols if s not in feed.mirrors]
        if unknown:
            self.error(f"unknown symbols: {', '.join(brief(s) for s in unknown[:10])}", op=op, field="symbols")
            return
        for symbol in dict.fromkeys(symbols):
            if op == "subscribe":
                feed.subscribe(self.sub, symbol)
            else:
                feed.unsubscribe(self.sub, symbol)

    def request(self, op: str, message: dict[str, Any]) -> None:
        request_id = message.pop("id", None)
        if not isinstance(request_id, (str, int)) or isinstance(request_id, bool):
            self.error("every order, cancel, amend and cancelAll needs an 'id' (string or integer)", op=op)
            return
        too_long = len(request_id) > MAX_WS_ID if isinstance(request_id, str) else not -(1 << 63) <= request_id < 1 << 63
        if too_long:
            self.error(f"an 'id' is a string of at most {MAX_WS_ID} characters or a 64-bit integer", op=op)
            return
        if self.sub.account is None:
            self._result(request_id, 401, encode({"error": "authenticate first: {\"op\": \"auth\", \"token\": ...}"}))
            return
        if self.in_flight >= MAX_WS_IN_FLIGHT:
            self._result(request_id, 429, encode({"error": f"more than {MAX_WS_IN_FLIGHT} requests in flight"}))
            return
        try:
            command = self._command(op, self.sub.account, message)
        except BadRequest as e:
            self._result(request_id, e.status, encode(e.body()))
            return
        self.in_flight += 1
        asyncio.ensure_future(self._submit(request_id, command))

    def _command(self, op: str, account: str, message: dict[str, Any]) -> Any:
        if op == "order":
            return requests.new_order(account, message, self.ex.engine.books)
        if op == "cancelAll":
            return requests.cancel_all(account, message, self.ex.engine.books)
        order_id = requests.order_id_field(message.pop("orderId", None))
        if op == "cancel":
            if message:
                names = list(message)
                raise BadRequest(f"unknown fields for cancel: {', '.join(brief(k) for k in names[:10])}",
                                 cut(names[0]))
            return requests.cancel(account, order_id)
        return requests.amend(account, order_id, message)

    async def _submit(self, request_id: str | int, command: Any) -> None:
        try:
            answer = answers.answer_cancel_all if type(command) is CancelAll else answers.answer
            status, body = await execute(self.ex, command, answer)
        except Exception:
            log.exception("order entry over WebSocket failed")
            status, body = 500, encode({"error": "internal error"})
        finally:
            self.in_flight -= 1
        self._result(request_id, status, body)

    def _result(self, request_id: str | int, status: int, body: bytes) -> None:
        self.sub.reply(encode({"type": "result", "id": request_id, "status": status, "body": msgspec.Raw(body)}))


# ------------------------------------------------------------------ the application


def make_app(exchange: Exchange) -> web.Application:
    app = web.Application(middlewares=[errors], client_max_size=MAX_BODY)
    app[EXCHANGE] = exchange
    r = app.router
    r.add_post("/orders", post_order)
    r.add_get("/orders", list_orders)
    r.add_delete("/orders", cancel_orders)
    r.add_get("/orders/{order_id}", get_order)
    r.add_delete("/orders/{order_id}", delete_order)
    r.add_patch("/orders/{order_id}", patch_order)
    r.add_get("/book/{symbol}", get_book)
    r.add_get("/trades", get_trades)
    r.add_get("/fills", get_fills)
    r.add_get("/bars", get_bars)
    r.add_get("/symbols", get_symbols)
    r.add_get("/health", get_health)
    r.add_get("/metrics", get_metrics)
    r.add_get("/openapi.json", get_openapi)
    r.add_get("/ws", websocket)
    r.add_route("*", "/{path:.*}", get_static)
    return app
