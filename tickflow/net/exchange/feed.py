"""The market-data feed: a mirror of the books as of the last durable batch, and its subscribers.

The sequencer may match a batch before the previous one is synced, so the engine's books can be
ahead of what is durable. Everything the outside world reads (snapshots, `GET /book`) comes from
this mirror instead, which only moves when a durable batch is published: a snapshot and the
updates after it always fit together.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Iterable

from aiohttp import WSMsgType, web

from tickflow.core.types import LevelChange, OrderState, Outcome
from tickflow.net.wire.answers import PublicTrade, encode, public_trade

log = logging.getLogger(__name__)

RECENT_TRADES = 50
BUFFER_MESSAGES = 2048
"""Messages a subscriber may have queued before it counts as slow."""
BUFFER_BYTES = 4 << 20
"""Bytes of feed data a subscriber may have queued beyond fresh snapshots of its symbols, before the next
message finds it slow: the messages alone do not bound memory, as one update of a sweep can run to megabytes."""
MAX_RESYNCS = 3
"""Slow-consumer resyncs tolerated within RESYNC_WINDOW seconds before the connection is closed."""
RESYNC_WINDOW = 10.0
MAX_REPLIES = 4096
"""Answers that may wait for a client, before it is closed (1008): it sends without reading them. As
many updates of its own orders may wait for a client whose socket has taken nothing for STALL seconds;
more may wait for one that reads: one order sweeping thousands of an account's orders queues an update
for each at once."""
STALL = 2.0
MAX_KEPT_BYTES = 64 << 20
"""Bytes of answers and own-order updates that may wait for a client, however it reads, before it is
closed (1008): a sweep of 100,000 of one account's orders queues about 35 MB of updates."""
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


