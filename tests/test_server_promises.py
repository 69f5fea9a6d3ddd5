"""Promises of the real server that were tested only in-process: what it says when its log device
fails, HTTP reads that wait for durability, and a sync helper that dies with the server.

Each test runs `tickflow serve` (tests/server_process.py). The sync helper is held through the seam in
tickflow/store/log/syncer.py (TICKFLOW_SYNC_HELPER, tests/helpers/wrapped_sync_helper.py); the failing
devices are real file systems (tests/helpers/devices.py: a full tmpfs, and ext4 on a loop device that
starts failing)."""

from __future__ import annotations

import asyncio
import signal
import socket
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.devices import failing_disk, fill, full_tmpfs
from helpers.promises import alive, eventually, metric, sync_helper_of, wait_for
from helpers.sync_gate import SyncGate

from server_process import ServerProcess

ALICE = {"Authorization": "Bearer alice"}


def order(client_order_id: str, price: int = 100, qty: int = 1, side: str = "buy") -> dict[str, Any]:
    return {"symbol": "ACME", "side": side, "type": "limit", "price": price, "qty": qty,
            "clientOrderId": client_order_id}


class ServerWithOutputElsewhere(ServerProcess):
    """A server whose data directory is on a device that fails: what it prints is kept off that device."""

    def __init__(self, data: Path, output: Path) -> None:
        super().__init__(data)
        self._output = output

    @property
    def log_path(self) -> Path:
        return self._output


@pytest.mark.parametrize("fault", ["full", "eio"])
async def test_a_failed_log_device_is_reported_by_health_refuses_orders_and_exits_non_zero(tmp_path: Path,
                                                                                          fault: str) -> None:
    """full: the file system fills up, the log's write fails (ENOSPC), nothing of that batch is applied,
    so the orders read over HTTP are still the durable ones. eio: the device fails under ext4, the
    write reaches the page cache but the fdatasync fails (EIO), so the engine holds a batch that is not
    durable and will never be: reads of orders answer 503 at once, naming the failure."""
    device = full_tmpfs(tmp_path / "mnt") if fault == "full" else failing_disk(tmp_path)
    with device as dev:
        root = dev if isinstance(dev, Path) else dev.mount
        server = ServerWithOutputElsewhere(root / "data", tmp_path / "server.log").start()
        strerror = "No space left on device" if fault == "full" else "Input/output error"
        try:
            async with aiohttp.ClientSession(headers=ALICE) as s:
                async with s.post(f"{server.url}/orders", json=order("before")) as r:
                    assert r.status == 200
                    acked = [await r.json()]
                fill(root) if fault == "full" else dev.fail()  # type: ignore[union-attr]
                # A full tmpfs still has room in the log's last page: orders go on until it is used up.
                for i in range(1000):
                    async with s.post(f"{server.url}/orders", json=order(f"after-{i}")) as r:
                        status, answer = r.status, await r.json()
                    if status != 200:
                        break
                    acked.append(answer)
                assert status == 503 and strerror in answer["error"] and "wal.log" in answer["error"], answer
                assert fault == "full" or len(acked) == 1  # EIO: the first sync after the failure fails

                async with s.get(f"{server.url}/health") as r:
                    health = await r.json()
                    assert r.status == 503 and health["status"] == "failed", health
                    assert strerror in health["error"] and "wal.log" in health["error"], health
                async with s.post(f"{server.url}/orders", json=order("later")) as r:
                    assert r.status == 503 and strerror in (await r.json())["error"]
                async with s.get(f"{server.url}/metrics") as r:
                    assert metric(await r.text(), "tickflow_log_failed") == 1

                async with s.get(f"{server.url}/orders") as r:
                    open_orders = r.status, await r.json()
                async with s.get(f"{server.url}/orders/{acked[0]['orderId']}") as r:
                    one = r.status, await r.json()
                if fault == "eio":  # the engine is ahead of the disk for good: no order state is answered
                    for status, body in (open_orders, one):
                        assert status == 503, body
                        assert "log has failed" in body["error"] and strerror in body["error"], body
                else:  # nothing that failed was applied: what is answered is exactly what is durable
                    assert open_orders[0] == 200 and [o["orderId"] for o in open_orders[1]["orders"]] == [
                        a["orderId"] for a in acked]
                    assert one[0] == 200 and one[1]["clientOrderId"] == "before"
                async with s.get(f"{server.url}/book/ACME") as r:  # the durable mirror: the acknowledged orders
                    book = await r.json()
                    assert r.status == 200 and book["bids"] == [{"price": 100, "qty": len(acked), "orders": len(acked)}]

            assert server.proc is not None
            server.proc.send_signal(signal.SIGTERM)
            assert server.proc.wait(20) == 1
            assert f"durable up to seq {health['seq']}" in server.output()
        finally:
            server.kill()
        if fault == "full":  # room again: the restart replays what the callers were told, no more
            (root / "filler").unlink()
            server.start()
            async with aiohttp.ClientSession(headers=ALICE) as s:
                async with s.get(f"{server.url}/orders") as r:
                    assert [o["clientOrderId"] for o in (await r.json())["orders"]] == [
                        a["clientOrderId"] for a in acked]
                async with s.post(f"{server.url}/orders", json=order("after-restart")) as r:
                    assert r.status == 200
            server.kill()


