"""An asyncio client for the tickflow wire protocol (docs/protocol.md), over aiohttp.

Two halves, sharing one `aiohttp.ClientSession`:

- `Client`: the HTTP calls (place, cancel, amend and get orders, cancel all, open orders, book, trades,
  bars, symbols, health), each returning a typed result or raising `ApiError` with the status and body.
- `Session`: one WebSocket that keeps itself up. Order entry correlated by request id (up to
  MAX_IN_FLIGHT on the wire at once; more wait their turn), market data applied into a `LocalBook` per symbol (snapshot, then updates checked against
  `prevSeq`; a gap re-subscribes; a big book's snapshot comes in parts, reported once whole), private
  order updates, and reconnection with exponential backoff
  plus jitter that re-authenticates and re-subscribes. What happens is reported as `Event`s, to
  listeners (`add_listener`) and to async iterators (`events()`).

```python
async with Client("http://127.0.0.1:8080", token="alice") as http:
    order = await http.place_order("ACME", "buy", 10, price=10000)

async with Session("http://127.0.0.1:8080", token="alice", symbols=["ACME"]) as ws:
    order = await ws.place_order("ACME", "sell", 5, price=10002)
    async for event in ws.events():
        ...
```

Only the wire protocol is used: nothing here imports the engine, so the terminal client, the simulator
and scripted users see the server exactly as any other client does.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from types import MappingProxyType
from typing import Any, Literal, TypeVar
from urllib.parse import quote, urlsplit

import aiohttp
import msgspec
from sortedcontainers import SortedDict

__all__ = [
    # calls
    "Client", "Session", "Backoff", "LocalBook", "ws_url", "new_http_session", "MAX_IN_FLIGHT",
    # wire types
    "Order", "Fill", "Trade", "Level", "Book", "BookLevel", "Bar", "SymbolInfo", "Health",
    "Side", "OrderType", "Tif", "Status", "ConnState", "OPEN_STATUSES",
    # events
    "Event", "StateChanged", "BookChanged", "TradesReceived", "OrderChanged", "GapDetected", "Resynced",
    "ServerError", "ServerChanged",
    # errors
    "TickflowError", "ApiError", "ProtocolError", "InvalidURL", "NotConnected", "ConnectionLost", "RequestTimeout",
    "AuthFailed",
]

log = logging.getLogger("tickflow.client")

Side = Literal["buy", "sell"]
OrderType = Literal["limit", "market"]
Tif = Literal["gtc", "ioc", "fok"]
ConnState = Literal["connecting", "connected", "reconnecting", "closed"]
Status = Literal["new", "partially_filled", "filled", "cancelled", "rejected"]
Liquidity = Literal["maker", "taker"]

OPEN_STATUSES = frozenset({"new", "partially_filled"})
MAX_IN_FLIGHT = 1024
"""Order-entry requests one WebSocket may have in flight (the server answers 429 above it); more wait."""
CLOSED_MEMORY = 65_536
"""Closed orders a session remembers, so that an older state read late never reopens one."""
MAX_MESSAGE = 4 * 1024 * 1024
"""The largest WebSocket message a session takes (aiohttp's default, named): a bound, so that a server
cannot make a client hold any amount of memory for one message. Market data comes in parts of at most
1 MiB whatever the book's size (the server's PART_LEVELS); only the answer to an order that fills
against some 100,000 orders at once (and its own-order update) is bigger, and ends the connection (1009),
as does the answer to a cancel-all of some 13,000 orders or more (`Client.cancel_all` has no such bound)."""


def new_http_session() -> aiohttp.ClientSession:
    """An aiohttp session that sends each request once.

    aiohttp re-sends an idempotent request (DELETE included) by itself when a kept-alive connection
    drops; a cancel that went through would then come back as 409 "not open". Exactly-once matters
    more here than hiding a dropped connection, so that retry is switched off.
    """
    session = aiohttp.ClientSession()
    if hasattr(session, "_retry_connection"):
        session._retry_connection = False
    return session


# ------------------------------------------------------------------ wire types


class Fill(msgspec.Struct, frozen=True, rename="camel"):
    """One fill made by an order call, in execution order."""

    trade_id: int
    price: int
    qty: int
    liquidity: Liquidity
    """`taker` in the answer of the order (or amend) that traded; `maker` in a resting order's update."""


class Order(msgspec.Struct, rename="camel"):
    """The order result: an order as the last command left it.

    `status` is one of new, partially_filled, filled, cancelled, rejected; `reason` says why it was
    cancelled or rejected (cancelled_by_user, post_only_would_take, ...). `price` is 0 or None for a
    market order. `fills` holds only the fills made by the call that produced this result.
    """

    order_id: int
    account: str
    symbol: str
    side: Side
    type: OrderType
    qty: int
    status: Status
    price: int | None = None
    client_order_id: str | None = None
    tif: Tif = "gtc"
    post_only: bool = False
    filled_qty: int = 0
    remaining_qty: int = 0
    fills: list[Fill] = []
    reason: str | None = None
    seq: int = 0
    ts: int = 0

    @property
    def is_open(self) -> bool:
        """True while the order rests on the book (status new or partially_filled)."""
        return self.status in OPEN_STATUSES


class Trade(msgspec.Struct, frozen=True, rename="camel"):
    """A public trade. `aggressor` is the side of the order that took liquidity."""

    trade_id: int
    symbol: str
    price: int
    qty: int
    aggressor: Side
    seq: int
    ts: int
    buy_order_id: int = 0
    sell_order_id: int = 0


class AccountFill(msgspec.Struct, frozen=True, rename="camel"):
    """The caller's side of one of its trades: its order, the side it was on, and whether that order was
    resting (`maker`) or took liquidity (`taker`)."""

    trade_id: int
    symbol: str
    order_id: int
    side: Side
    price: int
    qty: int
    liquidity: Liquidity
    seq: int
    ts: int


