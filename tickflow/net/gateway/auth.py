"""Who a request speaks for: a token names an account, from the tokens file or, in open mode, itself; and
the failed sign-ins, counted and logged at a bounded rate."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from tickflow.net.gateway.logburst import LogBurst
from tickflow.net.wire.limits import ACCOUNT_PATTERN

log = logging.getLogger("tickflow.net.gateway")


class Accounts:
    """Token -> account. Without a tokens file (open mode, for one person on loopback) a token that is a
    valid account name is that account."""

    def __init__(self, tokens: dict[str, str] | None) -> None:
        self.tokens = tokens
        self.watchers: set[Callable[[], bool]] = set()
        """Signed-in WebSocket sessions, told when the tokens change; each says whether it signed out."""

    @property
    def open(self) -> bool:
        return self.tokens is None

    def account(self, token: str | None) -> str | None:
        """The account `token` names, or None for none (missing, unknown, or not an account name)."""
        if not token:
            return None
        if self.tokens is not None:
            return self.tokens.get(token)
        return token if ACCOUNT_PATTERN.match(token) else None

    def replace(self, tokens: dict[str, str]) -> int:
        """Take a new tokens file (SIGHUP); sign-ins whose token it no longer gives the same account end.
        How many did."""
        self.tokens = tokens
        return sum(watcher() for watcher in list(self.watchers))


class SignInFailures:
    """Failed sign-ins (a token the server does not know), counted for /metrics and logged as WARNING
    lines, at most `burst` of them every `window` seconds: guessing cannot flood the log, and the first
    line after a quiet spell says how many were left out. The token itself is never logged."""

    def __init__(self, burst: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = 0
        self.burst = LogBurst("failed sign-ins", burst, window, clock)

    def failed(self, peer: str | None, how: str) -> None:
        self.total += 1
        note = self.burst.allow()
        if note is None:
            return
        log.warning("failed sign-in from %s (%s): unknown token; %d since start%s", peer or "an unknown peer",
                    how, self.total, note)
