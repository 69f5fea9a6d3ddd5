"""Where a real server's time goes, per command, under bench_e2e's load.

    .venv/bin/python bench/server_breakdown.py                          # HTTP, durability group
    .venv/bin/python bench/server_breakdown.py --transport ws --durability none --per-client 1000

A `tickflow serve` child runs with a timer around each stage of the order path (the sequencer's
steps, the engine, the log write, the fsync hand-off, the feed, the HTTP codec) and a GC callback;
64 clients then place orders as in bench_e2e.py. Each timer costs 0.1-0.2 us a call, so stages
called per command read a little high. CPU per thread comes from /proc: the event loop's thread
against the rest (SQLite's threads) and the fsync helper process.

A diagnostic for finding what to make faster, not a published figure: stages overlap (an indented
stage is inside the one above it), and the totals depend on the machine's mood like everything else.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_e2e  # noqa: E402

# (depth, module, owner or None for a module function, attribute, what it is)
STAGES: tuple[tuple[int, str, str | None, str, str], ...] = (
    (0, "tickflow.net.wire.requests", None, "new_order", "parse and validate an order body"),
    (0, "tickflow.net.gateway.inputs", None, "account", "find the caller's account"),
    (0, "tickflow.net.exchange.sequencer", "Sequencer", "_write_and_apply", "take a batch: stamp, log, match"),
    (1, "tickflow.net.exchange.sequencer", "Sequencer", "_encode", "encode records, decode them back"),
    (1, "tickflow.store.log.wal", "Wal", "append", "frame and write the batch"),
    (1, "tickflow.core.engine", "Engine", "apply", "match one command"),
    (1, "tickflow.store.log.syncer", "ProcessSyncer", "grown", "tell the fsync helper the log grew"),
    (0, "tickflow.net.exchange.sequencer", "Sequencer", "_synced", "a sync returned: answer what it covers"),
    (0, "tickflow.net.exchange.sequencer", "Sequencer", "_resolve", "resolve callers, call listeners"),
    (1, "tickflow.net.exchange.fanout", "Feed", "publish", "market data mirrors and subscribers"),
    (1, "tickflow.net.exchange.trade_writer", "TradeWriter", "publish", "queue trades for SQLite"),
    (0, "tickflow.net.wire.answers", None, "answer", "encode the answer body"),
)


def _stage_name(module: str, owner: str | None, attr: str) -> str:
    return f"{owner or module.rsplit('.', 1)[-1]}.{attr}"


def _stat_ticks(stat: Path) -> int:
    """utime + stime of one thread, from its /proc stat line (fields after the command name)."""
    fields = stat.read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


# ------------------------------------------------------------------ inside the server


def _instrument() -> tuple[dict[str, list[float]], list[float]]:
    """Wrap every stage with a timer; returns {stage: [seconds, calls]} and [gc seconds, collections]."""
    import importlib

    totals: dict[str, list[float]] = {}
    wrapped: dict[Any, Any] = {}
    clock = time.perf_counter
    for _, module_name, owner_name, attr, _ in STAGES:
        module = importlib.import_module(module_name)
        owner = getattr(module, owner_name) if owner_name else module
        fn = getattr(owner, attr)  # fails loudly when a stage is renamed
        cell = totals[_stage_name(module_name, owner_name, attr)] = [0.0, 0]

        def timed(*args: Any, _fn: Callable[..., Any] = fn, _cell: list[float] = cell, **kwargs: Any) -> Any:
            started = clock()
            try:
                return _fn(*args, **kwargs)
            finally:
                _cell[0] += clock() - started
                _cell[1] += 1

        setattr(owner, attr, timed)
        wrapped[fn] = timed
    # A stage bound as a default argument (orders.execute's `answer`) is timed where it is bound too.
    from tickflow.net.gateway import orders

    for value in vars(orders).values():
        defaults = getattr(value, "__defaults__", None)
        if callable(value) and defaults:
            value.__defaults__ = tuple(wrapped.get(d, d) if callable(d) else d for d in defaults)
    in_gc = [0.0, 0, 0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            in_gc[2] = clock()
        else:
            in_gc[0] += clock() - in_gc[2]
            in_gc[1] += 1

    gc.callbacks.append(on_gc)
    return totals, in_gc


def child(report: str, serve_args: list[str]) -> int:
    totals, in_gc = _instrument()
    from tickflow.net import server
    from tickflow.net.exchange import sequencer

    made: list[Any] = []
    original_init = sequencer.Sequencer.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        made.append(self)

    sequencer.Sequencer.__init__ = keep  # type: ignore[method-assign]
    code = server.main(serve_args)
    stats = made[0].stats if made else None
    Path(report).write_text(json.dumps({
        "stages": totals, "gc": in_gc[:2],
        "commands": stats.commands if stats else 0, "batches": stats.batches if stats else 0,
        "syncs": stats.syncs if stats else 0}))
    return code


# ------------------------------------------------------------------ the parent


def _cpu_ticks(pid: int) -> dict[str, int]:
    """CPU ticks of the server's main thread, its other threads, and its child processes."""
    out = {"event loop thread": 0, "other threads (SQLite)": 0, "fsync helper process": 0}
    for task in Path(f"/proc/{pid}/task").iterdir():
        out["event loop thread" if int(task.name) == pid else "other threads (SQLite)"] += _stat_ticks(task / "stat")
        for kid in (task / "children").read_text().split():
            for kid_task in Path(f"/proc/{kid}/task").iterdir():
                out["fsync helper process"] += _stat_ticks(kid_task / "stat")
    return out


