"""The log as segment files (tickflow/store/log/segments.py): rolled at the size given, replayed in order to
the state one file gives, a torn tail cut only in the last segment, a bad record or a missing segment
elsewhere refused by name, old segments deleted behind the snapshots, and a kill -9 or a power cut across
rolls losing no acknowledged order."""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from helpers.promises import alive, sync_helper_of, wait_for
from helpers.sync_gate import durable_size, recorder_env
from helpers.wait import wait_until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from server_process import ServerProcess
from test_engine_reference import cancel_alls, commands
from test_power_cut import SYNC_SECONDS, check_acknowledged, trade_until_killed
from test_snapshot_server import _call, _metrics, _place

from tickflow.core.engine import Engine
from tickflow.core.snapshot import capture
from tickflow.core.types import AddSymbol, Command, NewOrder, Record
from tickflow.net.exchange.sequencer import Sequencer
from tickflow.store import snapshots
from tickflow.store.log.codec import encode_record
from tickflow.store.log.segments import MissingSegment, SegmentedLog, listing, retire, segment_name
from tickflow.store.log.wal import FILE_HEADER, HEADER_SIZE, CorruptLog, Wal, frame
from tickflow.store.recovery import recover, recover_directory
from tickflow.core.snapshot import state_hash

histories = st.lists(st.one_of(commands(), cancel_alls()), min_size=1, max_size=150)


def write_segments(directory: Path, history: list[Command], segment_bytes: int, batch: int = 3,
                   snapshot_at: int | None = None) -> Engine:
    """`history` logged as the sequencer logs it (rolling between batches once a segment is full), with a
    snapshot after the batch ending at record `snapshot_at`; the engine it gives."""
    log = SegmentedLog.open(directory, segment_bytes=segment_bytes)
    list(log.replay_batches())
    engine = Engine()
    seq = 0
    for start in range(0, len(history), batch):
        if log.roll_due:
            log.roll(seq + 1)
        chunk = history[start:start + batch]
        log.append([encode_record(Record(seq + i, 1_000 + seq + i, c)) for i, c in enumerate(chunk, 1)])
        for command in chunk:
            seq += 1
            engine.apply(seq, 1_000 + seq, command)
        if seq == snapshot_at:  # named by the position after its batch, as the sequencer's after_batch does
            data = snapshots.encode(seq, log.position, 1_001, capture(engine))
            snapshots.publish(snapshots.write_temporary(directory, seq, data))
    log.sync()
    log.close()
    return engine


def whole_log_hash(directory: Path, history: list[Command]) -> str:
    """The state one unsegmented log of the same records gives."""
    data = FILE_HEADER + b"".join(frame(encode_record(Record(seq, 1_000 + seq, c))) for seq, c in enumerate(history, 1))
    engine = Engine()
    recover(Wal.checking(str(directory / "one.log"), data), engine)
    return state_hash(engine)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories, segment_bytes=st.integers(200, 3000), batch=st.integers(1, 8),
       snapshot_at=st.none() | st.integers(1, 150))
def test_many_segments_replay_to_the_state_one_log_gives(history: list[Command], segment_bytes: int, batch: int,
                                                         snapshot_at: int | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp, "data")
        data.mkdir()
        at = snapshot_at if snapshot_at is not None and snapshot_at <= len(history) and snapshot_at % batch == 0 \
            else None
        live = write_segments(data, history, segment_bytes, batch, at)
        log, engine, recovery = recover_directory(data)
        log.close()
        assert state_hash(engine) == state_hash(live) == whole_log_hash(Path(tmp), history)
        assert recovery.snapshot_seq == (at or 0) and recovery.cut is None
        assert recovery.records == len(history) - (at or 0)
        names = [s.first_seq for s in listing(data)]
        assert names[0] == 1 and names == sorted(names)


def _orders(n: int) -> list[Command]:
    orders: list[Command] = [AddSymbol("ACME")]
    return orders + [NewOrder("acct", "ACME", "buy" if i % 2 else "sell", "limit", 100 + i % 5, 1 + i % 3)
                     for i in range(n)]


