"""Bringing an exchange up from its data directory: the log replayed into the engine, SQLite brought in
line with the log, the durable mirror loaded, the sequencer and the trade writer started."""

from __future__ import annotations

import contextlib
import gc
import logging
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from tickflow.core.engine import Engine
from tickflow.net.exchange.fanout import Feed
from tickflow.net.exchange.mirror import RECENT_TRADES
from tickflow.net.exchange.sequencer import Durability, Sequencer
from tickflow.net.exchange.service import ExchangeService
from tickflow.net.exchange.snapshotter import KEEP_SNAPSHOTS, SNAPSHOT_EVERY, Snapshotter
from tickflow.net.exchange.store_check import StoreCheck, marker_path
from tickflow.net.exchange.trade_writer import TradeWriter
from tickflow.store.datadir import TRADES_FILE, how_to_fix
from tickflow.store.log.segments import MIN_SEGMENT_BYTES, SEGMENT_BYTES, SegmentedLog, current_path, listing
from tickflow.store.log.wal import CorruptLog, LogError, OsFileOps
from tickflow.store.recovery import HistoryGapRefused, Recovery, recover_directory
from tickflow.store.snapshots import SnapshotError
from tickflow.store.trades import TradeStore, sync_files, whole_upto

log = logging.getLogger("tickflow")
__all__ = ["MIN_SEGMENT_BYTES", "SEGMENT_BYTES", "StartupError", "Started", "start_exchange"]

CATCH_UP_CHUNK = 10_000
"""Trades inserted into SQLite per statement while it catches up with the log."""
DURABLE_FOR_SNAPSHOT = 60.0
"""Seconds a written snapshot waits for its records to become durable and its trades to reach SQLite."""


class StartupError(Exception):
    """The exchange cannot start; the message says why and what to do."""


@dataclass
class Started:
    """A running exchange and how it came back."""

    service: ExchangeService
    recovery: Recovery


async def start_exchange(data: Path, durability: Durability | str, ws_buffer: int,
                         stack: contextlib.AsyncExitStack, *, snapshot_every: int = SNAPSHOT_EVERY,
                         keep_snapshots: int = KEEP_SNAPSHOTS, segment_bytes: int = SEGMENT_BYTES,
                         accept_history_gap: bool = False) -> Started:
    """Recover the exchange in `data` (locked by the caller) and start it; `stack` stops and closes it.
    `accept_history_gap`: start even when SQLite lacks history the log no longer holds (recovery.py)."""
    try:
        wal_path = current_path(data)
    except CorruptLog as e:
        raise StartupError(str(e)) from None
    try:  # a log this process may not append to is refused before anything is read
        ops = OsFileOps()
        ops.close(ops.open_append(str(wal_path)))
    except OSError as e:
        raise StartupError(f"cannot open the log {wal_path} to read and append to it: {e.strerror or e}. "
                           f"{how_to_fix(e)}") from None
    full_check = marker_path(data / TRADES_FILE).exists()
    store = await _open_store(data / TRADES_FILE, full_check, accept_history_gap)
    stack.push_async_callback(store.close)
    try:
        wal, engine, recovery = await _recover(wal_path, store, data, segment_bytes, accept_history_gap)
    except sqlite3.Error as e:  # a full disk, an I/O error, a trigger: while SQLite was brought in line
        raise StartupError(f"the trade store {data / TRADES_FILE} failed while it was brought in line with the "
                           f"log: {e}. The log is as it was: free space or mend the store (or move it aside, to "
                           "have it rebuilt from the log), then start again") from None
    stack.callback(wal.close)

    feed = Feed(max(1, ws_buffer))
    for symbol in engine.books:
        bids, asks = engine.books[symbol].bids.sorted_levels(), engine.books[symbol].asks.sorted_levels()
        book = engine.books[symbol]
        feed.load(symbol, book.seq, [book.change(level) for level in bids],
                  [book.change(level) for level in asks], await store.recent(symbol, RECENT_TRADES))
    feed.mirror.durable.advance(engine.last_seq)

    _settle_gc()
    sequencer = Sequencer(engine, wal, durability, log_started=recovery.first_ts)
    writer = TradeWriter(store, engine.last_seq)
    sequencer.listeners += [feed.publish, writer.publish]

    async def durable(seq: int) -> None:
        """Until the log is durable and SQLite holds the trades up to `seq` (or the log failed)."""
        deadline = time.monotonic() + DURABLE_FOR_SNAPSHOT
        while True:
            if sequencer.failed:
                raise RuntimeError(f"the log failed: {sequencer.failed}")
            try:
                await feed.wait_durable(seq, 1.0)
                await writer.caught_up(seq, 1.0)
                return
            except TimeoutError:
                if time.monotonic() > deadline:
                    raise

    snapshotter = Snapshotter(data, engine, every=snapshot_every, keep=keep_snapshots,
                              first_ts=lambda: sequencer.log_started, durable=durable,
                              history_durable=lambda: sync_files(str(data / TRADES_FILE)),
                              last_seq=recovery.snapshot_seq)
    sequencer.after_batch = snapshotter.after_batch
    check = StoreCheck(data / TRADES_FILE)
    service = ExchangeService(engine, sequencer, feed, store, writer, snapshotter, recovery, check)
    await sequencer.start()
    writer.start()
    stack.push_async_callback(service.stop)
    if full_check:
        marker_path(data / TRADES_FILE).unlink(missing_ok=True)  # checked whole at the open, or set aside
    else:
        check.start()
    return Started(service, recovery)


