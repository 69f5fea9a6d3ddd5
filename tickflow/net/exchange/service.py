"""All a gateway may ask of the exchange: submit a command, read durable state, follow the feed.

The gateway (HTTP handlers, WebSocket sessions) knows the exchange only through this class, never its
engine, sequencer or store, so that it could one day run in a process of its own. Every read here
answers from durable state: the engine may be ahead of the disk while a batch's sync is in flight,
and nothing leaves the process before it is durable.
"""

from __future__ import annotations

import time
import heapq
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from tickflow.core.book import Order
from tickflow.core.engine import Engine
from tickflow.core.orders import state_of
from tickflow.core.types import AddSymbol, Amend, Cancel, Command, OrderState, Outcome, Reason, Rules, Side
from tickflow.net.exchange.fanout import Feed, Subscriber
from tickflow.net.exchange.sequencer import BadCommand, Durability, Sequencer, SequencerStopped
from tickflow.net.exchange.stats import Stats
from tickflow.net.exchange.snapshotter import Snapshotter
from tickflow.net.exchange.store_check import StoreCheck
from tickflow.net.exchange.trade_writer import TradeWriter
from tickflow.store.recovery import Recovery
from tickflow.store.trades import TradeStore

__all__ = ["ExchangeService", "Unavailable", "SequencerStopped", "BadCommand", "Subscriber", "Durability",
           "ExchangeMetrics"]

DURABLE_WAIT = 10.0
"""Seconds a read waits for the state it read to become durable, or SQLite to catch up, before a 503."""


def _order_id(order: Order) -> int:
    return order.order_id


class Unavailable(Exception):
    """The exchange cannot answer a read now (the log failed, or SQLite is behind): the gateway says 503."""


@dataclass(frozen=True)
class ExchangeMetrics:
    """What /metrics shows of the exchange, read at one moment."""

    queue_depth: int
    commands: int
    batches: int
    orders: int
    trades: int
    durable_seq: int
    subscribers: int
    resyncs: int
    buffered_bytes: int
    log_failed: bool
    batch_bounds: tuple[float, ...]
    batch_sizes: list[int]
    sync_bounds_seconds: tuple[float, ...]
    sync_counts: list[int]
    sync_seconds: float
    log_bytes: int = 0
    """Bytes of the log's segments on disk."""
    log_segments: int = 0
    snapshot_seq: int = 0
    snapshot_age_records: int = 0
    snapshot_age_seconds: float = 0.0
    snapshots_taken: int = 0
    snapshot_failures: int = 0
    store_check_failures: int = 0
    """Background integrity checks of the trade store that found it damaged (0 or 1 per run)."""
    client_order_ids: int = 0
    """clientOrderIds remembered (those inside the idempotency window)."""


