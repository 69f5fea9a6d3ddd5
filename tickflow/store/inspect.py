"""`tickflow log --data DIR`: replay a log read-only and say what it holds, without serving.

Exit status: 0 a clean log, 2 a torn tail (a crash mid-write; the next server start cuts it), 1 a log
that cannot be read or is corrupt (a server refuses to start on it), 141 when the output's reader went
away (`| head`)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile

from tickflow.core.engine import Engine
from tickflow.store.replay import recover
from tickflow.store.wal import FILE_HEADER, CorruptLog, Wal

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


def _main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="tickflow log", description=__doc__)
    p.add_argument("--data", default="tickflow-data", help="data directory holding wal.log")
    args = p.parse_args(argv)
    path = os.path.join(args.data, "wal.log")
    if not os.path.exists(path):
        print(f"tickflow log: no log at {path}", file=sys.stderr)
        return 1
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
