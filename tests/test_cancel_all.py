"""Cancel all (DELETE /orders, the WebSocket's cancelAll), reading open orders by the same filters, and
cancel on disconnect, against real servers."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import aiohttp
import pytest
from helpers.probe import sequenced_after, websockets_seen_closed
from helpers.wait import until

from server_process import ServerProcess


def auth(account: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {account}"}


async def call(s: aiohttp.ClientSession, method: str, url: str, account: str | None = None,
               **kw: Any) -> tuple[int, Any]:
    async with s.request(method, url, headers=auth(account) if account else {}, **kw) as r:
        return r.status, await r.json(content_type=None)


async def place(s: aiohttp.ClientSession, url: str, account: str, symbol: str, side: str, price: int,
                qty: int = 5) -> dict[str, Any]:
    status, body = await call(s, "POST", f"{url}/orders", account,
                              json={"symbol": symbol, "side": side, "price": price, "qty": qty})
    assert status == 200, body
    return body


async def open_ids(s: aiohttp.ClientSession, url: str, account: str) -> list[int]:
    status, body = await call(s, "GET", f"{url}/orders?status=open", account)
    assert status == 200
    return [o["orderId"] for o in body["orders"]]


async def commands(s: aiohttp.ClientSession, url: str) -> int:
    async with s.get(f"{url}/metrics") as r:
        text = await r.text()
    return int(next(line.split()[1] for line in text.splitlines() if line.startswith("tickflow_commands_total ")))


async def test_cancel_all_takes_exactly_the_callers_orders_in_one_command(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        acme_bids = [(await place(s, u, "alice", "ACME", "buy", p))["orderId"] for p in (98, 99, 99)]
        acme_ask = (await place(s, u, "alice", "ACME", "sell", 105))["orderId"]
        globex = (await place(s, u, "alice", "GLOBEX", "buy", 50))["orderId"]
        bobs = (await place(s, u, "bob", "ACME", "buy", 99))["orderId"]
        # What a cancel-all would take can be read first, with the same filters.
        status, listed = await call(s, "GET", f"{u}/orders?status=open&symbol=ACME&side=buy", "alice")
        assert status == 200 and [o["orderId"] for o in listed["orders"]] == acme_bids
        status, listed = await call(s, "GET", f"{u}/orders?side=sell", "alice")
        assert status == 200 and [o["orderId"] for o in listed["orders"]] == [acme_ask]
        # The same refusals as a cancel-all's, a misspelt filter included: it would have listed everything.
        for bad, field in (("symbol=NOPE", "symbol"), ("side=both", "side"), ("sid=buy", "sid"),
                           ("status=all", "status")):
            status, body = await call(s, "GET", f"{u}/orders?{bad}", "alice")
            assert status == 400 and body["field"] == field, (bad, body)
        before = await commands(s, u)

        status, body = await call(s, "DELETE", f"{u}/orders?symbol=ACME&side=buy", "alice")
        assert status == 200
        assert [o["orderId"] for o in body["orders"]] == acme_bids  # oldest first
        assert all(o["status"] == "cancelled" and o["reason"] == "cancelled_by_user" and o["remainingQty"] == 5
                   and o["seq"] == body["seq"] for o in body["orders"])  # one record for all of them
        assert await commands(s, u) == before + 1
        assert await open_ids(s, u, "alice") == [acme_ask, globex]
        assert await open_ids(s, u, "bob") == [bobs]
        _, book = await call(s, "GET", f"{u}/book/ACME")
        assert book["seq"] == body["seq"]
        assert book["bids"] == [{"price": 99, "qty": 5, "orders": 1}]  # bob's, where alice's two were

        status, body = await call(s, "DELETE", f"{u}/orders?symbol=GLOBEX", "alice")
        assert status == 200 and [o["orderId"] for o in body["orders"]] == [globex]
        status, body = await call(s, "DELETE", f"{u}/orders", "alice")
        assert status == 200 and [o["orderId"] for o in body["orders"]] == [acme_ask]
        status, body = await call(s, "DELETE", f"{u}/orders", "alice")
        assert status == 200 and body["orders"] == [] and body["seq"] > 0
        assert await open_ids(s, u, "alice") == [] and await open_ids(s, u, "bob") == [bobs]
        status, order = await call(s, "GET", f"{u}/orders/{acme_bids[0]}", "alice")
        assert status == 200 and order["status"] == "cancelled"


@pytest.mark.parametrize("query, field", [
    ("symbol=NOPE", "symbol"), ("symbol=", "symbol"), ("side=up", "side"), ("side=buy&side=sell", "side"),
    ("status=open", "status"), ("symbol=ACME&" + "x" * 5000 + "=1", "x" * 37 + "..."),
], ids=["unknown symbol", "empty symbol", "bad side", "two sides", "unknown parameter", "huge parameter"])
async def test_a_bad_cancel_all_is_refused_and_cancels_nothing(server: ServerProcess, query: str, field: str) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        mine = (await place(s, u, "alice", "ACME", "buy", 99))["orderId"]
        before = await commands(s, u)
        status, body = await call(s, "DELETE", f"{u}/orders?{query}", "alice")
        assert status == 400 and body["field"] == field and len(body["error"]) < 200, body
        status, body = await call(s, "DELETE", f"{u}/orders?symbol=ACME")
        assert status == 401
        assert await commands(s, u) == before
        assert await open_ids(s, u, "alice") == [mine]


@pytest.mark.parametrize("kill", [True, False], ids=["kill -9", "SIGTERM"])
async def test_a_cancel_all_survives_a_restart(server: ServerProcess, kill: bool) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        for price in (97, 98, 99):
            await place(s, u, "alice", "ACME", "buy", price)
        kept = (await place(s, u, "alice", "ACME", "sell", 110))["orderId"]
        status, body = await call(s, "DELETE", f"{u}/orders?side=buy", "alice")
        assert status == 200 and len(body["orders"]) == 3
        _, book = await call(s, "GET", f"{u}/book/ACME")
    server.restart(kill=kill)
    async with aiohttp.ClientSession() as s:
        assert await open_ids(s, u, "alice") == [kept]
        _, after = await call(s, "GET", f"{u}/book/ACME")
        assert after == book


async def test_cancel_all_over_the_websocket_answers_and_sends_each_update(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        ids = [(await place(s, u, "carol", "ACME", "sell", p))["orderId"] for p in (101, 102)]
        ws = await s.ws_connect(f"{server.ws_url}?token=carol")
        assert (await ws.receive_json(timeout=10))["type"] == "auth"
        await ws.send_json({"op": "cancelAll", "id": "x1", "symbol": "ACME", "side": "sell"})
        await ws.send_json({"op": "cancelAll", "id": "x2", "side": "sideways"})
        await ws.send_json({"op": "cancelAll", "id": "x3", "bogus": True})
        got: list[dict[str, Any]] = []
        while sum(m["type"] == "result" for m in got) < 3 or sum(m["type"] == "order" for m in got) < 2:
            got.append(await ws.receive_json(timeout=10))
        results = {m["id"]: m for m in got if m["type"] == "result"}
        assert results["x1"]["status"] == 200
        assert [o["orderId"] for o in results["x1"]["body"]["orders"]] == ids
        assert results["x2"]["status"] == 400 and results["x2"]["body"]["field"] == "side"
        assert results["x3"]["status"] == 400 and results["x3"]["body"]["field"] == "bogus"
        updates = [m["order"] for m in got if m["type"] == "order"]
        assert [(o["orderId"], o["status"]) for o in updates] == [(i, "cancelled") for i in ids]
        await ws.close()
        anonymous = await s.ws_connect(server.ws_url)
        await anonymous.send_json({"op": "cancelAll", "id": 1})
        answer = await anonymous.receive_json(timeout=10)
        assert answer["id"] == 1 and answer["status"] == 401
        await anonymous.close()


# ------------------------------------------------------------------ cancel on disconnect

BOT = """
import asyncio, sys, aiohttp
async def main(url):
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(url + "?token=bot&cancelOnDisconnect=true")
        assert (await ws.receive_json())["cancelOnDisconnect"] is True
        for i in range(3):
            await ws.send_json({"op": "order", "id": i, "symbol": "ACME", "side": "buy", "price": 90 + i, "qty": 2})
        answered = 0
        while answered < 3:
            answered += (await ws.receive_json())["type"] == "result"
        print("ready", flush=True)
        await asyncio.sleep(60)
