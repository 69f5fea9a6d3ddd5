"""Where fdatasync runs: the helper process a real log gets, and what its failures do to the sequencer."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
from helpers.aio import started
from helpers.logs import open_log, replayed
from helpers import procfs
from helpers.wait import until, wait_until
from server_process import ServerProcess

from tickflow.core.types import AddSymbol, NewOrder
from tickflow.net.exchange.sequencer import SequencerStopped
from tickflow.store.log.syncer import ProcessSyncer, ThreadSyncer


def order(i: int) -> NewOrder:
    return NewOrder(f"acct{i % 3}", "ACME", "buy" if i % 2 else "sell", "limit", 100, 1 + i % 5)


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0): look at its state.
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("mode", ["group", "order"])
async def test_a_real_log_is_synced_by_a_helper_process_that_ends_with_the_sequencer(tmp_path: Path,
                                                                                     mode: str) -> None:
    path = str(tmp_path / "seq.wal")
    sequencer = await started(path, mode)
    syncer = sequencer.syncer
    assert isinstance(syncer, ProcessSyncer) and syncer.pid is not None and alive(syncer.pid)
    pid = syncer.pid
    await sequencer.submit(AddSymbol("ACME"))
    outcomes = await asyncio.gather(*(sequencer.submit(order(i)) for i in range(200)))
    assert all(o.error is None for o in outcomes)
    assert sequencer.stats.syncs >= 1
    await sequencer.stop()
    assert not alive(pid)
    _, recovery = replayed(path)
    assert recovery.records == 201


async def test_a_helper_killed_mid_run_fails_the_unsynced_and_stops_the_sequencer(tmp_path: Path) -> None:
    path = str(tmp_path / "seq.wal")
    sequencer = await started(path, "group")
    await sequencer.submit(AddSymbol("ACME"))
    first = await sequencer.submit(order(1))
    pid = sequencer.syncer.pid  # type: ignore[attr-defined]
    os.kill(pid, signal.SIGKILL)
    results = await asyncio.gather(*(sequencer.submit(order(i)) for i in range(2, 50)), return_exceptions=True)
    # Nothing was in flight when it died, and nothing can be made durable after.
    assert all(isinstance(r, SequencerStopped) and "sync helper" in str(r) for r in results)
    await until(lambda: sequencer.failed is not None, message="the sequencer to stop")
    assert "sync helper" in (sequencer.failed or "")
    with pytest.raises(SequencerStopped, match="sync helper"):
        await sequencer.submit(order(99))
    await sequencer.stop()
    engine, _ = replayed(path)
    assert first.result is not None
    assert engine.order_state("acct1", first.result.order_id) is not None  # what was acknowledged is on disk


class PipeLog:
    """A log whose file is a pipe: fdatasync of it fails with EINVAL, as a failing device would fail it."""

    def __init__(self) -> None:
        self.read_end, self.write_end = os.pipe()
        self.path = "pipe-log"
        self.failed: str | None = None

    def fileno(self) -> int:
        return self.write_end

    def fail(self, why: str) -> None:
        self.failed = self.failed or why


async def test_a_failed_fdatasync_in_the_helper_is_reported_with_its_errno() -> None:
    log = PipeLog()
    syncer = ProcessSyncer(log)  # type: ignore[arg-type]
    answers: list[tuple[int, str | None]] = []
    syncer.start(asyncio.get_running_loop(), lambda size, error, seconds: answers.append((size, error)))
    syncer.grown(10)
    await until(lambda: len(answers) == 1, message="the answer")
    assert not syncer.busy
    syncer.grown(20)  # after a failure, nothing more is synced: every later caller hears why
    await until(lambda: len(answers) == 2, message="the second answer")
    syncer.close()
    assert all(e is not None and "Errno 22" in e and "pipe-log" in e for _, e in answers)
    assert log.failed is not None and "fdatasync" in log.failed
    os.close(log.read_end)
    os.close(log.write_end)


async def test_a_thread_syncer_starts_the_next_sync_before_it_reports_the_last(tmp_path: Path) -> None:
    from helpers.fileops import GatedOps

    ops = GatedOps()
    wal, _, _ = open_log(str(tmp_path / "x.wal"), ops)
    syncer = ThreadSyncer(wal)
    reports: list[tuple[int, bool]] = []
    syncer.start(asyncio.get_running_loop(), lambda size, error, seconds: reports.append((size, syncer.busy)))
    wal.append([b"first"])
    syncer.grown(first := wal.size)
    await until(ops.entered.is_set, message="the first sync")
    wal.append([b"second"])
    syncer.grown(wal.size)  # a sync is running: this one waits for it
    ops.gate.set()
    await until(lambda: len(reports) == 2, message="both syncs")
    assert reports == [(first, True), (wal.size, False)] and ops.syncs == 2
    syncer.close()
    wal.close()


class CountingSyncer(ProcessSyncer):
    """The helper process syncer, counting how often it had to wake the helper."""

    asks = 0

    def _ask(self) -> None:
        self.asks += 1
        super()._ask()


def _caught_in_fdatasync(pid: int) -> bool:
    """Stop `pid` where it is; True if that is inside (or on its way out of) fdatasync, so that it has
    not yet looked at the file's size again. Otherwise it is let go on."""
    os.kill(pid, signal.SIGSTOP)
    wait_until(lambda: procfs.state(pid) == "T", message="the helper stopped")
    now = procfs.syscall(pid)
    if now is not None and now[0] == procfs.FDATASYNC:
        return True
    os.kill(pid, signal.SIGCONT)
    return False