@pytest.fixture
def segmented(tmp_path: Path) -> tuple[Path, Engine]:
    data = tmp_path / "data"
    data.mkdir()
    return data, write_segments(data, _orders(300), 4096, batch=4)


def test_segments_are_named_by_their_first_seq_and_roll_past_the_size(segmented: tuple[Path, Engine]) -> None:
    data, _ = segmented
    found = listing(data)
    assert len(found) >= 4 and found[0].path.name == "wal.log"
    assert [s.path.name for s in found[1:]] == [segment_name(s.first_seq) for s in found[1:]]
    for segment in found[:-1]:
        size = segment.path.stat().st_size
        assert 4096 <= size < 4096 + 4 * 200, (segment.path.name, size)  # rolled at the first batch past it
        assert segment.path.read_bytes().startswith(FILE_HEADER)


def test_a_torn_tail_in_the_last_segment_is_cut(segmented: tuple[Path, Engine]) -> None:
    data, live = segmented
    last = listing(data)[-1].path
    whole = last.stat().st_size
    with open(last, "ab") as f:
        f.write(b"\x40\x00\x00\x00torn")
    log, engine, recovery = recover_directory(data)
    log.close()
    assert recovery.cut is not None and recovery.cut.offset == whole and last.stat().st_size == whole
    assert state_hash(engine) == state_hash(live)


def _second_record(path: Path) -> int:
    return len(FILE_HEADER) + HEADER_SIZE + int.from_bytes(path.read_bytes()[16:20], "little")


def test_a_bad_record_in_a_sealed_segment_is_refused_naming_file_and_offset(segmented: tuple[Path, Engine]) -> None:
    data, _ = segmented
    sealed = listing(data)[1].path
    raw = bytearray(sealed.read_bytes())
    at = _second_record(sealed)
    raw[at + HEADER_SIZE + 2] ^= 0xFF  # a payload byte: its CRC fails, valid records follow
    sealed.write_bytes(raw)
    with pytest.raises(CorruptLog) as refused:
        recover_directory(data)
    assert refused.value.path == str(sealed) and refused.value.offset == at
    assert f"{sealed}: corrupt record at byte offset {at}" in str(refused.value)


def test_a_torn_end_of_a_sealed_segment_is_corruption_not_a_tail(segmented: tuple[Path, Engine]) -> None:
    data, _ = segmented
    sealed = listing(data)[1].path
    size = sealed.stat().st_size
    os.truncate(sealed, size - 3)
    with pytest.raises(CorruptLog, match="in a sealed segment") as refused:
        recover_directory(data)
    assert refused.value.path == str(sealed)
    assert sealed.stat().st_size == size - 3  # nothing cut


def test_a_missing_middle_segment_is_refused(segmented: tuple[Path, Engine]) -> None:
    data, _ = segmented
    found = listing(data)
    found[2].path.unlink()
    with pytest.raises(MissingSegment, match=f"{found[3].path.name}: it begins at seq {found[3].first_seq}, but "
                                             f"{found[1].path.name} ends at seq {found[2].first_seq - 1}"):
        recover_directory(data)
    checked = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(data)], capture_output=True,
                             text=True, timeout=60)
    assert checked.returncode == 1 and "is missing" in checked.stderr, checked


def test_retire_deletes_whole_segments_before_a_seq_never_the_last(segmented: tuple[Path, Engine]) -> None:
    data, _ = segmented
    found = listing(data)
    upto = found[2].first_seq - 1  # the last record of the second segment
    assert [p.name for p in retire(data, upto)] == [s.path.name for s in found[:2]]
    assert retire(data, 10**9)[-1] == found[-2].path and [s.path for s in listing(data)] == [found[-1].path]


