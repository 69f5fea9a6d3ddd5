"""A deep book (issue 27, item 3): reads of its best levels, a subscribe and a fill-or-kill check cost what
the levels they use cost, not the book's depth.

The work is counted, not timed: prices are an int subclass that counts every comparison and product made
with it, so a read that sorts or scans the whole book shows up as tens of thousands of operations
whatever the machine's speed. The fan-out is sans-I/O (tickflow/net/exchange/fanout.py), so a deep
snapshot is taken as its writer would take it, one message at a time, with a batch published midway.
"""

from __future__ import annotations

import json
import random
from typing import Any

from test_ws_feed import FeedMirror, queued

from tickflow.core.book import BookSide
from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol, LevelChange, NewOrder, Outcome
from tickflow.net.exchange.fanout import Feed, Subscriber
from tickflow.net.exchange.mirror import SLICE_LEVELS


class Price(int):
    """An int that counts the comparisons and products it takes part in."""

    ops = 0

    def _count(name: str) -> Any:  # type: ignore[misc]
        method = getattr(int, name)

        def counted(self: int, other: Any) -> Any:
            Price.ops += 1
            return method(self, other)
        return counted

    __lt__ = _count("__lt__")
    __le__ = _count("__le__")
    __gt__ = _count("__gt__")
    __ge__ = _count("__ge__")
    __mul__ = _count("__mul__")
    __rmul__ = _count("__rmul__")
    __hash__ = int.__hash__


DEPTH = 20_000


def deep_feed(price: type[int] = int) -> Feed:
    """DEPTH one-lot levels a side, bids from 500,000 down, asks from 500,001 up (prices of type `price`)."""
    feed = Feed()
    feed.load("X", 7, [LevelChange("X", "buy", price(500_000 - i), 1, 1) for i in range(DEPTH)],
              [LevelChange("X", "sell", price(500_001 + i), 1, 1) for i in range(DEPTH)], [])
    return feed


def test_reading_the_best_levels_of_a_deep_book_does_not_walk_the_book() -> None:
    """`GET /book?depth=1` and `GET /symbols` (the best bid and ask) of a book of 40,000 levels."""
    feed = deep_feed(Price)
    Price.ops = 0
    book = feed.book("X", 1)
    best = feed.mirrors["X"].best()  # what GET /symbols shows of each symbol
    assert Price.ops < 100, f"{Price.ops} price operations to read the top of the book"
    assert [level["price"] for level in book["bids"] + book["asks"]] == [500_000, 500_001]
    assert best == (500_000, 500_001)
    Price.ops = 0
    book = feed.book("X", 1000)
    assert Price.ops < 100 and [b["price"] for b in book["bids"]] == list(range(500_000, 499_000, -1))


def test_a_deep_snapshot_is_built_a_slice_at_a_time_and_rebuilds_the_book_with_updates_between() -> None:
    """A subscribe queues only the best SLICE_LEVELS a side; each deeper slice is built when the writer
    takes it, after every update queued before it, so a reader that applies updates by the rules holds
    the book as it is, whatever changed between slices (levels sent or not yet sent, gone or new)."""
    feed = deep_feed()
    sub = Subscriber(feed)  # no socket: the fan-out is sans-I/O
    feed.subscribe(sub, "X")
    (head,) = map(json.loads, queued(sub))  # one message, not the book
    assert head["type"] == "snapshot" and "more" not in head
    assert len(head["bids"]) == len(head["asks"]) == SLICE_LEVELS and head["bids"][0] == [500_000, 1, 1]
    mirror = FeedMirror()
    taken = 0
    while (message := sub.next_message()) is not None:
        assert isinstance(message, bytes)
        part = json.loads(message)
        assert len(part["bids"]) <= SLICE_LEVELS and len(part["asks"]) <= SLICE_LEVELS
        mirror.apply(part)
        taken += 1
        if taken == 3:  # midway: a batch changes levels already sent, about to be sent, and not yet sent
            feed.publish([Outcome(8, None, None, [], [
                LevelChange("X", "buy", 500_000, 0, 0),                       # sent, gone
                LevelChange("X", "buy", 500_000 - 3 * SLICE_LEVELS, 7, 2),    # next slice's first level
                LevelChange("X", "buy", 500_000 - DEPTH + 5, 0, 0),           # not yet sent, gone
                LevelChange("X", "sell", 500_001 + DEPTH, 3, 1),              # a new level past the deepest
                LevelChange("X", "sell", 500_001 + 2 * SLICE_LEVELS + 7, 9, 4),  # in the slice being sent
            ], [])])
    assert taken >= 2 * DEPTH // SLICE_LEVELS // 2
    assert mirror.gaps == 0 and mirror.seq == 8
    truth = feed.mirrors["X"]
    assert mirror.bids == dict(truth.bids) and mirror.asks == dict(truth.asks)
    assert len(mirror.bids) == DEPTH - 2 and len(mirror.asks) == DEPTH + 1