async def test_the_helper_syncs_again_by_itself_when_the_log_grew_during_a_sync(tmp_path: Path) -> None:
    if procfs.FDATASYNC is None:
        pytest.fail("this machine's fdatasync system call number is not known to tests/helpers/procfs.py")
    wal, _, _ = open_log(str(tmp_path / "x.wal"))
    syncer = CountingSyncer(wal)
    reports: list[int] = []
    syncer.start(asyncio.get_running_loop(), lambda size, error, seconds: reports.append(size))
    assert syncer.pid is not None
    pid = syncer.pid
    try:
        for megabytes in (16, 64, 256):  # a sync long enough to catch the helper inside it
            wal.append([b"x" * (megabytes << 20)])
            syncer.grown(wal.size)
            caught = False
            while not reports:  # (the loop reads the helper's answer while this one waits)
                now = procfs.syscall(pid)
                if now is not None and now[0] == procfs.FDATASYNC and _caught_in_fdatasync(pid):
                    caught = True
                    break
                await asyncio.sleep(0.0002)
            if not caught:  # that sync was over before it could be caught: make the next one longer
                await until(lambda: not syncer.busy, message="the syncer idle")
                reports.clear()
                syncer.asks = 0
                continue
            # Held inside its sync: the write lands during it, and the helper must see it for itself.
            before = wal.size
            wal.append([b"during"])
            syncer.grown(wal.size)
            os.kill(pid, signal.SIGCONT)
            await until(lambda: not syncer.busy and reports[-1:] == [wal.size], message="the write synced")
            assert reports[-1] == wal.size and syncer.asks == 1
            assert reports == [before, wal.size], "the sync that was running covers only what came before it"
            break
        else:
            pytest.skip("could not catch the helper inside an fdatasync of up to 256 MiB: "
                        "is tmp_path on tmpfs?")
    finally:
        os.kill(pid, signal.SIGCONT)
        syncer.close()
        wal.close()


async def test_a_write_the_helper_missed_before_answering_is_asked_for_after_the_answer(tmp_path: Path) -> None:
    """The helper saw no growth and stopped, but the log grew before the loop read its answer."""
    wal, _, _ = open_log(str(tmp_path / "x.wal"))
    syncer = CountingSyncer(wal)
    reports: list[int] = []
    syncer.start(asyncio.get_running_loop(), lambda size, error, seconds: reports.append(size))
    assert syncer.pid is not None
    pid = syncer.pid
    # sync_helper.py LOG_FD REQUESTS_FD REPLIES_FD (its arguments show once its exec is through)
    requests = int(wait_until(lambda: procfs.argv(pid)[-3:], message="the helper's arguments")[-2])
    wait_until(lambda: procfs.reading(pid, requests), message="the helper started and waiting for a request")
    answers = procfs.writes(pid)
    wal.append([b"first"])
    syncer.grown(wal.size)
    # The event loop is held here: the helper syncs, finds nothing new, answers, waits (the loop has not
    # read the answer).
    wait_until(lambda: procfs.writes(pid) > answers and procfs.reading(pid, requests),
               message="the helper's answer, and the helper waiting again")
    wal.append([b"second"])
    syncer.grown(wal.size)  # the answer is unread: as far as the loop knows, the helper is still busy
    assert syncer.asks == 1
    await until(lambda: not syncer.busy and reports[-1:] == [wal.size], message="the second write synced")
    assert syncer.asks == 2
    syncer.close()
    wal.close()


async def test_a_log_with_injected_file_operations_keeps_the_sync_thread(tmp_path: Path) -> None:
    from helpers.fileops import GatedOps

    ops = GatedOps()
    ops.gate.set()
    sequencer = await started(str(tmp_path / "seq.wal"), "group", ops)
    assert isinstance(sequencer.syncer, ThreadSyncer)
    assert (await sequencer.submit(AddSymbol("ACME"))).error is None
    await sequencer.stop()


def helper_of(server_pid: int) -> int:
    """The sync helper among a server's child processes."""
    with open(f"/proc/{server_pid}/task/{server_pid}/children") as f:
        children = [int(pid) for pid in f.read().split()]
    for pid in children:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if b"sync_helper.py" in f.read():
                return pid
    raise AssertionError(f"no sync helper among {children}")


async def test_a_server_whose_sync_helper_dies_refuses_orders_says_why_and_restarts_whole(
        server: ServerProcess) -> None:
    import aiohttp

    headers = {"Authorization": "Bearer alice"}
    body = {"symbol": "ACME", "side": "buy", "type": "limit", "price": 100, "qty": 5, "clientOrderId": "before"}
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{server.url}/orders", json=body, headers=headers) as r:
            assert r.status == 200
            placed = await r.json()
        assert server.proc is not None
        os.kill(helper_of(server.proc.pid), signal.SIGKILL)
        acked = [placed]  # an order answered before the kill took effect was truly synced
        for i in range(200):  # the server learns of the death from the pipe's end of file
            async with s.post(f"{server.url}/orders", json=dict(body, clientOrderId=f"after-{i}"),
                              headers=headers) as r:
                status, answer = r.status, await r.json()
            if status != 200:
                break
            acked.append(answer)
            await asyncio.sleep(0.01)
        assert status == 503 and "sync helper" in answer["error"], answer
        async with s.get(f"{server.url}/health") as r:
            assert r.status == 503 and "sync helper" in (await r.json())["error"]
    server.restart(kill=True)
    async with aiohttp.ClientSession() as s:
        for ack in acked:
            async with s.get(f"{server.url}/orders/{ack['orderId']}", headers=headers) as r:
                assert r.status == 200 and (await r.json())["clientOrderId"] == ack["clientOrderId"]
        async with s.post(f"{server.url}/orders", json=dict(body, clientOrderId="after-restart"),
                          headers=headers) as r:
            assert r.status == 200
    assert server.proc is not None and helper_of(server.proc.pid) > 0
