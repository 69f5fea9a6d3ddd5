"""The production sync path: the helper process (tickflow/store/log/sync_helper.py) reports as durable
only what was in the file when its fdatasync began.

The helper here is the real one, run through ProcessSyncer with the documented seam
(TICKFLOW_SYNC_HELPER, syncer.py) pointing at tests/helpers/wrapped_sync_helper.py, which holds the
helper's fdatasync until the test lets it go: the test writes to the log while a sync is in flight."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from helpers.logs import open_log
from helpers.promises import eventually
from helpers.sync_gate import SyncGate

from tickflow.store.log.syncer import ProcessSyncer


async def test_bytes_written_during_a_sync_are_not_reported_durable_until_a_later_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = SyncGate(tmp_path / "gate")
    for name, value in gate.env().items():
        monkeypatch.setenv(name, value)
    gate.hold()
    wal, _, _ = open_log(str(tmp_path / "x.wal"))
    syncer = ProcessSyncer(wal)
    reports: list[tuple[int, str | None]] = []
    syncer.start(asyncio.get_running_loop(), lambda size, error, seconds: reports.append((size, error)))
    try:
        wal.append([b"first batch"])
        before = wal.size
        syncer.grown(before)
        assert await asyncio.to_thread(gate.entered), "the helper never began its sync"
        wal.append([b"a batch written while that sync runs"])  # after the helper looked at the file
        after = wal.size
        syncer.grown(after)
        gate.release(stop_holding=False)  # the next sync is held too
        await eventually(lambda: reports, what="the first answer")
        # Only what the file held when the fdatasync began is durable; the rest may not have reached the disk.
        assert reports == [(before, None)]
        assert syncer.busy  # it found the file grown and syncs again without being asked
        assert await asyncio.to_thread(gate.entered), "the helper did not sync the bytes it had not covered"
        gate.release()
        await eventually(lambda: len(reports) == 2 and not syncer.busy, what="the second answer")
        assert reports == [(before, None), (after, None)]
    finally:
        gate.close()
        syncer.close()
        wal.close()
