"""The durable book mirror: every symbol's levels and recent trades as of the last durable batch.

The sequencer may match a batch before the previous one is synced, so the engine's books can be
ahead of what is durable. Everything the outside world reads (snapshots, `GET /book`) comes from
this mirror instead, which only moves when a durable batch is published: a snapshot and the
updates after it always fit together.
"""

from __future__ import annotations

from collections import deque
from itertools import islice
from typing import Any, Container, Iterable

from sortedcontainers import SortedDict

from tickflow.core.types import LevelChange, OrderState, Outcome
from tickflow.net.exchange.waits import SeqGate
from tickflow.net.wire.answers import PublicTrade, encode, public_trade

RECENT_TRADES = 50
PART_LEVELS = 16_384
"""Levels in one update message at most; an update with more is sent in parts (`_parts`). A level is at
most 54 bytes of JSON (a 10-digit price, totals below 2**63) and a trade 233 (a 16-character symbol,
63-bit ids), so a part of PART_LEVELS levels and PART_TRADES trades stays under 1 MiB, whatever the book:
a client need not accept more (aiohttp's default limit is 4 MiB)."""
PART_TRADES = 512
"""Trades in one market-data message at most (a snapshot carries RECENT_TRADES, an update those of its batch)."""
SLICE_LEVELS = 1024
"""Levels of each side in one message of a snapshot. A snapshot's first message holds the best
SLICE_LEVELS of each side; the deeper levels follow as updates, SLICE_LEVELS a side at a time, each built
only when the subscriber's writer takes it (`BookMirror.deeper`). So no subscribe builds a whole book in
one turn of the event loop, whatever its depth (a book can hold up to MAX_PRICE levels), and a reader that
does not read holds one slice of it, not the book."""


class SymbolMirror:
    """One symbol's durable levels (sorted by price: the best N cost O(N + log L) to read, whatever the
    book's depth L), the seq of its last update and its recent trades."""

    __slots__ = ("bids", "asks", "seq", "trades", "last")

    def __init__(self, seq: int) -> None:
        # price -> (qty, orders); the best bid is the last key, the best ask the first.
        self.bids: Any = SortedDict()
        self.asks: Any = SortedDict()
        self.seq = seq
        self.trades: deque[PublicTrade | dict[str, Any]] = deque(maxlen=RECENT_TRADES)
        self.last: int | None = None

    def apply(self, change: LevelChange) -> None:
        levels = self.bids if change.side == "buy" else self.asks
        if change.qty:
            levels[change.price] = (change.qty, change.orders)
        else:
            levels.pop(change.price, None)

    def top(self, depth: int) -> tuple[Levels, Levels]:
        """The best `depth` levels of each side, best first."""
        bids, asks = self.bids, self.asks
        count = len(bids)  # islice counts from the lowest price whichever way it iterates
        return ([[p, *bids[p]] for p in bids.islice(max(0, count - depth), count, reverse=True)],
                [[p, *asks[p]] for p in asks.islice(0, depth)])

    def below(self, bid: int | None, ask: int | None, count: int) -> tuple[Levels, Levels]:
        """The next `count` levels of each side past the prices `bid` and `ask` (worse than them, best
        first); nothing of a side given as None."""
        bids, asks = self.bids, self.asks
        return ([] if bid is None else
                [[p, *bids[p]] for p in islice(bids.irange(maximum=bid, inclusive=(True, False), reverse=True), count)],
                [] if ask is None else
                [[p, *asks[p]] for p in islice(asks.irange(minimum=ask, inclusive=(False, True)), count)])

    def best(self) -> tuple[int | None, int | None]:
        return (self.bids.peekitem(-1)[0] if self.bids else None, self.asks.peekitem(0)[0] if self.asks else None)


class Deeper:
    """Where a subscriber's snapshot has got to: the worst price of each side sent so far, None for a side
    sent whole."""

    __slots__ = ("bid", "ask")

    def __init__(self, bid: int | None, ask: int | None) -> None:
        self.bid = bid
        self.ask = ask

    @property
    def done(self) -> bool:
        return self.bid is None and self.ask is None