class Subscriber:
    """One WebSocket connection: its symbols, its account and its own bounded send buffer."""

    def __init__(self, feed: "Feed", ws: web.WebSocketResponse,
                 transport: asyncio.Transport | None = None) -> None:
        self.feed = feed
        self.ws = ws
        self.transport = transport
        self.symbols: set[str] = set()
        self.account: str | None = None
        # Feed data: (its symbol, or None, a message or a message in parts sent together, its size).
        self.buffer: deque[tuple[str | None, Message, int]] = deque()
        self.buffered = 0
        """Bytes in `buffer`."""
        self.snapshot_bytes: dict[str, int] = {}
        """The size of the last snapshot of each symbol subscribed to: what a resync would queue."""
        self.snapshots_total = 0
        """The sum of `snapshot_bytes`, kept as it changes: `send` reads it for every message."""
        self.replies: deque[str | bytes] = deque()
        self.private: deque[str | bytes] = deque()
        self.kept = 0
        """Bytes (characters for text) in `replies` and `private`."""
        self.sent = 0
        """Messages written to the socket so far: the writer's progress, read by `_stalled`."""
        self._progress = (-1, 0.0)
        """(`sent`, when it was last seen to change), for `_stalled`."""
        self.wake = asyncio.Event()
        self.resyncs: deque[float] = deque()
        self.closed = False
        self.blocked = False
        """True while the writer waits for the socket to drain (the client is not reading)."""

    def send(self, symbol: str, message: Message) -> None:
        """Queue one feed message (a tuple of parts is one message); a full buffer is dropped and
        replaced by a resync, never waited for."""
        if self.closed:
            return
        pending = len(self.buffer)
        limit = self.feed.buffer_messages
        # A burst (one batch can touch hundreds of an account's orders) is not slowness; a buffer
        # that grows while the socket itself is backed up is. Bytes are bounded either way, but what
        # is queued, not the message: one sweep's update can be bigger than the bound by itself.
        if (pending >= limit and (self.blocked or pending >= 8 * limit)
                or self.buffered > self.feed.buffer_bytes + self.snapshots_total):
            self._resync()
            return
        self._queue(symbol, message, _size(message))

    def send_snapshot(self, symbol: str) -> None:
        """Queue a fresh snapshot of `symbol` in place of what is still queued for it: a client that
        subscribes again wants the book as it is now, and the snapshot and the updates after it are that."""
        if self.closed:
            return
        if any(entry[0] == symbol for entry in self.buffer):
            self.forget(symbol)
        message = self.feed.snapshot(symbol)
        size = _size(message)
        self.snapshots_total += size - self.snapshot_bytes.get(symbol, 0)
        self.snapshot_bytes[symbol] = size
        self._queue(symbol, message, size)

    def forget(self, symbol: str) -> None:
        """Drop what is queued for `symbol` (unsubscribed, or about to be snapshotted again)."""
        self.buffer = deque(entry for entry in self.buffer if entry[0] != symbol)
        self.buffered = sum(entry[2] for entry in self.buffer)
        self.snapshots_total -= self.snapshot_bytes.pop(symbol, 0)

    def _queue(self, symbol: str | None, message: Message, size: int) -> None:
        self.buffer.append((symbol, message, size))
        self.buffered += size
        self.wake.set()

    def reply(self, message: str | bytes) -> None:
        """Queue an answer to this connection's own request; a client that sends without reading its
        answers is closed once MAX_REPLIES of them wait, rather than grow this process's memory."""
        self._keep(self.replies, message, b"too many unread answers: read them before sending more")

    def private_update(self, message: str | bytes) -> None:
        """Queue an update of this account's own orders. Not feed data a snapshot replaces: a fill
        dropped in a resync would be lost to its owner, so it is kept like an answer (sent after the
        answers waiting, before the feed), and a client that never reads is closed instead."""
        self._keep(self.private, message, b"too many unread order updates: read them")

    def _keep(self, queue: deque[str | bytes], message: str | bytes, why: bytes) -> None:
        if self.closed:
            return
        # Answers come one per request, so many waiting means a client that sends without reading.
        # Updates of its own orders come in bursts (one sweep can fill thousands at once): only a
        # socket that has taken nothing for STALL seconds says the client is not reading them.
        if (len(queue) >= MAX_REPLIES and (queue is self.replies or self._stalled())
                or self.kept > MAX_KEPT_BYTES):
            log.info("closing a WebSocket client that does not read what it must not lose")
            self.close(1008, why)
            return
        queue.append(message)
        self.kept += len(message)
        self.wake.set()

    def _stalled(self) -> bool:
        """True when the socket has taken nothing for STALL seconds, as far as the calls so far saw."""
        now = asyncio.get_running_loop().time()
        if self._progress[0] != self.sent:
            self._progress = (self.sent, now)
            return False
        return now - self._progress[1] >= STALL

    def close(self, code: int, why: bytes) -> None:
        """Stop sending to this connection and close it."""
        self.closed = True
        self.buffer.clear()
        self.buffered = 0
        self.replies.clear()
        self.private.clear()
        self.kept = 0
        self.wake.set()
        asyncio.ensure_future(self._drop(code, why))

    def _resync(self) -> None:
        now = asyncio.get_running_loop().time()
        self.resyncs.append(now)
        while self.resyncs and now - self.resyncs[0] > RESYNC_WINDOW:
            self.resyncs.popleft()
        self.buffer.clear()
        self.buffered = 0
        self.snapshot_bytes.clear()
        self.snapshots_total = 0
        self.feed.stats_resyncs += 1
        if len(self.resyncs) > MAX_RESYNCS:
            log.info("closing a WebSocket client that keeps falling behind")
            self.close(1013, b"too slow: fell behind the feed")
            return
        notice = encode({"type": "resync", "reason": "slow consumer"})
        self._queue(None, notice, len(notice))
        for symbol in sorted(self.symbols):
            self.send_snapshot(symbol)

    async def _drop(self, code: int, why: bytes) -> None:
        """Close with `code`; a peer that does not read cannot take the close frame either, so abort."""
        try:
            await asyncio.wait_for(self.ws.close(code=code, message=why), 1.0)
        except (asyncio.TimeoutError, ConnectionError, RuntimeError):
            pass
        if self.transport is not None:
            self.transport.abort()

    async def write_loop(self) -> None:
        """Drain this connection's buffers; only this connection waits on its socket."""
        send = self.ws.send_frame
        text = WSMsgType.TEXT
        try:
            while not self.closed:
                await self.wake.wait()
                self.wake.clear()
                while self.replies or self.private or self.buffer:
                    message: str | Message
                    if self.replies or self.private:
                        message = (self.replies or self.private).popleft()
                        self.kept -= len(message)
                    else:
                        _, message, size = self.buffer.popleft()
                        self.buffered -= size
                    # Encoded once as UTF-8 JSON bytes, shared by every subscriber, sent as a text frame.
                    # send_frame only suspends when the transport is over its high-water mark.
                    self.blocked = True
                    if isinstance(message, tuple):  # a message in parts: nothing comes between them
                        for part in message:
                            await send(part, text)
                    else:
                        await send(message if isinstance(message, bytes) else message.encode(), text)
                    self.blocked = False
                    self.sent += 1
        except (ConnectionError, RuntimeError, asyncio.CancelledError):
            pass
        finally:
            self.closed = True