async def test_the_sequencer_rolls_between_batches_under_group_durability(tmp_path: Path) -> None:
    """The real write path and sync helper: every acknowledged order is in a segment, each sealed segment
    is durable whole and the helper follows the roll (one process's writes, another's syncs)."""
    data = tmp_path / "data"
    data.mkdir()
    log, engine, _ = recover_directory(data, segment_bytes=4096)
    sequencer = Sequencer(engine, log, "group")
    await sequencer.start()
    await sequencer.submit(AddSymbol("ACME"))
    orders = _orders(400)[1:]
    for at in range(0, len(orders), 8):  # small batches, many rolls
        outcomes = await asyncio.gather(*(sequencer.submit(c) for c in orders[at:at + 8]))
        assert all(o.error is None for o in outcomes)
    await sequencer.stop()
    assert len(listing(data)) >= 5
    log, again, recovery = recover_directory(data, segment_bytes=4096)
    log.close()
    assert state_hash(again) == state_hash(engine) and recovery.records == 401 and recovery.cut is None


def test_an_old_wal_log_keeps_working_and_old_segments_go_behind_the_snapshots(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data).start()  # the default segment size: the log stays wal.log, as before segments
    try:
        placed = _place(server, 30)
        server.stop()
        assert [p.name for p in data.glob("wal*.log")] == ["wal.log"]
        server.extra = ["--segment-bytes", "4096", "--snapshot-every", "60"]
        server.start()
        placed += _place(server, 400)
        states = {i: _call(server, "GET", f"/orders/{i}", token=a) for i, a in placed}
        wait_until(lambda: not (data / "wal.log").exists(), 30, message="wal.log deleted behind the snapshots")
        metrics = _metrics(server)
        found = listing(data)
        assert metrics["tickflow_log_segments"] >= 1 and metrics["tickflow_log_bytes"] > 0
        oldest = min(int(p.name[5:25]) for p in data.glob("snap-*.bin"))
        assert found[0].first_seq <= oldest + 1  # the oldest snapshot kept still has its records
        server.restart(kill=True)
        assert {i: _call(server, "GET", f"/orders/{i}", token=a) for i, a in placed} == states
        placed += _place(server, 50)
        server.stop()
        checked = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(data)],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked
        assert "segments:" in checked.stdout and "checked from snap-" in checked.stdout, checked.stdout
    finally:
        server.stop()


def _power_cut(data: Path, helper: int, record: Path, synced: dict[str, int]) -> None:
    """After a kill -9: each segment keeps what the helper's fdatasyncs covered of it, or what it held
    when the server started (`synced`: a start syncs the log), or its header (synced when the segment
    was made); a power cut could drop the rest."""
    wait_for(lambda: not alive(helper), 10, "the sync helper to die with the server")
    for segment in listing(data):
        kept = max(synced.get(segment.path.name, len(FILE_HEADER)), durable_size(record, segment.path))
        os.truncate(segment.path, kept)


@pytest.mark.parametrize("cut", [False, True], ids=["kill-9", "kill-9-and-power-cut"])
async def test_a_kill_across_rolls_loses_no_acknowledged_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                               cut: bool) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    data = tmp_path / "data"
    server = ServerProcess(data, durability="group", extra=["--segment-bytes", "4096"])
    all_acked = []
    try:
        for round_ in range(2):
            record = tmp_path / f"durable-{round_}"
            for name, value in recorder_env(record, SYNC_SECONDS).items():
                monkeypatch.setenv(name, value)
            server.start()
            assert server.proc is not None
            helper = sync_helper_of(server.proc.pid)
            assert helper is not None
            synced = {s.path.name: s.path.stat().st_size for s in listing(data)}
            before = len(synced)
            all_acked += await trade_until_killed(server, rng.randrange(300, 500), round_, rng)
            assert len(listing(data)) > before + 1, f"seed {seed}: no roll while trading"
            if cut:
                _power_cut(data, helper, record, synced)
            for name in recorder_env(record):
                monkeypatch.delenv(name)
            server.start()
            await check_acknowledged(server, all_acked)
            server.kill()
    finally:
        server.kill()