class SymbolUpdate:
    """What one durable batch did to one symbol: its new seq, the one before, the levels it left (totals,
    0 for a level gone) and its trades."""

    __slots__ = ("symbol", "seq", "prev_seq", "bids", "asks", "trades")

    def __init__(self, symbol: str, seq: int, prev_seq: int, bids: Levels, asks: Levels,
                 trades: list[PublicTrade]) -> None:
        self.symbol = symbol
        self.seq = seq
        self.prev_seq = prev_seq
        self.bids = bids
        self.asks = asks
        self.trades = trades

    def message(self) -> Message:
        """The update as feed subscribers get it: one message, or its parts for a big one."""
        if len(self.bids) + len(self.asks) <= PART_LEVELS and len(self.trades) <= PART_TRADES:
            return encode({"type": "update", "symbol": self.symbol, "seq": self.seq, "prevSeq": self.prev_seq,
                           "bids": self.bids, "asks": self.asks, "trades": self.trades})
        head = {"type": "update", "symbol": self.symbol, "seq": self.seq, "prevSeq": self.prev_seq}
        return _parts(head, *_removals_first(self.bids, self.asks), self.trades)


class BookMirror:
    """Every symbol's durable mirror, and the gate readers wait at for a seq to become durable."""

    def __init__(self) -> None:
        self.symbols: dict[str, SymbolMirror] = {}
        self.durable = SeqGate()

    @property
    def durable_seq(self) -> int:
        return self.durable.seq

    def load(self, symbol: str, seq: int, bids: Iterable[LevelChange], asks: Iterable[LevelChange],
             trades: Iterable[dict[str, Any]]) -> None:
        """Start a symbol's mirror from a recovered engine (the log on disk is its durable state)."""
        mirror = self.symbols[symbol] = SymbolMirror(seq)
        mirror.bids.update((c.price, (c.qty, c.orders)) for c in bids if c.qty)  # sorted once, not per level
        mirror.asks.update((c.price, (c.qty, c.orders)) for c in asks if c.qty)
        for trade in trades:
            mirror.trades.append(trade)
            mirror.last = trade["price"]
        self.durable.advance(seq)

    def add_symbol(self, symbol: str, seq: int) -> None:
        if symbol not in self.symbols:
            self.symbols[symbol] = SymbolMirror(seq)

    def apply(self, outcomes: list[Outcome], listening: Container[str]
              ) -> tuple[list[SymbolUpdate], list[OrderState]]:
        """Move the mirror by one durable batch. Returns what each symbol's subscribers are to be told, and
        the changed orders of the accounts in `listening` (only theirs are built: most have nobody)."""
        batch: dict[str, _SymbolBatch] = {}
        private: list[OrderState] = []
        for outcome in outcomes:
            if listening:
                result = outcome.result
                if result is not None and outcome.error is None and result.account in listening:
                    private.append(result)
                if outcome.quoted and outcome.quoted[0].account in listening:
                    private.extend(outcome.quoted)
                if outcome.changed:
                    private.extend(outcome.updates_of(listening))
            for change in outcome.book:
                entry = batch.get(change.symbol) or batch.setdefault(change.symbol, _SymbolBatch())
                entry.levels[(change.side, change.price)] = change
                entry.seq = outcome.seq
            for trade in outcome.trades:
                entry = batch.get(trade.symbol) or batch.setdefault(trade.symbol, _SymbolBatch())
                entry.trades.append(public_trade(trade))
                entry.seq = outcome.seq
        updates = [self._apply_symbol(symbol, entry) for symbol, entry in batch.items()]
        if outcomes:
            self.durable.advance(outcomes[-1].seq)  # its readers run after this batch is sent
        return updates, private

    def _apply_symbol(self, symbol: str, entry: "_SymbolBatch") -> SymbolUpdate:
        mirror = self.symbols.get(symbol)
        if mirror is None:
            mirror = self.symbols[symbol] = SymbolMirror(0)
        bids: Levels = []
        asks: Levels = []
        for change in entry.levels.values():
            mirror.apply(change)
            (bids if change.side == "buy" else asks).append([change.price, change.qty, change.orders])
        if entry.trades:
            mirror.trades.extend(entry.trades)
            mirror.last = entry.trades[-1].price
        # The mirror's seq moves before anything is sent: a send may resync a slow subscriber, and the
        # snapshot it then gets holds this batch's levels, so it must carry this batch's seq.
        prev, mirror.seq = mirror.seq, entry.seq
        return SymbolUpdate(symbol, entry.seq, prev, bids, asks, entry.trades)

    def snapshot(self, symbol: str) -> tuple[bytes, Deeper | None]:
        """The first message of a snapshot: the best SLICE_LEVELS levels of each side and the recent
        trades; and, for a deeper book, where the rest starts (for `deeper`), else None."""
        mirror = self.symbols[symbol]
        bids, asks = mirror.top(SLICE_LEVELS)
        head = {"type": "snapshot", "symbol": symbol, "seq": mirror.seq, "bids": bids, "asks": asks,
                "trades": list(mirror.trades)}
        rest = Deeper(bids[-1][0] if len(mirror.bids) > SLICE_LEVELS else None,
                      asks[-1][0] if len(mirror.asks) > SLICE_LEVELS else None)
        if rest.done:
            return encode(head), None
        head["deeper"] = True
        return encode(head), rest

    def deeper(self, symbol: str, rest: Deeper) -> bytes:
        """The next SLICE_LEVELS levels of each side past `rest`, as an update at the symbol's seq (seq
        and prevSeq both, `deeper` false on the last); `rest` moves past them, and is done once both
        sides are sent whole.

        It is built from the book as it is now, so it must be sent after every update of the symbol
        queued before it (the subscriber builds it only when nothing else waits): the client then holds
        this seq, and levels that changed since the first message came to it in those updates, as totals,
        which this agrees with."""
        mirror = self.symbols[symbol]
        bids, asks = mirror.below(rest.bid, rest.ask, SLICE_LEVELS)
        rest.bid = bids[-1][0] if len(bids) == SLICE_LEVELS and bids[-1][0] != mirror.bids.peekitem(0)[0] else None
        rest.ask = asks[-1][0] if len(asks) == SLICE_LEVELS and asks[-1][0] != mirror.asks.peekitem(-1)[0] else None
        return encode({"type": "update", "symbol": symbol, "seq": mirror.seq, "prevSeq": mirror.seq,
                       "bids": bids, "asks": asks, "trades": [], "deeper": not rest.done})

    def book(self, symbol: str, depth: int) -> dict[str, Any]:
        mirror = self.symbols[symbol]
        bids, asks = mirror.top(depth)
        return {
            "symbol": symbol,
            "seq": mirror.seq,
            "bids": [{"price": p, "qty": q, "orders": n} for p, q, n in bids],
            "asks": [{"price": p, "qty": q, "orders": n} for p, q, n in asks],
        }


