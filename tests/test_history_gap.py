"""A trade store that the log can no longer rebuild: SQLite behind every snapshot (a power cut took its last
commits, or it is missing or damaged) once the segments before the oldest snapshot are deleted. A start
refuses, naming the snapshot, SQLite's watermarks and the log's first seq; `--accept-history-gap` starts
from the newest snapshot and records the gap. And the snapshotter makes SQLite durable before it
publishes a snapshot, so a power cut cannot put SQLite behind it."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.wait import wait_until
from server_process import ServerProcess
from test_snapshot_server import _call, _place

from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol, NewOrder
from tickflow.net.exchange.snapshotter import Snapshotter
from tickflow.store import snapshots
from tickflow.store.log.segments import listing

SMALL = ["--segment-bytes", "4096", "--snapshot-every", "60"]


def _ran_past_its_first_segments(tmp_path: Path) -> tuple[ServerProcess, list[tuple[int, str]]]:
    """A server that traded until wal.log was deleted behind its snapshots, then stopped cleanly."""
    server = ServerProcess(tmp_path / "data", extra=SMALL).start()
    placed = _place(server, 400)
    wait_until(lambda: not (server.data / "wal.log").exists(), 30, message="wal.log deleted behind the snapshots")
    server.stop()
    return server, placed


def _watermarks(store: Path) -> tuple[int, int]:
    with sqlite3.connect(store) as db:
        trades = db.execute("SELECT COALESCE(MAX(trade_id), 0) FROM trades").fetchone()[0]
        orders = db.execute("SELECT COALESCE(MAX(seq), 0) FROM watermarks WHERE name = 'orders'").fetchone()[0]
    return trades, orders


def _lose_the_last_commits(store: Path, seq: int) -> None:
    """What a power cut can leave of a store run with synchronous=NORMAL: the rows after `seq` gone."""
    with sqlite3.connect(store) as db:
        db.execute("DELETE FROM trades WHERE seq > ?", (seq,))
        db.execute("DELETE FROM orders WHERE seq > ?", (seq,))
        db.execute("UPDATE watermarks SET seq = ? WHERE name = 'orders'", (seq,))


def _check_tool(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(data)],
                          capture_output=True, text=True, timeout=60)


def test_sqlite_behind_every_snapshot_with_the_early_log_gone_is_refused_then_accepted(tmp_path: Path) -> None:
    server, placed = _ran_past_its_first_segments(tmp_path)
    try:
        store = server.data / "trades.sqlite"
        first_seq = listing(server.data)[0].first_seq
        assert first_seq > 1
        _lose_the_last_commits(store, first_seq - 10)
        trades, orders = _watermarks(store)
        newest = snapshots.on_disk(server.data)[0].name
        with pytest.raises(RuntimeError) as refused:
            server.start()
        said = str(refused.value)
        for part in (newest, f"trades up to id {trades}", f"finished up to seq {orders}",
                     f"the log begins at seq {first_seq}", "--accept-history-gap", "backup"):
            assert part in said, said
        assert _watermarks(store) == (trades, orders)  # nothing changed
        checked = _check_tool(server.data)
        assert checked.returncode == 1 and "--accept-history-gap" in checked.stdout + checked.stderr, checked

        server.extra = SMALL + ["--accept-history-gap"]
        server.start()
        assert "history gap" in server.output()
        live = _place(server, 5)
        assert all(_call(server, "GET", f"/orders/{i}", token=a)["orderId"] == i for i, a in live)
        server.stop()
        server.extra = SMALL
        server.start()  # the gap is recorded: no second refusal, and no re-insert of every trade
        assert "has gaps" not in server.output()
        assert _call(server, "GET", f"/orders/{placed[-1][0]}", token=placed[-1][1])["orderId"] == placed[-1][0]
    finally:
        server.kill()


@pytest.mark.parametrize("what", ["missing", "damaged"])
def test_a_missing_or_damaged_store_with_the_early_log_gone_is_refused_then_accepted(tmp_path: Path,
                                                                                      what: str) -> None:
    server, _ = _ran_past_its_first_segments(tmp_path)
    try:
        store = server.data / "trades.sqlite"
        if what == "missing":
            store.unlink()
        else:
            data = bytearray(store.read_bytes())
            data[:100] = b"not a database" * 7 + b"xx"
            store.write_bytes(bytes(data))
        with pytest.raises(RuntimeError, match="--accept-history-gap") as refused:
            server.start()
        assert "the log begins at seq" in str(refused.value)
        if what == "damaged":
            assert store.exists() and not list(server.data.glob("trades.sqlite.damaged-*"))  # left where it was
        server.extra = SMALL + ["--accept-history-gap"]
        server.start()
        assert "history gap" in server.output()
        assert _place(server, 3)
    finally:
        server.kill()


def test_the_whole_log_still_rebuilds_a_missing_store_without_the_flag(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=SMALL).start()
    try:
        _place(server, 20)  # fewer records than a snapshot: wal.log stays
        server.stop()
        assert (server.data / "wal.log").exists()
        (server.data / "trades.sqlite").unlink()
        server.start()
        assert "history gap" not in server.output()
    finally:
        server.kill()


async def test_sqlite_is_made_durable_before_a_snapshot_is_published(tmp_path: Path) -> None:
    calls: list[tuple[str, int, bool]] = []

    async def durable(seq: int) -> None:
        calls.append(("durable", seq, bool(snapshots.on_disk(tmp_path))))

    def history_durable() -> None:
        calls.append(("history", 0, bool(snapshots.on_disk(tmp_path))))

    engine = Engine()
    engine.apply(1, 1, AddSymbol("ACME"))
    engine.apply(2, 2, NewOrder("a", "ACME", "buy", "limit", 100, 1))
    snapshotter = Snapshotter(tmp_path, engine, every=1, first_ts=lambda: 1, durable=durable,
                              history_durable=history_durable)
    snapshotter.after_batch(2, 100)
    assert snapshotter.task is not None
    await asyncio.wait_for(snapshotter.task, 30)
    assert calls == [("durable", 2, False), ("history", 0, False)]
    assert snapshots.on_disk(tmp_path)
    engine.apply(3, 3, NewOrder("a", "ACME", "buy", "limit", 101, 1))
    calls.clear()
    await snapshotter.stop(3, 200, 3)  # the clean stop's snapshot too
    assert calls == [("history", 0, False)] or calls == [("history", 0, True)]
    assert snapshots.on_disk(tmp_path)[0].name == snapshots.file_name(3)