class Feed:
    """Publishes durable batches to subscribers and answers snapshot and book reads."""

    def __init__(self, buffer_messages: int = BUFFER_MESSAGES, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.buffer_messages = buffer_messages
        self.buffer_bytes = buffer_bytes
        self.mirrors: dict[str, SymbolMirror] = {}
        self.subscribers: set[Subscriber] = set()
        self.by_symbol: dict[str, set[Subscriber]] = {}
        self.by_account: dict[str, set[Subscriber]] = {}
        self.durable_seq = 0
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []
        self.stats_resyncs = 0

    # ------------------------------------------------------------------ state

    def load(self, symbol: str, seq: int, bids: Iterable[LevelChange], asks: Iterable[LevelChange],
             trades: Iterable[dict[str, Any]]) -> None:
        """Start a symbol's mirror from a recovered engine (the log on disk is its durable state)."""
        mirror = self.mirrors[symbol] = SymbolMirror(seq)
        for change in (*bids, *asks):
            mirror.apply(change)
        for trade in trades:
            mirror.trades.append(trade)
            mirror.last = trade["price"]
        self.by_symbol.setdefault(symbol, set())
        self.durable_seq = max(self.durable_seq, seq)

    def publish(self, outcomes: list[Outcome]) -> None:
        """Sequencer listener: called with each durable batch, in order."""
        batch: dict[str, _SymbolBatch] = {}
        private: list[OrderState] = []
        listening = self.by_account
        for outcome in outcomes:
            if listening:  # only the orders of accounts with someone listening: most have nobody
                result = outcome.result
                if result is not None and outcome.error is None and result.account in listening:
                    private.append(result)
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
        if outcomes:
            self.durable_seq = outcomes[-1].seq
        for symbol, entry in batch.items():
            self._publish_symbol(symbol, entry)
        if private:
            for state in private:
                subs = self.by_account.get(state.account)
                if subs:
                    message = encode({"type": "order", "order": state})
                    for sub in subs:
                        sub.private_update(message)
        self._wake_waiters()

    def _publish_symbol(self, symbol: str, entry: "_SymbolBatch") -> None:
        mirror = self.mirrors.get(symbol)
        if mirror is None:
            mirror = self.mirrors[symbol] = SymbolMirror(0)
            self.by_symbol.setdefault(symbol, set())
        bids: list[list[int]] = []
        asks: list[list[int]] = []
        for change in entry.levels.values():
            mirror.apply(change)
            (bids if change.side == "buy" else asks).append([change.price, change.qty, change.orders])
        if entry.trades:
            mirror.trades.extend(entry.trades)
            mirror.last = entry.trades[-1].price
        # The mirror's seq moves before anything is sent: a send may resync a slow subscriber, and the
        # snapshot it then gets holds this batch's levels, so it must carry this batch's seq.
        prev, mirror.seq = mirror.seq, entry.seq
        subs = self.by_symbol.get(symbol)
        if subs:
            message: bytes | tuple[bytes, ...]
            if len(bids) + len(asks) <= PART_LEVELS and len(entry.trades) <= PART_TRADES:
                message = encode({"type": "update", "symbol": symbol, "seq": entry.seq, "prevSeq": prev,
                                  "bids": bids, "asks": asks, "trades": entry.trades})
            else:
                head = {"type": "update", "symbol": symbol, "seq": entry.seq, "prevSeq": prev}
                message = _parts(head, *_removals_first(bids, asks), entry.trades)
            for sub in subs:
                sub.send(symbol, message)

    def add_symbol(self, symbol: str, seq: int) -> None:
        if symbol not in self.mirrors:
            self.mirrors[symbol] = SymbolMirror(seq)
            self.by_symbol.setdefault(symbol, set())

    # ------------------------------------------------------------------ reads

    async def wait_durable(self, seq: int, timeout: float = 10.0) -> None:
        """Return once everything up to `seq` is durable, so a read never shows undurable state."""
        if seq <= self.durable_seq:
            return
        future = asyncio.get_running_loop().create_future()
        self._waiters.append((seq, future))
        await asyncio.wait_for(future, timeout)

    def _wake_waiters(self) -> None:
        if not self._waiters:
            return
        durable = self.durable_seq
        waiting = []
        for seq, future in self._waiters:
            if seq <= durable:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((seq, future))
        self._waiters = waiting

    def snapshot(self, symbol: str) -> bytes | tuple[bytes, ...]:
        """The whole book and the recent trades: one message, or its parts for a book over PART_LEVELS."""
        mirror = self.mirrors[symbol]
        bids, asks = mirror.sorted()
        head = {"type": "snapshot", "symbol": symbol, "seq": mirror.seq}
        return _parts(head, _halves(bids), _halves(asks), list(mirror.trades))

    def book(self, symbol: str, depth: int) -> dict[str, Any]:
        mirror = self.mirrors[symbol]
        bids, asks = mirror.sorted(depth)
        return {
            "symbol": symbol,
            "seq": mirror.seq,
            "bids": [{"price": p, "qty": q, "orders": n} for p, q, n in bids],
            "asks": [{"price": p, "qty": q, "orders": n} for p, q, n in asks],
        }

    # ------------------------------------------------------------------ subscribers

    def attach(self, sub: Subscriber) -> None:
        self.subscribers.add(sub)

    def detach(self, sub: Subscriber) -> None:
        sub.closed = True
        sub.wake.set()
        self.subscribers.discard(sub)
        for symbol in sub.symbols:
            self.by_symbol.get(symbol, set()).discard(sub)
        if sub.account is not None:
            subs = self.by_account.get(sub.account)
            if subs is not None:
                subs.discard(sub)
                if not subs:
                    del self.by_account[sub.account]

    def subscribe(self, sub: Subscriber, symbol: str) -> None:
        sub.symbols.add(symbol)
        self.by_symbol[symbol].add(sub)
        sub.send_snapshot(symbol)

    def unsubscribe(self, sub: Subscriber, symbol: str) -> None:
        sub.symbols.discard(symbol)
        sub.forget(symbol)
        self.by_symbol.get(symbol, set()).discard(sub)

    def authenticate(self, sub: Subscriber, account: str | None, updates: bool = True) -> None:
        """Name the connection's account (None signs it out); with `updates` it also receives its
        orders' changes."""
        if sub.account is not None:
            subs = self.by_account.get(sub.account)
            if subs:
                subs.discard(sub)
                if not subs:
                    del self.by_account[sub.account]
        sub.account = account
        if account is not None and updates:
            self.by_account.setdefault(account, set()).add(sub)


Levels = list[list[int]]
Message = bytes | tuple[bytes, ...]
"""A feed message, or one in parts that are sent together."""


def _size(message: Message) -> int:
    return len(message) if isinstance(message, bytes) else sum(map(len, message))


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
