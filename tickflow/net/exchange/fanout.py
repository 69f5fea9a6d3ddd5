"""Subscriber fan-out: each WebSocket's bounded buffers, and the feed that fills them from durable batches.

No sockets here: a gateway drains a subscriber (`next_message`) and closes its connection when asked
(`closer`), so the rules for slow consumers and lost updates are tested without a network.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Callable, Iterable

from tickflow.core.types import LevelChange, OrderState, Outcome
from tickflow.net.exchange.mirror import BookMirror, Deeper, Message
from tickflow.net.wire.answers import encode

log = logging.getLogger(__name__)

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
UPDATE_LIST = 1000
"""The most order updates one `orders` message carries: a sweep of many more comes as several, each well
under what a client reads in one message."""
MAX_KEPT_BYTES = 64 << 20
"""Bytes of answers and own-order updates that may wait for a client, however it reads, before it is
closed (1008): a sweep of 100,000 of one account's orders queues about 35 MB of updates."""

class Subscriber:
    """One WebSocket connection: its symbols, its account and its own bounded send buffer."""

    def __init__(self, feed: "Feed", closer: Callable[[int, bytes], None] | None = None) -> None:
        self.feed = feed
        self.closer = closer
        """Closes the connection with a code and a reason (the gateway's); None where there is none (tests)."""
        self.symbols: set[str] = set()
        self.account: str | None = None
        self.update_lists = False
        """The account's order updates come as lists, one message per durable batch (`"updates": "lists"`)."""
        # Feed data: (its symbol, or None, a message or a message in parts sent together, its size).
        self.buffer: deque[tuple[str | None, Message, int]] = deque()
        self.buffered = 0
        """Bytes in `buffer`."""
        self.snapshot_bytes: dict[str, int] = {}
        """The size of the last snapshot of each symbol subscribed to: what a resync would queue."""
        self.snapshots_total = 0
        """The sum of `snapshot_bytes`, kept as it changes: `send` reads it for every message."""
        self.deeper: dict[str, Deeper] = {}
        """The snapshots still being sent, by symbol: their next slices are built as the writer takes them."""
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
        if ((pending >= limit and (self.blocked or pending >= 8 * limit))
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
        message, rest = self.feed.snapshot(symbol)
        if rest is None:
            self.deeper.pop(symbol, None)
        else:
            self.deeper[symbol] = rest
        size = len(message)
        self.snapshots_total += size - self.snapshot_bytes.get(symbol, 0)
        self.snapshot_bytes[symbol] = size
        self._queue(symbol, message, size)

    def forget(self, symbol: str) -> None:
        """Drop what is queued for `symbol` (unsubscribed, or about to be snapshotted again)."""
        self.buffer = deque(entry for entry in self.buffer if entry[0] != symbol)
        self.buffered = sum(entry[2] for entry in self.buffer)
        self.snapshots_total -= self.snapshot_bytes.pop(symbol, 0)
        self.deeper.pop(symbol, None)

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
        # The bytes are counted before the message is queued: one message can be large.
        if ((len(queue) >= MAX_REPLIES and (queue is self.replies or self._stalled()))
                or self.kept + len(message) > MAX_KEPT_BYTES):
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
        self.deeper.clear()
        self.replies.clear()
        self.private.clear()
        self.kept = 0
        self.wake.set()
        if self.closer is not None:
            self.closer(code, why)

    def _resync(self) -> None:
        now = asyncio.get_running_loop().time()
        self.resyncs.append(now)
        while self.resyncs and now - self.resyncs[0] > RESYNC_WINDOW:
            self.resyncs.popleft()
        self.buffer.clear()
        self.buffered = 0
        self.deeper.clear()
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

    def next_message(self) -> str | bytes | Message | None:
        """Take the next message to write, answers and own-order updates before feed data, and the next
        slice of a deep snapshot only when nothing else waits; None when nothing does. The writer sets
        `blocked` while the socket takes it and counts it in `sent`."""
        if self.replies or self.private:
            message = (self.replies or self.private).popleft()
            self.kept -= len(message)
            return message
        if self.buffer:
            _, feed_message, size = self.buffer.popleft()
            self.buffered -= size
            return feed_message
        if self.deeper:
            # Built now, from the book as it is: every update queued before it has been taken, so the
            # client holds the symbol's seq, which this slice carries.
            symbol, rest = next(iter(self.deeper.items()))
            message = self.feed.mirror.deeper(symbol, rest)
            if rest.done:
                del self.deeper[symbol]
            return message
        return None


class Feed:
    """Publishes durable batches to subscribers and answers snapshot and book reads."""

    def __init__(self, buffer_messages: int = BUFFER_MESSAGES, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.buffer_messages = buffer_messages
        self.buffer_bytes = buffer_bytes
        self.mirror = BookMirror()
        self.mirrors = self.mirror.symbols
        """Every symbol's durable mirror, by name (the mirror's own dict)."""
        self.subscribers: set[Subscriber] = set()
        self.by_symbol: dict[str, set[Subscriber]] = {}
        self.by_account: dict[str, set[Subscriber]] = {}
        self.stats_resyncs = 0

    @property
    def durable_seq(self) -> int:
        """The last sequence number whose record is durable and published."""
        return self.mirror.durable_seq

    # ------------------------------------------------------------------ state

    def load(self, symbol: str, seq: int, bids: Iterable[LevelChange], asks: Iterable[LevelChange],
             trades: Iterable[dict[str, Any]]) -> None:
        """Start a symbol's mirror from a recovered engine (the log on disk is its durable state)."""
        self.mirror.load(symbol, seq, bids, asks, trades)
        self.by_symbol.setdefault(symbol, set())

    def publish(self, outcomes: list[Outcome]) -> None:
        """Sequencer listener: called with each durable batch, in order."""
        updates, private = self.mirror.apply(outcomes, self.by_account)
        for update in updates:
            subs = self.by_symbol.get(update.symbol)
            if subs:
                message = update.message()
                for sub in subs:
                    sub.send(update.symbol, message)
        if private:
            self._publish_private(private)

    def _publish_private(self, private: list[OrderState]) -> None:
        """Each account's order updates to its connections: one `order` message per update, or, for those
        that asked for lists, `orders` messages of up to UPDATE_LIST of them (one per durable batch)."""
        by_account: dict[str, list[OrderState]] = {}
        for state in private:
            by_account.setdefault(state.account, []).append(state)
        for account, states in by_account.items():
            listeners = self.by_account.get(account)
            if not listeners:
                continue
            each: list[bytes] | None = None
            lists: list[bytes] | None = None
            for sub in listeners:
                if sub.update_lists:
                    if lists is None:
                        lists = [encode({"type": "orders", "orders": states[i:i + UPDATE_LIST]})
                                 for i in range(0, len(states), UPDATE_LIST)]
                    for message in lists:
                        sub.private_update(message)
                else:
                    if each is None:
                        each = [encode({"type": "order", "order": state}) for state in states]
                    for message in each:
                        sub.private_update(message)

    def add_symbol(self, symbol: str, seq: int) -> None:
        self.mirror.add_symbol(symbol, seq)
        self.by_symbol.setdefault(symbol, set())

    # ------------------------------------------------------------------ reads

    async def wait_durable(self, seq: int, timeout: float = 10.0) -> None:
        """Return once everything up to `seq` is durable, so a read never shows undurable state."""
        await self.mirror.durable.wait(seq, timeout)

    def snapshot(self, symbol: str) -> tuple[bytes, Deeper | None]:
        """A snapshot's first message, and where the rest of a deep book starts (None: it was all)."""
        return self.mirror.snapshot(symbol)

    def book(self, symbol: str, depth: int) -> dict[str, Any]:
        return self.mirror.book(symbol, depth)

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
        self.by_symbol.setdefault(symbol, set()).add(sub)
        sub.send_snapshot(symbol)

    def unsubscribe(self, sub: Subscriber, symbol: str) -> None:
        sub.symbols.discard(symbol)
        sub.forget(symbol)
        self.by_symbol.get(symbol, set()).discard(sub)

    def authenticate(self, sub: Subscriber, account: str | None, updates: bool | str = True) -> None:
        """Name the connection's account (None signs it out); with `updates` (True, or "lists") it also
        receives its orders' changes."""
        if sub.account is not None:
            subs = self.by_account.get(sub.account)
            if subs:
                subs.discard(sub)
                if not subs:
                    del self.by_account[sub.account]
        sub.account = account
        sub.update_lists = updates == "lists"
        if account is not None and updates:
            self.by_account.setdefault(account, set()).add(sub)


def _size(message: Message) -> int:
    return len(message) if isinstance(message, bytes) else sum(map(len, message))
