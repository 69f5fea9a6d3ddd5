"""Issue 26: clientOrderIds are remembered for the idempotency window (`serve --idempotency-window`, a logged
rule), measured in the log's time: inside it a retry gets the first answer, across restarts and snapshots;
after it the id is a new order, and the entry is gone from memory and from snapshots."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
from reference_book import Driver

from server_process import ServerProcess
from tickflow.core.snapshot import capture, restore, state_hash
from tickflow.core.types import NewOrder, Rules

WINDOW_MS = 1500


def test_a_clientorderid_is_answered_inside_the_window_and_is_a_new_order_after_it() -> None:
    d = Driver()  # each command is stamped a millisecond after the one before
    d.apply(Rules(0, 0, 10))
    first = d.new("a", "buy", 90, 1, client_order_id="x").result
    assert first is not None
    for _ in range(8):
        d.new("b", "buy", 80, 1)
    again = d.apply(_order("x"))  # stamped 9 ms after the first: inside
    assert again.replayed and again.result == first
    d.new("b", "buy", 80, 1)  # 10 ms after the first: forgotten before this record is applied
    assert ("a", "x") not in d.engine.idempotency
    later = d.apply(_order("x"))
    assert not later.replayed and later.result is not None and later.result.order_id != first.order_id
    # A shorter window applies to what is kept at once; 0 keeps every id from then on.
    d.apply(Rules(0, 0, 1))
    assert ("a", "x") not in d.engine.idempotency
    d.apply(Rules(0, 0, 0))
    d.new("a", "buy", 90, 1, client_order_id="y")
    for _ in range(50):
        d.new("b", "buy", 80, 1)
    assert ("a", "y") in d.engine.idempotency


def test_a_snapshot_keeps_the_window_and_what_is_inside_it_and_forgets_the_same_entries() -> None:
    d = Driver()
    d.apply(Rules(0, 0, 5))
    for i in range(4):
        d.new("a", "buy", 90, 1, client_order_id=f"c{i}")
    engine = restore(capture(d.engine))
    assert engine.idempotency.window == 5 and state_hash(engine) == state_hash(d.engine)
    for _ in range(3):  # c0-c3 are stamped 1002-1005 and these 1006-1008; z is 1009: c0, c1, c2 are forgotten
        d.new("b", "buy", 80, 1)
        engine.apply(d.seq, 1000 + d.seq, NewOrder("b", "ACME", "buy", "limit", 80, 1))
    d.apply(_order("z", account="b"))
    engine.apply(d.seq, 1000 + d.seq, _order("z", account="b"))
    assert state_hash(engine) == state_hash(d.engine)
    assert list(engine.idempotency) == list(d.engine.idempotency) == [("a", "c3"), ("b", "z")]


def _order(coid: str, account: str = "a") -> NewOrder:
    return NewOrder(account, "ACME", "buy", "limit", 90, 1, client_order_id=coid)


async def _post(s: aiohttp.ClientSession, server: ServerProcess, coid: str, price: int = 90) -> dict[str, Any]:
    async with s.post(f"{server.url}/orders", headers={"Authorization": "Bearer alice"},
                      json={"symbol": "ACME", "side": "buy", "price": price, "qty": 1, "clientOrderId": coid}) as r:
        assert r.status == 200, await r.text()
        return dict(await r.json())


async def _seq(s: aiohttp.ClientSession, server: ServerProcess) -> int:
    async with s.get(f"{server.url}/health") as r:
        return int((await r.json())["seq"])


async def test_a_retry_inside_the_window_gets_the_first_answer_across_a_kill_and_a_snapshot(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--idempotency-window", "1h", "--snapshot-every", "5"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            first = await _post(s, server, "keep-1")
            for i in range(12):  # snapshots are taken after it
                await _post(s, server, f"fill-{i}", 80)
            server.restart(kill=True)
            async with s.get(f"{server.url}/health") as r:
                assert (await r.json())["recovery"]["snapshotSeq"] > first["seq"]
            assert await _post(s, server, "keep-1") == first
    finally:
        server.stop()


async def test_after_the_window_a_reused_id_is_a_new_order_and_a_replay_forgets_what_was_forgotten(
        tmp_path: Path) -> None:
    """The window in force when the records were written decides, whatever the window of the server that
    replays them: forgotten under a short window stays forgotten after a restart with a long one, and the
    long one applies to what is still kept from its record on."""
    server = ServerProcess(tmp_path / "data", extra=["--idempotency-window", f"{WINDOW_MS}ms"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            first = await _post(s, server, "reuse-me")
            seq = await _seq(s, server)
            # Retries inside the window are answered without a record; the first one after it is an order.
            deadline = time.monotonic() + 30
            while (again := await _post(s, server, "reuse-me")) == first:
                assert time.monotonic() < deadline, "the window never passed"
                assert await _seq(s, server) == seq
            assert again["orderId"] != first["orderId"] and again["ts"] >= first["ts"] + WINDOW_MS
            assert await _post(s, server, "reuse-me") == again  # the new answer is the one remembered now
            async with s.get(f"{server.url}/metrics") as r:
                assert "\ntickflow_client_order_ids 1\n" in await r.text()  # the first is forgotten, not kept too
            server.extra = ["--idempotency-window", "24h"]
            server.restart(kill=True)
            assert await _seq(s, server) == again["seq"] + 1  # the new window is one more record
            assert await _post(s, server, "reuse-me") == again
    finally:
        server.stop()


def test_a_window_too_long_or_not_a_duration_is_refused_at_start(tmp_path: Path) -> None:
    for bad in ("367d", "-1s", "1y", "abc", "1.5h", ""):
        proc = subprocess.run([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(tmp_path / "data"),
                               "--port", "0", "--symbols", "ACME", "--idempotency-window", bad],
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 2 and "--idempotency-window" in proc.stderr, (bad, proc.stderr)
        assert not (tmp_path / "data").exists()
