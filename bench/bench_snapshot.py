"""Snapshots: what taking one costs the sequencer under steady traffic, and how fast they write and load.

    .venv/bin/python bench/bench_snapshot.py [--open-orders 1000000] [--seconds 6] [--submitters 64]
                                             [--durability group] [--json]

An engine is filled with `--open-orders` resting orders (bids and asks that never cross), then runs
the sequencer over a real log in a temporary directory with `--submitters` closed-loop submitters
placing and cancelling small orders away from the spread, in two phases of `--seconds` each:
without snapshots, then with a snapshot taken every quarter of the phase's expected records (the
Snapshotter the server uses: fork() between two batches, the child writes and fsyncs, the parent
publishes once durable). Reported per phase: commands/s and the acknowledgement latency's p50,
p99.9 and max; for the snapshots: how long fork() held the sequencer (the parent's side), how long
each child took, and the file's size; then the write rate (orders/s, in-process encode + write +
fsync) and the load rate (read, check, decode, restore) of one snapshot of the engine.

Bar (issue 26): a snapshot adds at most 20 ms to the worst acknowledgement.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tickflow.core.engine import Engine  # noqa: E402
from tickflow.core.snapshot import capture, restore  # noqa: E402, state_hash
from tickflow.core.types import AddSymbol, Cancel, NewOrder  # noqa: E402
from tickflow.net.exchange import snapshotter as snapshotter_module  # noqa: E402
from tickflow.net.exchange.sequencer import Sequencer  # noqa: E402
from tickflow.net.exchange.snapshotter import Snapshotter  # noqa: E402
from tickflow.store import snapshots  # noqa: E402
from tickflow.store.log.wal import Wal  # noqa: E402
from tickflow.store.recovery import recover  # noqa: E402

SYMBOL = "ACME"


def filled_engine(open_orders: int) -> Engine:
    engine = Engine()
    engine.apply(1, 1, AddSymbol(SYMBOL))
    for i in range(open_orders):
        buy = i % 2 == 1
        price = 9_000 - i % 500 if buy else 11_000 + i % 500
        engine.apply(i + 2, 1, NewOrder(f"m{i % 1000}", SYMBOL, "buy" if buy else "sell", "limit", price, 10,
                                        client_order_id=f"c{i}" if i % 10 == 0 else None))
    return engine


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def phase(sequencer: Sequencer, seconds: float, submitters: int) -> dict:
    """Closed-loop traffic for `seconds`: each submitter places an order away from the spread, then
    cancels it (two records per loop, the book's size steady)."""
    latencies: list[float] = []
    stop_at = time.perf_counter() + seconds

    async def submitter(n: int) -> None:
        account = f"t{n}"
        i = 0
        while time.perf_counter() < stop_at:
            i += 1
            started = time.perf_counter()
            placed = await sequencer.submit(NewOrder(account, SYMBOL, "buy", "limit", 5_000 + i % 100, 1))
            latencies.append(time.perf_counter() - started)
            started = time.perf_counter()
            await sequencer.submit(Cancel(account, placed.result.order_id))  # type: ignore[union-attr]
            latencies.append(time.perf_counter() - started)

    began = time.perf_counter()
    await asyncio.gather(*(submitter(n) for n in range(submitters)))
    wall = time.perf_counter() - began
    return {"commands": len(latencies), "commands_per_s": round(len(latencies) / wall),
            "p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
            "p999_ms": round(percentile(latencies, 0.999) * 1000, 3),
            "max_ms": round(max(latencies) * 1000, 3)}


async def run(args: argparse.Namespace, directory: Path) -> dict:
    started = time.perf_counter()
    engine = filled_engine(args.open_orders)
    fill_seconds = time.perf_counter() - started
    gc.collect()
    gc.freeze()
    wal = Wal.open(str(directory / "wal.log"))
    recover(wal, Engine())  # an empty log, opened for appending; the engine's records are not in it
    sequencer = Sequencer(engine, wal, args.durability)
    forks: list[float] = []
    children: list[float] = []
    fork = os.fork

    def timed_fork() -> int:
        began = time.perf_counter()
        pid = fork()
        if pid:
            forks.append(time.perf_counter() - began)
        return pid

    snapshotter_module.os.fork = timed_fork  # type: ignore[attr-defined]

    async def durable(seq: int) -> None:
        while sequencer._durable_seq() < seq:
            await asyncio.sleep(0.001)

    snapshotter = Snapshotter(directory, engine, every=0, keep=2, first_ts=lambda: 1, durable=durable,
                              last_seq=engine.last_seq)
    sequencer.after_batch = snapshotter.after_batch
    await sequencer.start()
    quiet = await phase(sequencer, args.seconds, args.submitters)
    snapshotter.every = max(1, quiet["commands"] // 4)
    snapshotter.next_at = sequencer.seq + snapshotter.every
    original_finish = snapshotter._finish

    async def timed_finish(pid: int, seq: int) -> None:
        began = time.perf_counter()
        await original_finish(pid, seq)
        children.append(time.perf_counter() - began)

    snapshotter._finish = timed_finish  # type: ignore[method-assign]
    snapshotting = await phase(sequencer, args.seconds, args.submitters)
    if snapshotter.task is not None:
        await snapshotter.task
    await sequencer.stop()
    newest = snapshots.on_disk(directory)[0] if snapshots.on_disk(directory) else None

    measure = directory / "measure"
    measure.mkdir()
    began = time.perf_counter()
    data = snapshots.encode(engine.last_seq, wal.size, 1, capture(engine))
    written = snapshots.publish(snapshots.write_temporary(measure, engine.last_seq, data))
    write_seconds = time.perf_counter() - began
    began = time.perf_counter()
    loaded = restore(snapshots.read(written).state())
    load_seconds = time.perf_counter() - began
    assert state_hash(loaded) == state_hash(engine)
    live = sum(len(o) for o in engine.open_orders.values())
    return {
        "benchmark": "snapshot", "open_orders": args.open_orders, "durability": args.durability,
        "submitters": args.submitters, "seconds_per_phase": args.seconds, "fill_seconds": round(fill_seconds, 1),
        "without_snapshots": quiet, "with_snapshots": snapshotting,
        "snapshots_taken": snapshotter.taken, "snapshot_failures": snapshotter.failures,
        "fork_ms": [round(f * 1000, 2) for f in forks],
        "child_seconds": [round(c, 2) for c in children],
        "snapshot_bytes": newest.stat().st_size if newest else None,
        "worst_ack_added_ms": round(snapshotting["max_ms"] - quiet["max_ms"], 3),
        "write_orders_per_s": round(live / write_seconds), "load_orders_per_s": round(live / load_seconds),
        "write_seconds": round(write_seconds, 2), "load_seconds": round(load_seconds, 2),
        "median_fork_ms": round(statistics.median(forks) * 1000, 2) if forks else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--open-orders", type=int, default=1_000_000)
    p.add_argument("--seconds", type=float, default=6.0)
    p.add_argument("--submitters", type=int, default=64)
    p.add_argument("--durability", choices=("none", "group", "order"), default="group")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="tickflow-bench-snapshot-") as tmp:
        result = asyncio.run(run(args, Path(tmp)))
    if args.json:
        print(json.dumps(result))
        return
    for name in ("without_snapshots", "with_snapshots"):
        r = result[name]
        print(f"{name.replace('_', ' '):>18}: {r['commands_per_s']:>7,} cmd/s  p50 {r['p50_ms']} ms  "
              f"p99.9 {r['p999_ms']} ms  max {r['max_ms']} ms")
    print(f"snapshots: {result['snapshots_taken']} taken, {result['snapshot_failures']} failed; fork held the "
          f"sequencer {result['fork_ms']} ms; children {result['child_seconds']} s; {result['snapshot_bytes']} bytes")
    print(f"worst acknowledgement added: {result['worst_ack_added_ms']} ms (bar: 20 ms)")
    print(f"write {result['write_orders_per_s']:,} orders/s ({result['write_seconds']} s), "
          f"load {result['load_orders_per_s']:,} orders/s ({result['load_seconds']} s) "
          f"for {args.open_orders:,} open orders")


if __name__ == "__main__":
    main()
