"""What every handler of one gateway shares: the exchange's service, the accounts, limits and counters."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from tickflow.net.exchange.service import ExchangeService
from tickflow.net.gateway.auth import Accounts, SignInFailures
from tickflow.net.gateway.ratelimit import OrderRate
from tickflow.net.gateway.room import AUTH_TIMEOUT, MAX_PER_ACCOUNT, Room, default_max_anonymous
from tickflow.net.gateway.static import default_web_dir

BODY_TIMEOUT = 10.0
MAX_WEBSOCKETS = 1000
"""WebSockets open at once by default (`serve --max-websockets`): each may hold megabytes of queued
market data before it is resynced, and a file descriptor."""


@dataclass
class Gateway:
    """Everything the handlers share."""

    service: ExchangeService
    accounts: Accounts = field(default_factory=lambda: Accounts(None))
    started: float = field(default_factory=time.time)
    web_dir: Path = field(default_factory=default_web_dir)
    body_timeout: float = BODY_TIMEOUT
    """Seconds a request body may take to arrive once its headers have."""
    max_websockets: int = MAX_WEBSOCKETS
    room: Room = field(default_factory=lambda: Room(default_max_anonymous(MAX_WEBSOCKETS), MAX_PER_ACCOUNT))
    """The WebSockets not signed in and each account's, each kind under a cap of its own."""
    auth_timeout: float = AUTH_TIMEOUT
    """Seconds a WebSocket has to sign in or subscribe before it is closed."""
    allowed_origins: frozenset[str] = frozenset()
    """Web origins (`--allow-origin`) whose pages may open a WebSocket, besides the server's own."""
    allowed_hosts: frozenset[str] = frozenset()
    """Host names (`--allow-host`, lower case; `*`: any) requests may name, besides addresses and localhost."""
    warning: str | None = None
    """What /health warns of (open accounts on an address other machines can reach)."""
    sign_in_failures: SignInFailures = field(default_factory=SignInFailures)
    order_rate: OrderRate = field(default_factory=OrderRate)
    """Each account's order rate (`--max-order-rate`), checked before a command is queued."""
    websockets: int = 0
    """WebSocket requests being served, from before the handshake to the close."""
    open_sockets: set[web.WebSocketResponse] = field(default_factory=set)
    """WebSockets past their handshake, to be closed when the server stops."""
    counters: dict[str, int] = field(
        default_factory=lambda: {"ws_messages": 0, "ws_refused": 0, "cancel_on_disconnect": 0, "ws_origin_refused": 0,
                                 "ws_replies_too_large": 0, "ws_auth_timeouts": 0, "host_refused": 0})
    closing: bool = False
    """Set once the server is stopping: the WebSockets it closes then did not go away by themselves."""
    chores: set[asyncio.Task[Any]] = field(default_factory=set)
    """Commands the server sends on its own (cancel on disconnect), kept until they are answered."""

    def account(self, token: str | None) -> str | None:
        return self.accounts.account(token)


GATEWAY = web.AppKey("gateway", Gateway)
