"""`tickflow log --data DIR`: replay a log read-only, segment by segment, and say what it holds, without
serving.

Exit status: 0 a clean log, 2 a torn tail (a crash mid-write; the next server start cuts it), 1 a log
that cannot be read or is corrupt (a server refuses to start on it), 141 when the output's reader went
away (`| head`).

Each segment is read once and replayed in memory: checking never changes it (a server start cuts a torn
tail). A bad record in a sealed segment, or a missing segment, is corruption (exit status 1).

Every snapshot in the data directory is checked too: that it verifies, and that it and the records after
it give the state the whole log gives (a line each; exit status 1 for one a start would refuse). And the
trade store, trades.sqlite: SQLite's full integrity check (which a start leaves to the background), its
watermarks, and whether a start could bring it in line with the log (exit status 1 where a start would
refuse: a store behind every snapshot, or missing or damaged, once the log no longer begins at seq 1).

`--upgrade` gives a log written before tickflow logs had a header its header, once it replays with the
header; it takes the data directory's lock, so never while a server uses it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from datetime import datetime, timezone
from pathlib import Path

from tickflow.core.engine import Engine
from tickflow.core.snapshot import BadState, restore, state_hash
from tickflow.store import snapshots
from tickflow.store.datadir import LOCK_FILE, TRADES_FILE, WAL_FILE, DataDirBusy, NotWritable, check_writable, how_to_fix, lock_data_dir
from tickflow.store.recovery import HistoryGap, HistoryGapRefused, Recovery, recover
from tickflow.store import trades
from tickflow.store.log import segments
from tickflow.store.log.segments import MissingSegment, SegmentedLog
from tickflow.store.log.upgrade import add_header
from tickflow.store.log.wal import FILE_HEADER, CorruptLog, Wal, starts_with_record

TORN = 2
CLOSED_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a tool whose reader went away (`tickflow log | head -1`)."""


def main(argv: list[str]) -> int:
    try:
        status = _main(argv)
        sys.stdout.flush()  # here, not at exit, so a closed pipe is caught below
        return status
    except BrokenPipeError:
        # Nothing more can be written; point stdout at /dev/null so the flush at exit does not fail again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return CLOSED_PIPE


def _upgrade_locked(data: Path, path: str) -> int:
    """`--upgrade`, holding the data directory's lock; refused at once where the new log could not be put."""
    try:
        check_writable(data, {LOCK_FILE: "the lock file", os.path.basename(path): "the log"})
        lock = lock_data_dir(data)
    except DataDirBusy as e:
        print(f"tickflow log: not upgraded: {e}; stop it first", file=sys.stderr)
        return 1
    except NotWritable as e:
        print(f"tickflow log: not upgraded: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"tickflow log: not upgraded: cannot lock {data / LOCK_FILE}: {e.strerror or e}. {how_to_fix(e)}",
              file=sys.stderr)
        return 1
    try:
        return _upgrade(path)
    finally:
        os.close(lock)


def _upgrade(path: str) -> int:
    """Add the header to a headerless log, once it replays with the header (torn tail or not).

    The old log is read once: the replay checks those bytes, and the same bytes go to the new file."""
    try:
        with open(path, "rb") as f:
            old = f.read()
    except OSError as e:
        print(f"tickflow log: not upgraded: cannot read {path}: {e.strerror or e}. {how_to_fix(e)}", file=sys.stderr)
        return 1
    if old.startswith(FILE_HEADER):
        print(f"{path} already starts with its header: nothing to do")
        return 0
    if old and not starts_with_record(old):
        # With the header, a server would take these bytes for a torn first record and cut them all.
        print(f"tickflow log: not upgraded: {path} does not start with a whole tickflow record, so it is no log "
              f"from before logs had a header (another program's file?). {path} is unchanged.", file=sys.stderr)
        return 1
    try:
        recovery = recover(Wal.checking(path, FILE_HEADER + old), Engine())
    except CorruptLog as e:
        print(f"tickflow log: not upgraded: {e}", file=sys.stderr)
        return 1
    try:
        add_header(path, old)
    except OSError as e:
        print(f"tickflow log: not upgraded: cannot write the new log beside {path}: {e.strerror or e}. "
              f"{how_to_fix(e)} {path} is unchanged.", file=sys.stderr)
        return 1
    print(f"added the header to {path}: {recovery.records} records")
    return 0


