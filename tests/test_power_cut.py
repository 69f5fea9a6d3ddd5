"""A power cut on the production sync path: a real `tickflow serve --durability group`, its log synced by
the real helper process, killed with -9 in the middle of traffic from several clients, and then the
power cut: the log is truncated to what the helper's fdatasyncs truly covered.

The helper runs through the seam in tickflow/store/log/syncer.py (TICKFLOW_SYNC_HELPER) wrapped by
tests/helpers/wrapped_sync_helper.py, which notes after each fdatasync the size the log had when that
fdatasync began (not what the helper reports: that is what is under test), and makes each sync take
20 ms, as a slow disk does, so batches are written while a sync is in flight. A kill -9 alone keeps the
page cache; the cut throws away every byte no sync covered, as losing the power could. Every order the
server acknowledged must be there after the restart."""

from __future__ import annotations

import asyncio
import os
import random
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.promises import alive, sync_helper_of, wait_for
from helpers.sync_gate import durable_size, recorder_env

from server_process import ServerProcess

CLIENTS = 6
SYNC_SECONDS = 0.02


async def trade_until_killed(server: ServerProcess, kill_after: int, round_: int, rng: random.Random
                             ) -> list[dict[str, Any]]:
    """Orders from CLIENTS clients at once (crossing, so they trade), until `kill_after` are answered:
    then kill -9, mid-traffic. Every answer received counts as an acknowledgement, also one read after
    the kill (the server sent it before it died). Each client pauses a random moment before each order,
    so the clients do not fall into step (all answered by one sync, all sending before the next): orders
    keep arriving while a sync is in flight, as from independent users."""
    acked: list[dict[str, Any]] = []
    killed = asyncio.Event()

    async def client(n: int) -> None:
        account = f"trader{n}"
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {account}"}) as s:
            i = 0
            while not killed.is_set():
                i += 1
                await asyncio.sleep(rng.random() * SYNC_SECONDS)  # traffic shaping, not a wait for a result
                order = {"symbol": "ACME" if i % 3 else "GLOBEX", "side": "buy" if (i + n) % 2 else "sell",
                         "type": "limit", "price": 1000 + (i * 7 + n) % 9, "qty": 1 + i % 4,
                         "clientOrderId": f"{account}-{round_}-{i}"}
                try:
                    async with s.post(f"{server.url}/orders", json=order) as r:
                        assert r.status == 200, await r.text()
                        answer = await r.json()
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    return  # the server is gone
                acked.append(dict(answer, account=account))
                if len(acked) >= kill_after and not killed.is_set():
                    killed.set()
                    server.kill()

    await asyncio.wait_for(asyncio.gather(*(client(n) for n in range(CLIENTS))), 60)
    return acked


def power_cut(server: ServerProcess, helper: int, record: Path) -> int:
    """After the kill -9: wait until the helper is gone too (nothing more is synced), then drop every
    byte of the log that no fdatasync covered. Returns how many bytes were dropped."""
    wait_for(lambda: not alive(helper), 10, "the sync helper to die with the server")
    log = server.data / "wal.log"
    size = log.stat().st_size
    durable = durable_size(record, log)
    assert 0 < durable <= size, (durable, size)
    os.truncate(log, durable)
    return size - durable


async def check_acknowledged(server: ServerProcess, acked: list[dict[str, Any]]) -> None:
    async with aiohttp.ClientSession() as s:
        for answer in acked:
            headers = {"Authorization": f"Bearer {answer['account']}"}
            async with s.get(f"{server.url}/orders/{answer['orderId']}", headers=headers) as r:
                assert r.status == 200, (f"acknowledged order {answer['clientOrderId']} (id {answer['orderId']}, "
                                         f"seq {answer['seq']}) is gone after the power cut: {await r.text()}")
                now = await r.json()
            for field in ("clientOrderId", "symbol", "side", "price", "qty"):
                assert now[field] == answer[field], (field, answer, now)
            assert now["filledQty"] >= answer["filledQty"], (answer, now)


async def test_a_power_cut_after_kill_9_keeps_every_acknowledged_order(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random()
    seed = rng.randrange(1 << 30)
    rng.seed(seed)
    server = ServerProcess(tmp_path / "data", durability="group")
    all_acked: list[dict[str, Any]] = []
    dropped = []
    try:
        for round_ in range(2):  # a second round starts from a log that was itself cut
            record = tmp_path / f"durable-{round_}"
            for name, value in recorder_env(record, SYNC_SECONDS).items():
                monkeypatch.setenv(name, value)
            server.start()
            assert server.proc is not None
            helper = sync_helper_of(server.proc.pid)
            assert helper is not None, "no sync helper: the log is not on the helper path"
            with open(f"/proc/{helper}/cmdline", "rb") as f:
                assert b"wrapped_sync_helper.py" in f.read()
            acked = await trade_until_killed(server, rng.randrange(150, 400), round_, rng)
            dropped.append(power_cut(server, helper, record))
            all_acked += acked
            for name in recorder_env(record):
                monkeypatch.delenv(name)
            server.start()  # the real helper from here on
            await check_acknowledged(server, all_acked)
            server.kill()
        print(f"seed {seed}: {len(all_acked)} acknowledged, bytes cut {dropped}")
    finally:
        server.kill()
