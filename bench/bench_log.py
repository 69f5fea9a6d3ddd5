"""Replay speed: records/s to decode and apply a 1M-command log of the standard workload.

    .venv/bin/python bench/bench_log.py [--commands N] [--json]

The log is written once to a temporary file, then opened and replayed into a fresh engine (read,
frame check, decode, apply), which is what a restart does: quietly (no answers built), with the
framing done by the helper process on the other core (a log this size is over Wal.FRAME_ELSEWHERE_FROM;
`--frame-here` turns it off, for comparison). Bar: >= 300,000 records/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_engine import tickflow_commands, workload  # noqa: E402
from tickflow.core.engine import Engine  # noqa: E402
from tickflow.core.types import AddSymbol, Command, Record  # noqa: E402
from tickflow.store.log.codec import encode_record  # noqa: E402
from tickflow.store.recovery import recover  # noqa: E402
from tickflow.store.log.wal import Wal  # noqa: E402
from tickflow.core.snapshot import state_hash

BAR = 300_000
SYMBOL = "ACME"


def standard_workload(n: int = 1_000_000) -> list[Command]:
    """The standard workload, exactly as bench_engine.py draws it (one generator for every benchmark)."""
    return tickflow_commands(workload(n))


def write_log(path: str, n: int) -> int:
    """Write the workload as a log (symbol first, then n commands), 256 records per write."""
    wal = Wal.open(path)
    for _ in wal.replay():
        pass
    commands: list[Command] = [AddSymbol(SYMBOL), *standard_workload(n)]
    ts = 1_700_000_000_000
    batch: list[bytes] = []
    for seq, command in enumerate(commands, 1):
        batch.append(encode_record(Record(seq, ts + seq // 1000, command)))
        if len(batch) == 256:
            wal.append(batch)
            batch = []
    if batch:
        wal.append(batch)
    wal.sync()
    wal.close()
    return len(commands)


def run(commands: int = 1_000_000, repeats: int = 3, frame_here: bool = False) -> dict:
    """Replay the log `repeats` times into fresh engines; report the best and every run."""
    if frame_here:
        Wal.FRAME_ELSEWHERE_FROM = 1 << 62
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.wal")
        records = write_log(path, commands)
        size = os.path.getsize(path)
        runs = []
        hashes = set()
        for _ in range(repeats):
            # The previous run's engine (a million orders) is freed before the clock starts, not
            # inside the timed region, where it would be charged to this replay.
            engine = None
            gc.collect()
            engine = Engine()
            started = time.perf_counter()
            wal = Wal.open(path)
            recovery = recover(wal, engine)
            seconds = time.perf_counter() - started
            wal.close()
            assert recovery.records == records
            framed_elsewhere = wal.framed_elsewhere
            runs.append(records / seconds)
            hashes.add(state_hash(engine))
    best = max(runs)
    return {
        "records": records,
        "bytes": size,
        "records_per_s": round(best),
        "runs_records_per_s": [round(r) for r in runs],
        "seconds": round(records / best, 3),
        "deterministic": len(hashes) == 1,
        "framed_by_helper": framed_elsewhere,
        "bar_records_per_s": BAR,
        "meets_bar": best >= BAR,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--frame-here", action="store_true", help="no framing helper process")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = run(args.commands, args.repeats, args.frame_here)
    if args.json:
        print(json.dumps(result))
        return
    print(f"log: {result['records']:,} records, {result['bytes'] / 1e6:.1f} MB; "
          f"{result['framed_by_helper']:,} framed by the helper process")
    print(f"replay (read + check + decode + apply): {result['records_per_s']:,} records/s "
          f"(best of {args.repeats}: {', '.join(f'{r:,}' for r in result['runs_records_per_s'])})")
    print(f"bar {BAR:,}/s: {'met' if result['meets_bar'] else 'NOT met'}; "
          f"same state hash every run: {result['deterministic']}")


if __name__ == "__main__":
    main()
