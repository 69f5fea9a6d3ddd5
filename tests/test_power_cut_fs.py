"""Power cuts that every process's writes go through: the data directory on tests/helpers/powercut_fs.py,
a FUSE file system that keeps each file's and each directory's durable version apart from what was only
written. The server, its sync helper, its snapshot child and SQLite all write through it; the cut keeps
only what their fsyncs, fdatasyncs and directory fsyncs made durable (and, at random, part of what was
appended after), then the server starts again on it. The same file system fails the snapshot
temporaries' writes with ENOSPC or EIO on demand.

scripts/ci-fuse.sh installs what it needs (fuse3, mfusepy); without it these tests skip, and in CI a skip
fails the run."""

from __future__ import annotations

import errno
import os
import random
import re
import time
from pathlib import Path
from typing import Any, Iterator

import aiohttp
import pytest
from helpers.powercut_fs import PowerCutMount, fuse_missing
from helpers.promises import alive, sync_helper_of, wait_for
from helpers.wait import until
from test_power_cut import check_acknowledged, trade_until_killed

from server_process import ServerProcess
from tickflow.store.datadir import sync_dir

pytestmark = pytest.mark.skipif(fuse_missing() is not None, reason=f"no FUSE here: {fuse_missing()}")

ROUNDS = 5
SMALL = ["--segment-bytes", "4096", "--snapshot-every", "30"]
"""A segment roll every few dozen orders and a snapshot every 30 records: both happen during the traffic."""


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[PowerCutMount]:
    mount = PowerCutMount(tmp_path / "mnt", tmp_path / "disk")
    try:
        yield mount.start()
    finally:
        mount.unmount()


