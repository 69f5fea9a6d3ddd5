"""`tickflow log --data DIR`: replay a log read-only and say what it holds, without serving.

Exit status: 0 a clean log, 2 a torn tail (a crash mid-write; the next server start cuts it), 1 a log
that cannot be read or is corrupt (a server refuses to start on it), 141 when the output's reader went
away (`| head`).

The log is read once and replayed in memory: checking never changes it (a server start cuts a torn tail).

Every snapshot in the data directory is checked too: that it verifies, and that it and the records after
it give the state the whole log gives (a line each; exit status 1 for one a start would refuse).

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
from tickflow.core.snapshot import BadState, restore
from tickflow.store import snapshots
from tickflow.store.datadir import LOCK_FILE, WAL_FILE, DataDirBusy, NotWritable, check_writable, how_to_fix, lock_data_dir
from tickflow.store.recovery import Recovery, recover
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


def _check(path: str, engine: Engine) -> tuple[Recovery, bytes] | None:
    """Replay the log at `path` into `engine`, read once and in memory (its bytes come back too); None
    (said why) if it cannot be."""
    try:
        with open(path, "rb") as f:
            data = f.read()
        return recover(Wal.checking(path, data), engine), data
    except CorruptLog as e:
        print(f"tickflow log: {e}", file=sys.stderr)
    except OSError as e:
        print(f"tickflow log: cannot read {path}: {e.strerror or e}", file=sys.stderr)
    return None


def _check_snapshot(snapshot_path: Path, path: str, data: bytes, full_hash: str) -> tuple[str, bool]:
    """One line on a snapshot: whether it verifies, and whether it and the log records after it give the
    engine the whole log gives; and whether a server start would refuse it (a newer format, or ahead of
    the log) rather than pass it over."""
    try:
        snapshot = snapshots.read(snapshot_path)
        engine = restore(snapshot.state())
    except snapshots.NewerSnapshot as e:
        return f"snapshot {snapshot_path.name}: refused: {e}", True
    except (snapshots.SnapshotError, BadState) as e:
        return f"snapshot {snapshot_path.name}: passed over at start: {e}", False
    if snapshot.log_offset > len(data):
        return (f"snapshot {snapshot_path.name}: refused: it says the log goes on at byte {snapshot.log_offset}, "
                f"but the log ends at {len(data)}: the snapshot is ahead of the log"), True
    wal = Wal.checking(path, data[: len(FILE_HEADER)] + data[snapshot.log_offset:])
    wal.base = snapshot.log_offset - len(FILE_HEADER)
    try:
        after = recover(wal, engine)
    except CorruptLog as e:
        return f"snapshot {snapshot_path.name}: refused: the log after it does not follow it: {e}", True
    same = engine.state_hash() == full_hash
    verdict = "ok: it and the log after it give the same state" if same else \
        "DIFFERS from the whole log's state (state hash " + engine.state_hash() + ")"
    return (f"snapshot {snapshot_path.name}: seq {snapshot.seq}, {len(snapshot_path.read_bytes()):,} bytes, "
            f"{after.records} records after it; {verdict}"), not same


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tickflow log", description=__doc__)
    p.add_argument("--data", default="tickflow-data", help=f"data directory holding {WAL_FILE}")
    p.add_argument("--upgrade", action="store_true",
                   help="give a log written before logs had a header its header (stop the server first)")
    args = p.parse_args(argv)
    path = os.path.join(args.data, WAL_FILE)
    if not os.path.exists(path):
        print(f"tickflow log: no log at {path}", file=sys.stderr)
        return 1
    if args.upgrade:
        return _upgrade_locked(Path(args.data), path)
    engine = Engine()
    checked = _check(path, engine)
    if checked is None:
        return 1
    recovery, data = checked
    cut = recovery.cut
    print(f"format: {FILE_HEADER.decode().strip()}")
    if recovery.first_ts is not None:  # what /health calls logStarted
        started = datetime.fromtimestamp(recovery.first_ts / 1000, timezone.utc)
        print(f"started: {started:%Y-%m-%d %H:%M:%S}.{started.microsecond // 1000:03d} UTC "
              f"({recovery.first_ts} ms, the first record's time)")
    print(dataclasses.replace(recovery, cut=None))
    print(f"symbols: {', '.join(sorted(engine.books)) or '-'}")
    print(f"orders: {engine.next_order_id - 1}, trades: {engine.next_trade_id - 1}, "
          f"open: {sum(len(v) for v in engine.open_orders.values())}")
    full_hash = engine.state_hash()
    print(f"state hash: {full_hash}")
    refused = False
    for snapshot_path in snapshots.on_disk(Path(args.data)):
        line, refuses = _check_snapshot(snapshot_path, path, data, full_hash)
        print(line)
        refused |= refuses
    if refused:
        return 1
    if cut is not None:
        print(f"torn tail at byte {cut.offset}: the next server start cuts its {cut.dropped} bytes ({cut.why}); "
              "the counts above are what remains")
        return TORN
    return 0