class Level(msgspec.Struct, frozen=True, array_like=True):
    """A price level: total quantity and number of orders at `price` (the feed's `[price, qty, orders]`).

    Levels are equal when their fields are, whichever wire form they came from: a `LocalBook`'s levels
    compare equal to `GET /book`'s (`BookLevel`) at the same seq.
    """

    price: int
    qty: int
    orders: int

    # msgspec's own comparison also wants the same class; a level is its three numbers.
    def __eq__(self, other: object) -> bool:
        if isinstance(other, Level):
            return (self.price, self.qty, self.orders) == (other.price, other.qty, other.orders)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        if isinstance(other, Level):
            return (self.price, self.qty, self.orders) != (other.price, other.qty, other.orders)
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self.price, self.qty, self.orders))


class BookLevel(Level, frozen=True, array_like=False):
    """A level of `GET /book`: a `Level` that is a JSON object on the wire, equal to the feed's `Level`
    with the same fields."""


class Book(msgspec.Struct, frozen=True):
    """`GET /book/{symbol}`: best levels first; `seq` is the last command applied to this book."""

    symbol: str
    seq: int
    bids: list[BookLevel]
    asks: list[BookLevel]


class Bar(msgspec.Struct, frozen=True):
    """One OHLC bar; `t` is the bucket start in milliseconds since the epoch."""

    t: int
    open: int
    high: int
    low: int
    close: int
    volume: int
    vwap: float | None = None


class SymbolInfo(msgspec.Struct, frozen=True, rename="camel"):
    """`GET /symbols`: a symbol with its best bid, best ask and last trade price (None when there is none)."""

    symbol: str
    best_bid: int | None = None
    best_ask: int | None = None
    last: int | None = None


class Health(msgspec.Struct, frozen=True, rename="camel"):
    """`GET /health`; `Client.request("GET", "/health")` gives every field of the body as a dict."""

    status: str
    seq: int = 0
    log_started: int | None = None
    """When the exchange's log began (ms since the epoch; the time on its first record): the same across
    restarts, another for another exchange (a fresh data directory). None while the log has no record
    yet, and from a server too old to say."""
    durability: str | None = None
    accounts: str | None = None
    """"open" (demo mode: the token is the account name) or "tokens" (only a --tokens file's tokens)."""


class _OrderList(msgspec.Struct):
    orders: list[Order]


class _SymbolList(msgspec.Struct):
    symbols: list[SymbolInfo]


# WebSocket server messages, told apart by their "type" field.


class _Snapshot(msgspec.Struct, tag_field="type", tag="snapshot", rename="camel"):
    symbol: str
    seq: int
    bids: list[Level]
    asks: list[Level]
    trades: list[Trade] = []
    more: int = 0
    """Parts still to come (updates with seq = prevSeq = this seq) when the book did not fit one message."""


class _Update(msgspec.Struct, tag_field="type", tag="update", rename="camel"):
    symbol: str
    seq: int
    prev_seq: int
    bids: list[Level] = []
    asks: list[Level] = []
    trades: list[Trade] = []
    more: int = 0


class _Result(msgspec.Struct, tag_field="type", tag="result"):
    id: Any
    status: int
    body: msgspec.Raw


class _OrderMsg(msgspec.Struct, tag_field="type", tag="order"):
    order: Order


class _Auth(msgspec.Struct, tag_field="type", tag="auth", rename="camel"):
    account: str
    updates: bool = True
    cancel_on_disconnect: bool = False


class _Resync(msgspec.Struct, tag_field="type", tag="resync"):
    reason: str = ""


class _Error(msgspec.Struct, tag_field="type", tag="error"):
    error: str = ""
    id: Any = None
    op: Any = None


class _Pong(msgspec.Struct, tag_field="type", tag="pong"):
    pass


_ServerMsg = _Snapshot | _Update | _Result | _OrderMsg | _Auth | _Resync | _Error | _Pong
_ws_decoder = msgspec.json.Decoder(_ServerMsg)
_json = msgspec.json.Decoder()
_encode = msgspec.json.Encoder().encode
T = TypeVar("T")

# ------------------------------------------------------------------ errors


class TickflowError(Exception):
    """Base class of everything this module raises."""


class ApiError(TickflowError):
    """The server answered 4xx/5xx. `body` is the parsed JSON error body (or the raw text)."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("error") if isinstance(body, dict) else None
        self.message: str = str(message if message is not None else body)
        super().__init__(f"{status}: {self.message}")

    @property
    def field(self) -> str | None:
        """The request field the server blames, when it names one."""
        return self.body.get("field") if isinstance(self.body, dict) else None

    @property
    def code(self) -> str | None:
        """The matching engine's reason, when it refused the command: `not_open`, `unknown_order`,
        `nothing_to_amend`, `post_only_would_take`, `duplicate_client_order_id`, ..."""
        code = self.body.get("code") if isinstance(self.body, dict) else None
        return code if isinstance(code, str) else None

    @property
    def order(self) -> Order | None:
        """The order the error is about (`order` on 409 not-open, `original` on a reused clientOrderId)."""
        if not isinstance(self.body, dict):
            return None
        data = self.body.get("order") or self.body.get("original")
        try:
            return msgspec.convert(data, Order) if isinstance(data, dict) else None
        except msgspec.ValidationError:
            return None


class ProtocolError(TickflowError, msgspec.DecodeError):
    """A 2xx answer that is not what the protocol describes (not JSON, or not the expected shape): the
    address is probably not a tickflow server. `status` and `body` (the text) are what came back."""

    def __init__(self, what: str, status: int, raw: bytes, error: Exception) -> None:
        self.status = status
        self.body = raw.decode("utf-8", "replace")
        super().__init__(f"{what}: unexpected answer ({status}): {error}; body {self.body[:80]!r}")


class NotConnected(TickflowError):
    """The request was not sent: the session is not connected (it may be reconnecting), or the
    server could not be reached at all."""


class InvalidURL(TickflowError, ValueError):
    """The address is not http(s)://host[:port][/path]."""


class ConnectionLost(TickflowError):
    """The WebSocket dropped while a call was in flight: its outcome is unknown.

    Retrying with the same `clientOrderId` is safe: the server answers a retry with the original result.
    """


class RequestTimeout(ConnectionLost, TimeoutError):
    """No answer within the timeout: the request may still have been carried out (outcome unknown)."""


class AuthFailed(TickflowError):
    """The server refused the session's token (or did not arm the cancel on disconnect asked for); the
    session stops rather than retry forever."""


