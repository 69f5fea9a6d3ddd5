"""Each account's order rate (`serve --max-order-rate`): a token bucket per account, checked before a command
is queued, so an account over its rate is answered 429 with Retry-After and nothing reaches the log.

New orders, amends and quotes count (each op of a batch as one); cancels and cancel-alls never do: an
account must always be able to take its orders out of the book."""

from __future__ import annotations

import math
import time
from typing import Callable

from tickflow.net.wire.errors import BadRequest

MAX_ORDER_RATE = 20_000
"""Orders a second one account may send by default, with a burst of as many at once."""
MAX_IDLE_ACCOUNTS = 10_000
"""Accounts whose bucket is kept once full again; past this, full buckets are forgotten (a full bucket is
what a new one would be)."""


class OrderRate:
    """Token buckets by account: `rate` a second, up to `rate` saved up; 0 turns the limit off."""

    def __init__(self, rate: float = MAX_ORDER_RATE, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate = rate
        self.clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}
        """account -> (tokens left, when that was counted)."""
        self.refused = 0

    def take(self, account: str, count: int = 1) -> None:
        """Spend `count` orders of `account`'s rate, or raise 429 saying when it may send them (nothing spent)."""
        if not self.rate or count <= 0:
            return
        now = self.clock()
        left, then = self._buckets.get(account, (self.rate, now))
        left = min(self.rate, left + (now - then) * self.rate)
        if count > left:
            self.refused += 1
            wait = (count - left) / self.rate if count <= self.rate else math.inf
            if wait == math.inf:
                raise BadRequest(f"{count} orders at once is over the {self.rate:g} a second one account may send: "
                                 "send fewer at a time", None, 429, code="rate_limited")
            raise BadRequest(f"over the order rate of {self.rate:g} a second for this account: try again in "
                             f"{wait:.3f} s", None, 429, code="rate_limited", retry_after=wait)
        if len(self._buckets) >= MAX_IDLE_ACCOUNTS and account not in self._buckets:
            self._forget_full(now)
        self._buckets[account] = (left - count, now)

    def _forget_full(self, now: float) -> None:
        full = [a for a, (left, then) in self._buckets.items() if left + (now - then) * self.rate >= self.rate]
        for account in full:
            del self._buckets[account]
