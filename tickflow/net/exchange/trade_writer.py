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
"""

from __future__ import annotations

import asyncio
import logging

import msgspec

from tickflow.core.orders import finished
from tickflow.core.types import OrderState, Outcome, Trade
from tickflow.net.exchange.waits import SeqGate
from tickflow.store.trades import TradeStore

log = logging.getLogger(__name__)

LINGER = 0.1
FIRST_RETRY_DELAY = 0.1
MAX_RETRY_DELAY = 5.0


class TradeWriter:
    """A sequencer listener: queues each durable batch's trades; a task inserts them."""

    def __init__(self, store: TradeStore, flushed_seq: int = 0, linger: float = LINGER) -> None:
        self.store = store
        self.linger = linger
        self.pending: list[Trade] = []
        self.pending_orders: list[OrderState] = []
        self.unflushed: dict[int, OrderState] = {}
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

    def start(self) -> None:
        self.task = asyncio.create_task(self._run(), name="trade-writer")

    async def caught_up(self, seq: int, timeout: float = 10.0) -> None:
        """Return once SQLite holds every trade up to `seq`, so a read sees what an answer showed."""
        if seq <= self.flushed_seq:
            return
        self.urgent.set()
        await self.flushed.wait(seq, timeout)

    async def finished_orders(self, order_ids: list[int]) -> dict[int, OrderState]:
        """The final states of those of `order_ids` that a published (durable) batch finished, by id: from
        memory while their commit is pending, else from SQLite. No waiting: a state leaves memory only once
        SQLite holds it, so an order missing from both was not finished by any batch published so far."""
        unflushed = self.unflushed
        # A state, not an answer: without the fills of the command that finished it (as SQLite keeps it).
        found = {i: msgspec.structs.replace(unflushed[i], fills=[]) for i in order_ids if i in unflushed}
        rest = [i for i in order_ids if i not in found]
        if rest:
            found.update(await self.store.orders(rest))
        return found

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
            if self.pending or self.flushed_seq < self.pending_seq:
                batch, self.pending = self.pending, []
                orders, self.pending_orders = self.pending_orders, []
                seq = self.pending_seq
                if not await self._insert(batch, orders, seq):
                    if self.stopping:  # the log still holds them: the next start inserts them
                        return
                    self.pending = batch + self.pending  # in order, and not flushed: readers wait for them
                    self.pending_orders = orders + self.pending_orders
                    self.wake.set()
                    await asyncio.sleep(self.retry_delay)
                    self.retry_delay = min(self.retry_delay * 2, MAX_RETRY_DELAY)
                    continue
                for state in orders:  # only now: a reader that misses them here finds them in SQLite
                    self.unflushed.pop(state.order_id, None)
                self.flushed.advance(seq)
            if self.pending or self.flushed_seq < self.pending_seq:
                self.wake.set()  # more came in during the insert: they get their own turn
            elif self.stopping:
                return

    async def _insert(self, batch: list[Trade], orders: list[OrderState], seq: int) -> bool:
        try:
            await self.store.insert(batch, orders, seq)
        except Exception as e:
            if self.error is None:
                log.exception("writing %d trades and %d finished orders to SQLite failed; retrying (the log "
                              "holds them)", len(batch), len(orders))
            self.error = f"writing trades to SQLite failed: {e}"
            return False
        if self.error is not None:
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