def _log_times(a: int, b: int) -> tuple[str, str]:
    """Two log start times (ms since the epoch) in words, UTC, to the second (to the millisecond when
    the seconds are the same)."""
    def at(ms: int, millis: bool) -> str:
        t = datetime.fromtimestamp(ms / 1000, timezone.utc)
        return t.strftime("%Y-%m-%d %H:%M:%S") + (f".{ms % 1000:03d}" if millis else "") + " UTC"

    millis = a // 1000 == b // 1000
    return at(a, millis), at(b, millis)


def _trade_key(t: Trade) -> tuple[int, str, int, int, str, int]:
    """What makes a trade the same trade on the feed and in `GET /trades`."""
    return t.trade_id, t.symbol, t.price, t.qty, t.aggressor, t.ts


def _decode_body(raw: bytes) -> Any:
    try:
        return _json.decode(raw)
    except msgspec.DecodeError:
        return raw.decode("utf-8", "replace")


def _decode_as(kind: type[T], raw: bytes, what: str, status: int = 200) -> T:
    """`raw` as a `kind`, or `ProtocolError` when the answer is not one."""
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.DecodeError as e:  # ValidationError included
        raise ProtocolError(what, status, raw, e) from e


def _base_url(url: str) -> str:
    """`url` without a trailing /, once it is checked to be http(s)://host[:port][/path]."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except (ValueError, TypeError, AttributeError) as e:
        raise InvalidURL(f"{url!r} is not a server address: {e}") from e
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise InvalidURL(f"{url!r} is not a server address of the form http(s)://host[:port]")
    return url.rstrip("/")


def _order_fields(symbol: str, side: Side, qty: int, price: int | None, type: OrderType | None,
                  tif: Tif, post_only: bool, client_order_id: str | None) -> dict[str, Any]:
    body: dict[str, Any] = {"symbol": symbol, "side": side,
                            "type": type or ("limit" if price is not None else "market"), "qty": qty}
    if price is not None:
        body["price"] = price
    if tif != "gtc":
        body["tif"] = tif
    if post_only:
        body["postOnly"] = True
    if client_order_id is not None:
        body["clientOrderId"] = client_order_id
    return body


def _order_filters(symbol: str | None, side: Side | None) -> dict[str, Any]:
    """The filters of a cancel-all or an open-orders read: the ones given."""
    return {k: v for k, v in (("symbol", symbol), ("side", side)) if v is not None}


def _amend_fields(qty: int | None, price: int | None) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if qty is not None:
        body["qty"] = qty
    if price is not None:
        body["price"] = price
    return body


def ws_url(url: str) -> str:
    """The WebSocket address for a server's base URL: http://host:port → ws://host:port/ws."""
    base = url.rstrip("/")
    if base.startswith("http://"):
        base = "ws://" + base[len("http://"):]
    elif base.startswith("https://"):
        base = "wss://" + base[len("https://"):]
    return base if base.endswith("/ws") else base + "/ws"


# ------------------------------------------------------------------ HTTP