def run(transport: str, durability: str, per_client: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="tickflow-breakdown-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, os.path.abspath(__file__), "--child", str(report), "--", "--data",
               str(Path(tmp) / "data"), "--port", "0", "--durability", durability, "--symbols", "ACME", "--quiet"]
        proc, port = bench_e2e._start(cmd, Path(tmp) / "server.out")
        try:
            asyncio.run(bench_e2e._load(port, transport, max(2, per_client // 10), seed=7))  # warm up
            before = _cpu_ticks(proc.pid)
            load = asyncio.run(bench_e2e._load(port, transport, per_client, seed=8))
            after = _cpu_ticks(proc.pid)
        finally:
            bench_e2e._stop(proc)
        found = json.loads(report.read_text())
    n = found["commands"]
    tick = 1e6 / os.sysconf("SC_CLK_TCK")
    measured = load["orders"]
    return {
        "transport": transport, "durability": durability, "orders": measured,
        "orders_per_s": load["orders_per_s"], "commands_logged": n,
        "commands_per_batch": round(n / max(1, found["batches"]), 1),
        "commands_per_sync": round(n / found["syncs"], 1) if found["syncs"] else None,
        "cpu_us_per_order": {k: round((after[k] - before[k]) * tick / measured, 1) for k in after},
        "stages": [{"stage": name, "depth": depth, "what": what,
                    "us_per_command": round(found["stages"][name][0] / n * 1e6, 2),
                    "calls": found["stages"][name][1],
                    "us_per_call": round(found["stages"][name][0] / max(1, found["stages"][name][1]) * 1e6, 2)}
                   for (depth, module, owner, attr, what) in STAGES
                   for name in [_stage_name(module, owner, attr)]],
        "gc_us_per_command": round(found["gc"][0] / n * 1e6, 2), "gc_collections": found["gc"][1],
    }


def main() -> None:
    if "--child" in sys.argv:
        i = sys.argv.index("--child")
        raise SystemExit(child(sys.argv[i + 1], sys.argv[sys.argv.index("--") + 1:]))
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--transport", choices=("http", "ws"), default="http")
    p.add_argument("--durability", choices=("none", "group", "order"), default="group")
    p.add_argument("--per-client", type=int, default=1000, help="orders per client (64 clients)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    r = run(args.transport, args.durability, args.per_client)
    if args.json:
        print(json.dumps(r))
        return
    print(f"{r['transport']} {r['durability']}: {r['orders']:,} orders at {r['orders_per_s']:,}/s; "
          f"{r['commands_per_batch']} commands per batch"
          + (f", {r['commands_per_sync']} per fdatasync" if r["commands_per_sync"] else ""))
    print("CPU per order: " + ", ".join(f"{k} {v} us" for k, v in r["cpu_us_per_order"].items()))
    print(f"{'stage':<40} {'us/command':>10} {'calls':>8} {'us/call':>8}")
    for s in r["stages"]:
        name = "  " * s["depth"] + s["stage"]
        print(f"{name:<40} {s['us_per_command']:>10.2f} {s['calls']:>8} {s['us_per_call']:>8.2f}  {s['what']}")
    print(f"{'cyclic GC':<40} {r['gc_us_per_command']:>10.2f} {r['gc_collections']:>8}")


if __name__ == "__main__":
    main()
