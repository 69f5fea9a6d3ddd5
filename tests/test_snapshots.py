"""Snapshot files and recovery from them: the newest snapshot that verifies plus the records after it
gives the engine the whole log gives; a torn or damaged snapshot is passed over for an older one; a newer
format or a snapshot ahead of the log is refused (tickflow/store/snapshots.py, store/recovery.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.logs import commands, replayed, write_log

from tickflow.core.engine import Engine
from tickflow.core.snapshot import capture, state_hash
from tickflow.core.types import Command
from tickflow.store import snapshots
from tickflow.store.log.wal import CorruptLog
from tickflow.store.recovery import recover_directory

WAL = "wal.log"
Logged = tuple[Path, list[Command], list[int]]
"""A data directory holding a log, its commands, and each record's offset (the end's last)."""


def _snapshot_at(data: Path, cmds: list[Command], seq: int, offsets: list[int]) -> Path:
    """The snapshot a server would have written after record `seq` of `cmds`."""
    engine = Engine()
    for i, command in enumerate(cmds[:seq], 1):
        engine.apply(i, 1_700_000_000_000 + i - 1, command)
    blob = snapshots.encode(seq, offsets[seq], 1_700_000_000_000, capture(engine))
    return snapshots.publish(snapshots.write_temporary(data, seq, blob))


@pytest.fixture
def logged(tmp_path: Path) -> Logged:
    cmds = commands(400)
    offsets = write_log(str(tmp_path / WAL), cmds)
    return tmp_path, cmds, offsets


def test_recovery_starts_from_the_newest_snapshot_and_matches_a_full_replay(logged: Logged) -> None:
    data, cmds, offsets = logged
    full, _ = replayed(str(data / WAL))
    _snapshot_at(data, cmds, 150, offsets)
    _snapshot_at(data, cmds, 300, offsets)
    wal, engine, recovery = recover_directory(data)
    wal.close()
    assert (recovery.snapshot_seq, recovery.records, recovery.last_seq) == (300, 100, 400)
    assert recovery.first_ts == 1_700_000_000_000
    assert state_hash(engine) == state_hash(full)


def test_appending_after_a_recovery_from_a_snapshot_continues_the_log(logged: Logged) -> None:
    data, cmds, offsets = logged
    _snapshot_at(data, cmds, 380, offsets)
    wal, engine, _ = recover_directory(data)
    assert wal.size == offsets[-1]
    from helpers.logs import payloads
    wal.append(payloads(commands(3)[1:], first_seq=401))
    wal.sync()
    wal.close()
    whole, recovery = replayed(str(data / WAL))
    assert recovery.last_seq == 402 and recovery.cut is None


@pytest.mark.parametrize("damage", ["torn", "flipped", "empty"])
def test_a_damaged_newest_snapshot_is_passed_over_for_the_one_before(logged: Logged, damage: str) -> None:
    data, cmds, offsets = logged
    full, _ = replayed(str(data / WAL))
    _snapshot_at(data, cmds, 150, offsets)
    newest = _snapshot_at(data, cmds, 300, offsets)
    blob = newest.read_bytes()
    if damage == "torn":
        newest.write_bytes(blob[: len(blob) // 2])
    elif damage == "flipped":
        newest.write_bytes(blob[:200] + bytes([blob[200] ^ 1]) + blob[201:])
    else:
        newest.write_bytes(b"")
    wal, engine, recovery = recover_directory(data)
    wal.close()
    assert recovery.snapshot_seq == 150 and recovery.records == 250
    assert len(recovery.passed_over) == 1 and newest.name in recovery.passed_over[0]
    assert state_hash(engine) == state_hash(full)


def test_with_every_snapshot_damaged_the_whole_log_is_replayed(logged: Logged) -> None:
    data, cmds, offsets = logged
    full, _ = replayed(str(data / WAL))
    path = _snapshot_at(data, cmds, 300, offsets)
    path.write_bytes(path.read_bytes()[:-1])
    wal, engine, recovery = recover_directory(data)
    wal.close()
    assert (recovery.snapshot_seq, recovery.records) == (0, 400)
    assert state_hash(engine) == state_hash(full)


def test_a_snapshot_in_a_newer_format_is_refused_by_name(logged: Logged) -> None:
    data, cmds, offsets = logged
    path = _snapshot_at(data, cmds, 300, offsets)
    path.write_bytes(path.read_bytes().replace(b"tickflow snapshot v1\n", b"tickflow snapshot v2\n", 1))
    with pytest.raises(snapshots.NewerSnapshot, match="format v2.*newer tickflow"):
        recover_directory(data)


def test_a_snapshot_ahead_of_the_log_is_refused(logged: Logged) -> None:
    data, cmds, offsets = logged
    _snapshot_at(data, cmds, 300, offsets)
    with open(data / WAL, "r+b") as f:  # the log lost its records after 200 (restored from an old copy)
        f.truncate(offsets[200])
    with pytest.raises(CorruptLog, match="ahead of the log"):
        recover_directory(data)
    assert (data / WAL).stat().st_size == offsets[200]  # nothing was cut or written


def test_a_snapshot_whose_trades_sqlite_lacks_is_passed_over(logged: Logged) -> None:
    """SQLite rebuilt (damaged, moved aside) holds fewer trades than the snapshot covers: the records
    before it are replayed so that every trade can be inserted again."""
    data, cmds, offsets = logged
    full, _ = replayed(str(data / WAL))
    _snapshot_at(data, cmds, 300, offsets)
    wal, engine, recovery = recover_directory(data, keep_trades_after=0)
    wal.close()
    assert recovery.snapshot_seq == 0 and "SQLite holds trades up to id 0" in recovery.passed_over[0]
    assert [t.trade_id for t in recovery.trades] == list(range(1, full.next_trade_id))


def test_what_a_crash_left_half_written_is_removed_and_old_snapshots_are_pruned(logged: Logged) -> None:
    data, cmds, offsets = logged
    for seq in (100, 200, 300):
        _snapshot_at(data, cmds, seq, offsets)
    (data / ".snap-00000000000000000350.tmp").write_bytes(b"half")
    assert [p.name for p in snapshots.prune(data, 2)] == ["snap-00000000000000000100.bin"]
    wal, _, recovery = recover_directory(data)
    wal.close()
    assert recovery.snapshot_seq == 300
    assert not (data / ".snap-00000000000000000350.tmp").exists()
    assert [p.name for p in snapshots.on_disk(data)] == ["snap-00000000000000000300.bin",
                                                          "snap-00000000000000000200.bin"]


def _tickflow_log(data: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(data)],
                          capture_output=True, text=True, timeout=60)


def test_tickflow_log_checks_each_snapshot_against_the_log(logged: Logged) -> None:
    data, cmds, offsets = logged
    _snapshot_at(data, cmds, 200, offsets)
    out = _tickflow_log(data)
    assert out.returncode == 0, out.stderr
    assert "snapshot snap-00000000000000000200.bin: seq 200" in out.stdout and "200 records after it; ok" in out.stdout
    # A snapshot that is not what the log holds at its seq (here: the engine one command short).
    other = Engine()
    for i, command in enumerate(cmds[:199], 1):
        other.apply(i, 1_700_000_000_000 + i - 1, command)
    other.last_seq = 200
    blob = snapshots.encode(300, offsets[300], 1_700_000_000_000, capture(other))
    snapshots.publish(snapshots.write_temporary(data, 300, blob))
    out = _tickflow_log(data)
    assert out.returncode == 1 and "snap-00000000000000000300.bin" in out.stdout
    assert "log after it does not follow it" in out.stdout or "DIFFERS" in out.stdout
