"""Where the screen's data comes from: a live server through the client library, or a fixed feed.

The app talks only to a `Backend`. `LiveBackend` wraps one `tickflow.net.client.Session` (WebSocket:
market data, private updates, order entry) and its HTTP `Client` (symbols, bars, open orders). Tests and
screenshots pass a backend that replays a fixed feed instead, so nothing depends on the network or clock.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
from collections.abc import Callable
from typing import Protocol

from tickflow.net.client import AccountFill, Bar, Event, Order, Session, Side, SymbolInfo, Tif

Listener = Callable[[Event], None]
HOUR = 3_600_000


class Backend(Protocol):
    account: str

    async def run(self, symbol: str, listener: Listener) -> None:
        """Connect, feed `listener` with events until cancelled (reconnecting as needed)."""

    async def close(self) -> None:
        """Let go of the network (called when the app stops)."""

    async def switch(self, old: str | None, new: str) -> None:
        """Stop following `old` and follow `new` (a fresh snapshot follows)."""

    async def symbols(self) -> list[SymbolInfo]: ...

    async def bars(self, symbol: str, to_ms: int, before: int) -> list[Bar]:
        """The hour's minute bars before `to_ms`, over the trades with ids below `before`."""

    async def open_orders(self) -> list[Order]: ...

    async def fills(self, symbol: str, limit: int) -> list[AccountFill]:
        """The account's newest `limit` fills in `symbol`, newest first."""

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None, *,
                          tif: Tif = "gtc", post_only: bool = False) -> Order: ...

    async def cancel_order(self, order_id: int) -> Order: ...

    async def cancel_all(self, symbol: str) -> list[Order]:
        """Cancel every open order of the account in `symbol` in one command; the orders it cancelled."""

    async def amend_order(self, order_id: int, *, qty: int | None = None,
                          price: int | None = None) -> Order: ...


class LiveBackend:
    """A real server at `url`, as `account` (the bearer token; in open demo mode the token is the account)."""

    def __init__(self, url: str, account: str, token: str | None = None) -> None:
        self.url = url
        self.account = account
        self.session = Session(url, token or account)
        self._ids = itertools.count(1)
        self._prefix = f"tui-{secrets.token_hex(3)}"

    def _client_order_id(self) -> str:
        # A fresh id per ticket submission: a retry of the same submission would be answered, not doubled.
        return f"{self._prefix}-{next(self._ids)}"

    async def run(self, symbol: str, listener: Listener) -> None:
        self.session.symbols = [symbol]
        remove = self.session.add_listener(listener)
        try:
            await self.session.start(wait=False)
            await asyncio.Event().wait()
        finally:
            remove()

    async def close(self) -> None:
        await self.session.close()

    async def switch(self, old: str | None, new: str) -> None:
        if old and old != new:
            await self.session.unsubscribe(old)
        await self.session.subscribe(new)

    async def symbols(self) -> list[SymbolInfo]:
        return await self.session.http.symbols()

    async def bars(self, symbol: str, to_ms: int, before: int) -> list[Bar]:
        return await self.session.http.bars(symbol, "1m", from_ms=to_ms - HOUR, to_ms=to_ms, before=before)

    async def open_orders(self) -> list[Order]:
        return await self.session.http.open_orders()

    async def fills(self, symbol: str, limit: int) -> list[AccountFill]:
        return await self.session.http.fills(symbol, limit=limit, newest_first=True)

    async def place_order(self, symbol: str, side: Side, qty: int, price: int | None, *,
                          tif: Tif = "gtc", post_only: bool = False) -> Order:
        return await self.session.place_order(symbol, side, qty, price, tif=tif, post_only=post_only,
                                              client_order_id=self._client_order_id())

    async def cancel_order(self, order_id: int) -> Order:
        return await self.session.cancel_order(order_id)

    async def cancel_all(self, symbol: str) -> list[Order]:
        return await self.session.cancel_all(symbol)

    async def amend_order(self, order_id: int, *, qty: int | None = None,
                          price: int | None = None) -> Order:
        return await self.session.amend_order(order_id, qty=qty, price=price)
