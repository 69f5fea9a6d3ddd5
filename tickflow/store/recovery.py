"""Rebuild an engine from its data directory: the newest snapshot that verifies, then every record of the
log after it applied in order (stamps taken from the record); the whole log when no snapshot will do."""

from __future__ import annotations

import gc
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tickflow.core.engine import Engine
from tickflow.core.orders import finished, state_of
from tickflow.core.types import OrderState, Outcome, Record, Trade
from tickflow.store.log.codec import DecodeErrors, decode_joined, decode_record
from tickflow.core.snapshot import BadState, restore
from tickflow.store import snapshots
from tickflow.store.log.segments import SEGMENT_BYTES, SegmentedLog, listing
from tickflow.store.log.wal import HEADER_SIZE, CorruptLog, Cut, FileOps, Wal

Log = Wal | SegmentedLog

log = logging.getLogger("tickflow")


@dataclass(frozen=True)
class Recovery:
    records: int
    last_seq: int
    last_ts: int
    cut: Cut | None
    seconds: float
    trades: list[Trade] = field(default_factory=list, repr=False)
    """The trades re-derived with ids above `recover`'s `keep_trades_after`, in trade-id order."""
    first_ts: int | None = None
    """The time stamped on the log's first record (None for an empty log): it names the log, the same
    across restarts and different for another exchange's."""
    snapshot_seq: int = 0
    """The seq of the snapshot the engine started from (0: none, the whole log was replayed)."""
    passed_over: tuple[str, ...] = ()
    """Why each newer snapshot was not used (torn, damaged, or SQLite behind it)."""
    closed: list[OrderState] = field(default_factory=list, repr=False)
    """The final states of the orders closed by records after `recover`'s `keep_closed_after_seq`."""
    history_gap: HistoryGap | None = None
    """SQLite was behind every snapshot, the log could not rebuild it, and the gap was accepted."""

    def __str__(self) -> str:
        start = f"from the snapshot at seq {self.snapshot_seq}, " if self.snapshot_seq else ""
        text = f"{start}replayed {self.records} records (last seq {self.last_seq}) in {self.seconds:.3f}s"
        return f"{text}; {self.cut}" if self.cut else text


@dataclass(frozen=True)
class HistoryGap:
    """History SQLite lacks and the log no longer holds: the trades after `trades_after` up to `trades_upto`
    and the orders finished after seq `orders_after` up to `upto_seq`, the seq of `snapshot`."""

    snapshot: str
    upto_seq: int
    trades_after: int
    trades_upto: int
    orders_after: int
    log_first_seq: int

    def __str__(self) -> str:
        return (f"SQLite is behind every snapshot and the log can no longer rebuild it: SQLite holds the trades up "
                f"to id {self.trades_after} and the orders finished up to seq {self.orders_after}; the newest "
                f"snapshot that verifies, {self.snapshot}, is at seq {self.upto_seq} (trades up to id "
                f"{self.trades_upto}); the log begins at seq {self.log_first_seq} (the segments before it were "
                "deleted behind snapshots)")


class HistoryGapRefused(Exception):
    """A start would leave a gap in SQLite's history (HistoryGap), and was not told to accept one."""

    def __init__(self, gap: HistoryGap) -> None:
        super().__init__(
            f"{gap}. Restore trades.sqlite (with its -wal file, if any) from a backup that holds at least up to "
            f"seq {gap.upto_seq} (or up to an older snapshot still in the data directory) and start again; or start "
            f"with --accept-history-gap to start from {gap.snapshot}: the trades {gap.trades_after + 1} to "
            f"{gap.trades_upto} and the orders finished after seq {gap.orders_after} up to {gap.upto_seq} will "
            "then be missing from history queries (the live state is whole either way)")
        self.gap = gap