asyncio.run(main(sys.argv[1]))
"""


async def test_a_bot_killed_with_cancel_on_disconnect_armed_leaves_no_orders(server: ServerProcess) -> None:
    u = server.url
    bot = subprocess.Popen([sys.executable, "-c", BOT, server.ws_url], stdout=subprocess.PIPE, text=True)
    try:
        assert bot.stdout is not None and bot.stdout.readline().strip() == "ready"
        async with aiohttp.ClientSession() as s:
            assert len(await open_ids(s, u, "bot")) == 3
            other = await place(s, u, "someone", "ACME", "buy", 95)
            os.kill(bot.pid, signal.SIGKILL)
            await until(lambda: _none_open(s, u, "bot"), interval=0.05, message="the bot's orders cancelled")
            assert await open_ids(s, u, "someone") == [other["orderId"]]
            _, book = await call(s, "GET", f"{u}/book/ACME")
            assert book["bids"] == [{"price": 95, "qty": 5, "orders": 1}]
            async with s.get(f"{u}/metrics") as r:
                assert "tickflow_cancel_on_disconnect_total 1" in await r.text()
    finally:
        bot.kill()
        bot.wait()


async def _until_closed(ws: aiohttp.ClientWebSocketResponse) -> int | None:
    """Read (and so answer the server's close) until the connection closes; its close code."""
    async for _ in ws:
        pass
    return ws.close_code


async def _none_open(s: aiohttp.ClientSession, url: str, account: str) -> bool:
    return await open_ids(s, url, account) == []


async def test_orders_stay_when_cancel_on_disconnect_is_off_disarmed_or_the_server_stops(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        plain = await s.ws_connect(f"{server.ws_url}?token=p1")
        assert (await plain.receive_json(timeout=10))["cancelOnDisconnect"] is False
        disarmed = await s.ws_connect(f"{server.ws_url}?token=p2&cancelOnDisconnect=true")
        assert (await disarmed.receive_json(timeout=10))["cancelOnDisconnect"] is True
        await disarmed.send_json({"op": "auth", "token": "p2", "cancelOnDisconnect": False})
        assert (await disarmed.receive_json(timeout=10))["cancelOnDisconnect"] is False
        failed = await s.ws_connect(f"{server.ws_url}?token=p3&cancelOnDisconnect=true")
        assert (await failed.receive_json(timeout=10))["cancelOnDisconnect"] is True
        await failed.send_json({"op": "auth", "token": "p3", "cancelOnDisconnect": "yes"})
        assert (await failed.receive_json(timeout=10))["field"] == "cancelOnDisconnect"
        bad = await s.ws_connect(f"{server.ws_url}?token=p4&cancelOnDisconnect=1")
        refused = await bad.receive_json(timeout=10)
        assert refused["type"] == "error" and refused["field"] == "cancelOnDisconnect"
        armed = await s.ws_connect(f"{server.ws_url}?token=p5&cancelOnDisconnect=true")
        assert (await armed.receive_json(timeout=10))["cancelOnDisconnect"] is True
        mine = {a: (await place(s, u, a, "ACME", "buy", 90))["orderId"] for a in ("p1", "p2", "p3", "p4", "p5")}
        for ws in (plain, disarmed, failed, bad):
            await ws.close()
        # A cancel on disconnect would be under way once the server has seen them go (only `armed` is
        # open), and in the log before a command sequenced after that.
        await websockets_seen_closed(u, still_open=1)
        await sequenced_after(u, "ACME")
        for account in ("p1", "p2", "p3", "p4"):
            assert await open_ids(s, u, account) == [mine[account]], account
        # The server closes `armed` as it stops (the bot did not go away); the bot answers the close.
        closed = asyncio.ensure_future(_until_closed(armed))
        await asyncio.to_thread(server.stop)
        assert await closed == 1001
    server.start()
    async with aiohttp.ClientSession() as s:
        assert await open_ids(s, u, "p5") == [mine["p5"]]
