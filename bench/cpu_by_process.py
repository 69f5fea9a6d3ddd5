"""CPU per order of each process under bench_e2e's load: the server, its sync helper, the load generator.

    .venv/bin/python bench/cpu_by_process.py                              # HTTP: none, group, bare
    .venv/bin/python bench/cpu_by_process.py --transport ws --modes none,group --rounds 4 --per-client 100

One server per mode (and the bare endpoint) runs throughout; the modes take turns over `--rounds`
rounds of 64 clients, as in bench_e2e.py. Around each turn the server's and its child processes' CPU
are read from /proc, and this process's own (it is the load generator). `cores busy` is all three over
wall time: below 2 on this machine, some process waited (for a sync, or for an answer).

A diagnostic for where a mode's cost goes, not a published figure; docs/design.md quotes it in
"Where group commit's end-to-end cost goes".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_e2e  # noqa: E402
from server_breakdown import _cpu_ticks  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def run(transport: str, modes: list[str], rounds: int, per_client: int) -> dict[str, dict[str, float]]:
    """Orders/s and CPU microseconds per order by process, for each mode over all its turns."""
    totals = {m: {"orders": 0.0, "wall": 0.0, "server": 0.0, "helper": 0.0, "loadgen": 0.0} for m in modes}
    with tempfile.TemporaryDirectory(prefix="tickflow-cpu-") as tmp:
        procs = {}
        try:
            for mode in modes:
                procs[mode] = bench_e2e._start(bench_e2e.server_command(Path(tmp) / mode, mode),
                                               Path(tmp) / f"{mode}.out")
            for mode in modes:  # warm-up, untimed
                asyncio.run(bench_e2e._load(procs[mode][1], transport, max(2, per_client // 4), 7, bare=mode == "bare"))
            for r in range(rounds):
                for mode in modes[r % len(modes):] + modes[:r % len(modes)]:
                    proc, port = procs[mode]
                    before = _cpu_ticks(proc.pid)
                    load0, wall0 = time.process_time(), time.perf_counter()
                    result = asyncio.run(bench_e2e._load(port, transport, per_client, 100 + r, bare=mode == "bare"))
                    t = totals[mode]
                    t["wall"] += time.perf_counter() - wall0
                    t["loadgen"] += time.process_time() - load0
                    after = _cpu_ticks(proc.pid)
                    spent = {k: (after[k] - before[k]) / TICK for k in after}
                    t["server"] += spent["event loop thread"] + spent["other threads (SQLite)"]
                    t["helper"] += spent["fsync helper process"]
                    t["orders"] += result["orders"]
        finally:
            for proc, _ in procs.values():
                bench_e2e._stop(proc)
    out = {}
    for mode, t in totals.items():
        n = t["orders"]
        out[mode] = {"orders_per_s": round(n / t["wall"]),
                     **{f"{k}_us": round(t[k] / n * 1e6, 1) for k in ("server", "helper", "loadgen")},
                     "cores_busy": round((t["server"] + t["helper"] + t["loadgen"]) / t["wall"], 2)}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", choices=("http", "ws"), default="http")
    p.add_argument("--modes", default="none,group,bare", help="durability modes, and `bare` (HTTP only)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--per-client", type=int, default=100, help="orders per client per round")
    args = p.parse_args()
    modes = args.modes.split(",")
    if args.transport == "ws" and "bare" in modes:
        p.error("the bare endpoint is HTTP only")
    for mode, row in run(args.transport, modes, args.rounds, args.per_client).items():
        print(f"{args.transport:4} {mode:6} {row['orders_per_s']:>8,}/s   CPU per order: "
              f"server {row['server_us']:5.1f} us  sync helper {row['helper_us']:4.1f} us  "
              f"load generator {row['loadgen_us']:5.1f} us"
              f"   cores busy {row['cores_busy']:.2f}")


if __name__ == "__main__":
    main()
