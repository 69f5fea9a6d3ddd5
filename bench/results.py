"""Every published figure from one command: run the benchmarks and the crash test, write docs/results.md.

    .venv/bin/python bench/results.py                  # the full run (about 10-15 minutes on 2 cores)
    .venv/bin/python bench/results.py --quick          # smaller sizes, to check the pipeline works
    .venv/bin/python bench/results.py --only e2e       # re-run some sections; the rest are kept from
                                                       # docs/results.json, each with its own command

Each benchmark runs in its own process (`bench/<name>.py --json`), so one's garbage, caches or event loop
never colours another's. The tables go to docs/results.md with the machine they were measured on and the
exact commands, a chart to docs/results.png, and the latency table into the README between its markers.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
README_START = "<!-- results:start -->"
README_END = "<!-- results:end -->"


def yardstick() -> tuple[float, float]:
    """How fast this shared machine runs the interpreter right now: millions of steps/s of a fixed loop
    (compute), and millions of dict inserts and lookups/s over 500k random keys (memory), best of a few.
    Its speed swings by 2-3x between hours, and the memory-heavy kind (the engine, replay) most, so each
    section records both, taken just before it ran."""
    best = float("inf")
    for _ in range(3):
        started = time.perf_counter()
        total = 0
        for i in range(2_000_000):
            total += i
        best = min(best, time.perf_counter() - started)
    rng = random.Random(7)
    keys = [rng.getrandbits(40) for _ in range(500_000)]
    order = keys[:]
    rng.shuffle(order)
    best_dict = float("inf")
    for _ in range(2):
        started = time.perf_counter()
        table = {k: [k, k + 1, None] for k in keys}
        for k in order:
            total += table[k][0]
        best_dict = min(best_dict, time.perf_counter() - started)
        del table
    return round(2.0 / best, 1), round(1.0 / best_dict, 2)


def _run(name: str, cmd: list[str]) -> dict[str, Any]:
    speed = yardstick()
    print(f"running {name} (yardstick: {speed[0]} M steps/s, {speed[1]} M dict ops/s): {' '.join(cmd)}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    result = json.loads(lines[-1])
    result["_command"] = " ".join(["python", *cmd[1:]]).replace(str(ROOT) + "/", "")
    result["_seconds"] = round(time.monotonic() - started, 1)
    result["_yardstick"] = list(speed)
    return result


SECTIONS = ("engine", "log", "commit", "commit256", "synccost", "e2e", "bars")


def machine() -> dict[str, str]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 1024 / 1024:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    fs = "unknown"
    try:
        out = subprocess.run(["df", "-T", str(Path(os.environ.get("TMPDIR", "/tmp")))], capture_output=True, text=True)
        fs = out.stdout.splitlines()[1].split()[1]
    except (OSError, IndexError):
        pass
    import aiohttp
    import msgspec

    return {
        "cpu": f"{cpu}, {os.cpu_count()} cores",
        "memory": mem,
        "os": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": f"aiohttp {aiohttp.__version__}, msgspec {msgspec.__version__}",
        "temp file system": fs,
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _ms(x: float) -> str:
    return f"{x * 1000:.0f} µs" if x < 1 else f"{x:.1f} ms" if x < 100 else f"{x:.0f} ms"


def _us(x: float) -> str:
    return f"{x:.1f} µs" if x < 1000 else _ms(x / 1000)


def latency_table(r: dict[str, Any]) -> list[str]:
    rows = ["| Path | Orders/s | p50 | p99 | p99.9 | Survives |", "| --- | ---: | ---: | ---: | ---: | --- |"]
    eng = r.get("engine")
    if eng:
        mine = eng["results"][eng["headline"]]["tickflow"]
        theirs = eng["results"][eng["headline"]].get("pyorderbook")
        rows.append(f"| Matching engine alone | {mine['commands_per_s']:,} | {_us(mine['p50_us'])} | "
                    f"{_us(mine['p99_us'])} | {_us(mine['p999_us'])} | n/a |")
        if theirs:
            rows.append(f"| pyorderbook 0.4.9, same workload | {theirs['commands_per_s']:,} | {_us(theirs['p50_us'])} | "
                        f"{_us(theirs['p99_us'])} | {_us(theirs['p999_us'])} | n/a |")
    commit = r.get("commit")
    if commit:
        names = {"none": "Sequencer + log in-process, no fsync", "group": "Sequencer + log in-process, group commit",
                 "order": "Sequencer + log in-process, fsync per order"}
        for m in commit["modes"]:
            rows.append(f"| {names[m['mode']]} | {m['commands_per_s']:,} | {_ms(m['p50_ms'])} | {_ms(m['p99_ms'])} | "
                        f"{_ms(m['p999_ms'])} | {m['survives']} |")
    e2e = r.get("e2e")
    if e2e:
        for row in e2e["rows"]:
            if row["transport"] in ("wsbatch", "quote"):
                continue  # in their own table (batch_table)
            if row["mode"] == "bare":
                path = "Bare aiohttp endpoint, same JSON, no engine (HTTP)"
            else:
                path = f"End to end, {MODE_LABEL[row['mode']]} ({'HTTP' if row['transport'] == 'http' else 'WebSocket'})"
            rows.append(f"| {path} | {row['orders_per_s']:,} | {_ms(row['p50_ms'])} | {_ms(row['p99_ms'])} | "
                        f"{_ms(row['p999_ms'])} | {SURVIVES[row['mode']]} |")
    return rows


SURVIVES = {"none": "process crash", "group": "power loss", "order": "power loss", "bare": "nothing"}
MODE_LABEL = {"none": "no fsync", "group": "group commit", "order": "fsync per order"}


def _cpu(row: dict[str, Any]) -> str:
    """The server process's CPU per order of a bench_e2e row (a run from before it was measured: -)."""
    return f"{row['server_us_per_order']} µs" if "server_us_per_order" in row else "-"


