"""The Host check against DNS rebinding: a page on a name its author controls, pointed at 127.0.0.1, is of
the same origin as the server's own page to the browser, so the Origin check cannot tell; the Host header
names the attacker's name, and the server refuses it (403) for every path, the WebSocket's upgrade
included, unless `--allow-host` lists it. Addresses and localhost need no DNS and are always served."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Iterator

import aiohttp
import pytest

from server_process import ServerProcess
from tickflow.net.gateway.security import allowed_host_argument, host_allowed


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("host") / "data", extra=["--allow-host", "desk.example.com"]).start()
    yield s
    s.stop()


@pytest.mark.parametrize("host, served", [
    (None, True), ("127.0.0.1:8080", True), ("[::1]:8080", True), ("10.1.2.3", True), ("localhost:8080", True),
    ("LocalHost", True), ("app.localhost:8080", True), ("desk.example.com", True), ("DESK.example.com.:443", True),
    ("evil.example", False), ("127.0.0.1.evil.example", False), ("localhost.evil.example", False),
    ("desk.example.com.evil", False), ("", False), ("a b", False), ("host:port", False), ("user@127.0.0.1", False),
    ("127.0.0.1/path", False), ("[::1", False),
])
def test_addresses_localhost_and_listed_names_are_served_other_names_not(host: str | None, served: bool) -> None:
    assert host_allowed(host, frozenset({"desk.example.com"})) is served
    assert host_allowed(host, frozenset({"*"})) is (served or host not in ("", "a b", "host:port", "user@127.0.0.1",
                                                                         "127.0.0.1/path", "[::1"))


def test_allow_host_takes_names_and_a_star_only() -> None:
    assert allowed_host_argument("Desk.Example.COM.") == "desk.example.com"
    assert allowed_host_argument("*") == "*"
    for bad in ("", "a b", "desk.example.com:8080", "http://desk.example.com", "-x.example", "a..b"):
        with pytest.raises(argparse.ArgumentTypeError):
            allowed_host_argument(bad)


async def _get(s: aiohttp.ClientSession, server: ServerProcess, path: str, host: str) -> tuple[int, dict[str, str]]:
    async with s.get(f"{server.url}{path}", headers={"Host": host}) as r:
        return r.status, await r.json()


async def test_a_rebound_name_is_refused_everywhere_and_nothing_is_logged(server: ServerProcess) -> None:
    port = server.url.rsplit(":", 1)[1]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{server.url}/health") as r:
            seq = (await r.json())["seq"]
        for path in ("/health", "/", "/book/ACME", "/orders"):
            status, body = await _get(s, server, path, f"evil.example:{port}")
            assert status == 403 and "--allow-host" in body["error"], (path, body)
        rebound = {"Host": f"evil.example:{port}", "Authorization": "Bearer alice"}
        async with s.post(f"{server.url}/orders", headers=rebound,
                          json={"symbol": "ACME", "side": "buy", "price": 100, "qty": 1}) as r:
            assert r.status == 403
            assert r.headers["X-Frame-Options"] == "DENY"  # the refusal carries the browser headers too
        # The attack over the WebSocket: the page's Origin and the Host are both the rebound name.
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await s.ws_connect(f"{server.ws_url}", headers={"Host": f"evil.example:{port}",
                                                             "Origin": f"http://evil.example:{port}"})
        assert refused.value.status == 403
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"desk.example.com:{port}"):
            status, _ = await _get(s, server, "/health", host)
            assert status == 200, host
        async with s.ws_connect(f"{server.ws_url}", headers={"Origin": server.url}) as ws:  # the page's own
            await ws.close()
        async with s.get(f"{server.url}/health") as r:
            assert (await r.json())["seq"] == seq
        async with s.get(f"{server.url}/metrics") as r:
            assert "\ntickflow_host_refused_total 6\n" in await r.text()


async def test_allow_host_star_serves_any_name(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--allow-host", "*"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            assert (await _get(s, server, "/health", "anything.example"))[0] == 200
    finally:
        server.stop()
