"""A symbol's order book as a client holds it: the price levels of each side, best first, kept from
the feed's snapshot and updates. No I/O; which message may change it is `ClientState`'s rule."""

from __future__ import annotations

from collections.abc import Iterable

from sortedcontainers import SortedDict

from tickflow.net.wire.messages import Level

__all__ = ["LocalBook"]


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