def _check_snapshot(snapshot_path: Path, data: Path, full_hash: str) -> tuple[str, bool]:
    """One line on a snapshot: whether it verifies, and whether it and the log records after it give the
    engine the whole log gives; and whether a server start would refuse it (a newer format, ahead of the
    log, or its segments missing) rather than pass it over."""
    try:
        snapshot = snapshots.read(snapshot_path)
        engine = restore(snapshot.state())
    except snapshots.NewerSnapshot as e:
        return f"snapshot {snapshot_path.name}: refused: {e}", True
    except (snapshots.SnapshotError, BadState) as e:
        return f"snapshot {snapshot_path.name}: passed over at start: {e}", False
    try:
        after = recover(SegmentedLog.open(data, after_seq=snapshot.seq, offset=snapshot.log_offset, checking=True),
                        engine)
    except CorruptLog as e:
        return f"snapshot {snapshot_path.name}: refused: the log after it does not follow it: {e}", True
    same = state_hash(engine) == full_hash
    verdict = "ok: it and the log after it give the same state" if same else \
        "DIFFERS from the whole log's state (state hash " + state_hash(engine) + ")"
    return (f"snapshot {snapshot_path.name}: seq {snapshot.seq}, {snapshot_path.stat().st_size:,} bytes, "
            f"{after.records} records after it; {verdict}"), not same


def _whole_log(data: Path, first_seq: int) -> tuple[SegmentedLog, Engine, int | None, str]:
    """The log to check and the engine it starts from: from seq 1, or, when the segments before were
    deleted (retention), from the oldest snapshot that reads; and the log's first stamp, and a note."""
    if first_seq == 1:
        return SegmentedLog.open(data, checking=True), Engine(), None, ""
    for path in reversed(snapshots.on_disk(data)):
        try:
            snapshot = snapshots.read(path)
            engine = restore(snapshot.state())
        except (snapshots.SnapshotError, BadState):
            continue
        log = SegmentedLog.open(data, after_seq=snapshot.seq, offset=snapshot.log_offset, checking=True)
        return log, engine, snapshot.first_ts, (f"the log begins at seq {first_seq} (the segments before were "
                                                f"deleted after snapshots): checked from {path.name}")
    raise MissingSegment(str(data), f"the log begins at seq {first_seq} and no snapshot that reads holds the "
                                    "records before it")