def batch_table(e2e: dict[str, Any]) -> list[str]:
    """Batches and mass quotes (issue 28), beside the single-order WebSocket row and the in-process
    sequencer with `none` at 256 submitters, all from the same run of bench_e2e.py."""
    rows = [r for r in e2e["rows"] if r["transport"] in ("wsbatch", "quote")]
    if not rows:
        return []
    b, q = e2e.get("batch", {"connections": 16, "ops": 64}), e2e.get("quote", {})
    out = ["## Batches and mass quotes", "",
           f"{b['connections']} WebSockets each keep one batch of {b['ops']} ops in flight (the mix above: 90% "
           "orders, 10% cancels of the connection's earlier orders); p50 and p99 are a batch's answer. "
           f"Quoting: {q.get('makers', 8)} makers each re-quote {q.get('levels_a_side', 10)} levels a side (one mass "
           f"quote, one logged command) as soon as the last is answered, while {q.get('takers', 8)} takers send IOC "
           "orders against them, one in flight each; its orders/s counts the levels quoted (20 a quote), p50 and "
           "p99 are a quote's answer. Measured in the same run as the rows above, in alternating rounds with them "
           "(durability=order after). Server CPU/order: the server process's CPU time over the orders (not its "
           "sync helper's), read from /proc around each round; for quoting, per level quoted, the takers' work "
           "included.", "",
           "| Path | Orders/s | Batches/s | p50 | p99 | p99.9 | Server CPU/order | Survives |",
           "| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    single = next((r for r in e2e["rows"] if (r["transport"], r["mode"]) == ("ws", "group")), None)
    if single:
        out.append(f"| Single orders, group commit (WebSocket, 64 clients) | {single['orders_per_s']:,} | - | "
                   f"{_ms(single['p50_ms'])} | {_ms(single['p99_ms'])} | {_ms(single['p999_ms'])} | {_cpu(single)} | "
                   "power loss |")
    ref = e2e.get("inprocess")
    if ref:
        out.append(f"| Sequencer + log in-process, no fsync, {ref['submitters']} submitters | {ref['orders_per_s']:,} | "
                   f"- | {_ms(ref['p50_ms'])} | {_ms(ref['p99_ms'])} | {_ms(ref['p999_ms'])} | - | process crash |")
    for row in rows:
        if row["transport"] == "wsbatch":
            out.append(f"| Batches of {b['ops']}, {MODE_LABEL[row['mode']]} (WebSocket) | {row['orders_per_s']:,} | "
                       f"{row.get('batches_per_s', 0):,} | {_ms(row['p50_ms'])} | {_ms(row['p99_ms'])} | "
                       f"{_ms(row['p999_ms'])} | {_cpu(row)} | {SURVIVES[row['mode']]} |")
        else:
            out.append(f"| Mass quotes, {MODE_LABEL[row['mode']]} (WebSocket, quote levels) | {row['orders_per_s']:,} | "
                       f"{row['quotes_per_s']:,} quotes | {_ms(row['p50_ms'])} | {_ms(row['p99_ms'])} | "
                       f"{_ms(row['p999_ms'])} | {_cpu(row)} | {SURVIVES[row['mode']]} |")
    for row in rows:
        if row["transport"] == "quote":
            out += ["", f"The takers meanwhile: {row['taker_orders_per_s']:,} IOC orders/s (p50 "
                        f"{_ms(row['taker_p50_ms'])}, p99 {_ms(row['taker_p99_ms'])}); {row['taker_orders']:,} "
                        f"orders took {row['taker_filled']:,} of the quoted quantity."]
    if ref:
        out += ["", f"The in-process row: `{ref['command']}` (its `none` row), run by bench_e2e.py in a process "
                    "of its own, taking its turn in each round with the rows above (orders/s over all rounds; "
                    "latencies the median of the rounds'). The seed's end-to-end group-commit figure, 20,318 "
                    "orders/s, was measured on another machine: a reference, not a comparison."]
    return out


def bars_table(b: dict[str, Any]) -> list[str]:
    seed = b["seed"]
    return [
        "| Minute OHLC + VWAP over 1M trades | with the index | without | index speed-up |",
        "| --- | ---: | ---: | ---: |",
        f"| Last hour (tickflow) | {b['hour_ms_with_index']:.1f} ms | {b['hour_ms_without_index']:.1f} ms | "
        f"{b['hour_speedup']}× |",
        f"| Full day (tickflow) | {b['day_ms_with_index']:.1f} ms | {b['day_ms_without_index']:.1f} ms | "
        f"{b['day_speedup']}× |",
        f"| Last hour (the C# seed) | {seed['hour_index']} ms | {seed['hour_no_index']} ms | "
        f"{seed['hour_no_index'] / seed['hour_index']:.1f}× |",
    ]


def checks(r: dict[str, Any]) -> list[str]:
    """The bars the issues set, each with the figure measured in this run."""
    out = []

    def line(ok: bool, text: str) -> None:
        out.append(f"- {'✅' if ok else '❌'} {text}")

    def by_round(ratios: list[float]) -> str:
        return f"; by round {', '.join(f'{x:.2f}' for x in ratios)}" if ratios else ""

    if "engine" in r:
        headline = r["engine"].get("headline", "in_call_gc_off")
        others = []
        for key, row in r["engine"]["results"].items():
            if "ratio" not in row:
                continue
            if key == headline:
                line(row["ratio"] >= 3, f"engine vs pyorderbook ({row['label']}, the headline pass): "
                                        f"{row['ratio']}× (bar: at least 3×)")
            else:
                others.append(f"{row['label']} {row['ratio']}×")
        if others:
            out.append(f"  - the other passes, for reading the headline: {'; '.join(others)}")
    if "log" in r:
        line(r["log"]["records_per_s"] >= 300_000,
             f"replay of a {r['log']['records']:,}-record log: {r['log']['records_per_s']:,} records/s (bar: 300,000)")
    if "commit" in r:
        c = r["commit"]
        line(c["group_vs_none"] >= 0.8, f"in-process group commit vs none: {c['group_vs_none']:.3f}× (bar: 0.8×)"
             + by_round(c.get("group_vs_none_by_round", [])))
        if "commit256" in r:
            c = r["commit256"]
            out.append(f"  - the same with {c['submitters']} submitters: {c['group_vs_none']:.3f}×"
                       + by_round(c.get("group_vs_none_by_round", [])))
        if "synccost" in r:
            c = r["synccost"]
            arms = {a["arm"]: a for a in c["arms"]}
            out.append(f"  - `none` while an unrelated process appends and fdatasyncs its own file at group's sync rate "
                       f"({c['neighbour_syncs_per_s']:,}/s): {c['neighbour_vs_none']:.3f}× of `none` alone, against "
                       f"{c['group_vs_none']:.3f}× for group in the same run (user CPU per command "
                       f"{arms['none']['user_us_per_command']} → {arms['none + neighbour']['user_us_per_command']} µs, "
                       f"system {arms['none']['system_us_per_command']} → {arms['none + neighbour']['system_us_per_command']} µs)")
    if "e2e" in r:
        q = r["e2e"]["ratios"]
        rounds = r["e2e"].get("ratios_by_round", [])

        def e2e(name: str, ok: bool, text: str) -> None:
            line(ok, text + by_round([x[name] for x in rounds if name in x]))

        if "http group / none" in q:
            e2e("http group / none", q["http group / none"] >= 0.8,
                f"HTTP group commit vs none: {q['http group / none']:.3f}× (bar: 0.8×)")
        if "ws group / none" in q:
            e2e("ws group / none", q["ws group / none"] >= 0.8,
                f"WebSocket group commit vs none: {q['ws group / none']:.3f}× (bar: 0.8×)")
        if "http group / bare endpoint" in q:
            e2e("http group / bare endpoint", q["http group / bare endpoint"] >= 0.6,
                f"full order path over HTTP vs the bare endpoint: {q['http group / bare endpoint']:.3f}× (bar: 0.6×)")
        if "ws / http (group)" in q:
            e2e("ws / http (group)", q["ws / http (group)"] > 1,
                f"WebSocket order entry vs HTTP: {q['ws / http (group)']:.2f}× (bar: above 1×)")
        name = "ws batch / ws single (group)"
        if name in q:
            e2e(name, q[name] >= 3, f"batched WebSocket vs single-order WebSocket, group commit: {q[name]:.2f}× "
                                    "(bar: at least 3×)")
        name = "ws batch group / in-process none@256"
        if name in q:
            e2e(name, q[name] >= 0.5, f"batched WebSocket with group commit vs the in-process sequencer with none "
                                      f"at 256 submitters: {q[name]:.2f}× (bar: at least 0.5×)")
    if "crash" in r:
        for mode, c in r["crash"].items():
            line(c["lost"] == 0 and c["unexpected"] == 0,
                 f"crash test, {mode}: {c['lost']} lost of {c['acknowledged']:,} acknowledged orders, "
                 f"{c['unexpected']} unexpected, {c['rounds']} rounds of kill -9")
    return out


def chart(r: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    rows = [x for x in r.get("e2e", {}).get("rows", []) if x["mode"] != "bare" and x["transport"] in ("http", "ws")]
    if not rows:
        return False
    modes = ["none", "group", "order"]
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(11, 4.2))
    width = 0.38
    for i, transport in enumerate(("http", "ws")):
        by = {x["mode"]: x for x in rows if x["transport"] == transport}
        xs = [j + (i - 0.5) * width for j in range(len(modes))]
        a1.bar(xs, [by[m]["orders_per_s"] if m in by else 0 for m in modes], width,
               label="HTTP" if transport == "http" else "WebSocket")
        a2.bar(xs, [by[m]["p99_ms"] if m in by else 0 for m in modes], width,
               label=f"{'HTTP' if transport == 'http' else 'WebSocket'} p99")
        a2.scatter(xs, [by[m]["p50_ms"] if m in by else 0 for m in modes], color="black", zorder=3, s=12,
                   label="p50" if i == 0 else None)
    for ax, title, unit in ((a1, "Throughput, 64 clients", "orders/s"), (a2, "Latency, 64 clients", "ms (log)")):
        ax.set_xticks(range(len(modes)), ["no fsync", "group commit", "fsync per order"])
        ax.set_title(title)
        ax.set_ylabel(unit)
        ax.legend()
    a2.set_yscale("log")
    fig.suptitle("tickflow end to end, by durability mode")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def render(r: dict[str, Any], commands: list[str]) -> str:
    m = r["machine"]
    lines = ["# tickflow: measured results", "",
             "Written by `python bench/results.py` (a section re-run with `--only` replaces just that section; "
             "the commands at the end say what produced each), on this machine:", ""]
    lines += [f"- {k}: {v}" for k, v in m.items()]
    lines += ["", "The machine is shared and noisy: repeats vary by up to 2×, and its disk's fdatasync latency drifts "
              "within minutes. Ratios compare modes measured in alternating rounds of one run; each round's "
              "ratio is listed beside the bars.", "",
              "## Latency by path", "",
              "End-to-end rows: 64 clients, one order in flight each (90% limits that rest or cross, 10% cancels), "
              "load generator in a separate process on the same 2 cores. In-process rows: 64 submitter tasks "
              "on the server's own event loop. Engine rows: 1,000,000 commands of the standard workload, "
              "cyclic GC kept out of the timed pass.", ""]
    lines += latency_table(r)
    if "engine" in r:
        lines += ["", "The engine against pyorderbook 0.4.9 on the same 1,000,000 commands (best of "
                      f"{r['engine']['repeats']} runs; \"in call\": each library's order object is built inside "
                      "the timed call from the same plain fields, \"prebuilt\": built before the clock starts):", "",
                  "| pass | tickflow cmd/s | p99.9 | worst call | pyorderbook cmd/s | ratio |",
                  "| --- | ---: | ---: | ---: | ---: | ---: |"]
        for row in r["engine"]["results"].values():
            mine, theirs = row["tickflow"], row.get("pyorderbook")
            other = f"{theirs['commands_per_s']:,}" if theirs else "-"
            lines.append(f"| {row['label']} | {mine['commands_per_s']:,} | {_us(mine['p999_us'])} | "
                         f"{_us(mine['max_us'])} | {other} | {row.get('ratio', '-')}× |")
    if "log" in r:
        lines += ["", f"Replay of a {r['log']['records']:,}-record log (read, check, decode, apply, as a start "
                      f"does: no answers built, {r['log'].get('framed_by_helper', 0):,} records framed by the "
                      f"helper process on the other core): **{r['log']['records_per_s']:,} records/s**, "
                      f"deterministic: {r['log']['deterministic']}."]
    if "e2e" in r and batch_table(r["e2e"]):
        lines += [""] + batch_table(r["e2e"])
    if "bars" in r:
        lines += ["", "## SQL bars", ""] + bars_table(r["bars"])
        lines += ["", f"Built through the trade store at {r['bars']['insert_trades_per_s']:,} trades/s. "
                      "The shipped query aggregates each bucket in one pass over a covering index and reads "
                      "open and close by primary key; the window-function form (FIRST_VALUE over each bucket) "
                      "returns the same rows and is measured beside it in `bench/bench_bars.py`."]
        by_commit = r["bars"].get("insert_cpu_us_per_trade_by_commit")
        if by_commit:
            lines += ["", "CPU a trade costs to insert, by trades per commit (64 accounts; the trade writer's "
                          "100 ms linger sets the commit size): " + ", ".join(
                              f"{size}: {us} µs" for size, us in by_commit.items()) + "."]
    if "crash" in r:
        lines += ["", "## kill -9 (python/crash_test.py)", "",
                  "| mode | rounds | clients | acknowledged orders | acked cancels/amends | indeterminate | lost | "
                  "unexpected | restart (median / max) |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
        for mode, c in r["crash"].items():
            lines.append(f"| {mode} | {c['rounds']} | {c['clients']} | {c['acknowledged']:,} | {c['cancels_amends']:,} | "
                         f"{c['indeterminate']:,} | {c['lost']} | {c['unexpected']} | "
                         f"{c['restart_ms_median']:.0f} / {c['restart_ms_max']:.0f} ms |")
    lines += ["", "## The bars", ""] + checks(r)
    if r.get("chart"):
        lines += ["", "![throughput and latency by durability mode](results.png)"]
    lines += ["", "## Commands", "", "All of them, and this page: `python bench/results.py`. One by one:", "", "```sh"]
    lines += commands + ["```", ""]
    speeds = [(name, r[name]["_yardstick"]) for name in SECTIONS if name in r and "_yardstick" in r[name]]
    if speeds:
        lines += ["The machine's speed when each section started (`yardstick()` in bench/results.py: a fixed "
                  "pure-Python loop, and dict inserts and lookups over 500k random keys). Absolute figures such as "
                  "replay's records/s move with it, the memory-heavy ones most; the ratios are measured in "
                  "alternating rounds and move much less.", "",
                  "| section | loop, M steps/s | dict, M ops/s |", "| --- | ---: | ---: |"]
        lines += [f"| {name} | {_speeds(speed)} |" for name, speed in speeds] + [""]
    return "\n".join(lines)


def _speeds(speed: float | list[float]) -> str:
    """A section's yardstick as table cells (runs before the dict yardstick recorded the loop only)."""
    loop, memory = (speed, None) if isinstance(speed, (int, float)) else speed
    return f"{loop} | {memory if memory is not None else '-'}"


def update_readme(table: list[str]) -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    readme.write_text(head + README_START + "\n" + "\n".join(table) + "\n" + README_END + tail)


HAND_START = "<!-- by hand: kept as it is by bench/results.py -->"
HAND_END = "<!-- end by hand -->"


def write_page(out: Path, text: str) -> None:
    """Write the page, keeping its hand-measured part (between HAND_START and HAND_END) at its end."""
    old = out.read_text() if out.exists() else ""
    start, end = old.find(HAND_START), old.find(HAND_END)
    if 0 <= start < end:
        text = text.rstrip("\n") + "\n\n" + old[start:end + len(HAND_END)] + "\n"
    out.write_text(text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="small sizes: check the pipeline, not the figures")
    p.add_argument("--crash-rounds", type=int, default=10, help="rounds of kill -9 per mode (0 skips)")
    p.add_argument("--only", help="comma-separated subset of engine,log,commit,commit256,synccost,e2e,bars,crash")
    p.add_argument("--out", default=str(ROOT / "docs" / "results.md"))
    p.add_argument("--render", metavar="JSON", help="only re-render docs from a saved docs/results.json")
    args = p.parse_args()
    if args.render:
        saved = json.loads(Path(args.render).read_text())
        saved["chart"] = chart(saved, Path(args.out).with_name("results.png"))
        write_page(Path(args.out), render(saved, saved.get("commands", [])))
        update_readme(latency_table(saved))
        return
    q = args.quick
    plan: dict[str, list[str]] = {
        "engine": [PY, "bench/bench_engine.py", "--json"] + (["--commands", "100000"] if q else []),
        "log": [PY, "bench/bench_log.py", "--json"] + (["--commands", "100000", "--repeats", "1"] if q else []),
        "commit": [PY, "bench/bench_commit.py", "--json"] + (["--commands", "20000", "--order-commands", "500"] if q else []),
        # The same at four times the concurrency: how the group/none ratio depends on submitters.
        "commit256": [PY, "bench/bench_commit.py", "--json", "--submitters", "256", "--order-commands", "200"]
                     + (["--commands", "20000"] if q else []),
        # What the syncs cost a process that does not wait for them: bounds the in-process group ratio.
        "synccost": [PY, "bench/bench_sync_cost.py", "--json"] + (["--commands", "10000", "--rounds", "2"] if q else []),
        "e2e": [PY, "bench/bench_e2e.py", "--json"] + (["--per-client", "50", "--order-per-client", "4"] if q else []),
        "bars": [PY, "bench/bench_bars.py", "--json"] + (["--trades", "100000", "--repeats", "2"] if q else []),
    }
    only = set(args.only.split(",")) if args.only else set(plan) | {"crash"}
    saved_path = Path(args.out).with_suffix(".json")
    results: dict[str, Any] = {}
    if args.only and not q and saved_path.exists():  # a partial run updates the published figures
        results = {k: v for k, v in json.loads(saved_path.read_text()).items() if k not in only}
    results["machine"] = machine()
    for name, cmd in plan.items():
        if name in only:
            results[name] = _run(name, cmd)
    if "crash" in only and args.crash_rounds > 0:
        results["crash"] = {}
        rounds = 2 if q else args.crash_rounds
        for mode in ("none", "group", "order"):
            out = Path(args.out).with_name(f"crash-{mode}.json")
            cmd = [PY, "python/crash_test.py", "--rounds", str(rounds), "--clients", "32", "--durability", mode,
                   "--seed", "1", "--json", str(out)]
            print(f"running crash test ({mode}): {' '.join(cmd)}", file=sys.stderr, flush=True)
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
            summary = json.loads(out.read_text())
            t = summary["totals"]
            results["crash"][mode] = {
                "rounds": rounds, "clients": 32, "acknowledged": t["acknowledged_orders"],
                "acknowledged_before_kill": t["acknowledged_before_kill"],
                "indeterminate": t["indeterminate_orders"], "cancels_amends": t["acknowledged_cancels_amends"],
                "lost": t["lost"], "unexpected": t["unexpected"], "violations": t["violations"],
                "trades": t["trades"], "restart_ms_median": t["restart_ms"]["median"],
                "restart_ms_max": t["restart_ms"]["max"], "exit": proc.returncode,
                "command": " ".join(["python", *cmd[1:]]).replace(str(ROOT) + "/", "")}
            out.unlink(missing_ok=True)
    commands = [results[name]["_command"] for name in plan if name in results]
    commands += [c["command"] for c in results.get("crash", {}).values() if "command" in c]
    results["commands"] = commands
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))  # before anything can fail
    results["chart"] = chart(results, Path(args.out).with_name("results.png"))
    text = render(results, commands)
    write_page(Path(args.out), text)
    Path(args.out).with_suffix(".json").write_text(json.dumps(results, indent=1))
    if not q:
        update_readme(latency_table(results))
    print(text)


if __name__ == "__main__":
    main()
