"""What an fdatasync costs the process that did not ask for it: in-process `none` with a syncing neighbour.

    .venv/bin/python bench/bench_sync_cost.py [--commands N] [--rounds 6] [--submitters 64]
                                              [--neighbour append|overwrite|wake] [--json]

Three arms take turns in every round, each on a fresh log, with bench_commit's closed-loop submitters:

- `none`: the sequencer with no syncs at all;
- `group`: group commit, as in bench_commit (the fsync helper process syncs the log);
- `none + neighbour`: `none` again, while an unrelated process appends about a batch's bytes to a file of
  its own and fdatasyncs it, paced at the rate `group` synced in the same round.

`--neighbour overwrite` makes the neighbour overwrite a zero-filled file instead (no new size to
commit, as a preallocated log would); `--neighbour wake` makes it only wake up at that rate, with no
disk traffic at all. The sequencer in the third arm does exactly the work of the first; only the disk traffic of another
process differs. If it is much slower than `none`, part of what group commit costs here is not waiting
for the sync and not our code on the path, but the sync itself slowing this process down (on this
virtual machine the flush goes through the host). The CPU columns split user and system time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from bench_commit import _measure  # noqa: E402

ARMS = ("none", "group", "none + neighbour")
BATCH_BYTES = 64 * 80
"""About what one group-commit batch of the standard workload writes (64 records of about 80 bytes)."""


KINDS = ("append", "overwrite", "wake")
OVERWRITE_SPACE = 256 << 20


def neighbour(path: str, rate: float, kind: str, seconds: float) -> None:
    """Write a batch's worth of bytes and fdatasync (or, for `wake`, only wake up), `rate` times a
    second, until killed or `seconds` pass."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | (os.O_APPEND if kind == "append" else 0), 0o644)
    if kind == "overwrite":
        os.write(fd, bytes(OVERWRITE_SPACE))
        os.fsync(fd)
        os.lseek(fd, 0, os.SEEK_SET)
    data = b"x" * BATCH_BYTES
    print("ready", flush=True)
    interval = 1.0 / rate
    started = next_at = time.monotonic()
    try:
        while time.monotonic() - started < seconds:
            if kind != "wake":
                os.write(fd, data)
                os.fdatasync(fd)
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            else:
                next_at = time.monotonic()  # behind: do not burst to catch up
    finally:
        os.close(fd)


def _one(path: str, mode: str, commands: int, submitters: int) -> dict:
    return asyncio.run(_measure(path, mode, commands, submitters))


def run(commands: int = 60_000, rounds: int = 6, submitters: int = 64, kind: str = "append") -> dict:
    runs: dict[str, list[dict]] = {arm: [] for arm in ARMS}
    neighbour_syncs_per_s = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(rounds):
            order = ARMS if i % 2 == 0 else ("none + neighbour", "none", "group")
            done: dict[str, dict] = {}
            for arm in order:
                if arm == "none + neighbour":
                    # The group arm's own sync rate; in odd rounds it has not run yet, so the last round's.
                    group = done.get("group") or (runs["group"][-1] if runs["group"] else None)
                    rate = group["syncs"] / group["seconds"] if group else 2000.0
                    side = os.path.join(tmp, f"neighbour-{i}.bin")
                    proc = subprocess.Popen([sys.executable, __file__, "--neighbour-process", side, str(rate), kind],
                                            stdout=subprocess.PIPE)
                    assert proc.stdout is not None
                    proc.stdout.readline()  # it is ready (an overwrite neighbour has zero-filled its file)
                    time.sleep(0.2)  # and has reached its pace
                    try:
                        done[arm] = _one(os.path.join(tmp, f"nn-{i}.wal"), "none", commands, submitters)
                    finally:
                        proc.kill()
                        proc.wait()
                    neighbour_syncs_per_s.append(rate)
                else:
                    done[arm] = _one(os.path.join(tmp, f"{arm}-{i}.wal"), arm, commands, submitters)
            for arm, r in done.items():
                runs[arm].append(r)

    def summary(arm: str) -> dict:
        rs = runs[arm]
        n = sum(len(r["latencies"]) for r in rs)
        seconds = sum(r["seconds"] for r in rs)
        return {"arm": arm, "commands_per_s": round(n / seconds),
                "user_us_per_command": round(sum(r["user"] for r in rs) / n * 1e6, 2),
                "system_us_per_command": round(sum(r["system"] for r in rs) / n * 1e6, 2),
                "cpu_busy": round(sum(r["cpu"] for r in rs) / seconds, 2),
                "syncs_per_s": round(sum(r["syncs"] for r in rs) / seconds)}

    arms = {arm: summary(arm) for arm in ARMS}
    base = arms["none"]["commands_per_s"]
    return {
        "submitters": submitters, "rounds": rounds, "commands_per_round": commands, "neighbour": kind,
        "arms": list(arms.values()),
        "neighbour_syncs_per_s": round(sum(neighbour_syncs_per_s) / len(neighbour_syncs_per_s)),
        "group_vs_none": round(arms["group"]["commands_per_s"] / base, 3),
        "neighbour_vs_none": round(arms["none + neighbour"]["commands_per_s"] / base, 3),
        "by_round": [{arm: round(len(runs[arm][i]["latencies"]) / runs[arm][i]["seconds"]) for arm in ARMS}
                     for i in range(rounds)],
    }


def table(r: dict) -> str:
    rows = [f"{'arm':<20}{'cmds/s':>10}{'user us/cmd':>13}{'sys us/cmd':>12}{'busy':>6}{'syncs/s':>9}"]
    for a in r["arms"]:
        rows.append(f"{a['arm']:<20}{a['commands_per_s']:>10,}{a['user_us_per_command']:>13}"
                    f"{a['system_us_per_command']:>12}{a['cpu_busy']:>6}{a['syncs_per_s']:>9,}")
    doing = "waking" if r["neighbour"] == "wake" else f"syncing ({r['neighbour']})"
    rows.append(f"group / none = {r['group_vs_none']:.2f}; none with a neighbour {doing} "
                f"{r['neighbour_syncs_per_s']:,}/s / none = {r['neighbour_vs_none']:.2f} "
                f"({r['submitters']} submitters, {r['rounds']} rounds)")
    return "\n".join(rows)


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--neighbour-process":
        neighbour(sys.argv[2], float(sys.argv[3]), sys.argv[4], seconds=600)
        return
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--commands", type=int, default=60_000, help="commands per arm per round")
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--submitters", type=int, default=64)
    p.add_argument("--neighbour", choices=KINDS, default="append",
                   help="what the neighbour does at group's sync rate: append+fdatasync, overwrite+fdatasync, wake only")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args()
    result = run(args.commands, args.rounds, args.submitters, args.neighbour)
    print(json.dumps(result) if args.json else table(result))


if __name__ == "__main__":
    main()
