"""One symbol's order book: price levels kept in FIFO order, best price found through a heap.

Levels live in a dict keyed by price; a heap of prices finds the best one. Removing a level only
deletes it from the dict: its stale heap entry is dropped when it reaches the top. Cancelling an
order marks it dead and adjusts its level's totals, so a cancel is O(1); dead orders are skipped
when matching reaches them and swept when they outnumber the live ones.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from typing import Iterator

import msgspec

from tickflow.core.types import LevelChange, OrderType, Side, Status, Tif


class Order(msgspec.Struct, gc=False):
    """A live or finished order as the engine keeps it."""

    order_id: int
    client_order_id: str | None
    account: str
    symbol: str
    side: Side
    type: OrderType
    price: int
    qty: int
    tif: Tif
    post_only: bool
    filled: int = 0
    status: Status = "new"
    reason: str | None = None
    seq: int = 0
    ts: int = 0
    live: bool = False
    """True while this object rests in a level's queue; an amend that re-queues makes a new object."""

    @property
    def remaining(self) -> int:
        return self.qty - self.filled


class Level:
    """Orders resting at one price, oldest first, with running totals of the live ones."""

    __slots__ = ("price", "side", "qty", "count", "queue")

    def __init__(self, price: int, side: Side) -> None:
        self.price = price
        self.side = side
        self.qty = 0
        self.count = 0
        self.queue: deque[Order] = deque()

    def live_orders(self) -> Iterator[Order]:
        return (o for o in self.queue if o.live)

    def sweep(self) -> None:
        """Drop dead entries once they outnumber the live ones, so a busy level stays small."""
        if len(self.queue) > 2 * self.count + 16:
            self.queue = deque(o for o in self.queue if o.live)


class BookSide:
    """The bids or the asks of one book."""

    __slots__ = ("side", "levels", "heap", "in_heap", "sign")

    def __init__(self, side: Side) -> None:
        self.side: Side = side
        self.levels: dict[int, Level] = {}
        self.heap: list[int] = []
        self.in_heap: set[int] = set()
        # Bids are kept negated so the heap's smallest entry is always the best price.
        self.sign = -1 if side == "buy" else 1

    def best(self) -> Level | None:
        heap = self.heap
        levels = self.levels
        sign = self.sign
        while heap:
            level = levels.get(heap[0] * sign)
            if level is not None:
                return level
            self.in_heap.discard(heappop(heap) * sign)
        return None

    def level_for(self, price: int) -> Level:
        level = self.levels.get(price)
        if level is None:
            level = self.levels[price] = Level(price, self.side)
            if price not in self.in_heap:
                self.in_heap.add(price)
                heappush(self.heap, price * self.sign)
                if len(self.heap) > 4 * len(self.levels) + 64:
                    self._rebuild_heap()
        return level

    def drop(self, level: Level) -> None:
        del self.levels[level.price]

    def _rebuild_heap(self) -> None:
        self.heap = [p * self.sign for p in self.levels]
        self.heap.sort()
        self.in_heap = set(self.levels)

    def sorted_levels(self, depth: int | None = None) -> list[Level]:
        """Levels best first, at most `depth` of them."""
        prices = sorted(self.levels, reverse=self.side == "buy")
        if depth is not None:
            prices = prices[:depth]
        return [self.levels[p] for p in prices]

    def crosses(self, best: int, limit: int) -> bool:
        """True when a resting price `best` on this side trades with an incoming limit of `limit`."""
        return best >= limit if self.side == "buy" else best <= limit


class Book:
    """The two sides of one symbol."""

    __slots__ = ("symbol", "bids", "asks")

    def __init__(self, symbol: str) -> None:
        self.symbol = symbol
        self.bids = BookSide("buy")
        self.asks = BookSide("sell")

    def side(self, side: Side) -> BookSide:
        return self.bids if side == "buy" else self.asks

    def opposite(self, side: Side) -> BookSide:
        return self.asks if side == "buy" else self.bids

    def rest(self, order: Order) -> Level:
        """Queue `order` at the back of its price level."""
        level = self.side(order.side).level_for(order.price)
        level.queue.append(order)
        level.qty += order.qty - order.filled
        level.count += 1
        order.live = True
        return level

    def unrest(self, order: Order) -> Level:
        """Take a live order out of its level (O(1): it is marked dead, its level's totals shrink)."""
        book_side = self.side(order.side)
        level = book_side.levels[order.price]
        order.live = False
        level.qty -= order.qty - order.filled
        level.count -= 1
        if level.count == 0:
            book_side.drop(level)
        else:
            level.sweep()
        return level

    def change(self, level: Level) -> LevelChange:
        return LevelChange(self.symbol, level.side, level.price, level.qty, level.count)

    def is_crossed(self) -> bool:
        bid, ask = self.bids.best(), self.asks.best()
        return bid is not None and ask is not None and bid.price >= ask.price
