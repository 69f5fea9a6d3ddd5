"""Issue 27: what someone who can reach the server (or a page the operator opens) could do, and what the
server does instead. Real server processes (tests/server_process.py), sockets on 127.0.0.1 only; the one
test that must serve an address other machines could reach does so in a network namespace of its own.

Each test names the attack or the failure, then checks the answer: refusals before anything is logged,
headers a browser obeys, bounded answers, one clear line for a start that cannot be made."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import resource
import signal
import sqlite3
import stat
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from server_process import ServerProcess
from tickflow.net.client import Client
from tickflow.net.gateway.security import CHART_STYLE
from tickflow.net.wire.limits import MAX_BARS, MAX_ORDERS_PAGE, MAX_WS_REPLY, MIN_TOKEN_LENGTH
from tickflow.store.log.wal import FILE_HEADER, OsFileOps, Wal

ROOT = Path(__file__).resolve().parent.parent
GOOD_TOKEN = "alice-token-0123456789"


def serve_once(data: Path, *flags: str, preexec: Any = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """`tickflow serve` for a start that is expected to be refused: its exit status and what it said."""
    return subprocess.run([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(data), "--port", "0",
                           "--symbols", "ACME", *flags], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=preexec)


async def call(s: aiohttp.ClientSession, method: str, url: str, token: str | None = None,
               body: Any = None, headers: dict[str, str] | None = None) -> tuple[int, Any, Any]:
    """status, JSON body (or text), headers."""
    h = dict(headers or {})
    if token:
        h["Authorization"] = f"Bearer {token}"
    async with s.request(method, url, json=body, headers=h) as r:
        text = await r.text()
        try:
            data = json.loads(text)
        except ValueError:
            data = text
        return r.status, data, r.headers


async def trade_once(s: aiohttp.ClientSession, url: str) -> None:
    await call(s, "POST", f"{url}/orders", "maker", {"symbol": "ACME", "side": "sell", "price": 5, "qty": 1})
    await call(s, "POST", f"{url}/orders", "taker", {"symbol": "ACME", "side": "buy", "price": 5, "qty": 1})


async def metric(s: aiohttp.ClientSession, url: str, name: str) -> int:
    async with s.get(f"{url}/metrics") as r:
        text = await r.text()
    found = re.search(rf"^{name} (\d+)$", text, re.M)
    assert found, f"{name} not in /metrics"
    return int(found.group(1))


async def results(ws: aiohttp.ClientWebSocketResponse, ids: set[Any], timeout: float = 60) -> dict[Any, Any]:
    """The results of the requests `ids` sent on `ws`, by id (other messages are passed over)."""
    got: dict[Any, Any] = {}
    async with asyncio.timeout(timeout):
        while ids - got.keys():
            msg = await ws.receive_json()
            if msg.get("type") == "result":
                got[msg["id"]] = msg
    return got


async def next_of(ws: aiohttp.ClientWebSocketResponse, kind: str, timeout: float = 10) -> dict[str, Any]:
    async with asyncio.timeout(timeout):
        while True:
            msg = await ws.receive_json()
            if msg.get("type") == kind:
                return msg


async def rest_orders(ws: aiohttp.ClientWebSocketResponse, n: int, price: int = 10, first_id: int = 0) -> None:
    """Place `n` one-lot bids on ACME over `ws` (signed in), at most 512 in flight."""
    sent = 0
    while sent < n:
        batch = range(first_id + sent, first_id + min(n, sent + 512))
        for i in batch:
            await ws.send_json({"op": "order", "id": i, "symbol": "ACME", "side": "buy", "price": price, "qty": 1})
        answered = await results(ws, set(batch))
        assert all(r["status"] == 200 for r in answered.values())
        sent += len(batch)


async def in_one_packet(server: ServerProcess, token: str, messages: list[dict[str, Any]]) -> dict[Any, Any]:
    """Send `messages` on a new WebSocket in one write (so the server reads them together) and return
    their results by id: a plain socket, since a client library writes each frame by itself."""
    reader, writer = await asyncio.open_connection("127.0.0.1", int(server.url.rsplit(":", 1)[1]))
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((f"GET /ws?token={token}&updates=false HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                  f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head

    def frame(text: str) -> bytes:
        data = text.encode()
        mask = os.urandom(4)
        size = bytes([0x80 | len(data)]) if len(data) < 126 else bytes([0x80 | 126]) + len(data).to_bytes(2, "big")
        return bytes([0x81]) + size + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data))

    async def read_text() -> dict[str, Any]:
        first, second = await reader.readexactly(2)
        size = second & 0x7F
        if size == 126:
            size = int.from_bytes(await reader.readexactly(2), "big")
        elif size == 127:
            size = int.from_bytes(await reader.readexactly(8), "big")
        return json.loads(await reader.readexactly(size))

    got: dict[Any, Any] = {}
    try:
        async with asyncio.timeout(10):
            assert (await read_text())["type"] == "auth"
            writer.write(b"".join(frame(json.dumps(m)) for m in messages))
            while len(got) < len(messages):
                msg = await read_text()
                if msg.get("type") == "result":
                    got[msg["id"]] = msg
    finally:
        writer.close()
    return got


# ------------------------------------------------------------------ 1. open accounts off loopback


def test_an_address_others_can_reach_without_tokens_refuses_to_start(tmp_path: Path) -> None:
    """The attack: `serve --host 0.0.0.0` in open mode, where anyone who reaches the port trades as anyone."""
    for host in ("0.0.0.0", "::"):
        out = serve_once(tmp_path / "data", "--host", host)
        assert out.returncode == 2, out.stderr
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "--tokens" in lines[0] and "--open-accounts" in lines[0], out.stderr
        assert not (tmp_path / "data").exists()  # refused before anything was made
    out = serve_once(tmp_path / "data", "--host", "0.0.0.0", "--open-accounts", "--tokens", "x.json")
    assert out.returncode == 2 and "exclude each other" in out.stderr


def test_a_loopback_host_keeps_open_mode(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--host", "localhost"]).start()
    try:
        health = json.loads(_get(f"{server.url}/health"))
        assert health["accounts"] == "open" and "warning" not in health
    finally:
        server.kill()


NETNS_SCRIPT = """
import json, sys, urllib.request
sys.path.insert(0, sys.argv[2])
from server_process import ServerProcess
from pathlib import Path
server = ServerProcess(Path(sys.argv[1]), extra=["--host", "0.0.0.0", "--open-accounts"]).start()
try:
    with urllib.request.urlopen(server.url.replace("0.0.0.0", "127.0.0.1") + "/health", timeout=10) as r:
        print(json.dumps({"health": json.load(r), "output": server.output()}))