def test_subscribing_again_or_unsubscribing_midway_starts_over_or_stops_the_slices() -> None:
    feed = deep_feed()
    sub = Subscriber(feed)
    feed.subscribe(sub, "X")
    for _ in range(4):
        sub.next_message()
    feed.subscribe(sub, "X")
    first = json.loads(sub.next_message())  # type: ignore[arg-type]
    assert first["type"] == "snapshot" and first["bids"][0] == [500_000, 1, 1]
    feed.unsubscribe(sub, "X")
    assert sub.next_message() is None


def rest_deep(engine: Engine, count: int) -> None:
    """`count` one-lot asks of `maker`, the best last, so that the book's dict holds the best at its end."""
    for i in range(count):
        engine.apply(2 + i, 2 + i, NewOrder("maker", "X", "sell", "limit", Price(100_000 - i), 1))


def test_a_fill_or_kill_check_walks_only_the_levels_it_could_take() -> None:
    engine = Engine()
    engine.apply(1, 1, AddSymbol("X"))
    rest_deep(engine, DEPTH)
    best = 100_000 - DEPTH + 1
    Price.ops = 0
    refused = engine.apply(DEPTH + 2, 0, NewOrder("taker", "X", "buy", "limit", best + 1, 3, tif="fok"))
    assert Price.ops < 200, f"{Price.ops} price operations for a fill-or-kill of two levels"
    assert refused.result is not None and refused.result.reason == "fok_not_filled"
    filled = engine.apply(DEPTH + 3, 0, NewOrder("taker", "X", "buy", "limit", best + 2, 3, tif="fok"))
    assert filled.result is not None and filled.result.status == "filled"
    assert [f.price for f in filled.result.fills] == [best, best + 1, best + 2]


def test_a_fill_or_kill_check_of_an_account_with_orders_of_its_own_leaves_them_out() -> None:
    engine = Engine()
    engine.apply(1, 1, AddSymbol("X"))
    rest_deep(engine, 100)
    engine.apply(200, 200, NewOrder("taker", "X", "sell", "limit", 99_901, 5))  # its own, at the best price
    refused = engine.apply(201, 201, NewOrder("taker", "X", "buy", "limit", 99_902, 3, tif="fok"))
    assert refused.result is not None and refused.result.reason == "fok_not_filled"
    filled = engine.apply(202, 202, NewOrder("taker", "X", "buy", "limit", 99_903, 3, tif="fok"))
    assert filled.result is not None and filled.result.status == "filled"


def test_best_first_gives_the_live_levels_in_price_order_whatever_the_heap_holds() -> None:
    """Levels made, emptied and made again leave stale and repeated keys in the heap; best_first skips
    both and matches a sort of the levels."""
    rnd = random.Random(27)
    for side in ("buy", "sell"):
        book = BookSide(side)
        for _ in range(3_000):
            price = rnd.randint(1, 300)
            level = book.levels.get(price)
            if level is None:
                book.add_level(price)
            elif rnd.random() < 0.7:
                book.drop(level)
            if rnd.random() < 0.05:
                assert [lv.price for lv in book.best_first()] == [lv.price for lv in book.sorted_levels()]
        assert [lv.price for lv in book.best_first()] == [lv.price for lv in book.sorted_levels()]
