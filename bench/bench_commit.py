"""Group commit: commands/s and latency at 64 concurrent in-process submitters, per durability mode.

    .venv/bin/python bench/bench_commit.py [--commands N] [--order-commands N] [--submitters 64]
                                           [--rounds 5] [--uvloop] [--json]

Each submitter is a closed loop (submit, wait for the durable answer, submit the next) drawing from
the standard workload (bench_log.standard_workload). The log is a real file in a temporary directory.
Latency is measured around `await sequencer.submit(...)`. Bar: group >= 0.8x none in the same run.
`none` and `group` alternate over `--rounds` rounds, each on a fresh log, so both see the same
machine (this one is shared and its disk's sync latency drifts); the ratio is total over total, and
each round's ratio is printed too.

What bounds group commit here: with 64 submitters each waiting for its own answer, a batch's 64
commands wait for one sync. The sync starts as soon as the batch is written and runs in a helper
process while the batch is matched, so a round trip costs about max(sync, matching) rather than
their sum. `cpu_us_per_command` and `cpu_busy` (process CPU / wall time) show whether a mode is
CPU-bound or waiting on the disk.

The syncs also slow this process down while they run elsewhere: bench_sync_cost.py measures `none`
with an unrelated process syncing at group's rate, which on this machine alone costs 16-25%.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import sys
import tempfile
import time
from typing import Iterator

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from bench_log import SYMBOL, standard_workload  # noqa: E402

from tickflow.core.engine import Engine  # noqa: E402
from tickflow.core.types import AddSymbol, Command  # noqa: E402
from tickflow.net.exchange.sequencer import Sequencer  # noqa: E402
from tickflow.store.recovery import recover  # noqa: E402
from tickflow.store.log.wal import Wal  # noqa: E402

SURVIVES = {"none": "process crash", "group": "power loss", "order": "power loss"}
BAR = 0.8


async def _measure(path: str, mode: str, commands: int, submitters: int) -> dict:
    """One closed-loop run on a fresh log: raw latencies, wall and CPU seconds, sequencer stats."""
    wal = Wal.open(path)
    engine = Engine()
    recover(wal, engine)
    sequencer = Sequencer(engine, wal, mode)
    await sequencer.start()
    await sequencer.submit(AddSymbol(SYMBOL))
    work: Iterator[Command] = iter(list(standard_workload(commands)))
    latencies: list[float] = []
    clock = time.perf_counter
    submit = sequencer.submit

    async def client() -> None:
        record = latencies.append
        for command in work:
            started = clock()
            await submit(command)
            record(clock() - started)

    gc.collect()
    started = clock()
    before = resource.getrusage(resource.RUSAGE_SELF)
    await asyncio.gather(*(client() for _ in range(submitters)))
    seconds = clock() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    user, system = after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime
    stats = sequencer.stats
    await sequencer.stop()
    return {"latencies": latencies, "seconds": seconds, "cpu": user + system, "user": user, "system": system,
            "batches": stats.batches, "batched": stats.commands, "syncs": stats.syncs, "sync_seconds": stats.sync_seconds}


def _summary(mode: str, runs: list[dict]) -> dict:
    latencies = sorted(x for r in runs for x in r["latencies"])
    n = len(latencies)
    seconds = sum(r["seconds"] for r in runs)
    cpu = sum(r["cpu"] for r in runs)
    batches = sum(r["batches"] for r in runs)
    syncs = sum(r["syncs"] for r in runs)

    def pct(p: float) -> float:
        return latencies[min(n - 1, int(p * n))] * 1000

    return {
        "mode": mode,
        "commands": n,
        "seconds": round(seconds, 3),
        "commands_per_s": round(n / seconds),
        "p50_ms": round(pct(0.50), 3),
        "p99_ms": round(pct(0.99), 3),
        "p999_ms": round(pct(0.999), 3),
        "cpu_us_per_command": round(cpu / n * 1e6, 2),
        "cpu_busy": round(cpu / seconds, 2),
        "batches": batches,
        "mean_batch": round(sum(r["batched"] for r in runs) / max(batches, 1), 1),
        "syncs": syncs,
        "mean_sync_ms": round(sum(r["sync_seconds"] for r in runs) / max(syncs, 1) * 1000, 3),
        "survives": SURVIVES[mode],
    }


def run(commands: int = 200_000, order_commands: int = 5_000, submitters: int = 64,
        use_uvloop: bool = False, rounds: int = 5) -> dict:
    """none and group alternate over `rounds` rounds (each a fresh log) so both see the same machine;
    order runs once with `order_commands`. The ratio is total group rate over total none rate."""
    runs: dict[str, list[dict]] = {"none": [], "group": [], "order": []}
    ratios = []

    def measure(tmp: str, mode: str, n: int, i: int) -> dict:
        coro = _measure(os.path.join(tmp, f"{mode}-{i}.wal"), mode, n, submitters)
        if use_uvloop:
            import uvloop

            return uvloop.run(coro)
        return asyncio.run(coro)

    with tempfile.TemporaryDirectory() as tmp:
        per_round = max(1, commands // rounds)
        for i in range(rounds):
            pair = ("none", "group") if i % 2 == 0 else ("group", "none")
            done = {mode: measure(tmp, mode, per_round, i) for mode in pair}
            for mode, r in done.items():
                runs[mode].append(r)
            ratios.append((len(done["group"]["latencies"]) / done["group"]["seconds"])
                          / (len(done["none"]["latencies"]) / done["none"]["seconds"]))
        runs["order"].append(measure(tmp, "order", order_commands, 0))
    results = [_summary(mode, r) for mode, r in runs.items()]
    by_mode = {r["mode"]: r for r in results}
    ratio = by_mode["group"]["commands_per_s"] / by_mode["none"]["commands_per_s"]
    return {
        "submitters": submitters,
        "loop": "uvloop" if use_uvloop else "asyncio",
        "rounds": rounds,
        "modes": results,
        "group_vs_none": round(ratio, 3),
        "group_vs_none_by_round": [round(r, 3) for r in ratios],
        "bar_group_vs_none": BAR,
        "meets_bar": ratio >= BAR,
    }


def table(result: dict) -> str:
    rows = [f"{'Path':<34}{'Cmds/s':>10}{'p50':>11}{'p99':>11}{'p99.9':>11}  {'batch':>6}  Survives"]
    names = {"none": "Sequencer + log, no fsync", "group": "Sequencer + log, group commit",
             "order": "Sequencer + log, fsync per order"}
    for r in result["modes"]:
        rows.append(f"{names[r['mode']]:<34}{r['commands_per_s']:>10,}{r['p50_ms']:>8.3f} ms"
                    f"{r['p99_ms']:>8.3f} ms{r['p999_ms']:>8.3f} ms  {r['mean_batch']:>6}  {r['survives']}")
    rows.append(f"group / none = {result['group_vs_none']:.2f} (bar {BAR}: "
                f"{'met' if result['meets_bar'] else 'NOT met'}); {result['submitters']} submitters, {result['loop']}; "
                f"by round {', '.join(f'{r:.2f}' for r in result['group_vs_none_by_round'])}")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commands", type=int, default=200_000)
    parser.add_argument("--order-commands", type=int, default=5_000)
    parser.add_argument("--submitters", type=int, default=64)
    parser.add_argument("--uvloop", action="store_true")
    parser.add_argument("--rounds", type=int, default=5, help="none and group alternate this many times")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    result = run(args.commands, args.order_commands, args.submitters, args.uvloop, args.rounds)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