class Client:
    """The HTTP half of the protocol. Every call raises `ApiError` on a 4xx/5xx answer.

    A market order is sent when `price` is None and `type` is not given. Pass `session` to share an
    `aiohttp.ClientSession`; otherwise one is made and closed by `close()` / `async with`. `url` is
    `http(s)://host[:port]` (anything else raises `InvalidURL`); `timeout` bounds each call in seconds.
    Every failure is a `TickflowError`: `ApiError` (4xx/5xx), `ProtocolError` (a 2xx answer that is not
    the protocol's), `NotConnected` (nothing sent), `ConnectionLost` / `RequestTimeout` (outcome unknown).
    """

    def __init__(self, url: str, token: str | None = None, *, timeout: float = 10.0,
                 session: aiohttp.ClientSession | None = None) -> None:
        self.url = _base_url(url)
        self.token = token
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._session = session
        self._own_session = session is None

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the connection pool (unless it was passed in); a later call opens a new one."""
        if self._own_session and self._session is not None:
            await self._session.close()
            self._session = None

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_http_session()
            self._own_session = True
        return self._session

    async def request(self, method: str, path: str, *, params: dict[str, Any] | None = None,
                      body: dict[str, Any] | None = None) -> Any:
        """Send one request; return the decoded JSON body of a 2xx answer, raise `ApiError` otherwise."""
        return _decode_body(await self._raw(method, path, params, body))

    async def _raw(self, method: str, path: str, params: dict[str, Any] | None,
                   body: dict[str, Any] | None) -> bytes:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = None
        if body is not None:
            data = _encode(body)
            headers["Content-Type"] = "application/json"
        query = {k: str(v) for k, v in (params or {}).items() if v is not None}
        try:
            async with self._http().request(method, self.url + path, params=query, data=data,
                                            headers=headers, timeout=self._timeout) as resp:
                raw = await resp.read()
        except aiohttp.ClientConnectorError as e:  # nothing was sent
            raise NotConnected(f"cannot reach {self.url}: {e}") from e
        except asyncio.TimeoutError as e:
            raise RequestTimeout(f"{method} {path}: no answer in {self._timeout.total} s; outcome unknown") from e
        except (aiohttp.ClientError, OSError) as e:
            raise ConnectionLost(f"{method} {path}: {type(e).__name__}: {e}; outcome unknown") from e
        if resp.status >= 400:
            raise ApiError(resp.status, _decode_body(raw))
        return raw

    async def _typed(self, kind: type[T], method: str, path: str, params: dict[str, Any] | None = None,
                     body: dict[str, Any] | None = None) -> T:
        return _decode_as(kind, await self._raw(method, path, params, body), f"{method} {path}")

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None = None, *,
                          type: OrderType | None = None, tif: Tif = "gtc", post_only: bool = False,
                          client_order_id: str | None = None) -> Order:
        """`POST /orders`. A book rejection is not an error: the result's `status` says "rejected"."""
        fields = _order_fields(symbol, side, qty, price, type, tif, post_only, client_order_id)
        return await self._typed(Order, "POST", "/orders", body=fields)

    async def cancel_order(self, order_id: int) -> Order:
        """`DELETE /orders/{id}`: 404 unknown or not yours, 409 not open any more."""
        return await self._typed(Order, "DELETE", f"/orders/{order_id}")

    async def amend_order(self, order_id: int, *, qty: int | None = None, price: int | None = None) -> Order:
        """`PATCH /orders/{id}`: `qty` is the new total quantity (filled part included)."""
        return await self._typed(Order, "PATCH", f"/orders/{order_id}", body=_amend_fields(qty, price))

    async def cancel_all(self, symbol: str | None = None, side: Side | None = None) -> list[Order]:
        """`DELETE /orders`: cancel every open order of the caller's, or only those in `symbol` and/or on
        `side`, in one command (nothing trades between the first cancel and the last). Returns the
        orders it cancelled, oldest first, [] when none was open; 400 unknown symbol or bad side."""
        params = _order_filters(symbol, side)
        return (await self._typed(_OrderList, "DELETE", "/orders", params)).orders

    async def get_order(self, order_id: int) -> Order:
        """`GET /orders/{id}`: the order's current state (`fills` empty); 404 unknown or not yours."""
        return await self._typed(Order, "GET", f"/orders/{order_id}")

    async def open_orders(self, symbol: str | None = None, side: Side | None = None) -> list[Order]:
        """The caller's open orders, oldest first: all of them, or those in `symbol` and/or on `side`."""
        params = {"status": "open", **_order_filters(symbol, side)}
        return (await self._typed(_OrderList, "GET", "/orders", params)).orders

    async def book(self, symbol: str, depth: int = 20) -> Book:
        """`GET /book/{symbol}`: the best `depth` levels (1-1000) of each side; 404 unknown symbol."""
        return await self._typed(Book, "GET", f"/book/{quote(symbol, safe='')}", {"depth": depth})

    async def trades(self, symbol: str | None = None, after: int = 0, limit: int = 100, *,
                     before: int | None = None, newest_first: bool = False) -> list[Trade]:
        """Trades with after < id < before, in trade-id order, at most `limit` (1-1000). `newest_first`
        gives the newest of them, newest first: page back with `before` the oldest id seen."""
        params = {"symbol": symbol, "after": after, "before": before, "limit": limit,
                  "order": "desc" if newest_first else None}
        return await self._typed(list[Trade], "GET", "/trades", params)

    async def fills(self, symbol: str | None = None, after: int = 0, limit: int = 100, *,
                    before: int | None = None, newest_first: bool = False) -> list[AccountFill]:
        """`GET /fills`: the caller's side of its trades, paged like `trades`."""
        params = {"symbol": symbol, "after": after, "before": before, "limit": limit,
                  "order": "desc" if newest_first else None}
        return await self._typed(list[AccountFill], "GET", "/fills", params)

    async def bars(self, symbol: str, interval: str = "1m", from_ms: int | None = None,
                   to_ms: int | None = None, *, before: int | None = None) -> list[Bar]:
        """OHLC bars over the trades with from_ms <= ts < to_ms, oldest first; the server defaults to the
        last hour. `before` counts only trades with smaller ids: bars up to a trade held, exactly."""
        params = {"symbol": symbol, "interval": interval, "from": from_ms, "to": to_ms, "before": before}
        return await self._typed(list[Bar], "GET", "/bars", params)

    async def symbols(self) -> list[SymbolInfo]:
        """`GET /symbols`: every open book with its best prices and last trade."""
        return (await self._typed(_SymbolList, "GET", "/symbols")).symbols

    async def health(self) -> Health:
        """`GET /health`; a 503 (log device failed) raises `ApiError` with the reason in the body."""
        return await self._typed(Health, "GET", "/health")


# ------------------------------------------------------------------ the local book


class LocalBook:
    """A symbol's book as the feed describes it: a snapshot, then level changes in `seq` order.

    `live` is False until the first snapshot and again from a detected gap until the next snapshot
    (and while a snapshot or update sent in parts is still arriving); while it is False the levels are
    stale or incomplete.
    """

    def __init__(self, symbol: str) -> None:
        self.symbol = symbol
        self.seq = 0
        self.live = False
        self._bids: SortedDict = SortedDict()  # -price -> (qty, orders): best bid first
        self._asks: SortedDict = SortedDict()  # price -> (qty, orders): best ask first

    def load(self, seq: int, bids: Iterable[Level], asks: Iterable[Level]) -> None:
        """Replace everything with a snapshot."""
        self._bids = SortedDict({-lv.price: (lv.qty, lv.orders) for lv in bids if lv.qty > 0})
        self._asks = SortedDict({lv.price: (lv.qty, lv.orders) for lv in asks if lv.qty > 0})
        self.seq = seq
        self.live = True

    def apply(self, seq: int, bids: Iterable[Level], asks: Iterable[Level]) -> None:
        """Apply one update's level totals (`qty` 0 removes the level)."""
        for lv in bids:
            if lv.qty > 0:
                self._bids[-lv.price] = (lv.qty, lv.orders)
            else:
                self._bids.pop(-lv.price, None)
        for lv in asks:
            if lv.qty > 0:
                self._asks[lv.price] = (lv.qty, lv.orders)
            else:
                self._asks.pop(lv.price, None)
        self.seq = seq

    def bids(self, depth: int | None = None) -> list[Level]:
        """Bid levels, best (highest) first."""
        keys = self._bids.islice(0, depth)
        return [Level(-k, *self._bids[k]) for k in keys]

    def asks(self, depth: int | None = None) -> list[Level]:
        """Ask levels, best (lowest) first."""
        keys = self._asks.islice(0, depth)
        return [Level(k, *self._asks[k]) for k in keys]

    @property
    def best_bid(self) -> Level | None:
        return Level(-self._bids.keys()[0], *self._bids.values()[0]) if self._bids else None

    @property
    def best_ask(self) -> Level | None:
        return Level(self._asks.keys()[0], *self._asks.values()[0]) if self._asks else None

    @property
    def spread(self) -> int | None:
        bid, ask = self.best_bid, self.best_ask
        return ask.price - bid.price if bid and ask else None

    @property
    def mid(self) -> float | None:
        bid, ask = self.best_bid, self.best_ask
        return (ask.price + bid.price) / 2 if bid and ask else None

    def __len__(self) -> int:
        return len(self._bids) + len(self._asks)


# ------------------------------------------------------------------ session events


