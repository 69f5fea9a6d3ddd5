"""The durable book mirror: every symbol's levels and recent trades as of the last durable batch.

The sequencer may match a batch before the previous one is synced, so the engine's books can be
ahead of what is durable. Everything the outside world reads (snapshots, `GET /book`) comes from
this mirror instead, which only moves when a durable batch is published: a snapshot and the
updates after it always fit together.
"""

from __future__ import annotations

from collections import deque
from typing import Any, Container, Iterable

from tickflow.core.types import LevelChange, OrderState, Outcome
from tickflow.net.exchange.waits import SeqGate
from tickflow.net.wire.answers import PublicTrade, encode, public_trade

RECENT_TRADES = 50
PART_LEVELS = 16_384
"""Levels in one market-data message at most; an update with more is sent in parts (`_parts`), and a
snapshot takes at most half of them from each side per part (so a side over 8,192 levels splits it).
A level is at most 54 bytes of JSON (a 10-digit price, totals below 2**63) and a trade 233 (a 16-character
symbol, 63-bit ids), so a part of PART_LEVELS levels and PART_TRADES trades stays under 1 MiB, whatever the
book: a client need not accept more (aiohttp's default limit is 4 MiB), while a whole book can hold up to
MAX_PRICE levels, tens of gigabytes."""
PART_TRADES = 512
"""Trades in one market-data message at most (a snapshot carries RECENT_TRADES, an update those of its batch)."""



class SymbolMirror:
    """One symbol's durable levels, the seq of its last update and its recent trades."""

    __slots__ = ("bids", "asks", "seq", "trades", "last")

    def __init__(self, seq: int) -> None:
        self.bids: dict[int, tuple[int, int]] = {}
        self.asks: dict[int, tuple[int, int]] = {}
        self.seq = seq
        self.trades: deque[PublicTrade | dict[str, Any]] = deque(maxlen=RECENT_TRADES)
        self.last: int | None = None

    def apply(self, change: LevelChange) -> None:
        levels = self.bids if change.side == "buy" else self.asks
        if change.qty:
            levels[change.price] = (change.qty, change.orders)
        else:
            levels.pop(change.price, None)

    def sorted(self, depth: int | None = None) -> tuple[list[list[int]], list[list[int]]]:
        bids = sorted(self.bids, reverse=True)[:depth] if depth else sorted(self.bids, reverse=True)
        asks = sorted(self.asks)[:depth] if depth else sorted(self.asks)
        return ([[p, *self.bids[p]] for p in bids], [[p, *self.asks[p]] for p in asks])

    def best(self) -> tuple[int | None, int | None]:
        return (max(self.bids) if self.bids else None, min(self.asks) if self.asks else None)


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
        for change in (*bids, *asks):
            mirror.apply(change)
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

    def snapshot(self, symbol: str) -> Message:
        """The whole book and the recent trades: one message, or its parts for a book over PART_LEVELS."""
        mirror = self.symbols[symbol]
        bids, asks = mirror.sorted()
        head = {"type": "snapshot", "symbol": symbol, "seq": mirror.seq}
        return _parts(head, _halves(bids), _halves(asks), list(mirror.trades))

    def book(self, symbol: str, depth: int) -> dict[str, Any]:
        mirror = self.symbols[symbol]
        bids, asks = mirror.sorted(depth)
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
    """One snapshot or update as messages of at most PART_LEVELS levels and PART_TRADES trades each:
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


def _halves(levels: Levels) -> list[Levels]:
    """One side of a snapshot, best first, in pieces of half a part: every part holds both sides' next
    levels, so the first shows the top of the book."""
    size = PART_LEVELS // 2
    return [levels[i:i + size] for i in range(0, len(levels), size)]


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
