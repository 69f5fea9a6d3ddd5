"""Finished orders leave the engine's memory; the wire answers for them from SQLite (the `orders` table),
which is re-derived from the log after a kill -9 like the trades are: from the whole log, or from a snapshot."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.wait import until
from server_process import ServerProcess
from test_http_api import call, order

from tickflow.store.datadir import TRADES_FILE


async def _history(s: aiohttp.ClientSession, u: str) -> dict[int, tuple[str, dict[str, Any]]]:
    """Orders that finish every way, and one that stays live: id -> (owner, its state as GET tells it)."""
    ids: dict[int, str] = {}
    _, maker = await call(s, "POST", f"{u}/orders", "alice", json=order(side="sell", price=100, qty=5))
    _, taker = await call(s, "POST", f"{u}/orders", "bob", json=order(side="buy", price=100, qty=5))
    assert maker["status"] == "new" and taker["status"] == "filled"
    _, resting = await call(s, "POST", f"{u}/orders", "carol", json=order(side="buy", price=90, qty=3))
    st, cancelled = await call(s, "DELETE", f"{u}/orders/{resting['orderId']}", "carol")
    assert st == 200 and cancelled["status"] == "cancelled"
    _, ioc = await call(s, "POST", f"{u}/orders", "dave", json=order(side="buy", price=80, qty=2, tif="ioc"))
    _, live = await call(s, "POST", f"{u}/orders", "erin", json=order(side="sell", price=120, qty=4))
    # A post-only order that would take: rejected by the book.
    _, rejected = await call(s, "POST", f"{u}/orders", "dave", json=order(side="buy", price=120, qty=1, postOnly=True))
    for state, owner in ((maker, "alice"), (taker, "bob"), (cancelled, "carol"), (ioc, "dave"), (rejected, "dave"),
                         (live, "erin")):
        ids[state["orderId"]] = owner
    states = {}
    for order_id, owner in ids.items():
        st, state = await call(s, "GET", f"{u}/orders/{order_id}", owner)
        assert st == 200, state
        states[order_id] = (owner, state)
    assert states[maker["orderId"]][1] == {**maker, "status": "filled", "filledQty": 5, "remainingQty": 0,
                                          "seq": taker["seq"], "ts": taker["ts"]}
    assert states[taker["orderId"]][1] == {**taker, "fills": []}
    assert states[resting["orderId"]][1] == cancelled
    assert states[ioc["orderId"]][1] == ioc and ioc["status"] == "cancelled"
    assert states[rejected["orderId"]][1] == rejected and rejected["status"] == "rejected"
    assert states[live["orderId"]][1] == live
    return states


async def _check(s: aiohttp.ClientSession, u: str, states: dict[int, tuple[str, dict[str, Any]]]) -> None:
    """GET answers each order's state; a cancel or amend of one's own finished order is 409 not_open with it,
    of anyone else's order exactly an unknown id's 404."""
    unknown = await call(s, "DELETE", f"{u}/orders/999999", "mallory")
    assert unknown[0] == 404 and unknown[1]["code"] == "unknown_order"
    for order_id, (owner, state) in states.items():
        assert await call(s, "GET", f"{u}/orders/{order_id}", owner) == (200, state)
        assert await call(s, "GET", f"{u}/orders/{order_id}", "mallory") == (
            await call(s, "GET", f"{u}/orders/999999", "mallory"))
        assert await call(s, "DELETE", f"{u}/orders/{order_id}", "mallory") == unknown
        st, body = await call(s, "PATCH", f"{u}/orders/{order_id}", "mallory", json={"qty": 1})
        assert (st, body["code"]) == (404, "unknown_order")
        if state["status"] in ("filled", "cancelled", "rejected"):
            for method, kw in (("DELETE", {}), ("PATCH", {"json": {"qty": 1}})):
                st, body = await call(s, method, f"{u}/orders/{order_id}", owner, **kw)
                assert (st, body["code"], body["order"]) == (409, "not_open", state), method
    # The same through a batch.
    some = next(i for i, (_, state) in states.items() if state["status"] == "filled")
    owner = states[some][0]
    st, body = await call(s, "POST", f"{u}/batch", owner, json={"ops": [
        {"op": "cancel", "orderId": some}, {"op": "amend", "orderId": some, "qty": 1}]})
    assert st == 200, body
    assert [(r["status"], r["body"]["code"], r["body"]["order"]) for r in body["results"]] == [
        (409, "not_open", states[some][1])] * 2


async def test_finished_orders_answer_from_sqlite(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        states = await _history(s, u)
        await _check(s, u, states)
        live = [i for i, (_, state) in states.items() if state["status"] == "new"]
        _, listed = await call(s, "GET", f"{u}/orders", "erin")
        assert [o["orderId"] for o in listed["orders"]] == live


def _forget(data: Path, after_seq: int | None) -> int:
    """What a power cut does to SQLite's last commits (synchronous=NORMAL): the finished orders of records after
    `after_seq` gone and the watermark back at it (None: the whole table and the watermark lost)."""
    with sqlite3.connect(data / TRADES_FILE) as db:
        floor = 0 if after_seq is None else after_seq
        gone = db.execute("DELETE FROM orders WHERE seq > ?", (floor,)).rowcount
        if after_seq is None:
            db.execute("DELETE FROM watermarks")
        else:
            db.execute("UPDATE watermarks SET seq = ? WHERE name = 'orders'", (after_seq,))
    return gone


def _snapshot_seqs(data: Path) -> list[int]:
    return sorted(int(p.name[5:25]) for p in data.glob("snap-*.bin"))


@pytest.mark.parametrize("how", ["at-once", "whole-log", "from-snapshot", "behind-the-snapshots", "sigterm"])
async def test_finished_orders_survive_a_kill_and_sqlite_catches_up_from_the_log(tmp_path: Path, how: str) -> None:
    data = tmp_path / "data"
    extra = ["--snapshot-every", "0" if how in ("at-once", "whole-log") else "4"]
    server = ServerProcess(data, extra=extra).start()
    try:
        u = server.url
        async with aiohttp.ClientSession() as s:
            states = await _history(s, u)
            _, health = await call(s, "GET", f"{u}/health")
            if how != "at-once":  # SQLite holds every finished order (GET /trades waits for the writer)
                await call(s, "GET", f"{u}/trades")
            if how in ("from-snapshot", "behind-the-snapshots"):  # a snapshot before the end is published
                await until(lambda: [q for q in _snapshot_seqs(data) if q < health["seq"]], 10,
                            message="a snapshot published before the last seq")
        if how == "sigterm":
            server.stop()
        else:
            server.kill()
        last_seq = health["seq"]
        snaps = _snapshot_seqs(data)
        if how == "at-once":
            pass  # killed while SQLite may not hold them yet (the writer lingers 100 ms)
        elif how == "whole-log":
            assert not snaps
            assert _forget(data, None) == 5
        elif how == "from-snapshot":
            # SQLite lost what came after a snapshot (a newer one, if any, is then passed over): the replay
            # from it must put that back.
            base = max(s for s in snaps if s < last_seq)
            assert _forget(data, base) > 0
        elif how == "behind-the-snapshots":
            # SQLite lost every finished order: no snapshot will do, the whole log is replayed.
            assert snaps and _forget(data, None) == 5
        else:
            assert snaps and snaps[-1] == last_seq
        server.start()
        out = server.output()
        assert "replayed" in out
        if how == "from-snapshot":
            assert f"{last_seq - base} records replayed" in out, out  # from the snapshot, not the whole log
        if how == "behind-the-snapshots":
            assert f"{last_seq} records replayed" in out and "passing over a snapshot" in out, out
        async with aiohttp.ClientSession() as s:
            await _check(s, u, states)
        with sqlite3.connect(data / TRADES_FILE) as db:
            assert db.execute("SELECT seq FROM watermarks WHERE name = 'orders'").fetchone()[0] >= last_seq
            assert db.execute("SELECT COUNT(*) FROM orders").fetchone()[0] == 5
    finally:
        server.kill()


async def test_orders_of_records_a_cut_log_lost_leave_sqlite_with_them(tmp_path: Path) -> None:
    """A log cut back (a torn tail: `--durability none` and a power cut) will give the lost records' order ids
    again: SQLite must not answer for the orders it had from them."""
    data = tmp_path / "data"
    server = ServerProcess(data, durability="none", extra=["--snapshot-every", "0"]).start()
    try:
        u = server.url
        async with aiohttp.ClientSession() as s:
            await call(s, "POST", f"{u}/orders", "erin", json=order(side="sell", price=120, qty=4))
            _, ioc = await call(s, "POST", f"{u}/orders", "dave", json=order(side="buy", price=80, qty=2, tif="ioc"))
            assert ioc["status"] == "cancelled"
            assert (await call(s, "GET", f"{u}/orders/{ioc['orderId']}", "dave"))[0] == 200  # in SQLite now
        server.kill()
        wal = data / "wal.log"
        os.truncate(wal, wal.stat().st_size - 1)  # the IOC's record torn: cut at the next start
        server.start()
        async with aiohttp.ClientSession() as s:
            _, again = await call(s, "POST", f"{u}/orders", "erin", json=order(side="sell", price=121, qty=1))
            assert again["orderId"] == ioc["orderId"] and again["status"] == "new"
            st, body = await call(s, "GET", f"{u}/orders/{ioc['orderId']}", "dave")
            assert (st, body["code"]) == (404, "unknown_order")
            st, body = await call(s, "DELETE", f"{u}/orders/{ioc['orderId']}", "dave")
            assert (st, body["code"]) == (404, "unknown_order")
    finally:
        server.kill()