def recover_directory(data: Path, *, keep_trades_after: int | None = None,
                      keep_closed_after_seq: int | None = None, ops: FileOps | None = None,
                      segment_bytes: int = SEGMENT_BYTES, accept_history_gap: bool = False
                      ) -> tuple[SegmentedLog, Engine, Recovery]:
    """The log of `data` opened for appending (in its last segment), and the engine it holds: from the
    newest snapshot that verifies (and whose trades and finished orders SQLite already holds:
    `keep_trades_after` is the highest trade id it has whole, `keep_closed_after_seq` the seq up to which
    it has every finished order), then the records after it, segment by segment; else from the whole log.

    When SQLite is behind every snapshot that verifies and the log no longer begins at seq 1, nothing can
    re-derive what SQLite lacks: HistoryGapRefused, unless `accept_history_gap`, which starts from the newest
    snapshot that verifies and says what is missing in `Recovery.history_gap`.

    Raises NewerSnapshot for a snapshot this tickflow cannot read, CorruptLog for a log shorter than a
    usable snapshot says (the snapshot is ahead of the log), a corrupt record or a missing segment,
    OSError for a log that cannot be opened."""
    started = time.perf_counter()
    segments = listing(data)
    log_first_seq = segments[0].first_seq if segments else 1
    newest: tuple[Path, snapshots.Snapshot, Engine, int] | None = None
    """The newest snapshot that verifies, passed over because SQLite is behind it; its last trade id."""
    for gone in snapshots.remove_temporaries(data):
        log.warning("removed %s, a snapshot a crash left half written", gone.name)
    passed_over: list[str] = []
    for path in snapshots.on_disk(data):
        try:
            snapshot = snapshots.read(path)
            state = snapshot.state()
            engine = restore(state)
        except (snapshots.SnapshotError, BadState) as e:
            if isinstance(e, snapshots.NewerSnapshot):
                raise
            passed_over.append(str(e))
            log.warning("passing over a snapshot: %s", e)
            continue
        if newest is None:
            newest = (path, snapshot, engine, state.next_trade_id - 1)
        if keep_trades_after is not None and keep_trades_after < state.next_trade_id - 1:
            why = (f"{path.name}: SQLite holds trades up to id {keep_trades_after}, the snapshot covers up to "
                   f"{state.next_trade_id - 1}: replaying from further back to re-derive them")
            passed_over.append(why)
            log.warning("passing over a snapshot: %s", why)
            continue
        if keep_closed_after_seq is not None and keep_closed_after_seq < snapshot.seq:
            why = (f"{path.name}: SQLite holds the orders finished up to seq {keep_closed_after_seq}, the snapshot "
                   f"is at {snapshot.seq}: replaying from further back to re-derive them")
            passed_over.append(why)
            log.warning("passing over a snapshot: %s", why)
            continue
        return _from_snapshot(data, ops, segment_bytes, snapshot, engine, keep_trades_after,
                              keep_closed_after_seq, started, tuple(passed_over))
    if newest is not None and log_first_seq > 1:
        path, snapshot, engine, trades_upto = newest
        gap = HistoryGap(path.name, snapshot.seq, keep_trades_after or 0, trades_upto, keep_closed_after_seq or 0,
                         log_first_seq)
        if not accept_history_gap:
            raise HistoryGapRefused(gap)
        log.error("starting with a history gap (--accept-history-gap): %s", gap)
        return _from_snapshot(data, ops, segment_bytes, snapshot, engine, keep_trades_after, snapshot.seq,
                              started, tuple(passed_over), gap)
    wal = SegmentedLog.open(data, ops, segment_bytes=segment_bytes)
    engine = Engine()
    recovery = recover(wal, engine, keep_trades_after=keep_trades_after, keep_closed_after_seq=keep_closed_after_seq)
    return wal, engine, Recovery(recovery.records, recovery.last_seq, recovery.last_ts, recovery.cut,
                                 time.perf_counter() - started, recovery.trades, recovery.first_ts, 0,
                                 tuple(passed_over), recovery.closed)


def _from_snapshot(data: Path, ops: FileOps | None, segment_bytes: int, snapshot: snapshots.Snapshot,
                   engine: Engine, keep_trades_after: int | None, keep_closed_after_seq: int | None,
                   started: float, passed_over: tuple[str, ...], gap: HistoryGap | None = None
                   ) -> tuple[SegmentedLog, Engine, Recovery]:
    """The log after `snapshot` replayed into its `engine`."""
    wal = SegmentedLog.open(data, ops, after_seq=snapshot.seq, offset=snapshot.log_offset,
                            segment_bytes=segment_bytes)
    recovery = recover(wal, engine, keep_trades_after=keep_trades_after, keep_closed_after_seq=keep_closed_after_seq)
    return wal, engine, Recovery(recovery.records, recovery.last_seq, recovery.last_ts, recovery.cut,
                                 time.perf_counter() - started, recovery.trades, snapshot.first_ts,
                                 snapshot.seq, passed_over, recovery.closed, gap)