async def _recover(wal_path: Path, store: TradeStore, data: Path, segment_bytes: int, accept_history_gap: bool
                   ) -> tuple[SegmentedLog, Engine, Recovery]:
    """The log's engine, from the newest usable snapshot and the records after it; then SQLite made to
    hold exactly the log's trades."""
    stored = await store.max_trade_id()
    stored_count = await store.count()
    after = whole_upto(stored, stored_count, await store.missing_trades())
    if after < stored:
        log.warning("the trade store has gaps (%d trades, highest id %d): re-inserting every trade from the log",
                    stored_count, stored)
    # Every order closed by a record up to this seq is in SQLite; those closed after it are re-derived.
    orders_seq = await store.orders_seq()
    try:
        wal, engine, recovery = recover_directory(data, keep_trades_after=after, keep_closed_after_seq=orders_seq,
                                                  segment_bytes=segment_bytes, accept_history_gap=accept_history_gap)
    except (CorruptLog, SnapshotError, HistoryGapRefused) as e:
        raise StartupError(str(e)) from None
    except LogError as e:  # e.g. no space for a new log's header
        raise StartupError(f"cannot start the log: {e}; free space (or mend the device) and start again") from None
    except OSError as e:
        raise StartupError(f"cannot read, repair or sync the log {wal_path}: {e.strerror or e}") from None
    gap = recovery.history_gap
    if gap is not None:  # before any row after it, so the next start knows the hole is meant
        await store.record_gap(gap.trades_after, gap.trades_upto, gap.orders_after, gap.upto_seq, gap.snapshot)
    # A cut tail is worth a warning even in --quiet; a clean replay is routine.
    log.log(logging.WARNING if recovery.cut else logging.INFO, "%s", recovery)
    last_trade = engine.next_trade_id - 1
    if recovery.records == 0 and recovery.snapshot_seq == 0 and stored > 0:
        wal.close()
        raise StartupError(
            f"the log {wal_path} is missing or empty, but {data / TRADES_FILE} holds {stored_count} trades: "
            f"refusing to start a new exchange over them. Restore the log, or move {TRADES_FILE} aside to "
            "start afresh")
    if stored > last_trade:  # the log was cut or replaced: SQLite must not show trades it does not hold
        removed = await store.delete_after(last_trade)
        log.warning("removed %d trades from SQLite that the log does not hold (it ends at trade %d)",
                    removed, last_trade)
    if orders_seq > engine.last_seq:  # likewise for finished orders (and the ids a cut log will give again)
        removed = await store.delete_orders_after(engine.last_seq)
        log.warning("removed %d finished orders from SQLite that the log does not hold (it ends at seq %d)",
                    removed, engine.last_seq)
    missing = recovery.trades
    if missing:
        before = await store.count()
        for start in range(0, len(missing), CATCH_UP_CHUNK):
            await store.insert(missing[start:start + CATCH_UP_CHUNK])
        log.warning("brought SQLite in line with the log: %d trades inserted", await store.count() - before)
    closed = recovery.closed
    for start in range(0, len(closed), CATCH_UP_CHUNK):
        await store.insert([], closed[start:start + CATCH_UP_CHUNK])
    if orders_seq != engine.last_seq:  # after the rows it covers, so a crash here only repeats the work
        await store.insert([], None, engine.last_seq)
        if closed:
            log.warning("brought SQLite in line with the log: %d finished orders", len(closed))
    return wal, engine, recovery


async def _open_store(path: Path, full_check: bool, accept_history_gap: bool) -> TradeStore:
    """The trade store; a damaged one is set aside and rebuilt, since the log holds every trade (unless the
    log no longer begins at seq 1: then only with `accept_history_gap`). Checked whole (`full_check`) only
    when a background check of the last run found it damaged."""
    try:
        return await TradeStore.open(str(path), full_check=full_check)
    except sqlite3.Error as e:
        damaged = getattr(e, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or \
            str(e).startswith("integrity check")
        if not damaged:  # a full disk, a directory in the way, no permission: nothing to rebuild from here
            raise StartupError(f"cannot open the trade store {path}: {e}") from None
        found = listing(path.parent)
        if found and found[0].first_seq > 1 and not accept_history_gap:
            raise StartupError(
                f"the trade store {path} is damaged ({e}), and the log begins at seq {found[0].first_seq} (the "
                "segments before it were deleted behind snapshots), so it cannot be rebuilt from the log; nothing "
                f"was changed. Restore {path.name} (with its -wal file, if any) from a backup and start again; or "
                "start with --accept-history-gap to set the damaged store aside and start a new one from the "
                "newest snapshot on: the history before that snapshot will be missing from history queries")
        aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            part = Path(f"{path}{suffix}")
            if part.exists():
                part.rename(f"{aside}{suffix}")
        log.warning("the trade store %s is damaged (%s): moved it to %s; rebuilding it from the log", path, e, aside)
        try:
            return await TradeStore.open(str(path))
        except sqlite3.Error as again:
            raise StartupError(f"cannot create the trade store {path}: {again}") from None


def _settle_gc() -> None:
    """Keep the cyclic GC off the replayed state and out of the request path.

    The replayed books and order table are frozen out of every later collection, and the young
    generation is collected every 10,000 net allocations rather than 700, so that collections under
    load are few and short (docs/decisions.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)