finally:
    server.kill()
"""


def test_open_accounts_off_loopback_is_allowed_on_purpose_and_says_so(tmp_path: Path) -> None:
    """`--open-accounts` serves 0.0.0.0 without tokens, with a warning at start and in /health. It runs in
    a network namespace of its own (only its loopback), so nothing is really reachable from elsewhere."""
    probe = subprocess.run(["unshare", "-n", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"needs a network namespace (unshare -n, root or user namespaces): {probe.stderr!r}")
    out = subprocess.run(["unshare", "-n", "sh", "-c", 'ip link set lo up && exec "$0" "$@"', sys.executable,
                          "-c", NETNS_SCRIPT, str(tmp_path / "data"), str(ROOT / "tests")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr + out.stdout
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    health = seen["health"]
    assert health["accounts"] == "open"
    assert "other machines can reach" in health["warning"] and "--open-accounts" in health["warning"]
    assert "WARNING" in seen["output"] and "open accounts on --host 0.0.0.0" in seen["output"]


def _get(url: str, headers: dict[str, str] | None = None) -> str:
    import urllib.request

    with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=10) as r:
        return r.read().decode()


# ------------------------------------------------------------------ 5. browsers: Origin and headers


async def test_a_websocket_from_another_sites_page_is_refused(tmp_path: Path) -> None:
    """The attack: a page the operator opens elsewhere connects to ws://127.0.0.1:PORT/ws?token=alice."""
    server = ServerProcess(tmp_path / "data", extra=["--allow-origin", "https://desk.example.com"]).start()
    port = server.url.rsplit(":", 1)[1]
    try:
        async with aiohttp.ClientSession() as s:
            for origin in ("http://evil.example", "null", f"http://127.0.0.1.evil.example:{port}",
                           "https://desk.example.com:8443", f"ws://127.0.0.1:{port}"):
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await s.ws_connect(f"{server.ws_url}?token=alice", headers={"Origin": origin})
                assert refused.value.status == 403, origin
            status, body, _ = await call(s, "GET", f"{server.url}/ws?token=alice",
                                         headers={"Origin": "http://evil.example", "Upgrade": "websocket",
                                                  "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                                                  "Sec-WebSocket-Key": base64.b64encode(os.urandom(16)).decode()})
            assert status == 403 and "origin" in body["error"], body  # refused before the upgrade, in JSON
            for allowed in ("", f"http://127.0.0.1:{port}", f"https://127.0.0.1:{port}", f"HTTP://127.0.0.1:{port}/",
                            "https://desk.example.com", "https://DESK.example.com:443"):
                headers = {"Origin": allowed} if allowed else {}  # none at all: a bot
                async with s.ws_connect(f"{server.ws_url}?token=alice", headers=headers) as ws:
                    assert (await next_of(ws, "auth"))["account"] == "alice", allowed
            assert await metric(s, server.url, "tickflow_websocket_origin_refused_total") == 6
            assert await metric(s, server.url, "tickflow_commands_total") == 2  # the two symbols: nothing else
    finally:
        server.kill()
    out = serve_once(tmp_path / "x", "--allow-origin", "desk.example.com")
    assert out.returncode == 2 and "not a web origin" in out.stderr


async def test_every_answer_tells_browsers_to_sniff_nothing_frame_nothing_and_run_only_its_own_files(
        server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        answers = [
            await call(s, "GET", f"{u}/"), await call(s, "GET", f"{u}/js/main.js"),
            await call(s, "GET", f"{u}/vendor/lightweight-charts.js"), await call(s, "GET", f"{u}/book/ACME"),
            await call(s, "GET", f"{u}/nowhere"), await call(s, "POST", f"{u}/book/ACME"),
            await call(s, "GET", f"{u}/book/ACME?depth=x"), await call(s, "GET", f"{u}/orders"),
            await call(s, "GET", f"{u}/metrics"), await call(s, "GET", f"{u}/openapi.json"),
        ]
        async with s.ws_connect(server.ws_url) as ws:
            handshake = ws._response.headers  # the 101 too
    assert [a[0] for a in answers] == [200, 200, 200, 200, 404, 405, 400, 401, 200, 200]
    for _, body, headers in [*answers, (None, None, handshake)]:
        assert headers["X-Content-Type-Options"] == "nosniff"
        assert headers["X-Frame-Options"] == "DENY"
        assert headers["Referrer-Policy"] == "no-referrer"
        csp = headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp and "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "unsafe-inline" not in csp and "unsafe-eval" not in csp


def test_the_one_inline_style_allowed_is_the_vendored_charts() -> None:
    """The chart library adds one <style> for its attribution logo; the policy allows that text alone."""
    vendored = (ROOT / "web/vendor/lightweight-charts.js").read_text()
    styles = re.findall(r'createElement\("style"\),this\.\w+\.innerText="([^"]*)"', vendored)
    assert len(styles) == 1
    digest = base64.b64encode(hashlib.sha256(styles[0].encode()).digest()).decode()
    assert CHART_STYLE == f"sha256-{digest}"
    assert "<script>" not in (ROOT / "web/index.html").read_text() and " style=" not in (
        ROOT / "web/index.html").read_text()


# ------------------------------------------------------------------ 8. starts that cannot be made


def test_no_room_for_the_log_header_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    """A new log's header cannot be written (here: a file size limit, EFBIG, as a full disk gives ENOSPC)."""
    data = tmp_path / "data"
    server = ServerProcess(data).start()  # makes the trade store; kill -9: no snapshot at the stop
    server.kill()
    for name in os.listdir(data):
        if not name.startswith(("trades.sqlite", "LOCK", "server.log")):
            path = data / name
            path.unlink() if path.is_file() else __import__("shutil").rmtree(path)
    # The store is kept open here, so the server's SQLite is not the first to open it and has nothing
    # to write (the limit would stop it first): only the new log's 16-byte header goes past the limit.
    with sqlite3.connect(data / "trades.sqlite") as reader:
        assert reader.execute("SELECT COUNT(*) FROM trades").fetchone() == (0,)

        def small_files() -> None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (12, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

        out = serve_once(data, preexec=small_files)
    assert out.returncode == 1, out.stderr
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tickflow: cannot start the log") and "wal.log" in lines[0], lines


async def test_a_sqlite_error_while_catching_up_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", symbols="ACME").start()
    try:
        async with aiohttp.ClientSession() as s:
            await trade_once(s, server.url)
    finally:
        server.kill()
    with sqlite3.connect(server.data / "trades.sqlite") as db:  # the trade gone, and no insert taken
        db.execute("DELETE FROM trades")
        db.execute("CREATE TRIGGER no_inserts BEFORE INSERT ON trades BEGIN SELECT RAISE(ABORT, 'no room'); END")
    for name in os.listdir(server.data):
        if name.startswith("snapshot"):
            (server.data / name).unlink()
    out = serve_once(server.data)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.strip().splitlines() if line.startswith("tickflow:")]
    assert len(lines) == 1 and "the trade store" in lines[0] and "no room" in lines[0], out.stderr


# ------------------------------------------------------------------ 9. the smaller ones


class _FailingOps(OsFileOps):
    """The real file system, but the `write_at`th write takes half its bytes and then fails (a disk
    filling up), and cutting the file back fails too (a device that went read-only, an I/O error)."""

    def __init__(self, write_at: int) -> None:
        self.write_at = write_at
        self.writes = 0
        self.armed = False

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.writes += 1
        if self.writes == self.write_at:
            self.armed = True
            return super().write(fd, data[: len(data) // 2])
        if self.armed:
            raise OSError(28, "No space left on device")
        return super().write(fd, data)

    def truncate(self, fd: int, size: int) -> None:
        if self.armed:
            raise OSError(5, "Input/output error")
        super().truncate(fd, size)


def _records(path: Path) -> tuple[list[bytes], Any]:
    wal = Wal.open(str(path))
    payloads = [bytes(p) for _, p in wal.replay()]
    wal.close()
    return payloads, wal.cut


def test_a_half_batch_whose_cut_failed_is_never_replayed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from tickflow.store.log.wal import LogError

    path = tmp_path / "wal.log"
    ops = _FailingOps(write_at=3)  # 1: the header; 2: the first batch; 3: the second, half written
    wal = Wal.open(str(path), ops)
    list(wal.replay())
    wal.append([b"first"])
    with pytest.raises(LogError):
        wal.append([b"taken-" + bytes([i]) * 200 for i in range(8)])  # 4 whole records reach the file
    wal.close()
    assert "blanked with zeros" in caplog.text
    payloads, cut = _records(path)
    assert payloads == [b"first"]  # none of the refused batch, though its first records were whole
    assert cut is not None and cut.offset == len(FILE_HEADER) + 8 + len(b"first")

    # After a failed sync, the records no caller was told were taken, when they cannot be cut.
    path2 = tmp_path / "wal2.log"
    wal = Wal.open(str(path2))
    list(wal.replay())
    wal.append([b"durable"])
    durable = wal.size
    wal.append([b"refused-1", b"refused-2"])

    def no_truncate(fd: int, size: int) -> None:
        raise OSError(5, "Input/output error")

    wal.ops.truncate = no_truncate  # type: ignore[method-assign]
    assert wal.discard_after(durable)
    wal.close()
    assert _records(path2)[0] == [b"durable"]


def test_the_data_directory_is_its_owners_and_its_entry_survives_a_power_cut(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tickflow.net.server import data_dir

    synced: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    made = data_dir(str(tmp_path / "a" / "b"))
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert str(tmp_path / "a") in synced and str(tmp_path) in synced  # each new entry's parent


async def test_the_servers_files_are_its_owners_only(tmp_path: Path) -> None:
    """Every order and trade of every account is in them: 0600 and 0700, whatever the umask gives others."""
    fresh = tmp_path / "fresh" / "data"
    old = os.umask(0o022)
    try:
        server = ServerProcess(tmp_path / "data", extra=["--data", str(fresh)]).start()
    finally:
        os.umask(old)
    try:
        async with aiohttp.ClientSession() as s:
            await trade_once(s, server.url)
            status, trades, _ = await call(s, "GET", f"{server.url}/trades")
            assert status == 200 and len(trades) == 1  # so SQLite has written
        assert stat.S_IMODE(fresh.stat().st_mode) == 0o700
        names = {"LOCK", "wal.log", "trades.sqlite", "trades.sqlite-wal", "trades.sqlite-shm"}
        assert names <= set(os.listdir(fresh))
        for name in os.listdir(fresh):
            mode = stat.S_IMODE((fresh / name).stat().st_mode)
            assert mode & 0o077 == 0, (name, oct(mode))
    finally:
        server.kill()


@pytest.mark.parametrize("path, field", [
    ("/book/ACME?dept=5", "dept"), ("/trades?limt=5", "limt"), ("/trades?symbol=ACME&sid=buy", "sid"),
    ("/fills?after=0&x=1", "x"), ("/bars?symbol=ACME&intrval=5m", "intrval"),
    ("/orders?status=open&sym=ACME", "sym"), ("/book/ACME?" + "y" * 5000 + "=1", "y" * 37 + "..."),
])
async def test_an_unknown_query_parameter_is_refused_not_ignored(server: ServerProcess, path: str, field: str) -> None:
    """A misspelt parameter (`dept`, `limt`) used to be ignored: the answer was taken for what was asked."""
    async with aiohttp.ClientSession() as s:
        status, body, _ = await call(s, "GET", f"{server.url}{path}", "alice")
    assert status == 400 and body["field"] == field, body
    assert "unknown query parameter" in body["error"] and len(body["error"]) < 300


async def test_unknown_fields_of_auth_and_subscribe_are_refused(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s, s.ws_connect(server.ws_url) as ws:
        await ws.send_json({"op": "auth", "token": "alice"})
        assert (await next_of(ws, "auth"))["account"] == "alice"
        # A misspelt cancelOnDisconnect must not leave the bot signed in without its dead man's switch.
        await ws.send_json({"op": "auth", "token": "alice", "cancelOnDisconect": True})
        error = await next_of(ws, "error")
        assert error["op"] == "auth" and error["field"] == "cancelOnDisconect" and "unknown field" in error["error"]
        await ws.send_json({"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 5, "qty": 1})
        assert (await results(ws, {1}))[1]["status"] == 401  # signed out, as after any failed auth
        await ws.send_json({"op": "subscribe", "symbols": ["ACME"], "depth": 5})
        error = await next_of(ws, "error")
        assert error["op"] == "subscribe" and error["field"] == "depth"
        await ws.send_json({"op": "unsubscribe", "symbol": ["ACME"]})
        error = await next_of(ws, "error")
        assert error["op"] == "unsubscribe" and error["field"] == "symbol"
        await ws.send_json({"op": "ping"})
        assert (await ws.receive_json()) == {"type": "pong"}  # and nothing else was sent: no snapshot
    async with aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await s.ws_connect(f"{server.ws_url}?token=alice&cancelOnDisconect=true")
        assert refused.value.status == 400


async def test_a_cancel_all_with_nothing_to_cancel_writes_no_record(server: ServerProcess) -> None:
    """The attack: a flood of empty cancel-alls (or of cancel-on-disconnect sockets) each grew the log."""
    u = server.url
    log = server.data / "wal.log"
    async with aiohttp.ClientSession() as s:
        before = log.stat().st_size
        commands = await metric(s, u, "tickflow_commands_total")
        for _ in range(20):
            status, body, _ = await call(s, "DELETE", f"{u}/orders", "alice")
            assert status == 200 and body["orders"] == [] and body["seq"] >= 1
        for _ in range(5):
            async with s.ws_connect(f"{server.ws_url}?token=alice&cancelOnDisconnect=true") as ws:
                await next_of(ws, "auth")
        deadline = time.monotonic() + 10  # each close has handed its cancel-all to the sequencer
        while await metric(s, u, "tickflow_cancel_on_disconnect_total") < 5:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        async with s.ws_connect(f"{server.ws_url}?token=bob") as ws:  # sequenced after them, were they logged
            await ws.send_json({"op": "cancelAll", "id": 1, "symbol": "ACME"})
            assert (await results(ws, {1}))[1]["body"]["orders"] == []
        assert await metric(s, u, "tickflow_commands_total") == commands
        assert log.stat().st_size == before
        # Still right with orders in flight: an order sent just before a cancel-all is cancelled by it, also
        # when both arrive in one read, so the cancel-all is taken while the order still waits in the queue.
        for _ in range(3):
            got = await in_one_packet(server, "alice", [
                {"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 5, "qty": 1},
                {"op": "cancelAll", "id": 2}])
            assert [o["orderId"] for o in got[2]["body"]["orders"]] == [got[1]["body"]["orderId"]], got
        status, body, _ = await call(s, "DELETE", f"{u}/orders?side=sell", "alice")
        assert status == 200 and body["orders"] == []


def test_a_short_token_in_the_tokens_file_refuses_to_start(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"x" * (MIN_TOKEN_LENGTH - 1): "alice"}))
    out = serve_once(tmp_path / "data", "--tokens", str(tokens))
    assert out.returncode == 1 and f"a token must be {MIN_TOKEN_LENGTH}-4096 printable characters" in out.stderr
    assert "Traceback" not in out.stderr and "x" * (MIN_TOKEN_LENGTH - 1) not in out.stderr
    tokens.write_text(json.dumps({"x" * MIN_TOKEN_LENGTH: "alice"}))
    ServerProcess(tmp_path / "data", extra=["--tokens", str(tokens)]).start().kill()


async def test_failed_sign_ins_are_counted_and_logged_at_a_bounded_rate(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({GOOD_TOKEN: "alice"}))
    server = ServerProcess(tmp_path / "data", extra=["--tokens", str(tokens)]).start()
    try:
        async with aiohttp.ClientSession() as s:
            for i in range(30):
                status, _, _ = await call(s, "GET", f"{server.url}/orders", f"guess-{i:04d}-abcdefghijkl")
                assert status == 401
            assert (await call(s, "GET", f"{server.url}/orders"))[0] == 401  # no token: no sign-in tried
            assert (await call(s, "GET", f"{server.url}/orders", GOOD_TOKEN))[0] == 200
            async with s.ws_connect(server.ws_url) as ws:
                await ws.send_json({"op": "auth", "token": "guess-over-the-websocket"})
                assert (await next_of(ws, "error"))["op"] == "auth"
            assert await metric(s, server.url, "tickflow_auth_failures_total") == 31
    finally:
        server.kill()
    logged = [line for line in server.output().splitlines() if "failed sign-in" in line]
    assert 1 <= len(logged) <= 10, logged  # at most 10 a minute: guessing cannot flood the log
    assert "not logged" in logged[-1] and "127.0.0.1" in logged[0]
    assert "guess-" not in server.output()  # never the token itself


async def test_sighup_reads_the_tokens_again_and_keeps_them_if_the_file_is_bad(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({GOOD_TOKEN: "alice"}))
    server = ServerProcess(tmp_path / "data", extra=["--tokens", str(tokens)]).start()
    assert server.proc is not None
    bob = "bob-token-0123456789"
    try:
        async with aiohttp.ClientSession() as s, s.ws_connect(f"{server.ws_url}?token={GOOD_TOKEN}") as ws:
            assert (await next_of(ws, "auth"))["account"] == "alice"
            tokens.write_text(json.dumps({bob: "bob"}))  # alice's token revoked, bob's added
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while (await call(s, "GET", f"{server.url}/orders", bob))[0] != 200:
                assert time.monotonic() < deadline, server.output()
                await asyncio.sleep(0.05)
            assert (await call(s, "GET", f"{server.url}/orders", GOOD_TOKEN))[0] == 401
            signed_out = await next_of(ws, "error")  # the connection alice signed in on is hers no more
            assert signed_out["op"] == "auth" and "signed out" in signed_out["error"]
            await ws.send_json({"op": "order", "id": 1, "symbol": "ACME", "side": "buy", "price": 5, "qty": 1})
            assert (await results(ws, {1}))[1]["status"] == 401
            tokens.write_text(json.dumps({"short": "bob"}))  # a bad file: the tokens in use stay
            server.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "kept the 1 tokens in use" not in server.output():
                assert time.monotonic() < deadline, server.output()
                await asyncio.sleep(0.05)
            assert (await call(s, "GET", f"{server.url}/orders", bob))[0] == 200
        assert server.proc.poll() is None
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(20) == 0
    finally:
        server.kill()


def test_the_aiohttp_floor_is_past_the_releases_with_parser_advisories() -> None:
    from importlib.metadata import version

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    floor = next(d for d in project["dependencies"] if d.startswith("aiohttp"))
    assert floor == "aiohttp>=3.14.3"  # 3.14.2: smuggling via the WebSocket upgrade; 3.14.3: the C parser
    assert tuple(int(p) for p in version("aiohttp").split(".")[:3]) >= (3, 14, 3)


# ------------------------------------------------------------------ 6. unbounded answers


async def test_open_orders_are_paged(server: ServerProcess) -> None:
    """The attack: an account with many open orders makes each GET /orders?status=open as large as all."""
    u = server.url
    n = MAX_ORDERS_PAGE + 5
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(f"{server.ws_url}?token=alice") as ws:
            await next_of(ws, "auth")
            await rest_orders(ws, n)
        status, first, _ = await call(s, "GET", f"{u}/orders?status=open", "alice")
        assert status == 200 and len(first["orders"]) == MAX_ORDERS_PAGE
        ids = [o["orderId"] for o in first["orders"]]
        assert ids == sorted(ids)
        status, rest, _ = await call(s, "GET", f"{u}/orders?status=open&after={ids[-1]}", "alice")
        assert [o["orderId"] for o in rest["orders"]] == list(range(ids[-1] + 1, ids[-1] + 6))
        status, two, _ = await call(s, "GET", f"{u}/orders?after={ids[9]}&limit=2&symbol=ACME&side=buy", "alice")
        assert [o["orderId"] for o in two["orders"]] == ids[10:12]
        for bad, field in (("limit=0", "limit"), (f"limit={MAX_ORDERS_PAGE + 1}", "limit"), ("after=-1", "after")):
            status, body, _ = await call(s, "GET", f"{u}/orders?{bad}", "alice")
            assert status == 400 and body["field"] == field
    async with Client(u, "alice") as client:  # the client library follows the pages
        assert len(await client.open_orders()) == n
        assert len(await client.open_orders("ACME", "sell")) == 0


async def test_bars_over_a_huge_range_are_refused(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        status, body, _ = await call(s, "GET", f"{u}/bars?symbol=ACME&interval=1m&from=0&to={1 << 50}")
        assert status == 400 and body["field"] == "from" and str(MAX_BARS) in body["error"]
        status, body, _ = await call(s, "GET", f"{u}/bars?symbol=ACME&interval=1m&from=0&to={MAX_BARS * 60_000}")
        assert status == 200 and body == []  # exactly the most
        status, body, _ = await call(s, "GET", f"{u}/bars?symbol=ACME&interval=1m&from=1&to={MAX_BARS * 60_000 + 1}")
        assert status == 400  # one more bucket, cut at both ends
        status, body, _ = await call(s, "GET", f"{u}/bars?symbol=ACME&interval=1h&from=0&to={MAX_BARS * 3_600_000}")
        assert status == 200


async def test_a_websocket_answer_over_the_limit_is_replaced_before_it_is_queued(server: ServerProcess) -> None:
    """A cancel-all of some 21,000 orders answers over 4 MiB: more than a client reads in one message."""
    n = MAX_WS_REPLY // 200  # an order in the answer is about 260 bytes
    async with aiohttp.ClientSession() as s:
        async with s.ws_connect(f"{server.ws_url}?token=alice&updates=false", max_msg_size=1 << 26) as ws:
            await next_of(ws, "auth")
            await rest_orders(ws, n)
            await ws.send_json({"op": "cancelAll", "id": "all"})
            answer = (await results(ws, {"all"}))["all"]
            assert len(json.dumps(answer)) < 2000
            assert answer["status"] == 413 and answer["body"]["code"] == "answer_too_large"
            assert answer["body"]["status"] == 200 and "WAS carried out" in answer["body"]["error"]
            await ws.send_json({"op": "ping"})
            assert (await next_of(ws, "pong")) == {"type": "pong"}  # the connection goes on
        status, body, _ = await call(s, "GET", f"{server.url}/orders", "alice")
        assert status == 200 and body["orders"] == []  # it was carried out
        assert await metric(s, server.url, "tickflow_websocket_answers_too_large_total") == 1
        status, body, _ = await call(s, "DELETE", f"{server.url}/orders", "alice")  # HTTP answers have no cap
        assert status == 200