def recover(
    wal: Log, engine: Engine, on_outcome: Callable[[Outcome], None] | None = None, *,
    keep_trades_after: int | None = None, keep_closed_after_seq: int | None = None,
) -> Recovery:
    """Replay `wal` into `engine`. With `on_outcome`, it sees each command's whole answer; without,
    the engine replays quietly, building no answers. Either way the trades with ids above
    `keep_trades_after` and the final states of the orders closed by records with seqs above
    `keep_closed_after_seq` (to bring SQLite in line) come back in `Recovery.trades` and `.closed`.

    Raises CorruptLog for a record whose checksum holds but which is not a record, or whose sequence
    number does not follow the one before: acknowledged records may lie behind it, so nothing is cut.
    """
    started = time.perf_counter()
    # Replay allocates millions of short-lived, acyclic objects (reference counting frees them);
    # the cyclic collector would rescan the growing books over and over for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        trades: list[Trade] = []
        closed: list[OrderState] = []
        if on_outcome is not None:
            if keep_trades_after is not None or keep_closed_after_seq is not None:
                on_outcome = _keeping(on_outcome, keep_trades_after, keep_closed_after_seq, trades, closed)
            seq, ts, first_ts = _apply_all(wal, engine, on_outcome)
        else:
            with engine.replaying(keep_trades_after, keep_closed_after_seq) as kept:
                seq, ts, first_ts = _apply_all(wal, engine, None)
            trades = kept
            closed = [state_of(order) for order in kept.closed]
    finally:
        if collecting:
            gc.enable()
    return Recovery(wal.records, seq, ts, wal.cut, time.perf_counter() - started, trades, first_ts, closed=closed)


def _keeping(on_outcome: Callable[[Outcome], None], trades_after: int | None, closed_after: int | None,
             trades: list[Trade], closed: list[OrderState]) -> Callable[[Outcome], None]:
    """`on_outcome`, also collecting into `trades` those of each outcome with ids above `trades_after`, and
    into `closed` the orders finished by the outcomes with seqs above `closed_after`."""
    def seen(outcome: Outcome) -> None:
        if trades_after is not None:
            trades.extend(t for t in outcome.trades if t.trade_id > trades_after)
        if closed_after is not None and outcome.seq > closed_after:
            closed.extend(finished(outcome))
        on_outcome(outcome)
    return seen


def _apply_all(wal: Log, engine: Engine, on_outcome: Callable[[Outcome], None] | None) -> tuple[int, int, int | None]:
    """Every record of `wal` applied; the last seq and time, and the first record's time."""
    apply = engine.apply
    seq = engine.last_seq
    ts = engine.last_ts
    first_ts = None
    for offset, count, joined in wal.replay_batches():
        try:
            records = decode_joined(count, joined)
        except DecodeErrors:
            payloads = wal.payloads(offset, count)
            framed = sum(map(len, payloads))
            if len(payloads) != count or framed != len(joined):
                # Only a framing helper at odds with the file gets here.
                raise CorruptLog(wal.path, wal.base + offset, f"the framing helper took {count} records of {len(joined)} "
                                 f"bytes for good here, this process {len(payloads)} of {framed}",
                                 "so nothing is cut") from None
            records = _decode_each(wal.path, wal.base + offset, payloads)
        first = seq + 1
        if first == 1 and records:
            first_ts = records[0].ts
        for record in records:
            seq += 1
            if record.seq != seq:
                where = wal.base + offset + sum(HEADER_SIZE + len(p) for p in wal.payloads(offset, count)[: seq - first])
                raise CorruptLog(wal.path, where, f"sequence {record.seq} follows {seq - 1}", CorruptLog.WHOLE)
            ts = record.ts
            outcome = apply(seq, ts, record.command)
            if on_outcome is not None:
                on_outcome(outcome)
    return seq, ts, first_ts


def _decode_each(path: str, offset: int, payloads: list[memoryview]) -> list[Record]:
    """Decode one by one, to name the offset of the record that is not one."""
    records = []
    for payload in payloads:
        try:
            records.append(decode_record(payload))
        except DecodeErrors as e:
            raise CorruptLog(path, offset, f"not a record: {e}", CorruptLog.UNREADABLE) from None
        offset += HEADER_SIZE + len(payload)
    return records