@dataclass(frozen=True, slots=True)
class StateChanged:
    """The connection went `connecting` → `connected` → `reconnecting` (waiting `delay` s) → ... → `closed`."""

    state: ConnState
    attempt: int = 0
    delay: float = 0.0
    error: str | None = None
    account: str | None = None


@dataclass(frozen=True, slots=True)
class BookChanged:
    """`book` (the session's `LocalBook`) took a snapshot (`snapshot=True`) or an update; one the server
    sent in parts (a book too big for one message) is reported once, when the last part is in."""

    symbol: str
    book: LocalBook
    seq: int
    snapshot: bool


@dataclass(frozen=True, slots=True)
class TradesReceived:
    """Trades not seen before on this session, oldest first (snapshot trades are de-duplicated)."""

    symbol: str
    trades: list[Trade]


@dataclass(frozen=True, slots=True)
class OrderChanged:
    """A private update: one of the account's orders changed, whoever caused it."""

    order: Order


@dataclass(frozen=True, slots=True)
class GapDetected:
    """An update's `prevSeq` was not the `seq` held (or a part of a message sent in parts is missing):
    the book is stale until the fresh snapshot."""

    symbol: str
    held_seq: int
    prev_seq: int
    seq: int


@dataclass(frozen=True, slots=True)
class Resynced:
    """The server dropped our buffer (slow consumer); fresh snapshots follow."""

    reason: str


@dataclass(frozen=True, slots=True)
class ServerError:
    """A `{"type": "error"}` message: something we sent was refused."""

    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ServerChanged:
    """A reconnection found another server at the address (a fresh data directory, say): `reason` says
    how it was told. What the session held of the old one (`last_seq`, the trades and orders seen) was
    let go before connecting, so seqs, trade ids and order ids start again; a screen drops its own copy."""

    reason: str


Event = (StateChanged | BookChanged | TradesReceived | OrderChanged | GapDetected | Resynced | ServerError
         | ServerChanged)


@dataclass
class Backoff:
    """Exponential backoff with jitter: attempt n waits `min(maximum, initial * factor**n)`, less up to
    `jitter` of it at random, so clients that lost the same server do not all return at once."""

    initial: float = 0.2
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 32))
        return base * (1.0 - self.jitter * self.rng.random())


# ------------------------------------------------------------------ WebSocket session


@dataclass
class _Parts:
    """A snapshot or update the server sent in parts: how many are still to come, and their trades."""

    left: int
    snapshot: bool
    trades: list[Trade]


@dataclass
class _Backfill:
    """A symbol's missed trades being fetched over HTTP; the trades that arrive meanwhile wait in `held`."""

    held: list[Trade]
    upto: int
    """Fetch up to this trade id: just before the oldest trade a snapshot brought."""


