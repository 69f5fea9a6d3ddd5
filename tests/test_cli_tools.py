"""The command-line tools faced with operator mistakes: a clear message and exit status, never a traceback."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiohttp import web

from server_process import ServerProcess


def tickflow(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """Run `python -m tickflow.cli ARGS` to the end."""
    return subprocess.run([sys.executable, "-m", "tickflow.cli", *args], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=timeout)


def no_traceback(out: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in out.stderr + out.stdout, out.stderr


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("cli-server"), durability="none", symbols="ACME").start()
    yield proc
    proc.kill()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port of 127.0.0.1 that refuses connections: bound (so nothing else takes it) but not listening."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


@contextlib.contextmanager
def refusing_exchange() -> Iterator[str]:
    """A stand-in server on 127.0.0.1 that lists ACME and answers every order-entry request 503."""

    async def symbols(request: web.Request) -> web.Response:
        return web.json_response({"symbols": [{"symbol": "ACME"}]})

    async def ws(request: web.Request) -> web.WebSocketResponse:
        sock = web.WebSocketResponse()
        await sock.prepare(request)
        async for msg in sock:
            message = json.loads(msg.data)
            if message.get("op") == "auth":
                await sock.send_json({"type": "auth", "account": message["token"], "updates": True,
                                      "cancelOnDisconnect": bool(message.get("cancelOnDisconnect"))})
            elif "id" in message:
                await sock.send_json({"type": "result", "id": message["id"], "status": 503,
                                      "body": {"error": "the log failed"}})
        return sock

    app = web.Application()
    app.router.add_get("/symbols", symbols)
    app.router.add_get("/ws", ws)
    runner = web.AppRunner(app, handle_signals=False)
    loop = asyncio.new_event_loop()
    loop.run_until_complete(runner.setup())
    loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", 0).start())
    port = runner.addresses[0][1]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.run_until_complete(runner.cleanup())
        loop.close()


# ------------------------------------------------------------------ tickflow simulate


@pytest.mark.parametrize("args, option", [
    (["--url", "notaurl"], "--url"),
    (["--url", "http://127.0.0.1:99999"], "--url"),
    (["--url", "ftp://127.0.0.1:1"], "--url"),
    (["--prefix", "bad prefix!"], "--prefix"),
    (["--rate", "-5"], "--rate"),
    (["--rate", "0"], "--rate"),
    (["--duration", "-1"], "--duration"),
])
def test_simulate_refuses_bad_arguments_before_starting(args: list[str], option: str) -> None:
    duration = [] if "--duration" in args else ["--duration", "3"]
    out = tickflow("simulate", *args, *duration)
    assert out.returncode == 2
    assert f"error: argument {option}:" in out.stderr
    assert "done: sent" not in out.stdout
    no_traceback(out)


def test_simulate_says_the_server_cannot_be_reached(closed_port: int) -> None:
    out = tickflow("simulate", "--url", f"http://127.0.0.1:{closed_port}", "--duration", "3",
                   "--connect-timeout", "1")
    assert out.returncode == 1
    assert out.stderr.strip() == (f"tickflow simulate: cannot reach the server at http://127.0.0.1:{closed_port} "
                                  "within 1 s: connection refused")
    assert "done: sent" not in out.stdout


def test_simulate_says_the_server_lacks_a_symbol(live: ServerProcess) -> None:
    out = tickflow("simulate", "--url", live.url, "--symbols", "ACME,NOPE", "--duration", "3")
    assert out.returncode == 1
    assert out.stderr.strip() == "tickflow simulate: the server has no symbol NOPE (it has ACME)"


def test_simulate_says_the_server_refused_its_tokens(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"secret-0123456789": "alice"}))
    proc = ServerProcess(tmp_path / "data", symbols="ACME", extra=["--tokens", str(tokens)]).start()
    try:
        out = tickflow("simulate", "--url", proc.url, "--duration", "3", "--makers", "1", "--takers", "0")
    finally:
        proc.kill()
    assert out.returncode == 1
    assert "tickflow simulate: the server refused account sim-mm1 (unknown token)" in out.stderr
    assert "give simulate the same file with --tokens" in out.stderr
    no_traceback(out)


def test_simulate_trades_as_the_accounts_of_a_tokens_file(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"t-maker-9f2-0123456789": "maker", "t-taker-77a-0123456789": "taker",
                                  "t-spare-1c0-0123456789": "spare"}))
    proc = ServerProcess(tmp_path / "data", symbols="ACME", extra=["--tokens", str(tokens)]).start()
    try:
        out = tickflow("simulate", "--url", proc.url, "--tokens", str(tokens), "--duration", "2", "--rate", "200",
                       "--makers", "1", "--takers", "1", "--seed", "4", "--keep-quotes")
        assert out.returncode == 0, out.stderr
        assert "simulate: done: sent" in out.stdout and ", errors 0," in out.stdout
        trades = json.loads(urllib.request.urlopen(f"{proc.url}/trades?symbol=ACME&limit=1000", timeout=10).read())
        assert trades  # the taker crossed the maker's quotes: two accounts, not one trading with itself

        def open_orders(token: str) -> list[dict]:
            request = urllib.request.Request(f"{proc.url}/orders?status=open",
                                             headers={"Authorization": f"Bearer {token}"})
            return json.loads(urllib.request.urlopen(request, timeout=10).read())["orders"]

        assert open_orders("t-maker-9f2-0123456789")  # the maker's quotes rest under its account
        assert open_orders("t-spare-1c0-0123456789") == []  # one maker and one taker: the third account never traded
        too_few = tickflow("simulate", "--url", proc.url, "--tokens", str(tokens), "--duration", "1",
                           "--makers", "3", "--takers", "2")
        assert too_few.returncode == 1
        assert "3 makers and 2 takers need 5 tokens; the tokens file has 3" in too_few.stderr
        other = tmp_path / "other.json"
        other.write_text(json.dumps({"not-the-server's": "maker"}))
        wrong = tickflow("simulate", "--url", proc.url, "--tokens", str(other), "--duration", "1",
                         "--makers", "1", "--takers", "0")
        assert wrong.returncode == 1
        assert "refused the token of account maker" in wrong.stderr and "tokens file the server was" in wrong.stderr
    finally:
        proc.kill()
    for out in (too_few, wrong):
        no_traceback(out)


@pytest.mark.parametrize("content, says", [
    ("not json", "cannot read tokens from"),
    ("{}", "holds no tokens"),
    ('{"t": "bad name!"}', "bad account name"),
])
def test_simulate_checks_its_tokens_file(tmp_path: Path, content: str, says: str) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(content)
    out = tickflow("simulate", "--tokens", str(tokens), "--duration", "1")
    assert out.returncode == 2, out.stderr  # a usage error: nothing was tried
    assert "--tokens: " in out.stderr and says in out.stderr
    no_traceback(out)


def test_simulate_counts_errors_by_reason_and_fails_when_every_order_failed() -> None:
    with refusing_exchange() as url:
        out = tickflow("simulate", "--url", url, "--duration", "1", "--rate", "50", "--seed", "1")
    assert out.returncode == 1, out.stderr
    done = [line for line in out.stdout.splitlines() if "done: sent" in line]
    assert len(done) == 1
    sent = int(done[0].split("sent ")[1].split()[0])
    unanswered = int(done[0].split("unanswered at the end ")[1].split()[0])  # cut off by the end of the run
    failed = sent - unanswered
    assert failed > 0 and unanswered <= 5  # 5 traders, at most one call on the wire each
    assert f"errors {failed}," in done[0] and f"(503 the log failed: {failed})" in done[0]
    assert out.stderr.strip() == f"tickflow simulate: all {failed} answered calls failed (503 the log failed: {failed})"


# ------------------------------------------------------------------ tickflow demo


@pytest.mark.parametrize("port", ["70000", "-1", "http"])
def test_demo_refuses_a_port_out_of_range(port: str) -> None:
    out = tickflow("demo", "--no-tui", "--port", port)
    assert out.returncode == 2
    assert "error: argument --port:" in out.stderr and "from 0 to 65535" in out.stderr
    no_traceback(out)


def test_demo_prints_the_servers_refusal_once(tmp_path: Path) -> None:
    out = tickflow("demo", "--no-tui", "--data", str(tmp_path / "data"), "--port", "0", "--symbols", "acme")
    assert out.returncode == 1
    assert out.stderr.count("bad symbol names ['acme']") == 1, out.stderr
    assert out.stderr.startswith("tickflow demo: tickflow serve exited with 1: tickflow: bad symbol names")
    no_traceback(out)


def test_demo_says_the_data_directory_is_in_use(live: ServerProcess) -> None:
    out = tickflow("demo", "--no-tui", "--data", str(live.data), "--port", "0", "--symbols", "ACME")
    assert out.returncode == 1
    assert out.stderr.count("another tickflow server") == 1, out.stderr
    no_traceback(out)


def test_demo_says_the_data_directory_is_a_file(tmp_path: Path) -> None:
    data = tmp_path / "a-file"
    data.write_text("not a directory")
    out = tickflow("demo", "--no-tui", "--data", str(data), "--port", "0")
    assert out.returncode == 1
    assert out.stderr.strip() == (f"tickflow demo: tickflow serve not started: cannot use {data} as the data "
                                  "directory: it is not a directory")
    no_traceback(out)


def test_demo_starts_a_killed_server_again_and_gives_up_on_one_that_keeps_dying(tmp_path: Path) -> None:
    """kill -9 the demo's server: it comes back on the same address with the orders it had acknowledged
    (what tickflow is for); killed over and over, the demo stops trying and says so."""
    data = tmp_path / "data"
    demo = subprocess.Popen([sys.executable, "-m", "tickflow.cli", "demo", "--no-tui", "--data", str(data),
                             "--port", "0", "--rate", "20"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert demo.stdout is not None and demo.stderr is not None
        for line in demo.stdout:
            if "browser page" in line:
                url = line.split("server ", 1)[1].split()[0]
                break
        request = urllib.request.Request(f"{url}/orders", method="POST", headers={"Authorization": "Bearer kim"},
                                         data=b'{"symbol":"ACME","side":"buy","price":1,"qty":7,"clientOrderId":"k1"}')
        placed = json.load(urllib.request.urlopen(request, timeout=10))
        pids = []
        for kill in range(4):
            pid = int((data / "LOCK").read_text())  # the server writes its pid there once it holds the directory
            assert pid not in pids
            pids.append(pid)
            os.kill(pid, signal.SIGKILL)
            if kill == 3:
                break
            for line in demo.stderr:
                if "the server is back" in line:
                    break
            assert line.startswith("tickflow demo: the server is back after ") and f"on {url}" in line, line
            mine = urllib.request.Request(f"{url}/orders/{placed['orderId']}", headers={"Authorization": "Bearer kim"})
            assert json.load(urllib.request.urlopen(mine, timeout=10)) == placed
        _, err = demo.communicate(timeout=60)
        assert demo.returncode == 1
        assert (f"tickflow demo: the server stopped unexpectedly (killed by SIGKILL), 4 times within 60 s: not "
                f"starting it again; see {data}/server.log") in err
        assert "Traceback" not in err
    finally:
        if demo.poll() is None:
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(20)
            except subprocess.TimeoutExpired:
                demo.kill()


# ------------------------------------------------------------------ tickflow log, tickflow, tickflow-tui


def test_log_into_a_closed_pipe_exits_quietly(live: ServerProcess) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line, as after `| head -1`
    try:
        out = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(live.data)],
                             stdout=write_end, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
                             timeout=60)
    finally:
        os.close(write_end)
    assert out.returncode == 141
    assert out.stderr == ""


def test_unknown_command_is_named() -> None:
    out = tickflow("bogus")
    assert out.returncode == 2
    assert out.stderr.splitlines()[0] == "tickflow: unknown command 'bogus'"
    assert "usage: tickflow <command>" in out.stderr


@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:8080", "http://", "http://127.0.0.1:8080/somewhere"])
def test_tui_refuses_a_url_that_is_no_server_address(url: str) -> None:
    out = subprocess.run([sys.executable, "-m", "tickflow.tui.app", "--url", url], capture_output=True, text=True,
                         stdin=subprocess.DEVNULL, timeout=60)
    assert out.returncode == 2
    assert f"tickflow-tui: error: argument --url: {url!r} is not a server address" in out.stderr
    no_traceback(out)
