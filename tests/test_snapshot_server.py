"""Snapshots in a running server: taken as records pass (a fork()ed writer), used by the next start, shown
in /health and /metrics; a failed one costs nothing but itself."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path
from typing import Any

from helpers.wait import wait_until
from server_process import ServerProcess


def _call(server: ServerProcess, method: str, path: str, body: Any = None, token: str = "alice") -> Any:
    request = urllib.request.Request(server.url + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Authorization": f"Bearer {token}",
                                              "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _metrics(server: ServerProcess) -> dict[str, float]:
    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as response:
        lines = response.read().decode().splitlines()
    return {name: float(value) for name, value in (line.split(" ", 1) for line in lines if not line.startswith("#"))}


def _place(server: ServerProcess, n: int) -> list[tuple[int, str]]:
    placed = []
    for i in range(n):
        account = f"a{i % 3}"
        order = _call(server, "POST", "/orders", {"symbol": "ACME", "side": "buy" if i % 2 else "sell",
                                                  "price": 100 + i % 7 - 3, "qty": 5}, account)
        placed.append((order["orderId"], account))
    return placed


def test_a_restart_starts_from_the_newest_snapshot_and_loses_nothing(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--snapshot-every", "40"]).start()
    try:
        placed = _place(server, 150)
        states = {i: _call(server, "GET", f"/orders/{i}", token=a) for i, a in placed}
        wait_until(lambda: _metrics(server)["tickflow_snapshot_seq"] >= 120)
        server.restart(kill=True)
        health = _call(server, "GET", "/health")
        recovery = health["recovery"]
        assert recovery["snapshotSeq"] >= 120 and recovery["replayedRecords"] == health["seq"] - recovery["snapshotSeq"]
        assert {i: _call(server, "GET", f"/orders/{i}", token=a) for i, a in placed} == states
        server.stop()  # a clean stop takes one more: the next start replays nothing
        server.start()
        health = _call(server, "GET", "/health")
        assert health["recovery"]["snapshotSeq"] == health["seq"] and health["recovery"]["replayedRecords"] == 0
        assert len(list((tmp_path / "data").glob("snap-*.bin"))) == 2  # --keep-snapshots' default
    finally:
        server.stop()


def test_a_failed_snapshot_is_counted_and_the_next_one_is_taken(tmp_path: Path) -> None:
    """A directory where the writer's temporary file goes (as good as a full disk for it): that snapshot
    fails, orders go on, and the next one, `--snapshot-every` records later, is written."""
    data = tmp_path / "data"
    server = ServerProcess(data, extra=["--snapshot-every", "20"]).start()
    try:
        seq = _call(server, "GET", "/health")["seq"]
        (data / f".snap-{20:020d}.tmp").mkdir()  # the first snapshot falls due at seq 20
        assert seq < 20
        _place(server, 20 - seq)
        wait_until(lambda: _metrics(server)["tickflow_snapshot_failures_total"] == 1)
        _place(server, 25)
        wait_until(lambda: _metrics(server)["tickflow_snapshots_total"] >= 1)
        metrics = _metrics(server)
        assert metrics["tickflow_snapshot_seq"] >= 40 and metrics["tickflow_log_failed"] == 0
        assert _call(server, "GET", "/health")["status"] == "ok"
        assert "snapshot at seq 20 failed" in server.output()
    finally:
        server.stop()
