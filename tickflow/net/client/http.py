"""The HTTP half of the protocol: `Client`, the aiohttp session it rides on, and the server addresses
the WebSocket `Session` shares with it (request bodies and decoding are bodies.py's, batches batch.py's)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar
from urllib.parse import quote as url_quote
from urllib.parse import urlsplit

import aiohttp

from tickflow.net.client.batch import OpResult, QuoteLevel, batch_body, op_results, quote_body
from tickflow.net.client.bodies import amend_fields, decode_as, decode_body, encode, order_fields, order_filters
from tickflow.net.client.errors import ApiError, ConnectionLost, InvalidURL, NotConnected, RequestTimeout
from tickflow.net.client.ops import Op
from tickflow.net.wire.limits import MAX_ORDERS_PAGE
from tickflow.net.wire.messages import (
    AccountFill,
    Bar,
    BatchAnswer,
    Book,
    Health,
    Order,
    OrderList,
    OrderType,
    Quote,
    Side,
    SymbolInfo,
    SymbolList,
    Tif,
    Trade,
)

__all__ = ["Client", "new_http_session", "ws_url"]

T = TypeVar("T")


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


def base_url(url: str) -> str:
    """`url` without a trailing /, once it is checked to be http(s)://host[:port][/path]."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises ValueError on a port that is not a number)
    except (ValueError, TypeError, AttributeError) as e:
        raise InvalidURL(f"{url!r} is not a server address: {e}") from e
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise InvalidURL(f"{url!r} is not a server address of the form http(s)://host[:port]")
    return url.rstrip("/")


def ws_url(url: str) -> str:
    """The WebSocket address for a server's base URL: http://host:port → ws://host:port/ws."""
    base = url.rstrip("/")
    if base.startswith("http://"):
        base = "ws://" + base[len("http://"):]
    elif base.startswith("https://"):
        base = "wss://" + base[len("https://"):]
    return base if base.endswith("/ws") else base + "/ws"


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
        self.url = base_url(url)
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
        return decode_body(await self._raw(method, path, params, body))

    async def _raw(self, method: str, path: str, params: dict[str, Any] | None,
                   body: dict[str, Any] | None) -> bytes:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        data = None
        if body is not None:
            data = encode(body)
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
            raise ApiError(resp.status, decode_body(raw))
        return raw

    async def _typed(self, kind: type[T], method: str, path: str, params: dict[str, Any] | None = None,
                     body: dict[str, Any] | None = None) -> T:
        return decode_as(kind, await self._raw(method, path, params, body), f"{method} {path}")

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None = None, *,
                          type: OrderType | None = None, tif: Tif = "gtc", post_only: bool = False,
                          client_order_id: str | None = None) -> Order:
        """`POST /orders`. A book rejection is not an error: the result's `status` says "rejected"."""
        fields = order_fields(symbol, side, qty, price, type, tif, post_only, client_order_id)
        return await self._typed(Order, "POST", "/orders", body=fields)

    async def cancel_order(self, order_id: int) -> Order:
        """`DELETE /orders/{id}`: 404 unknown or not yours, 409 not open any more."""
        return await self._typed(Order, "DELETE", f"/orders/{order_id}")

    async def amend_order(self, order_id: int, *, qty: int | None = None, price: int | None = None) -> Order:
        """`PATCH /orders/{id}`: `qty` is the new total quantity (filled part included)."""
        return await self._typed(Order, "PATCH", f"/orders/{order_id}", body=amend_fields(qty, price))

    async def cancel_all(self, symbol: str | None = None, side: Side | None = None) -> list[Order]:
        """`DELETE /orders`: cancel every open order of the caller's, or only those in `symbol` and/or on
        `side`, in one command (nothing trades between the first cancel and the last). Returns the
        orders it cancelled, oldest first, [] when none was open; 400 unknown symbol or bad side."""
        params = order_filters(symbol, side)
        return (await self._typed(OrderList, "DELETE", "/orders", params)).orders

    async def batch(self, ops: Iterable[Op | Mapping[str, Any]]) -> list[OpResult]:
        """`POST /batch`: up to 256 ops (`tickflow.net.client.ops`) sequenced one after another, nothing
        of anyone else's between them. One `OpResult` per op, in order, each what the op alone would have
        been answered (a failed op is in its result, not raised); `ApiError` when the batch is refused as
        a whole (400 malformed, 401), and then nothing of it ran. As `Session.batch`."""
        sent, wire = batch_body(ops)
        answer = await self._typed(BatchAnswer, "POST", "/batch", body={"ops": wire})
        return op_results(sent, answer.results, "POST /batch")

    async def quote(self, symbol: str, bids: Iterable[QuoteLevel], asks: Iterable[QuoteLevel]) -> Quote:
        """`PUT /quotes/{symbol}`: replace the account's whole quote in `symbol` with these `(price, qty)`
        levels in one logged command (an empty side pulls it). As `Session.quote`."""
        return await self._typed(Quote, "PUT", f"/quotes/{url_quote(symbol, safe='')}", body=quote_body(bids, asks))

    async def get_order(self, order_id: int) -> Order:
        """`GET /orders/{id}`: the order's current state (`fills` empty); 404 unknown or not yours."""
        return await self._typed(Order, "GET", f"/orders/{order_id}")

    async def open_orders(self, symbol: str | None = None, side: Side | None = None) -> list[Order]:
        """The caller's open orders, oldest first: all of them, or those in `symbol` and/or on `side`.

        `GET /orders` answers at most MAX_ORDERS_PAGE at once; the pages are followed (`after` the last
        order id of each) until one is short, so every open order is here. Orders placed or closed while
        the pages are read may or may not be."""
        orders: list[Order] = []
        after = 0
        while True:
            params = {"status": "open", **order_filters(symbol, side), "after": after or None}
            page = (await self._typed(OrderList, "GET", "/orders", params)).orders
            orders += page
            if len(page) != MAX_ORDERS_PAGE:  # (a server from before paging answers them all at once)
                return orders
            after = page[-1].order_id

    async def book(self, symbol: str, depth: int = 20) -> Book:
        """`GET /book/{symbol}`: the best `depth` levels (1-1000) of each side; 404 unknown symbol."""
        return await self._typed(Book, "GET", f"/book/{url_quote(symbol, safe='')}", {"depth": depth})

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
        return (await self._typed(SymbolList, "GET", "/symbols")).symbols

    async def health(self) -> Health:
        """`GET /health`; a 503 (log device failed) raises `ApiError` with the reason in the body."""
        return await self._typed(Health, "GET", "/health")
