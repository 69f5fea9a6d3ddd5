"""One symbol's order book: price levels kept in FIFO order, best price found through a heap.

Levels live in a dict keyed by price; a heap of price keys (prices, negated for bids, so the
smallest key is always the best price) finds the best one. The top of the heap is always a live
level, so the best price is a peek; a level that empties below the top only leaves the dict, and
its stale key is dropped once it surfaces. Cancelling an order marks it dead and adjusts its
level's totals, so a cancel is O(1); dead orders are skipped when matching reaches them and swept
when they outnumber the live ones.
"""

from __future__ import annotations

from collections import deque
from heapq import heappop, heappush
from typing import Final, Iterator

import msgspec

from tickflow.core.types import LevelChange, OrderType, Side, Status, Tif

NO_LIMIT: Final = 1 << 62
"""The matching key of a market order: beyond every price, so every resting order crosses it."""
MAX_SPARE_LEVELS: Final = 64
"""Emptied levels a book side keeps for reuse."""


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
    quote: bool = False
    """Placed by a mass quote: the account's next quote in the symbol replaces it."""

    @property
    def remaining(self) -> int:
        return self.qty - self.filled


class Level:
    """Orders resting at one price, oldest first, with running totals of the live ones.

    A plain class, not a msgspec struct like the rest: its totals change on every fill, and
    CPython stores to __slots__ attributes several times faster than to struct fields."""

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

    __slots__ = ("side", "levels", "heap", "sign", "spare")

    def __init__(self, side: Side) -> None:
        self.side: Side = side
        self.levels: dict[int, Level] = {}
        # Keys are price * sign: the smallest key is the best price on either side. Every live
        # level has a key here and heap[0] is always a live level's; other keys may be stale.
        self.heap: list[int] = []
        self.sign = -1 if side == "buy" else 1
        # Emptied levels, kept for reuse: levels near the spread empty and come back all the time,
        # and building a Level costs more than the rest of resting an order in it.
        self.spare: list[Level] = []

    def key(self, price: int) -> int:
        """`price` as a heap key of this side: resting levels with keys <= it are at least as good."""
        return price * self.sign

    def best(self) -> Level | None:
        return self.levels[self.heap[0] * self.sign] if self.heap else None

    def add_level(self, price: int) -> Level:
        """A new, empty level at `price` (which has none)."""
        spare = self.spare
        if spare:
            level = spare.pop()  # empty: no live orders, qty and count 0
            level.price = price
        else:
            level = Level(price, self.side)
        self.levels[price] = level
        heap = self.heap
        heappush(heap, price * self.sign)
        if len(heap) > 4 * len(self.levels) + 64:
            self.heap = [p * self.sign for p in self.levels]
            self.heap.sort()
        return level

    def drop(self, level: Level) -> None:
        """Forget an empty level, keeping the top of the heap live. A later add_level may reuse the
        object for another price, so take any LevelChange of it before adding a level."""
        levels = self.levels
        del levels[level.price]
        if len(self.spare) < MAX_SPARE_LEVELS:
            if level.queue:
                level.queue.clear()  # dead orders only
            self.spare.append(level)
        heap = self.heap
        sign = self.sign
        while heap and heap[0] * sign not in levels:
            heappop(heap)

    def sorted_levels(self, depth: int | None = None) -> list[Level]:
        """Levels best first, at most `depth` of them."""
        prices = sorted(self.levels, reverse=self.side == "buy")
        if depth is not None:
            prices = prices[:depth]
        return [self.levels[p] for p in prices]

    def fillable(self, need: int, key: int, besides: str | None = None) -> bool:
        """True when levels crossing `key` (a matching key, see BookSide) hold `need`, not counting the orders
        of account `besides` (self-trade prevention would cancel them, not fill against them)."""
        sign = self.sign
        for level in self.best_first():  # best first: stop once filled or past the limit
            if level.price * sign > key:
                return False
            if besides is not None:
                need -= sum(o.qty - o.filled for o in level.live_orders() if o.account != besides)
            else:
                need -= level.qty
            if need <= 0:
                return True
        return False

    def best_first(self) -> Iterator[Level]:
        """Live levels, best first, read off the heap without sorting it: the k-th costs O(log k).

        A heap's children are never better than their parent, so the next best key is always among the
        children of those already taken: a second, small heap of that frontier yields them in order.
        Stale keys (levels gone) are passed over, and a price that came back after its old key went
        stale has two keys, which surface one after the other. The book must not change meanwhile."""
        heap = self.heap
        levels = self.levels
        sign = self.sign
        size = len(heap)
        frontier = [(heap[0], 0)] if heap else []
        last = None
        while frontier:
            key, i = heappop(frontier)
            child = 2 * i + 1
            if child < size:
                heappush(frontier, (heap[child], child))
                if child + 1 < size:
                    heappush(frontier, (heap[child + 1], child + 1))
            if key == last:
                continue
            last = key
            level = levels.get(key * sign)
            if level is not None:
                yield level

    def crosses(self, best: int, limit: int) -> bool:
        """True when a resting price `best` on this side trades with an incoming limit of `limit`."""
        return best >= limit if self.side == "buy" else best <= limit


class Book:
    """The two sides of one symbol."""

    __slots__ = ("symbol", "bids", "asks", "seq", "last")

    def __init__(self, symbol: str) -> None:
        self.symbol = symbol
        self.bids = BookSide("buy")
        self.asks = BookSide("sell")
        self.seq = 0
        """The last command that listed the book, traded in it or changed a level: the feed's seq for it."""
        self.last = 0
        """The price of the last trade (0 before the first): the centre of the price band."""

    def outside_band(self, price: int, band: int) -> bool:
        """True when `price` is more than `band` basis points from the last trade price (never before one)."""
        last = self.last
        return bool(last) and abs(price - last) * 10_000 > last * band

    def side(self, side: Side) -> BookSide:
        return self.bids if side == "buy" else self.asks

    def opposite(self, side: Side) -> BookSide:
        return self.asks if side == "buy" else self.bids

    def rest(self, order: Order) -> Level:
        """Queue `order` at the back of its price level."""
        book_side = self.bids if order.side == "buy" else self.asks
        level = book_side.levels.get(order.price)
        if level is None:
            level = book_side.add_level(order.price)
        level.queue.append(order)
        level.qty += order.qty - order.filled
        level.count += 1
        order.live = True
        return level

    def unrest(self, order: Order) -> Level:
        """Take a live order out of its level (O(1): it is marked dead, its level's totals shrink)."""
        book_side = self.bids if order.side == "buy" else self.asks
        level = book_side.levels[order.price]
        order.live = False
        level.qty -= order.qty - order.filled
        level.count -= 1
        if level.count == 0:
            book_side.drop(level)
        elif len(level.queue) > 2 * level.count + 16:
            level.sweep()
        return level

    def change(self, level: Level) -> LevelChange:
        return LevelChange(self.symbol, level.side, level.price, level.qty, level.count)
