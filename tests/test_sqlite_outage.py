"""SQLite's disk fills up under a running server (issue 27, item 7): orders keep flowing, /health says the
trade store is degraded, and once there is room again every trade is in SQLite, none missing, none twice.
The trade store is on a small tmpfs of its own (tests/helpers/devices.py), the log beside the test's."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.devices import fill, full_tmpfs
from helpers.wait import until

from server_process import ServerProcess


async def trade(s: aiohttp.ClientSession, url: str, i: int) -> int:
    """One sell of alice's taken by bob: the trade ids of bob's fills."""
    async with s.post(f"{url}/orders", json={"symbol": "ACME", "side": "sell", "price": 100, "qty": 1,
                                             "clientOrderId": f"s{i}"},
                      headers={"Authorization": "Bearer alice"}) as r:
        assert r.status == 200, await r.text()
    async with s.post(f"{url}/orders", json={"symbol": "ACME", "side": "buy", "price": 100, "qty": 1,
                                             "clientOrderId": f"b{i}"},
                      headers={"Authorization": "Bearer bob"}) as r:
        assert r.status == 200, await r.text()
        (fill_,) = (await r.json())["fills"]
        return int(fill_["tradeId"])


async def health(s: aiohttp.ClientSession, url: str) -> dict[str, Any]:
    async with s.get(f"{url}/health") as r:
        return dict(await r.json())


async def all_trades(s: aiohttp.ClientSession, url: str) -> list[int] | None:
    """Every trade id SQLite holds, or None while /trades answers 503 (SQLite behind)."""
    ids: list[int] = []
    while True:
        async with s.get(f"{url}/trades", params={"symbol": "ACME", "after": str(ids[-1] if ids else 0),
                                                   "limit": "1000"}) as r:
            if r.status == 503:
                return None
            page = await r.json()
        if not page:
            return ids
        ids += [t["tradeId"] for t in page]


async def test_orders_flow_while_sqlite_has_no_room_and_every_trade_reaches_it_after(tmp_path: Path) -> None:
    with full_tmpfs(tmp_path / "mnt", size="2m") as mnt:
        data = tmp_path / "data"
        data.mkdir(mode=0o700)
        os.symlink(mnt / "trades.sqlite", data / "trades.sqlite")  # the store, and its -wal, on the tmpfs
        server = ServerProcess(data, durability="none").start()
        try:
            async with aiohttp.ClientSession() as s:
                made = [await trade(s, server.url, i) for i in range(5)]
                assert await all_trades(s, server.url) == made
                fill(mnt)
                i = 5
                while (await health(s, server.url)).get("status") != "degraded":
                    assert i < 5_000, "SQLite never failed on a full file system"
                    made.append(await trade(s, server.url, i))
                    i += 1
                assert "SQLite" in (await health(s, server.url))["error"]
                for j in range(i, i + 200):  # orders keep flowing while SQLite refuses
                    made.append(await trade(s, server.url, j))
                (mnt / "filler").unlink()
                await until(lambda: all_trades(s, server.url), 60, interval=0.2,
                            message="SQLite to take the trades again")
                assert await all_trades(s, server.url) == made == list(range(1, len(made) + 1))
                assert (await health(s, server.url))["status"] == "ok"
        finally:
            server.kill()


async def test_an_outage_past_what_memory_may_hold_is_caught_up_from_the_log_at_the_next_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer holds at most TICKFLOW_MAX_TRADES_BUFFERED trades (here 50) while SQLite refuses them;
    past that it leaves them to the log: readers are told at once, orders still flow, and the restart
    (with room again) puts every trade in SQLite."""
    monkeypatch.setenv("TICKFLOW_MAX_TRADES_BUFFERED", "50")
    with full_tmpfs(tmp_path / "mnt", size="2m") as mnt:
        data = tmp_path / "data"
        data.mkdir(mode=0o700)
        os.symlink(mnt / "trades.sqlite", data / "trades.sqlite")
        server = ServerProcess(data, durability="none").start()
        try:
            async with aiohttp.ClientSession() as s:
                made = [await trade(s, server.url, i) for i in range(5)]
                fill(mnt)
                i = 5
                while "next start" not in (await health(s, server.url)).get("error", ""):
                    assert i < 5_000, "the writer never left the backlog to the log"
                    made.append(await trade(s, server.url, i))
                    i += 1
                for j in range(i, i + 100):
                    made.append(await trade(s, server.url, j))
                async with s.get(f"{server.url}/trades", params={"symbol": "ACME"}) as r:
                    assert r.status == 503 and "next start" in (await r.json())["error"]
            (mnt / "filler").unlink()
            server.restart(kill=False)
            async with aiohttp.ClientSession() as s:
                assert await all_trades(s, server.url) == made == list(range(1, len(made) + 1))
                assert (await health(s, server.url))["status"] == "ok"
        finally:
            server.kill()