def _check_store(data: Path, log_first_seq: int) -> tuple[str, bool]:
    """Lines on the trade store: its integrity, its watermarks, and whether a start would refuse it."""
    path = data / TRADES_FILE
    rebuilt = "a start re-derives it from the log" if log_first_seq == 1 else ""
    if not path.exists():
        found = "trades.sqlite: none"
        trades_after = orders_after = 0
    else:
        try:
            db = trades.open_for_check(str(path))
            try:
                damage = trades.quick_check(db)
                if damage is None:
                    stored, count = db.execute("SELECT COALESCE(MAX(trade_id), 0), COUNT(*) FROM trades").fetchone()
                    orders_after = db.execute(trades.ORDERS_SEQ_SQL).fetchone()[0]
                    gaps = db.execute("SELECT name FROM sqlite_master WHERE name = 'history_gaps'").fetchone()
                    missing = db.execute(trades.MISSING_TRADES_SQL).fetchone()[0] if gaps else 0
            finally:
                db.close()
        except Exception as e:  # sqlite3.Error, and anything else an unreadable file raises
            damage = str(e)
        if damage is not None:
            if log_first_seq == 1:
                return f"trades.sqlite: DAMAGED ({damage}): a start sets it aside and rebuilds it from the log", False
            return (f"trades.sqlite: DAMAGED ({damage}), and the log begins at seq {log_first_seq}: a start refuses; "
                    f"restore {TRADES_FILE} from a backup, or start with --accept-history-gap"), True
        trades_after = trades.whole_upto(stored, count, missing)
        found = (f"trades.sqlite: integrity ok; trades up to id {stored}, orders finished up to seq {orders_after}"
                 + (f", {missing} trades in accepted history gaps" if missing else ""))
    newest: HistoryGap | None = None
    for snapshot_path in snapshots.on_disk(data):
        try:
            snapshot = snapshots.read(snapshot_path)
            trades_upto = snapshot.state().next_trade_id - 1
        except snapshots.SnapshotError:
            continue
        if trades_after >= trades_upto and orders_after >= snapshot.seq:
            return f"{found}; a start uses {snapshot_path.name}", False
        newest = newest or HistoryGap(snapshot_path.name, snapshot.seq, trades_after, trades_upto, orders_after,
                                      log_first_seq)
    if newest is None or log_first_seq == 1:
        return f"{found}; {rebuilt or 'a start brings it in line with the log'}", False
    return f"{found}\nrefused at start: {HistoryGapRefused(newest)}", True


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tickflow log", description=__doc__)
    p.add_argument("--data", default="tickflow-data", help="data directory holding the log's segments")
    p.add_argument("--upgrade", action="store_true",
                   help=f"give a log ({WAL_FILE}) written before logs had a header its header (stop the server first)")
    args = p.parse_args(argv)
    data = Path(args.data)
    if args.upgrade:
        path = os.path.join(args.data, WAL_FILE)
        if not os.path.exists(path):
            print(f"tickflow log: no log at {path}", file=sys.stderr)
            return 1
        return _upgrade_locked(data, path)
    try:
        found = segments.listing(data)
        if not found:
            print(f"tickflow log: no log at {data / WAL_FILE}", file=sys.stderr)
            return 1
        log, engine, first_ts, note = _whole_log(data, found[0].first_seq)
        recovery = recover(log, engine)
    except CorruptLog as e:
        print(f"tickflow log: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"tickflow log: cannot read the log in {data}: {e.strerror or e}", file=sys.stderr)
        return 1
    cut = recovery.cut
    first_ts = recovery.first_ts if first_ts is None else first_ts
    print(f"format: {FILE_HEADER.decode().strip()}")
    if note:
        print(note)
    if first_ts is not None:  # what /health calls logStarted
        started = datetime.fromtimestamp(first_ts / 1000, timezone.utc)
        print(f"started: {started:%Y-%m-%d %H:%M:%S}.{started.microsecond // 1000:03d} UTC "
              f"({first_ts} ms, the first record's time)")
    total, count = segments.on_disk(data)
    print(f"segments: {count}, {total:,} bytes")
    for segment, records, size in log.replayed_segments:
        seqs = f"seq {segment.first_seq}-{segment.first_seq + records - 1}" if records else "no records"
        print(f"  {segment.path.name}: {seqs}, {size:,} bytes read")
    print(dataclasses.replace(recovery, cut=None))
    print(f"symbols: {', '.join(sorted(engine.books)) or '-'}")
    print(f"orders: {engine.next_order_id - 1}, trades: {engine.next_trade_id - 1}, "
          f"open: {sum(len(v) for v in engine.open_orders.values())}")
    full_hash = state_hash(engine)
    print(f"state hash: {full_hash}")
    refused = False
    for snapshot_path in snapshots.on_disk(data):
        line, refuses = _check_snapshot(snapshot_path, data, full_hash)
        print(line)
        refused |= refuses
    line, refuses = _check_store(data, found[0].first_seq)
    print(line)
    refused |= refuses
    if refused:
        return 1
    if cut is not None:
        print(f"torn tail at byte {cut.offset} of {log.path}: the next server start cuts its {cut.dropped} bytes "
              f"({cut.why}); the counts above are what remains")
        return TORN
    return 0