class Session:
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
    server for no private updates (no `OrderChanged`): for a script that needs only its own answers.

    `cancel_on_disconnect=True` (needs a token) asks the server to cancel every open order of the
    account (in every symbol, also those placed over HTTP or other connections) when this connection
    goes away, however it goes: `close()` (the cancel may still be on its way when it returns), the
    process dying, the network dropping it, the server closing it for not reading. Not when the server
    stops or crashes: the orders are still there after its restart. It lasts one connection, so the
    session asks for it with every sign-in. A connection that dies silently is noticed by the server's
    pings (within some 45 s), possibly after the session is back on a new one: what was placed
    meanwhile is cancelled too (each an `OrderChanged`). A server that does not confirm it stops the
    session with `AuthFailed`.
    """

    def __init__(self, url: str, token: str | None = None, *, symbols: Iterable[str] = (),
                 updates: bool = True, cancel_on_disconnect: bool = False, reconnect: bool = True,
                 backoff: Backoff | None = None, heartbeat: float = 5.0, request_timeout: float = 10.0,
                 connect_timeout: float = 5.0, http: aiohttp.ClientSession | None = None) -> None:
        self.url = _base_url(url)
        if cancel_on_disconnect and not token:
            raise ValueError("cancel_on_disconnect needs a token: it is armed by signing in as the account")
        self.token = token
        self.updates = updates
        self.cancel_on_disconnect = cancel_on_disconnect
        self.symbols: list[str] = list(dict.fromkeys(symbols))
        self.books: dict[str, LocalBook] = {}
        self.state: ConnState = "closed"
        self.account: str | None = None
        self.last_seq = 0
        """The highest `seq` seen on any message: how far this client has followed the log."""
        self.log_started: int | None = None
        """When the log of the exchange followed began (`GET /health`'s logStarted), once known: a
        server at the address whose log began at another time is another exchange."""
        self.last_error: str | None = None
        """Why the last connection attempt failed or the last connection ended (None once connected)."""
        self.reconnects = 0
        self.gaps = 0
        self._reconnect = reconnect
        self._backoff = backoff or Backoff()
        self._heartbeat = heartbeat
        self._request_timeout = request_timeout
        self._connect_timeout = connect_timeout
        self._http = http
        self._own_http = http is None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        """Work beside the connection loop (catching up orders, fetching missed trades)."""
        self._closers: set[asyncio.Task[None]] = set()
        """Closing handshakes of connections let go of."""
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[tuple[int, bytes]]] = {}
        self._pongs: list[asyncio.Future[None]] = []
        self._listeners: list[Callable[[Event], None]] = []
        self._queues: list[asyncio.Queue[Event]] = []
        self._connected = asyncio.Event()
        self._closing = False
        self._fatal: AuthFailed | None = None
        self._last_trade: dict[str, int] = {}
        self._newest_trade: Trade | None = None
        """The last trade delivered (any symbol): a server that does not hold it is another server."""
        self._backfills: dict[str, _Backfill] = {}
        self._parts: dict[str, _Parts] = {}
        """Per symbol, the snapshot or update whose parts are arriving (its book is not live meanwhile)."""
        self._http_client: Client | None = None
        self._was_connected = False
        self._stopped = False
        """The connection loop ended for good (closed, refused token, or no reconnecting)."""
        self._slots = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._orders: dict[int, Order] = {}
        """The last state seen of each of the account's open orders (to catch up after a reconnection)."""
        self._closed_orders: OrderedDict[int, None] = OrderedDict()
        """Orders seen closed, most recent last (at most CLOSED_MEMORY): a closed order stays closed."""

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
    def orders(self) -> Mapping[int, Order]:
        """This account's open orders as last seen by this session (answers to its calls and private
        updates), by id: never an older state over a newer one, never a closed order again."""
        return MappingProxyType(self._orders)

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
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def events(self, maxsize: int = 10_000) -> AsyncIterator[Event]:
        """Iterate over the events from this call on; the iteration ends once the session has stopped
        for good (closed, its token refused, or the connection lost with `reconnect=False`). A
        consumer that falls `maxsize` behind loses the oldest (books stay right: each `BookChanged`
        carries the live `LocalBook`)."""
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self._queues.append(queue)
        return self._drain(queue)

    async def _drain(self, queue: asyncio.Queue[Event]) -> AsyncIterator[Event]:
        try:
            while True:
                if queue.empty() and self.state == "closed" and (self._stopped or self._closing):
                    return
                event = await queue.get()
                yield event
                if isinstance(event, StateChanged) and event.state == "closed" and (self._stopped or self._closing):
                    return
        finally:
            self._queues.remove(queue)

    def _emit(self, event: Event) -> None:
        if isinstance(event, OrderChanged):
            self._track(event.order)
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %r", event)
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)

    def _set_state(self, state: ConnState, attempt: int = 0, delay: float = 0.0,
                   error: str | None = None) -> None:
        self.state = state
        if state == "connected":
            self._connected.set()
        else:
            self._connected.clear()
        self._emit(StateChanged(state, attempt, delay, error, self.account))

    def _track(self, order: Order) -> None:
        """Keep the newest state of each open order. States can come late (an order call's answer is
        read by its caller after the updates behind it), so an older one never replaces a newer one,
        and a closed order never reopens."""
        order_id = order.order_id
        known = self._orders.get(order_id)
        if order_id in self._closed_orders or (known is not None and known.seq > order.seq):
            return
        if order.is_open:
            self._orders[order_id] = order
            return
        self._orders.pop(order_id, None)
        self._closed_orders[order_id] = None
        if len(self._closed_orders) > CLOSED_MEMORY:
            self._closed_orders.popitem(last=False)

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
            book = self.books.get(s)
            if book is not None:
                book.live = False
            self._parts.pop(s, None)  # parts already on their way are let go with the rest of the stream
        if self.connected and symbols:
            await self._send_quietly({"op": "unsubscribe", "symbols": list(symbols)})

    # ---- order entry

    async def request(self, op: dict[str, Any], timeout: float | None = None) -> tuple[int, bytes]:
        """Send one order-entry message with a fresh `id`; return the answer's HTTP status and raw body."""
        if self._ws is None or self._ws.closed or not self.connected:
            raise NotConnected(f"not connected to {self.url} ({self.state})")
        timeout = self._request_timeout if timeout is None else timeout
        async with self._slots:
            rid = next(self._ids)
            future: asyncio.Future[tuple[int, bytes]] = asyncio.get_running_loop().create_future()
            self._pending[rid] = future
            try:
                await self._send({**op, "id": rid})
                return await asyncio.wait_for(future, timeout)
            except asyncio.TimeoutError as e:
                raise RequestTimeout(f"no answer to {op.get('op')} in {timeout} s; outcome unknown") from e
            finally:
                self._pending.pop(rid, None)

    async def _call(self, kind: type[T], op: dict[str, Any], timeout: float | None) -> T:
        """An order-entry request's answer as a `kind`; `ApiError` on a 4xx/5xx status."""
        status, raw = await self.request(op, timeout)
        if status >= 400:
            raise ApiError(status, _decode_body(raw))
        return _decode_as(kind, raw, f"{op.get('op')} over the WebSocket", status)

    async def _order_call(self, op: dict[str, Any], timeout: float | None) -> Order:
        order = await self._call(Order, op, timeout)
        self._track(order)
        return order

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None = None, *,
                          type: OrderType | None = None, tif: Tif = "gtc", post_only: bool = False,
                          client_order_id: str | None = None, timeout: float | None = None) -> Order:
        """Place an order over the WebSocket; same answer as `Client.place_order`."""
        fields = _order_fields(symbol, side, qty, price, type, tif, post_only, client_order_id)
        return await self._order_call({"op": "order", **fields}, timeout)

    async def cancel_order(self, order_id: int, *, timeout: float | None = None) -> Order:
        """Cancel over the WebSocket; same answer as `Client.cancel_order`."""
        return await self._order_call({"op": "cancel", "orderId": order_id}, timeout)

    async def amend_order(self, order_id: int, *, qty: int | None = None, price: int | None = None,
                          timeout: float | None = None) -> Order:
        """Amend over the WebSocket; same answer as `Client.amend_order`."""
        return await self._order_call({"op": "amend", "orderId": order_id, **_amend_fields(qty, price)},
                                      timeout)

    async def cancel_all(self, symbol: str | None = None, side: Side | None = None, *,
                         timeout: float | None = None) -> list[Order]:
        """Cancel all over the WebSocket; same answer as `Client.cancel_all`. Each order it cancelled
        also comes as an `OrderChanged`. An answer over MAX_MESSAGE (some 13,000 orders) ends the
        connection: for that many, use `Client.cancel_all` (`self.http`)."""
        op = {"op": "cancelAll", **_order_filters(symbol, side)}
        orders = (await self._call(_OrderList, op, timeout)).orders
        for order in orders:
            self._track(order)
        return orders

    async def ping(self, timeout: float = 5.0) -> float:
        """Round trip of `{"op": "ping"}` in seconds; `RequestTimeout` when no pong comes in `timeout`."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pongs.append(future)
        start = time.perf_counter()
        try:
            await self._send({"op": "ping"})
        except TickflowError:
            self._pongs.remove(future)  # never sent: no pong will answer it
            raise
        try:
            await asyncio.wait_for(future, timeout)
        except asyncio.TimeoutError as e:
            raise RequestTimeout(f"no pong in {timeout} s") from e
        return time.perf_counter() - start

    # ---- the connection loop

    async def _send(self, message: dict[str, Any]) -> None:
        """Send one message: `NotConnected` when there is no connection, `ConnectionLost` when it fails."""
        ws = self._ws
        if ws is None or ws.closed:
            raise NotConnected(f"not connected to {self.url} ({self.state})")
        try:
            await ws.send_str(_encode(message).decode())
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
        if self.last_seq or self._newest_trade is not None or self.log_started is not None:
            other = await self._other_server()
            if other:
                self._forget_server(other)
        ws = await asyncio.wait_for(
            self._http.ws_connect(ws_url(self.url), heartbeat=self._heartbeat, autoping=True,
                                  max_msg_size=MAX_MESSAGE),
            self._connect_timeout)
        self._ws = ws
        if self.log_started is None:  # the first connection, or a log that had no record yet
            await self._learn_log_started()
        if self.token:
            auth: dict[str, Any] = {"op": "auth", "token": self.token}
            if not self.updates:
                auth["updates"] = False
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
        """Why the server now at the address is not the exchange followed so far, or None when it is (or
        it cannot tell: it answers with an error, or not as tickflow would). `GET /health`'s logStarted
        names the exchange: when it and the one remembered are both known, they decide, whatever the
        seqs say (another exchange may well be further on). Otherwise (an older server, or a log that
        had no record yet) its log is the witness: a restart of the same server (kill -9 included) is at
        or past every seq and holds every trade already seen. A server that cannot be reached fails this
        attempt to connect: were the check skipped (a keep-alive connection to the server that died,
        say) another server would pass."""
        try:
            health = await asyncio.wait_for(self.http.health(), self._connect_timeout)
        except (ApiError, ProtocolError):
            return None  # it answered, but not what tells (a failed log's 503): taken as the same server
        started = health.log_started
        if started is not None and self.log_started is not None:
            if started == self.log_started:
                return None
            theirs, ours = _log_times(started, self.log_started)
            self.log_started = started
            return f"another exchange at this address: its log began at {theirs}, not {ours}"
        reason = await self._other_log(health)
        if started is not None or reason is not None:
            self.log_started = started  # this exchange's, when the seqs or trades tell it is another
        return reason

    async def _other_log(self, health: Health) -> str | None:
        """The fallback for a server that does not name its exchange: its seq and trades."""
        if health.seq < self.last_seq:
            return f"its log is at seq {health.seq}, behind the {self.last_seq} seen"
        seen = self._newest_trade
        if seen is not None:
            try:
                page = await asyncio.wait_for(self.http.trades(seen.symbol, after=seen.trade_id - 1, limit=1),
                                              self._request_timeout)
            except (ApiError, ProtocolError):
                return None
            if not page or _trade_key(page[0]) != _trade_key(seen):
                return f"it does not hold the {seen.symbol} trade #{seen.trade_id} seen"
        return None

    async def _learn_log_started(self) -> None:
        """Remember when the log of the server just connected to began, if it says (and has a record):
        asked once connected, so a server that cannot be reached is told by the connection, as ever."""
        try:
            health = await asyncio.wait_for(self.http.health(), self._request_timeout)
        except (TickflowError, asyncio.TimeoutError):
            return  # not known yet: the seq and trades check stands in, and the next connection asks again
        self.log_started = health.log_started

    def _forget_server(self, reason: str) -> None:
        """Let go of what belongs to the server followed so far: with another one, its seqs, trade ids
        and order ids mean nothing (an order id seen closed there may be open here)."""
        self.last_seq = 0
        self._last_trade.clear()
        self._newest_trade = None
        self._orders.clear()
        self._closed_orders.clear()
        self._emit(ServerChanged(reason))

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
        for book in self.books.values():
            book.live = False
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
        """After a reconnection or a resync: read the account's orders again; report any that changed.

        Private updates keep arriving meanwhile, so a state read here is reported only if it is
        newer (a higher `seq`) than the last one seen, and never for an order closed meanwhile."""
        before = dict(self._orders)
        try:
            http = self.http
            current = {o.order_id: o for o in await http.open_orders()}
            for order_id in [i for i in before if i not in current]:
                current[order_id] = await http.get_order(order_id)
        except TickflowError as e:
            log.warning("could not read the orders again: %s", e)
            return
        for order_id, order in current.items():
            latest = self._orders.get(order_id)
            if order_id in self._closed_orders or (latest is None and order_id in before):
                continue  # closed by an update that came in meanwhile: that state is final
            if latest is None or order.seq > latest.seq:
                self._emit(OrderChanged(order))

    def _fail_waiters(self) -> None:
        """The connection ended: what waits for an answer on it will not get one."""
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ConnectionLost(f"connection to {self.url} lost; outcome unknown"))
        self._pending.clear()
        for pong in self._pongs:
            if not pong.done():
                pong.set_exception(ConnectionLost("connection lost"))
        self._pongs.clear()

    def _disconnect(self) -> None:
        """Let go of the connection at once (no await: no call may find it half gone); it closes beside."""
        self._fail_waiters()
        for book in self.books.values():
            book.live = False
        self._parts.clear()
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
            msg = _ws_decoder.decode(data)
        except msgspec.DecodeError:  # ValidationError included
            log.warning("unrecognised message: %.200s", data)
            return
        if isinstance(msg, _Update):
            await self._on_update(msg)
        elif isinstance(msg, _Result):
            self._on_result(msg)
        elif isinstance(msg, _OrderMsg):
            self.last_seq = max(self.last_seq, msg.order.seq)
            self._emit(OrderChanged(msg.order))
        elif isinstance(msg, _Snapshot):
            self._on_snapshot(msg)
        elif isinstance(msg, _Auth):
            if self.cancel_on_disconnect and not msg.cancel_on_disconnect:
                # Carrying on would leave orders in the book that the caller counts on going with it.
                raise AuthFailed("the server did not arm cancel on disconnect (a server too old to know it?)")
            self.account = msg.account
            await self._on_connected()
        elif isinstance(msg, _Resync):
            self._on_resync(msg)
        elif isinstance(msg, _Error):
            self._on_error(msg, data)
        elif isinstance(msg, _Pong):
            self._on_pong()

    def _on_result(self, msg: _Result) -> None:
        future = self._pending.get(msg.id) if isinstance(msg.id, int) else None
        if future is not None and not future.done():
            future.set_result((msg.status, bytes(msg.body)))

    def _on_error(self, msg: _Error, data: str) -> None:
        body = _json.decode(data)
        if not self._was_connected and self.token and msg.op in ("auth", None):
            raise AuthFailed(str(body.get("error") or body))
        future = self._pending.get(msg.id) if isinstance(msg.id, int) else None
        if future is not None and not future.done():
            future.set_result((400, _encode(body)))
        self._emit(ServerError(body))

    def _on_pong(self) -> None:
        if self._pongs:
            future = self._pongs.pop(0)
            if not future.done():
                future.set_result(None)

    def _on_resync(self, msg: _Resync) -> None:
        """The server dropped the market data it had queued for us; snapshots follow. Private updates
        are never dropped, but the orders are read again all the same (an older server dropped them)."""
        for book in self.books.values():
            book.live = False
        self._parts.clear()
        self._emit(Resynced(msg.reason))
        self._catch_up()

    def _on_snapshot(self, msg: _Snapshot) -> None:
        book = self.books.get(msg.symbol)
        if book is None:
            book = self.books[msg.symbol] = LocalBook(msg.symbol)
        book.load(msg.seq, msg.bids, msg.asks)
        self.last_seq = max(self.last_seq, msg.seq)
        self._parts.pop(msg.symbol, None)
        if msg.more:
            book.live = False
            self._parts[msg.symbol] = _Parts(msg.more, True, list(msg.trades))
            return
        self._emit(BookChanged(msg.symbol, book, msg.seq, True))
        self._snapshot_trades(msg.symbol, list(msg.trades))

    def _snapshot_trades(self, symbol: str, trades: list[Trade]) -> None:
        """Deliver a snapshot's trades, after those printed before them that this session has not seen."""
        running = self._backfills.get(symbol)
        if running is not None:
            running.held.extend(trades)
            if trades:
                running.upto = max(running.upto, trades[0].trade_id - 1)
            return
        last = self._last_trade.get(symbol)
        if last is not None and trades and trades[0].trade_id > last + 1:
            self._backfills[symbol] = _Backfill(trades, trades[0].trade_id - 1)
            self._spawn(self._backfill(symbol, last))
            return
        self._deliver_trades(symbol, trades)

    def _update_trades(self, symbol: str, trades: Sequence[Trade]) -> None:
        running = self._backfills.get(symbol)
        if running is not None:
            running.held.extend(trades)  # delivered after the missed ones, in order
        else:
            self._deliver_trades(symbol, trades)

    async def _backfill(self, symbol: str, last: int) -> None:
        """Fetch the trades printed while we were away (after `last`, up to the snapshot's oldest), then
        deliver them with those that arrived meanwhile, each once and in order."""
        state = self._backfills[symbol]
        missed: list[Trade] = []
        try:
            missed = await self._fetch_trades(symbol, last, state)
        finally:
            del self._backfills[symbol]
            if not self._closing:
                trades = {t.trade_id: t for t in [*missed, *state.held]}
                self._deliver_trades(symbol, [trades[i] for i in sorted(trades)])

    async def _fetch_trades(self, symbol: str, after: int, state: _Backfill) -> list[Trade]:
        """Pages of `GET /trades` from `after` up to `state.upto`.

        The trade store is written just after the feed, so a fetch can briefly lag the snapshot: it
        is retried a few times until the ids reach the snapshot's trades."""
        missed: list[Trade] = []
        retries = 0
        while after < state.upto and retries < 5:
            try:
                page = await asyncio.wait_for(self.http.trades(symbol, after=after, limit=1000),
                                              self._request_timeout)
            except (TickflowError, asyncio.TimeoutError) as e:
                log.warning("could not fetch missed %s trades: %s", symbol, e)
                break
            missed.extend(page)
            if page:
                after = page[-1].trade_id
            if after < state.upto and len(page) < 1000:  # SQLite may not hold them all yet: try again shortly
                retries += 1
                await asyncio.sleep(0.05 * retries)
        return missed

    def _deliver_trades(self, symbol: str, trades: Sequence[Trade]) -> None:
        last = self._last_trade.get(symbol, 0)
        fresh = [t for t in trades if t.trade_id > last]
        if fresh:
            self._last_trade[symbol] = fresh[-1].trade_id
            self._newest_trade = fresh[-1]
            self._emit(TradesReceived(symbol, fresh))
        elif symbol not in self._last_trade:
            self._last_trade[symbol] = 0

    async def _on_update(self, msg: _Update) -> None:
        book = self.books.get(msg.symbol)
        parts = self._parts.get(msg.symbol)
        if book is None or not (book.live or parts):
            return  # waiting for a snapshot: it will include this change
        # A part continues its message: prevSeq and seq both the seq that message brought.
        if msg.prev_seq != book.seq or (parts and msg.seq != book.seq):
            await self._gap(book, msg)
            return
        book.apply(msg.seq, msg.bids, msg.asks)
        self.last_seq = max(self.last_seq, msg.seq)
        if parts is None and msg.more:
            book.live = False
            self._parts[msg.symbol] = _Parts(msg.more, False, list(msg.trades))
        elif parts is not None:
            parts.trades.extend(msg.trades)
            parts.left -= 1
            if not parts.left:
                self._whole(book, self._parts.pop(msg.symbol))
        else:
            self._emit(BookChanged(msg.symbol, book, msg.seq, False))
            if msg.trades:
                self._update_trades(msg.symbol, msg.trades)

    def _whole(self, book: LocalBook, parts: _Parts) -> None:
        """The last part of a snapshot or update arrived: report it as one."""
        book.live = True
        self._emit(BookChanged(book.symbol, book, book.seq, parts.snapshot))
        if parts.snapshot:
            self._snapshot_trades(book.symbol, parts.trades)
        elif parts.trades:
            self._update_trades(book.symbol, parts.trades)

    async def _gap(self, book: LocalBook, msg: _Update) -> None:
        """Something was missed (an update, or a part of one): the book is stale until a fresh snapshot."""
        book.live = False
        self._parts.pop(book.symbol, None)
        self.gaps += 1
        self._emit(GapDetected(book.symbol, book.seq, msg.prev_seq, msg.seq))
        await self._send_quietly({"op": "subscribe", "symbols": [book.symbol]})

    async def feed(self, data: str | bytes) -> None:
        """Handle one server message as if it had arrived on the socket (for tests and replays)."""
        await self._on_text(data if isinstance(data, str) else data.decode())