Levels = list[list[int]]
Message = bytes | tuple[bytes, ...]
"""A feed message, or one in parts that are sent together."""


def _parts(head: dict[str, Any], bids: list[Levels], asks: list[Levels], trades: list[Any]
           ) -> bytes | tuple[bytes, ...]:
    """One update as messages of at most PART_LEVELS levels and PART_TRADES trades each:
    the message itself when it fits in one, else a tuple of its parts (queued and sent as one).

    `bids` and `asks` are the levels already cut in the pieces each part takes (the i-th of each go in
    part i). The first part is `head` with `more`, the number of parts after it, when there are any;
    those are updates with `seq` and `prevSeq` both the head's `seq`. A client that applies updates by
    the usual rules (prevSeq must be the seq held; levels are totals) so rebuilds the whole message with
    no code of its own for parts, and a part lost in a resync is a resync as ever.
    """
    count = max(len(bids), len(asks), -(-len(trades) // PART_TRADES), 1)
    seq = head["seq"]
    parts = []
    for i in range(count):
        start = head if i == 0 else {"type": "update", "symbol": head["symbol"], "seq": seq, "prevSeq": seq}
        message = {**start, "bids": bids[i] if i < len(bids) else [], "asks": asks[i] if i < len(asks) else [],
                   "trades": trades[i * PART_TRADES:(i + 1) * PART_TRADES]}
        if i == 0 and count > 1:
            message["more"] = count - 1
        parts.append(encode(message))
    return parts[0] if count == 1 else tuple(parts)


def _removals_first(bids: Levels, asks: Levels) -> tuple[list[Levels], list[Levels]]:
    """An update's levels in pieces of PART_LEVELS, the levels that go before those that come or change.
    A reader that shows the book between parts then never sees it crossed: while levels go, its prices
    are some of the old book's; once they have gone, some of the new book's."""
    sided = [(True, level) for level in bids] + [(False, level) for level in asks]
    changes = [change for change in sided if change[1][1] == 0] + [change for change in sided if change[1][1]]
    pieces: tuple[list[Levels], list[Levels]] = ([], [])
    for start in range(0, len(changes), PART_LEVELS):
        piece = changes[start:start + PART_LEVELS]
        pieces[0].append([level for is_bid, level in piece if is_bid])
        pieces[1].append([level for is_bid, level in piece if not is_bid])
    return pieces


class _SymbolBatch:
    """What one durable batch did to one symbol: final level totals and trades, in order."""

    __slots__ = ("levels", "trades", "seq")

    def __init__(self) -> None:
        self.levels: dict[tuple[str, int], LevelChange] = {}
        self.trades: list[PublicTrade] = []
        self.seq = 0