def _raw_get(port: int, path: str) -> socket.socket:
    """Send one GET on a socket of its own, and return the socket without reading the answer."""
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice\r\n"
                 "Connection: close\r\n\r\n".encode())
    return sock


def _answered(sock: socket.socket) -> bool:
    try:
        return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False


async def test_http_reads_show_an_order_only_once_the_sync_covering_it_has_returned(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gate = SyncGate(tmp_path / "gate")
    for name, value in gate.env().items():
        monkeypatch.setenv(name, value)
    server = ServerProcess(tmp_path / "data").start()
    pending: socket.socket | None = None
    try:
        async with aiohttp.ClientSession(headers=ALICE) as s:
            async with s.post(f"{server.url}/orders", json=order("resting", price=99)) as r:
                first = await r.json()
            gate.hold()
            placing = asyncio.create_task(s.post(f"{server.url}/orders", json=order("held", price=101, qty=7)))
            assert await asyncio.to_thread(gate.entered), "the order's sync never started"
            held_id = first["orderId"] + 1

            async def engine_has_it() -> bool:  # /metrics counts the engine's orders, durable or not
                async with s.get(f"{server.url}/metrics") as r:
                    return metric(await r.text(), "tickflow_orders_total") == held_id
            await eventually(engine_has_it, 10, "the engine to hold the order whose sync is held")

            pending = _raw_get(server.port, f"/orders/{held_id}")  # must wait for the sync
            for _ in range(3):  # answered after the GET above was read, on the one event loop
                async with s.get(f"{server.url}/book/ACME") as r:
                    book = await r.json()
                assert [level["price"] for level in book["bids"]] == [99], book  # only what is durable
                assert book["seq"] == first["seq"]
            assert not _answered(pending), "GET /orders/{id} answered before the order was durable"
            assert not placing.done()

            gate.release()
            async with await asyncio.wait_for(placing, 10) as r:
                assert r.status == 200 and (await r.json())["orderId"] == held_id
            pending.settimeout(10)
            answer = (await asyncio.to_thread(pending.recv, 65536)).decode()
            assert answer.startswith("HTTP/1.1 200") and '"clientOrderId":"held"' in answer, answer

            async def book_shows_it() -> Any:
                async with s.get(f"{server.url}/book/ACME") as r:
                    book = await r.json()
                return [level["price"] for level in book["bids"]] == [101, 99]
            await eventually(book_shows_it, 10, "the book to show the order once durable")
    finally:
        if pending is not None:
            pending.close()
        gate.close()
        server.kill()


async def test_the_sync_helper_dies_with_a_killed_server_even_in_the_middle_of_a_sync(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """kill -9 leaves the helper no end of file to notice while its fdatasync runs (here held for good):
    it must die with its parent all the same, not linger holding the log open."""
    gate = SyncGate(tmp_path / "gate")
    for name, value in gate.env().items():
        monkeypatch.setenv(name, value)
    server = ServerProcess(tmp_path / "data").start()
    try:
        assert server.proc is not None
        helper = sync_helper_of(server.proc.pid)
        assert helper is not None and alive(helper)
        gate.hold()
        async with aiohttp.ClientSession(headers=ALICE) as s:
            placing = asyncio.create_task(s.post(f"{server.url}/orders", json=order("in-flight")))
            assert await asyncio.to_thread(gate.entered), "the order's sync never started"
            server.kill()
            with pytest.raises(aiohttp.ClientError):
                await asyncio.wait_for(placing, 10)
        wait_for(lambda: not alive(helper), 5, "the sync helper to die with the server")
    finally:
        server.kill()
        gate.close()