def _write(path: Path, data: bytes, *, sync: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.write(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


# ------------------------------------------------------------------ the tool itself


def test_a_cut_keeps_what_was_synced_and_nothing_else(disk: PowerCutMount) -> None:
    root = disk.mountpoint
    _write(root / "synced", b"kept", sync=True)
    _write(root / "unsynced", b"", sync=False)
    (root / "dir").mkdir()
    _write(root / "old", b"old", sync=True)
    sync_dir(root)  # the entries so far are durable, and the contents that were fsynced
    _write(root / "synced", b"+lost", sync=False)
    _write(root / "unsynced", b"lost", sync=False)
    _write(root / "dir" / "new", b"data", sync=True)  # the file synced, its directory never
    _write(root / "tmp", b"renamed", sync=True)
    os.rename(root / "tmp", root / "renamed")  # rename, no directory fsync
    _write(root / "tmp2", b"new", sync=True)
    os.rename(root / "tmp2", root / "old")  # over a durable file, no directory fsync
    assert (root / "synced").read_bytes() == b"kept+lost"  # before the cut, reads see the cache

    disk.cut(seed=1, mode="drop")
    disk.start()
    assert sorted(os.listdir(root)) == ["dir", "old", "synced", "unsynced"]
    assert (root / "synced").read_bytes() == b"kept"
    assert (root / "unsynced").read_bytes() == b""
    assert os.listdir(root / "dir") == []
    assert (root / "old").read_bytes() == b"old"

    _write(root / "log", b"synced|", sync=True)
    sync_dir(root)
    _write(root / "log", b"0123456789", sync=False)
    disk.cut(seed=2, mode="torn")
    disk.start()
    data = (root / "log").read_bytes()
    assert data.startswith(b"synced|") and b"synced|0123456789".startswith(data), data


def test_faults_fail_the_writes_of_matching_files_until_switched_off(disk: PowerCutMount) -> None:
    root = disk.mountpoint
    for code in ("ENOSPC", "EIO"):
        disk.fault(code, ".snap-*.tmp")
        with pytest.raises(OSError) as failed:
            _write(root / ".snap-00000000000000000001.tmp", b"x", sync=True)
        assert failed.value.errno == getattr(errno, code)
        _write(root / "wal.log", b"x", sync=True)  # other files are written as usual
        disk.faults_off()
        _write(root / ".snap-00000000000000000001.tmp", b"x", sync=True)
    assert disk.stats()["faulted"] == 2


# ------------------------------------------------------------------ the server on it


def _server_on(disk: PowerCutMount) -> ServerProcess:
    """A server whose data directory is on the mount. The directory is made here, durably, as an
    operator's mkdir would be (ServerProcess makes it before the server runs, with no fsync of its parent,
    so the cut would take the whole directory with it)."""
    data = disk.mountpoint / "data"
    data.mkdir(mode=0o700)
    sync_dir(disk.mountpoint)
    return ServerProcess(data, durability="group", extra=SMALL)


def _gone_with(server: ServerProcess, helper: int) -> None:
    """Wait until the server and every process it ran (its sync helper, a snapshot child forked from
    it, whose command line is the server's) have exited: nothing writes after the cut is made."""
    data = str(server.data).encode()

    def left() -> list[int]:
        pids = [helper] if alive(helper) else []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if data in f.read() and alive(int(pid)):
                        pids.append(int(pid))
            except OSError:
                continue
        return pids

    wait_for(lambda: not left(), 10, "the server's processes to exit after kill -9")


async def test_power_cuts_through_the_file_system_keep_every_acknowledged_order(tmp_path: Path,
                                                                              disk: PowerCutMount) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"seed {seed}")  # shown with a failure: random.Random(seed) replays the cut points and modes
    server = _server_on(disk)
    all_acked: list[dict[str, Any]] = []
    cuts: list[dict[str, int]] = []
    started = time.monotonic()
    try:
        for round_ in range(ROUNDS):
            server.start()
            assert server.proc is not None
            helper = sync_helper_of(server.proc.pid)
            assert helper is not None, "no sync helper: the log is not on the production sync path"
            if all_acked:
                await check_acknowledged(server, all_acked)
            all_acked += await trade_until_killed(server, rng.randrange(100, 300), round_, rng)
            _gone_with(server, helper)
            stats = disk.stats()
            cuts.append(dict(disk.cut(rng.randrange(1 << 30)), **stats))
            disk.start()
        server.start()  # after the last cut: it starts, and every acknowledged order is there
        await check_acknowledged(server, all_acked)
        server.stop()
    finally:
        server.kill()
    # The cuts landed where the durability is made: the helper's fdatasyncs, the snapshot child's
    # fsyncs, the renames and directory fsyncs of snapshots and segment rolls.
    last = cuts[-1]
    assert last["rename"] > 0 and last["fsyncdir"] > 0, cuts
    print(f"seed {seed}: {len(all_acked)} acknowledged in {time.monotonic() - started:.1f} s; cuts {cuts}")


async def _metric(session: aiohttp.ClientSession, url: str, name: str) -> int:
    async with session.get(f"{url}/metrics") as r:
        assert r.status == 200
        found = re.search(rf"^{name} (\d+)", await r.text(), re.M)
    assert found, f"{name} not in /metrics"
    return int(found.group(1))


async def test_a_snapshot_that_cannot_be_written_fails_alone(disk: PowerCutMount) -> None:
    server = _server_on(disk).start()
    placed = 0
    try:
        async with aiohttp.ClientSession(headers={"Authorization": "Bearer trader"}) as s:

            async def place(n: int) -> None:
                nonlocal placed
                for _ in range(n):
                    placed += 1
                    order = {"symbol": "ACME", "side": "buy" if placed % 2 else "sell", "type": "limit",
                             "price": 1000 + placed % 5, "qty": 1, "clientOrderId": f"o-{placed}"}
                    async with s.post(f"{server.url}/orders", json=order) as r:
                        assert r.status == 200, await r.text()
                async with s.get(f"{server.url}/health") as r:
                    assert r.status == 200, await r.text()

            async def trades_until(name: str, above: int) -> int:
                async def check() -> int:
                    await place(10)
                    value = await _metric(s, server.url, name)
                    return value if value > above else 0
                return await until(check, 20, 0, f"{name} to rise above {above}")

            await trades_until("tickflow_snapshots_total", 0)  # one snapshot before the faults
            for code in ("ENOSPC", "EIO"):
                disk.fault(code, ".snap-*.tmp")
                failures = await _metric(s, server.url, "tickflow_snapshot_failures_total")
                taken = await _metric(s, server.url, "tickflow_snapshots_total")
                await trades_until("tickflow_snapshot_failures_total", failures)
                disk.faults_off()
                await trades_until("tickflow_snapshots_total", taken)
            assert disk.stats()["faulted"] >= 2
            assert server.output().count("snapshot") >= 2, server.output()
    finally:
        server.kill()
