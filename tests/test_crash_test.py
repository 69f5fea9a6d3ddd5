"""python/crash_test.py end to end: short kill -9 runs in every durability mode, and proof that it
notices a server that loses acknowledged orders (the test of the test)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "python" / "crash_test.py"
LOST_LINE = re.compile(r"^([\d,]+) lost of ([\d,]+) acknowledged orders$", re.M)


def crash_test(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "out"
    summary = tmp_path / "summary.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--rounds", "2", "--clients", "4", "--kill-min", "0.6", "--kill-max", "1.0",
         "--seed", "7", "--out", str(out), "--json", str(summary), "--timeout", "90", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    data = json.loads(summary.read_text()) if summary.exists() else {}
    return proc, data


@pytest.mark.parametrize("durability", ["none", "group", "order"])
def test_nothing_acknowledged_is_lost_across_kill_9(tmp_path: Path, durability: str) -> None:
    # A snapshot every 25 records: kills land before, during and after snapshots are written and published.
    # Each kill waits for 60 orders of its round acknowledged, however long a busy machine takes for them.
    proc, summary = crash_test(tmp_path, "--durability", durability, "--snapshot-every", "25", "--min-acks", "60")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = LOST_LINE.search(proc.stdout)
    assert line and line.group(1) == "0", proc.stdout
    assert "\n0 unexpected\n" in proc.stdout, proc.stdout
    totals = summary["totals"]
    assert summary["ok"] and totals["lost"] == totals["unexpected"] == totals["violations"] == 0
    assert totals["acknowledged_orders"] > 100  # the clients really traded
    assert totals["trades"] > 0
    assert len(summary["rounds"]) == 2
    assert all(r["in_flight_at_kill"] > 0 and r["restart_ms"] > 0 for r in summary["rounds"])
    assert summary["clean_restart"]["exit_status"] == 0
    assert (tmp_path / "out" / "crash_test.txt").exists()
    assert not (tmp_path / "out" / "data").exists()  # removed when everything passed


def test_a_server_that_acks_before_writing_is_caught(tmp_path: Path) -> None:
    """Hold the last records back from the log after acknowledging them: the kill must show losses."""
    wrapper = tmp_path / "leaky_server.py"
    wrapper.write_text(textwrap.dedent("""
        import sys
        from tickflow.store.log import wal
        from tickflow.net import server

        append = wal.Wal.append
        held = []

        def leaky_append(self, payloads):
            held.extend(payloads)
            if len(held) >= 200:
                append(self, list(held))
                held.clear()

        wal.Wal.append = leaky_append
        sys.exit(server.main(sys.argv[1:]))
    """))
    proc, summary = crash_test(tmp_path, "--durability", "none", "--server-cmd", f"{sys.executable} {wrapper}")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert summary["totals"]["lost"] > 0
    assert summary["totals"]["lost_orders"] > 0
    line = LOST_LINE.search(proc.stdout)
    assert line and line.group(1) != "0", proc.stdout
    assert (tmp_path / "out" / "data").exists()  # kept for a post-mortem
