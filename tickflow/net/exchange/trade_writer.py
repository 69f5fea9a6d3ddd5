"""Copies durable trades, and the final states of the orders they finished, into SQLite in batches, off the
sequencer's path. Each commit also moves SQLite's orders watermark (store/trades.py) to the seq it covers,
so a start knows from which record on to re-derive finished orders.

Trades wait up to LINGER seconds to share a transaction, unless a reader (GET /trades, /bars, /fills)
is waiting for them, so no answer waits for the linger: each commit is two hand-offs to the SQLite
thread. Each commit also rewrites the last page of every index an inserted trade touches (one per
account that traded, on each side), so larger commits make each trade cheaper (bench/bench_bars.py
measures it; docs/decisions.md says why LINGER is what it is). A failed insert (a full disk) is
retried, in order, with a growing pause; readers wait rather than see a gap where an answered fill
should be.

What an outage can cost is bounded: a transaction holds at most MAX_CHUNK trades, so a backlog is
retried in chunks of that size, not as one ever larger transaction; and at most MAX_BUFFERED trades
wait in memory. Past that the writer stops copying for the rest of the run (`behind`): the log holds
every trade, and the next start re-derives from it what SQLite lacks (store/recovery.py), as after a
crash. Readers then get a 503 at once, saying so, rather than a history with a hole in it.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict

import msgspec

from tickflow.core.orders import finished
from tickflow.core.types import OrderState, Outcome, Trade
from tickflow.net.exchange.waits import SeqGate
from tickflow.store.trades import TradeStore

log = logging.getLogger(__name__)

LINGER = 0.1
FIRST_RETRY_DELAY = 0.1
MAX_RETRY_DELAY = 5.0
RECENT_ORDERS = 100_000
"""Finished orders kept in memory once SQLite holds them too (a few hundred bytes each)."""
MAX_CHUNK = 10_000
"""Trades in one transaction at most."""
MAX_BUFFERED = int(os.environ.get("TICKFLOW_MAX_TRADES_BUFFERED") or 200_000)
"""Trades held in memory while SQLite refuses them (a few hundred bytes each), before the writer leaves
them to the log and the next start. The environment variable TICKFLOW_MAX_TRADES_BUFFERED sets it: a
test seam, so a server test reaches the bound with a few hundred trades."""


class TradeWriter:
    """A sequencer listener: queues each durable batch's trades; a task inserts them."""

    def __init__(self, store: TradeStore, flushed_seq: int = 0, linger: float = LINGER,
                 max_buffered: int = MAX_BUFFERED, max_chunk: int = MAX_CHUNK) -> None:
        self.store = store
        self.linger = linger
        self.max_buffered = max_buffered
        self.max_chunk = max_chunk
        self.behind: str | None = None
        """Set once the writer has stopped copying trades for this run (the next start catches up)."""
        self.pending: list[Trade] = []
        self.pending_orders: list[OrderState] = []
        self.unflushed: dict[int, OrderState] = {}
        self.recent: OrderedDict[int, OrderState] = OrderedDict()
        """The last RECENT_ORDERS finished orders SQLite holds, oldest first: a cancel of an order that has
        just filled (the usual stale cancel) is answered from memory, not by a read on SQLite's thread."""
        """The finished orders published and not yet committed, by id (`finished_orders` reads them here)."""
        self.pending_seq = flushed_seq
        self.flushed = SeqGate(flushed_seq)
        """Every trade made, and every order finished, by a command up to its seq is in SQLite."""
        self.wake = asyncio.Event()
        self.urgent = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.stopping = False
        self.error: str | None = None
        """Why the last insert failed, while trades wait to be retried (GET /health shows it)."""
        self.retry_delay = FIRST_RETRY_DELAY

    def publish(self, outcomes: list[Outcome]) -> None:
        if self.behind is not None:
            return  # the log holds them; the next start puts them in SQLite
        for outcome in outcomes:
            if outcome.trades:
                self.pending.extend(outcome.trades)
            done = finished(outcome)
            if done:
                self.pending_orders.extend(done)
                for state in done:
                    self.unflushed[state.order_id] = state
        if outcomes:
            self.pending_seq = outcomes[-1].seq
        self.wake.set()

    @property
    def flushed_seq(self) -> int:
        return self.flushed.seq

    async def finished_orders(self, order_ids: list[int]) -> dict[int, OrderState]:
        """The final states of those of `order_ids` that a published (durable) batch finished, by id: from
        memory while their commit is pending, else from SQLite. No waiting: a state leaves memory only once
        SQLite holds it, so an order missing from both was not finished by any batch published so far.
        TimeoutError once the writer has left the rest of this run to the log (`behind`): an order missing
        then may be one SQLite never got."""
        unflushed, recent = self.unflushed, self.recent
        found: dict[int, OrderState] = {}
        for i in order_ids:
            state = unflushed.get(i) or recent.get(i)
            if state is not None:
                # A state, not an answer: without the fills of the command that finished it (as SQLite keeps it).
                found[i] = msgspec.structs.replace(state, fills=[]) if state.fills else state
        rest = [i for i in order_ids if i not in found]
        if rest:
            found.update(await self.store.orders(rest))
            if self.behind is not None and len(found) < len(order_ids):
                raise TimeoutError(self.behind)
        return found

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="trade-writer")

    async def caught_up(self, seq: int, timeout: float = 10.0) -> None:
        """Return once SQLite holds every trade up to `seq`, so a read sees what an answer showed."""
        if seq <= self.flushed_seq:
            return
        if self.behind is not None:
            raise TimeoutError(self.behind)
        self.urgent.set()
        await self.flushed.wait(seq, timeout)

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            if not self.flushed.waiting and not self.stopping and self.linger > 0:
                try:
                    await asyncio.wait_for(self.urgent.wait(), self.linger)
                except TimeoutError:
                    pass
            self.wake.clear()
            self.urgent.clear()
            if self.behind is None and (self.pending or self.flushed_seq < self.pending_seq):
                # Trades that come in during the insert are appended after the chunk: it stays at the front.
                batch = self.pending[:self.max_chunk]
                # A command's trades may straddle two chunks: a chunk covers up to the seq before the next
                # trade's, and takes the orders finished up to there (published in seq order).
                upto = self.pending[len(batch)].seq - 1 if len(self.pending) > len(batch) else self.pending_seq
                taken = 0
                while taken < len(self.pending_orders) and self.pending_orders[taken].seq <= upto:
                    taken += 1
                orders = self.pending_orders[:taken]
                if not await self._insert(batch, orders, upto):
                    if self.stopping:  # the log still holds them: the next start inserts them
                        return
                    if len(self.pending) + len(self.pending_orders) > self.max_buffered:
                        self._give_up()
                        continue
                    self.wake.set()  # in order, and not flushed: readers wait for them
                    await asyncio.sleep(self.retry_delay)
                    self.retry_delay = min(self.retry_delay * 2, MAX_RETRY_DELAY)
                    continue
                del self.pending[:len(batch)]
                del self.pending_orders[:taken]
                recent = self.recent
                for state in orders:  # only now: a reader that misses them here finds them in SQLite
                    recent[state.order_id] = self.unflushed.pop(state.order_id, state)
                while len(recent) > RECENT_ORDERS:
                    recent.popitem(last=False)
                self.flushed.advance(upto)
            if self.behind is None and (self.pending or self.flushed_seq < self.pending_seq):
                self.wake.set()  # more came in during the insert: they get their own turn
            elif self.stopping:
                return

    def _give_up(self) -> None:
        self.behind = (f"SQLite refused trades until more than {self.max_buffered} waited; they are in the log, "
                       "and the next start puts them in SQLite: restart once it takes writes again")
        log.error("%s (the trades from seq %d on)", self.behind, self.flushed_seq + 1)
        self.error = self.behind
        self.pending = []
        self.pending_orders = []
        self.unflushed.clear()  # bounded memory: finished_orders says it cannot tell any more
        self.recent.clear()

    async def _insert(self, batch: list[Trade], orders: list[OrderState], seq: int) -> bool:
        try:
            await self.store.insert(batch, orders, seq)
        except Exception as e:
            if self.error is None:
                log.exception("writing %d trades and %d finished orders to SQLite failed; retrying (the log "
                              "holds them)", len(batch), len(orders))
            self.error = f"writing trades to SQLite failed: {e}"
            return False
        if self.error is not None and self.behind is None:
            log.warning("SQLite takes trades again")
            self.error = None
            self.retry_delay = FIRST_RETRY_DELAY
        return True

    async def stop(self) -> None:
        self.stopping = True
        self.wake.set()
        self.urgent.set()
        if self.task is not None:
            await self.task
