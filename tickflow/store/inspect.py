"""`tickflow log --data DIR`: replay a log read-only and say what it holds, without serving.

Exit status: 0 a clean log, 2 a torn tail (a crash mid-write; the next server start cuts it), 1 a log
that cannot be read or is corrupt (a server refuses to start on it), 141 when the output's reader went
away (`| head`).

`--upgrade` gives a log written before tickflow logs had a header its header, once a copy with the
header replays; it takes the data directory's lock, so never while a server uses it."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tickflow.core.engine import Engine
from tickflow.store.lock import DataDirBusy, lock_data_dir
from tickflow.store.replay import recover
from tickflow.store.wal import FILE_HEADER, CorruptLog, Wal, add_header

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


def _upgrade(path: str) -> int:
    """Add the header to a headerless log, once a copy with it replays (torn tail or not)."""
    with open(path, "rb") as f:
        data = f.read()
    if data.startswith(FILE_HEADER):
        print(f"{path} already starts with its header: nothing to do")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "wal.log")
        with open(copy, "wb") as f:
            f.write(FILE_HEADER + data)
        try:
            recovery = recover(Wal.open(copy), Engine())
        except CorruptLog as e:
            print(f"tickflow log: not upgraded: {str(e).replace(copy, path)}", file=sys.stderr)
            return 1
    add_header(path)
    print(f"added the header to {path}: {recovery.records} records")
    return 0


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tickflow log", description=__doc__)
    p.add_argument("--data", default="tickflow-data", help="data directory holding wal.log")
    p.add_argument("--upgrade", action="store_true",
                   help="give a log written before logs had a header its header (stop the server first)")
    args = p.parse_args(argv)
    path = os.path.join(args.data, "wal.log")
    if not os.path.exists(path):
        print(f"tickflow log: no log at {path}", file=sys.stderr)
        return 1
    if args.upgrade:
        try:
            lock = lock_data_dir(Path(args.data))
        except DataDirBusy as e:
            print(f"tickflow log: not upgraded: {e}; stop it first", file=sys.stderr)
            return 1
        try:
            return _upgrade(path)
        finally:
            os.close(lock)
    # Replay a copy, so checking a log never cuts its tail; a server start does that.
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "wal.log")
        engine = Engine()
        try:
            shutil.copyfile(path, copy)
            recovery = recover(Wal.open(copy), engine)
        except CorruptLog as e:
            print(f"tickflow log: {str(e).replace(copy, path)}", file=sys.stderr)
            return 1
        except OSError as e:
            print(f"tickflow log: cannot read {path}: {e.strerror or e}", file=sys.stderr)
            return 1
    cut = recovery.cut
    print(f"format: {FILE_HEADER.decode().strip()}")
    print(dataclasses.replace(recovery, cut=None))
    print(f"symbols: {', '.join(sorted(engine.books)) or '-'}")
    print(f"orders: {engine.next_order_id - 1}, trades: {engine.next_trade_id - 1}, "
          f"open: {sum(len(v) for v in engine.open_orders.values())}")
    print(f"state hash: {engine.state_hash()}")
    if cut is not None:
        print(f"torn tail at byte {cut.offset}: the next server start cuts its {cut.dropped} bytes ({cut.why}); "
              "the counts above are what remains")
        return TORN
    return 0
