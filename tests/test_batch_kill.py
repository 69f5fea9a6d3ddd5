"""kill -9 a real server while makers re-quote and takers send batches (issue 28): after the restart, every
acknowledged batch op and quote is in the log and replays to exactly the answer that was given."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path
from typing import Any

import aiohttp

from server_process import ServerProcess
from test_recovery_kill import as_json, replay
from tickflow.store.datadir import WAL_FILE

ACKS_BEFORE_KILL = 400


async def maker(s: aiohttp.ClientSession, url: str, name: str, acks: list[tuple[str, Any]], seed: int) -> None:
    rng = random.Random(seed)
    async with s.ws_connect(f"{url}?token={name}") as ws:
        await ws.receive()
        for request_id in range(1, 100_000):
            mid = 100 + rng.randint(-3, 3)
            bids = [[mid - 1 - i, rng.randint(1, 9)] for i in range(rng.randint(0, 5))]
            asks = [[mid + 1 + i, rng.randint(1, 9)] for i in range(rng.randint(0, 5))]
            await ws.send_json({"op": "quote", "id": request_id, "symbol": "ACME", "bids": bids, "asks": asks})
            while True:
                msg = json.loads((await ws.receive()).data)
                if msg.get("id") == request_id:
                    break
            acks.append(("quote", msg))


async def taker(s: aiohttp.ClientSession, url: str, name: str, acks: list[tuple[str, Any]], seed: int) -> None:
    rng = random.Random(seed)
    mine: list[int] = []
    async with s.ws_connect(f"{url}?token={name}") as ws:
        await ws.receive()
        for request_id in range(1, 100_000):
            ops: list[dict[str, Any]] = []
            for n in range(rng.randint(1, 32)):
                if mine and rng.random() < 0.2:
                    ops.append({"op": "cancel", "orderId": mine.pop(rng.randrange(len(mine)))})
                else:
                    side = rng.choice(["buy", "sell"])
                    price = 100 + rng.randint(-4, 4)
                    ops.append({"op": "order", "symbol": "ACME", "side": side, "price": price,
                                "qty": rng.randint(1, 6), "clientOrderId": f"{name}-{request_id}-{n}"})
            await ws.send_json({"op": "batch", "id": request_id, "ops": ops})
            while True:
                msg = json.loads((await ws.receive()).data)
                if msg.get("id") == request_id:
                    break
            acks.append(("batch", msg))
            for result in msg.get("results", []):
                body = result["body"]
                if result["status"] == 200 and "orderId" in body and body["status"] in ("new", "partially_filled"):
                    mine.append(body["orderId"])


async def test_kill_9_keeps_every_acknowledged_batch_and_quote(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", durability="group").start()
    acks: list[tuple[str, Any]] = []
    try:
        async with aiohttp.ClientSession() as s:
            tasks = [asyncio.create_task(maker(s, server.ws_url, f"mm{i}", acks, i)) for i in range(3)]
            tasks += [asyncio.create_task(taker(s, server.ws_url, f"tk{i}", acks, 10 + i)) for i in range(3)]
            async with asyncio.timeout(120):
                while len(acks) < ACKS_BEFORE_KILL:
                    if any(t.done() for t in tasks):
                        break
                    await asyncio.sleep(0.01)
            assert not any(t.done() and t.exception() for t in tasks), [t.exception() for t in tasks if t.done()]
            server.kill()  # SIGKILL, while every client still has a request in flight
            await asyncio.gather(*tasks, return_exceptions=True)
        answered = list(acks)
        log, outcomes, _ = replay(str(server.data / WAL_FILE))
        checked = quotes = 0
        for kind, msg in answered:
            if kind == "quote":
                assert msg["status"] == 200, msg
                body = msg["body"]
                assert as_json(outcomes[body["seq"]].quoted) == body["orders"]
                quotes += 1
                continue
            assert msg["type"] == "results", msg
            for result in msg["results"]:
                body = result["body"]
                if result["status"] == 200:
                    assert as_json(outcomes[body["seq"]].result) == body
                    checked += 1
        assert quotes > 50 and checked > 1000, (quotes, checked)
        server.start()  # the restarted server holds at least everything acknowledged
        async with aiohttp.ClientSession() as s:
            async with s.get(f"{server.url}/health") as r:
                health = await r.json()
        assert health["seq"] == max(outcomes)
    finally:
        server.stop()
