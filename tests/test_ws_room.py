"""Room for signed-in traders (issue 27, item 2): anonymous WebSockets that answer pings held every slot,
and a trader then got 503. Real server processes on 127.0.0.1 with small caps set by flag."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers.wait import until
from test_ws_feed import metric

from server_process import ServerProcess

ORDER = {"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 100, "qty": 1}


async def next_of(ws: aiohttp.ClientWebSocketResponse, kind: str) -> dict[str, Any]:
    while True:
        msg = await ws.receive(timeout=10)
        assert msg.type is aiohttp.WSMsgType.TEXT, msg
        data = json.loads(msg.data)
        if data["type"] == kind:
            return data


async def refused(s: aiohttp.ClientSession, url: str) -> int:
    with pytest.raises(aiohttp.WSServerHandshakeError) as refusal:
        await s.ws_connect(url)
    return refusal.value.status


async def test_anonymous_sockets_cannot_take_the_room_kept_for_signed_in_traders(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=[
        "--max-websockets", "10", "--max-anonymous-websockets", "5", "--max-websockets-per-account", "2"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            # The attack: anonymous sockets that answer pings (aiohttp's client does), as many as let in.
            held = [await s.ws_connect(server.ws_url) for _ in range(5)]
            for ws in held[:4]:  # purpose enough for the sign-in deadline: viewers are welcome
                await ws.send_json({"op": "subscribe", "symbols": ["ACME"]})
            assert await refused(s, server.ws_url) == 503
            async with s.get(server.ws_url, headers={"Connection": "Upgrade", "Upgrade": "websocket",
                                                      "Sec-WebSocket-Version": "13",
                                                      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}) as r:
                assert r.status == 503 and r.headers["Retry-After"] == "5"
                assert "not signed in" in (await r.json())["error"]

            # A trader still gets in and trades; one account has a cap of its own (429: its doing).
            trader = await s.ws_connect(server.ws_url + "?token=alice")
            await trader.send_json(ORDER)
            assert (await next_of(trader, "result"))["status"] == 200
            second = await s.ws_connect(server.ws_url + "?token=alice")
            assert await refused(s, server.ws_url + "?token=alice") == 429

            # A socket let in anonymously that signs in leaves the anonymous room: another viewer fits.
            await held[4].send_json({"op": "auth", "token": "bob"})
            assert (await next_of(held[4], "auth"))["account"] == "bob"
            viewer = await until(lambda: _connect(s, server.ws_url), interval=0.05,
                                 message="room for a viewer once an anonymous socket signed in")
            # Signing in past the account's cap is refused, and the socket stays as it was.
            await viewer.send_json({"op": "auth", "token": "alice"})
            answer = await next_of(viewer, "error")
            assert answer["op"] == "auth" and "signed in as alice" in answer["error"]
            await viewer.send_json({"op": "ping"})
            assert (await next_of(viewer, "pong")) == {"type": "pong"}
            async with s.get(f"{server.url}/metrics") as r:
                assert metric(await r.text(), "tickflow_websocket_refused_total") == 3
            for ws in (*held, trader, second, viewer):
                await ws.close()
    finally:
        server.kill()


async def _connect(s: aiohttp.ClientSession, url: str) -> aiohttp.ClientWebSocketResponse | None:
    try:
        return await s.ws_connect(url)
    except aiohttp.WSServerHandshakeError:
        return None


async def test_a_socket_that_neither_signs_in_nor_subscribes_is_closed_at_the_deadline(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--auth-timeout", "0.5"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            signed_in = await s.ws_connect(server.ws_url + "?token=alice")
            viewer = await s.ws_connect(server.ws_url)
            await viewer.send_json({"op": "subscribe", "symbols": ["ACME"]})
            late = await s.ws_connect(server.ws_url)
            await late.send_json({"op": "auth", "token": "bob"})
            idle = await s.ws_connect(server.ws_url)  # answers pings, sends its own: no purpose
            await idle.send_json({"op": "ping"})
            assert (await next_of(idle, "pong")) == {"type": "pong"}
            while (msg := await idle.receive(timeout=10)).type is aiohttp.WSMsgType.TEXT:
                pass
            assert msg.type is aiohttp.WSMsgType.CLOSE and idle.close_code == 1008
            assert "neither signed in nor subscribed within 0.5 s" in (msg.extra or "")
            # The others, opened before it, are past their deadline too, and still served.
            for ws in (signed_in, viewer, late):
                await ws.send_json({"op": "ping"})
                assert (await next_of(ws, "pong")) == {"type": "pong"}
            async with s.get(f"{server.url}/metrics") as r:
                assert metric(await r.text(), "tickflow_websocket_auth_timeouts_total") == 1
            for ws in (signed_in, viewer, late):
                await ws.close()
    finally:
        server.kill()


def test_the_anonymous_cap_is_a_part_of_the_whole(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--max-websockets", "4", "--max-anonymous-websockets", "5"])
    with pytest.raises(Exception) as refusal:
        server.start()
    assert "--max-anonymous-websockets 5 is more than --max-websockets 4" in str(refusal.value)