class ExchangeService:
    """The sequencer, the durable mirror and the trade store behind one narrow surface."""

    def __init__(self, engine: Engine, sequencer: Sequencer, feed: Feed, store: TradeStore,
                 trade_writer: TradeWriter, snapshotter: Snapshotter | None = None,
                 recovery: Recovery | None = None, store_check: StoreCheck | None = None) -> None:
        self._engine = engine
        self._sequencer = sequencer
        self._feed = feed
        self._store = store
        self._trade_writer = trade_writer
        self._snapshotter = snapshotter
        self._recovery = recovery
        self._store_check = store_check

    # ------------------------------------------------------------------ commands

    async def submit(self, command: Command) -> Outcome:
        """Sequence `command`; its outcome once durable. Raises SequencerStopped (not taking commands)
        or BadCommand (it cannot be logged as given)."""
        outcome = await self._sequencer.submit(command)
        if outcome.error == Reason.NOT_LIVE:
            return (await self._not_live([(command, outcome)]))[0]  # type: ignore[list-item]
        return outcome

    async def submit_many(self, commands: list[Command]) -> list[Outcome | Exception]:
        """Sequence `commands` one after another, with no other command between them: each one's outcome, or
        the BadCommand or SequencerStopped it met, in order. Raises SequencerStopped when none was taken."""
        results = await self._sequencer.submit_many(commands)
        refused = [i for i, r in enumerate(results) if isinstance(r, Outcome) and r.error == Reason.NOT_LIVE]
        if refused:
            told = await self._not_live([(commands[i], results[i]) for i in refused])  # type: ignore[misc]
            for i, outcome in zip(refused, told):
                results[i] = outcome
        return results

    async def _not_live(self, refused: list[tuple[Cancel | Amend, Outcome]]) -> list[Outcome]:
        """The engine's NOT_LIVE (an id it gave out, not one of the account's live orders) as the wire promises
        it: not_open with the final state of the account's own finished order, unknown_order for another
        account's. Every close up to the refusal has been published to the trade writer already (a logged
        refusal is durable, so is every batch before it; one without a record was answered only when
        everything applied was durable), so the writer knows every such order: one read for a batch's."""
        try:
            states = await self._trade_writer.finished_orders([c.order_id for c, _ in refused])
        except TimeoutError:  # SQLite is behind for the rest of this run: which it is, nobody can say
            return [Outcome(outcome.seq, None, Reason.HISTORY_UNAVAILABLE, [], [], []) for _, outcome in refused]
        told = []
        for command, outcome in refused:
            state = states.get(command.order_id)
            if state is None or state.account != command.account:
                told.append(Outcome(outcome.seq, None, Reason.UNKNOWN_ORDER, [], [], []))
            else:
                told.append(Outcome(outcome.seq, state, Reason.NOT_OPEN, [], [], []))
        return told

    @property
    def order_symbols(self) -> Collection[str]:
        """The books that take orders now (a symbol is listed here as soon as it is sequenced)."""
        return self._engine.books.keys()

    async def set_rules(self, max_open_orders: int, price_band: int = 0, idempotency_window: int = 0) -> None:
        """Log the limits the engine enforces, unless they are in force already (a replay keeps them)."""
        engine = self._engine
        if (engine.max_open_orders, engine.price_band, engine.idempotency.window) != \
                (max_open_orders, price_band, idempotency_window):
            await self._sequencer.submit(Rules(max_open_orders, price_band, idempotency_window))

    @property
    def max_open_orders(self) -> int:
        return self._engine.max_open_orders

    async def add_symbol(self, symbol: str) -> None:
        """Open a book, unless it is open already."""
        if symbol not in self._engine.books:
            # The AddSymbol's own seq: commands from clients may have been applied since it was.
            listed = await self._sequencer.submit(AddSymbol(symbol))
            self._feed.add_symbol(symbol, listed.seq)

    # ------------------------------------------------------------------ durable reads

    async def order_state(self, account: str, order_id: int) -> OrderState | None:
        """`account`'s order as durable state has it: a live one from the engine, a finished one from history
        (the trade writer's memory until its commit, then SQLite); None for an order that is not the
        account's."""
        seq = self._engine.last_seq
        state = self._engine.order_state(account, order_id)
        await self._durable(seq)  # and so published: the trade writer knows every order closed up to seq
        if state is not None or not 0 < order_id < self._engine.next_order_id:
            return state
        try:
            state = (await self._trade_writer.finished_orders([order_id])).get(order_id)
        except TimeoutError as e:
            raise Unavailable(f"the order is not live, and SQLite does not hold finished orders now: {e}") from None
        return state if state is not None and state.account == account else None

    async def open_orders(self, account: str, symbol: str | None = None, side: Side | None = None,
                          after: int = 0, limit: int | None = None) -> list[OrderState]:
        """`account`'s open orders, oldest first, in `symbol` and on `side` when given: those with ids
        above `after`, at most `limit` of them (a page costs the states of its own orders only)."""
        seq = self._engine.last_seq
        open_ = self._engine.open_orders.get(account)
        chosen = [o for o in open_.values() if o.order_id > after and symbol in (None, o.symbol)
                  and side in (None, o.side)] if open_ else []
        if limit is not None and len(chosen) > limit:
            chosen = heapq.nsmallest(limit, chosen, key=_order_id)
        else:
            chosen.sort(key=_order_id)
        orders = [state_of(o) for o in chosen]
        await self._durable(seq)
        return orders

    async def _durable(self, seq: int) -> None:
        """Wait until the engine state read at `seq` is durable; a failed log never gets there."""
        failed = self._sequencer.failed
        if failed and seq > self._feed.durable_seq:
            raise Unavailable(f"the order state is not durable and the log has failed: {failed}")
        try:
            await self._feed.wait_durable(seq, DURABLE_WAIT)
        except TimeoutError:
            raise Unavailable("timed out waiting for the log to become durable") from None

    @property
    def book_symbols(self) -> Collection[str]:
        """The symbols with a durable book (what market data can be asked about)."""
        return self._feed.mirrors.keys()

    def book(self, symbol: str, depth: int) -> dict[str, Any]:
        """The best `depth` levels of each side of `symbol`'s durable book, with its seq."""
        return self._feed.book(symbol, depth)

    def summaries(self) -> list[dict[str, Any]]:
        """Every symbol's best bid, best ask and last trade price, by name."""
        summaries = []
        for name in sorted(self._feed.mirrors):
            mirror = self._feed.mirrors[name]
            bid, ask = mirror.best()
            summaries.append({"symbol": name, "bestBid": bid, "bestAsk": ask, "last": mirror.last})
        return summaries

    async def trades(self, symbol: str | None, after: int, limit: int, before: int,
                     newest_first: bool) -> list[dict[str, Any]]:
        await self._trades_caught_up()
        return await self._store.trades(symbol, after, limit, before=before, newest_first=newest_first)

    async def fills(self, account: str, symbol: str | None, after: int, limit: int, before: int,
                    newest_first: bool) -> list[dict[str, Any]]:
        """`account`'s side of its trades: the paging of `trades`, plus its order, side and liquidity."""
        await self._trades_caught_up()
        return await self._store.fills(account, symbol, after, limit, before=before, newest_first=newest_first)

    async def bars(self, symbol: str, interval_ms: int, start: int, to: int, before: int | None
                   ) -> list[dict[str, Any]]:
        await self._trades_caught_up()
        return await self._store.bars(symbol, interval_ms, start, to, before=before)

    async def _trades_caught_up(self) -> None:
        """Wait until SQLite holds every durable trade, so a read never misses a fill that was answered."""
        try:
            await self._trade_writer.caught_up(self._feed.durable_seq, DURABLE_WAIT)
        except TimeoutError:
            why = self._trade_writer.error or "it is behind"
            raise Unavailable(f"timed out waiting for SQLite to hold the latest trades ({why})") from None

    # ------------------------------------------------------------------ the exchange's state

    @property
    def failed(self) -> str | None:
        """Why the log failed, once it has: no command is taken after that."""
        return self._sequencer.failed

    @property
    def durable_seq(self) -> int:
        return self._feed.durable_seq

    @property
    def sequenced(self) -> int:
        """The last sequence number given out (durable or not)."""
        return self._sequencer.seq

    @property
    def durability(self) -> Durability:
        return self._sequencer.durability

    @property
    def log_started(self) -> int | None:
        """The time on the log's first record, once durable: it names the exchange across restarts."""
        return self._sequencer.log_started if self._feed.durable_seq >= 1 else None

    @property
    def trade_store_error(self) -> str | None:
        """Why SQLite is not taking trades, while it is not, or why it is damaged (orders still flow)."""
        check = self._store_check
        return self._trade_writer.error or (check.error if check is not None else None)

    @property
    def recovery(self) -> dict[str, Any]:
        """How this start came back: the snapshot it started from (0: none), the records replayed after
        it and the seconds it took."""
        recovery = self._recovery
        if recovery is None:
            return {"snapshotSeq": 0, "replayedRecords": 0, "seconds": 0.0}
        return {"snapshotSeq": recovery.snapshot_seq, "replayedRecords": recovery.records,
                "seconds": round(recovery.seconds, 3)}

    def metrics(self) -> ExchangeMetrics:
        stats = self._sequencer.stats
        snapshotter = self._snapshotter
        log_bytes, log_segments = self._sequencer.wal.on_disk()
        return ExchangeMetrics(
            queue_depth=self._sequencer.queue_depth, commands=stats.commands, batches=stats.batches,
            orders=self._engine.next_order_id - 1, trades=self._engine.next_trade_id - 1,
            durable_seq=self._feed.durable_seq, subscribers=len(self._feed.subscribers),
            resyncs=self._feed.stats_resyncs, buffered_bytes=sum(s.buffered for s in self._feed.subscribers),
            log_failed=bool(self._sequencer.failed), batch_bounds=Stats.BATCH_BUCKETS,
            batch_sizes=list(stats.batch_sizes), sync_bounds_seconds=tuple(b / 1000 for b in Stats.SYNC_BUCKETS_MS),
            sync_counts=list(stats.sync_hist), sync_seconds=stats.sync_seconds,
            log_bytes=log_bytes, log_segments=log_segments,
            snapshot_seq=snapshotter.last_seq if snapshotter else 0,
            snapshot_age_records=self._sequencer.seq - (snapshotter.last_seq if snapshotter else 0),
            snapshot_age_seconds=time.time() - snapshotter.last_time if snapshotter else 0.0,
            snapshots_taken=snapshotter.taken if snapshotter else 0,
            snapshot_failures=snapshotter.failures if snapshotter else 0,
            store_check_failures=self._store_check.failures if self._store_check else 0,
            client_order_ids=len(self._engine.idempotency))

    # ------------------------------------------------------------------ the feed

    def attach(self, closer: Callable[[int, bytes], None]) -> Subscriber:
        """A new subscriber for one connection; `closer` closes that connection with a code and reason."""
        sub = Subscriber(self._feed, closer)
        self._feed.attach(sub)
        return sub

    def detach(self, sub: Subscriber) -> None:
        self._feed.detach(sub)

    def subscribe(self, sub: Subscriber, symbol: str) -> None:
        self._feed.subscribe(sub, symbol)

    def unsubscribe(self, sub: Subscriber, symbol: str) -> None:
        self._feed.unsubscribe(sub, symbol)

    def authenticate(self, sub: Subscriber, account: str | None, updates: bool | str = True) -> None:
        """Name the connection's account (None signs it out); with `updates` (True, or "lists": one message
        per durable batch) it also gets its orders' changes."""
        self._feed.authenticate(sub, account, updates)

    # ------------------------------------------------------------------ stopping

    async def stop(self) -> None:
        """The sequencer first (it finishes the batch in flight), then the trades it handed over, then a
        snapshot of where it stopped (the next start replays nothing)."""
        if self._store_check is not None:
            await self._store_check.stop()
        await self._sequencer.stop()
        await self._trade_writer.stop()
        if self._snapshotter is not None and not self._sequencer.failed:
            await self._snapshotter.stop(self._sequencer.seq, self._sequencer.wal.position,
                                         self._trade_writer.flushed_seq)
            self._snapshotter = None

