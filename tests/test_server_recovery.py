"""The server process on damaged or partial data: SQLite rebuilt from the log, torn tails, corruption, tokens."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import random
import re
import shutil
import signal
import socket
import stat
import struct
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from helpers import procfs
from helpers.logs import commands, write_log
from helpers.wait import until, wait_until

from server_process import ServerProcess

from tickflow.core.types import AddSymbol
from tickflow.store.datadir import lock_data_dir
from tickflow.store.log.codec import decode_record
from tickflow.store.log.wal import FILE_HEADER

NO_SNAPSHOTS = ["--snapshot-every", "0"]
"""For the tests of the log itself: no snapshot, so that every start reads the whole log."""


async def _place(url: str, account: str, body: dict[str, Any]) -> dict[str, Any]:
    async with aiohttp.ClientSession() as s:
        async with s.post(f"{url}/orders", json=body, headers={"Authorization": f"Bearer {account}"}) as r:
            assert r.status == 200
            return await r.json()


async def _get(url: str) -> Any:
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            return await r.json()


async def _trade_a_little(url: str, n: int = 10) -> None:
    for i in range(n):
        await _place(url, "maker", {"symbol": "ACME", "side": "sell", "price": 100 + i, "qty": 5})
        await _place(url, "taker", {"symbol": "ACME", "side": "buy", "price": 100 + i, "qty": 5})


async def test_sqlite_is_rebuilt_from_the_log(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        await _trade_a_little(server.url)
        trades = await _get(f"{server.url}/trades?limit=1000")
        assert len(trades) == 10
        server.kill()
        for name in os.listdir(server.data):
            if name.startswith("trades.sqlite"):
                os.remove(server.data / name)
        server.start()
        assert "10 trades inserted" in server.output()
        assert await _get(f"{server.url}/trades?limit=1000") == trades
    finally:
        server.kill()


async def _delete(url: str, account: str, order_id: int) -> int:
    async with aiohttp.ClientSession() as s:
        async with s.delete(f"{url}/orders/{order_id}", headers={"Authorization": f"Bearer {account}"}) as r:
            return r.status


async def test_each_book_keeps_its_feed_seq_across_a_restart(tmp_path: Path) -> None:
    """A book's seq is that of the last command that changed it (here a trade, a cancel, and for a book
    never traded in, the command that listed it), replayed or live: a client that saw it before a
    restart sees no gap after it."""
    server = ServerProcess(tmp_path / "data", symbols="ACME,GLOBEX,INITECH").start()
    try:
        await _trade_a_little(server.url, 3)
        resting = await _place(server.url, "maker", {"symbol": "GLOBEX", "side": "sell", "price": 100, "qty": 5})
        await _place(server.url, "maker", {"symbol": "ACME", "side": "sell", "price": 200, "qty": 5})
        assert await _delete(server.url, "maker", resting["orderId"]) == 200
        before = {s: (await _get(f"{server.url}/book/{s}"))["seq"] for s in ("ACME", "GLOBEX", "INITECH")}
        assert before["GLOBEX"] > before["ACME"] > before["INITECH"] > 0
        for kill in (True, False):
            server.restart(kill=kill)
            after = {s: (await _get(f"{server.url}/book/{s}"))["seq"] for s in ("ACME", "GLOBEX", "INITECH")}
            assert after == before
    finally:
        server.kill()


async def test_health_names_the_exchange_by_its_first_record_across_restarts(tmp_path: Path) -> None:
    """`logStarted` is the first record's time: kept across SIGKILL and SIGTERM restarts (and a quiet
    replay), another for a fresh data directory even where its seq is ahead."""
    began = int(time.time() * 1000)
    server = ServerProcess(tmp_path / "data").start()
    other = None
    try:
        health = await _get(f"{server.url}/health")
        started = health["logStarted"]
        assert began <= started <= int(time.time() * 1000), (began, started)
        log = (server.data / "wal.log").read_bytes()
        (length,) = struct.unpack_from("<I", log, len(FILE_HEADER))
        start = len(FILE_HEADER) + 8  # [length u32][crc u32][payload]
        first = decode_record(log[start:start + length])
        assert first.seq == 1 and first.ts == started
        await _trade_a_little(server.url, 2)
        for kill in (True, False):
            server.restart(kill=kill)
            assert (await _get(f"{server.url}/health"))["logStarted"] == started
        time.sleep(0.01)
        other = ServerProcess(tmp_path / "other").start()
        await _trade_a_little(other.url, 5)  # its seq runs ahead of the first exchange's
        health = await _get(f"{other.url}/health")
        assert health["seq"] > 4 and health["logStarted"] > started
    finally:
        server.kill()
        if other is not None:
            other.kill()


async def test_a_torn_tail_is_cut_and_reported(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        await _trade_a_little(server.url, 3)
        book = await _get(f"{server.url}/book/ACME")
        server.kill()
        with open(server.data / "wal.log", "ab") as f:
            f.write(b"\x40\x00\x00\x00\xde\xad\xbe\xefhalf a rec")  # a header promising 64 bytes, then a crash
        server.start()
        assert "cut a torn tail" in server.output() and "18 bytes dropped" in server.output()
        assert await _get(f"{server.url}/book/ACME") == book
        await _place(server.url, "maker", {"symbol": "ACME", "side": "sell", "price": 500, "qty": 1})
        server.restart(kill=True)
        assert "cut a torn tail" not in server.output()
    finally:
        server.kill()


async def test_corruption_in_the_middle_refuses_to_start(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=NO_SNAPSHOTS).start()
    await _trade_a_little(server.url, 3)
    server.stop()
    log = server.data / "wal.log"
    data = bytearray(log.read_bytes())
    size = len(data)
    data[30] ^= 0x01  # a flipped bit inside an early record
    log.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match=r"corrupt record at byte offset \d+"):
        server.start(timeout=20)
    assert log.stat().st_size == size  # nothing truncated


async def test_tokens_file_maps_tokens_to_accounts(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps({"s3cret-a-0123456789": "alice", "s3cret-b-0123456789": "bob"}))
    server = ServerProcess(tmp_path / "data", extra=["--tokens", str(tokens)]).start()
    try:
        placed = await _place(server.url, "s3cret-a-0123456789", {"symbol": "ACME", "side": "buy", "price": 10, "qty": 1})
        assert placed["account"] == "alice"
        assert (await _get(f"{server.url}/health"))["accounts"] == "tokens"
        async with aiohttp.ClientSession() as s:
            async with s.post(f"{server.url}/orders", headers={"Authorization": "Bearer alice"},
                              json={"symbol": "ACME", "side": "buy", "price": 10, "qty": 1}) as r:
                assert r.status == 401  # the account name is not a token here
            async with s.get(f"{server.url}/orders/{placed['orderId']}",
                             headers={"Authorization": "Bearer s3cret-b-0123456789"}) as r:
                assert r.status == 404
    finally:
        server.kill()


async def test_bad_tokens_file_or_symbols_refuse_to_start(tmp_path: Path) -> None:
    (tmp_path / "tokens.json").write_text("[1, 2]")
    with pytest.raises(RuntimeError, match="token -> account"):
        ServerProcess(tmp_path / "a", extra=["--tokens", str(tmp_path / "tokens.json")]).start(timeout=20)
    with pytest.raises(RuntimeError, match="bad symbol names"):
        ServerProcess(tmp_path / "b", symbols="ACME,not ok").start(timeout=20)
    with pytest.raises(RuntimeError, match="bad symbol names"):
        ServerProcess(tmp_path / "c", symbols="ACME,..").start(timeout=20)  # URLs normalise it away
    with pytest.raises(RuntimeError, match="no symbols"):
        ServerProcess(tmp_path / "d", symbols=",,").start(timeout=20)


@pytest.mark.parametrize("tokens, message", [
    ({}, "holds no tokens"),
    ({"t1": ""}, "bad account name ''"),
    ({"t1": "a" * 65}, "bad account name"),  # a record over the log's limit, if it were long enough
    ({"t1": "has space"}, "bad account name 'has space'"),
    ({"": "alice"}, "a token must be"),
    ({" t1": "alice"}, "a token must be"),  # the header is read stripped: it could never be sent
], ids=["empty", "empty-account", "long-account", "odd-account", "empty-token", "spaced-token"])
async def test_a_tokens_file_with_an_unusable_entry_refuses_to_start(tmp_path: Path, tokens: dict[str, str],
                                                                   message: str) -> None:
    (tmp_path / "tokens.json").write_text(json.dumps(tokens))
    server = ServerProcess(tmp_path / "data", extra=["--tokens", str(tmp_path / "tokens.json")])
    with pytest.raises(RuntimeError, match=re.escape(message)):
        server.start(timeout=20)
    assert not (tmp_path / "data" / "wal.log").exists() or (tmp_path / "data" / "wal.log").stat().st_size == 0


async def test_a_tokens_file_naming_a_token_twice_refuses_to_start(tmp_path: Path) -> None:
    (tmp_path / "tokens.json").write_text('{"t1": "alice", "t1": "bob"}')
    with pytest.raises(RuntimeError, match="appears twice"):
        ServerProcess(tmp_path / "data", extra=["--tokens", str(tmp_path / "tokens.json")]).start(timeout=20)


async def test_tickflow_log_checks_a_log_without_changing_it(tmp_path: Path) -> None:
    import subprocess
    import sys

    server = ServerProcess(tmp_path / "data").start()
    await _trade_a_little(server.url, 4)
    server.kill()
    log = server.data / "wal.log"
    with open(log, "ab") as f:
        f.write(b"\x10\x00\x00")  # a torn header
    before = log.read_bytes()
    out = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(server.data)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr  # torn: told apart from a clean log by the exit status
    assert "replayed 10 records" in out.stdout and "torn tail at byte" in out.stdout
    assert "the next server start cuts its 3 bytes" in out.stdout
    assert "orders: 8, trades: 4, open: 0" in out.stdout and "state hash: " in out.stdout
    assert log.read_bytes() == before  # checking never cuts; only a server start does
    missing = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "no log" in missing.stderr
    log.write_bytes(before[:-3])  # the torn header gone: a clean log
    clean = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(server.data)],
                           capture_output=True, text=True, timeout=60)
    assert clean.returncode == 0 and "torn" not in clean.stdout, clean.stdout
    assert clean.stdout.startswith("format: tickflow wal v1\nstarted: 20")
    assert f"({decode_record(before[24:24 + struct.unpack_from('<I', before, 16)[0]]).ts} ms, " in clean.stdout
    data = bytearray(before[:-3])
    data[30] ^= 0x01
    log.write_bytes(bytes(data))
    corrupt = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(server.data)],
                             capture_output=True, text=True, timeout=60)
    assert corrupt.returncode == 1 and f"{log}: corrupt record at byte offset" in corrupt.stderr, corrupt.stderr
    log.write_bytes(b"some other file\n" + before[16:])
    foreign = subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(server.data)],
                             capture_output=True, text=True, timeout=60)
    assert foreign.returncode == 1 and "so it is no tickflow log" in foreign.stderr, foreign.stderr


async def test_a_log_from_before_headers_is_refused_with_the_fix_and_upgraded_by_tickflow_log(tmp_path: Path) -> None:
    import subprocess
    import sys

    def tickflow_log(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(server.data), *extra],
                              capture_output=True, text=True, timeout=60)

    server = ServerProcess(tmp_path / "data", extra=NO_SNAPSHOTS).start()
    await _trade_a_little(server.url, 4)
    book = await _get(f"{server.url}/book/ACME")
    server.stop()
    log = server.data / "wal.log"
    headerless = log.read_bytes()[len(FILE_HEADER):]  # as tickflow wrote logs before they had a header
    log.write_bytes(headerless)
    with pytest.raises(RuntimeError, match=r"a log written before tickflow logs had a header\? "
                                           r"`tickflow log --upgrade` gives it one"):
        server.start(timeout=20)
    assert log.read_bytes() == headerless

    held = lock_data_dir(server.data)  # as a running server holds it: the upgrade changes nothing
    try:
        busy = tickflow_log("--upgrade")
    finally:
        os.close(held)
    assert busy.returncode == 1 and "another tickflow server" in busy.stderr and "stop it first" in busy.stderr
    assert log.read_bytes() == headerless

    damaged = bytearray(headerless)
    damaged[12] ^= 1  # the first record's payload: followed by good records, so corruption
    log.write_bytes(bytes(damaged))
    refused = tickflow_log("--upgrade")
    assert refused.returncode == 1 and "not upgraded" in refused.stderr, refused.stderr
    assert log.read_bytes() == bytes(damaged)

    log.write_bytes(headerless)
    upgraded = tickflow_log("--upgrade")
    assert upgraded.returncode == 0 and "added the header" in upgraded.stdout, upgraded.stderr
    assert log.read_bytes() == FILE_HEADER + headerless
    assert "nothing to do" in tickflow_log("--upgrade").stdout
    server.start()
    try:
        assert await _get(f"{server.url}/book/ACME") == book
    finally:
        server.stop()


async def test_sqlite_with_gaps_or_ahead_of_the_log_is_brought_in_line(tmp_path: Path) -> None:
    import sqlite3

    server = ServerProcess(tmp_path / "data", extra=NO_SNAPSHOTS).start()
    try:
        await _trade_a_little(server.url)
        trades = await _get(f"{server.url}/trades?limit=1000")
        bars = await _get(f"{server.url}/bars?symbol=ACME")
        server.stop()
        with sqlite3.connect(server.data / "trades.sqlite") as db:  # rows lost in the middle (a failed write)
            db.execute("DELETE FROM trades WHERE trade_id IN (3, 4, 7)")
        server.start()
        assert "the trade store has gaps" in server.output() and "3 trades inserted" in server.output()
        assert await _get(f"{server.url}/trades?limit=1000") == trades
        assert await _get(f"{server.url}/bars?symbol=ACME") == bars
        server.stop()
        log = server.data / "wal.log"
        whole = log.read_bytes()
        log.write_bytes(whole[:_symbols_only(whole)])  # the log is the truth: a store ahead of it must not show
        server.start()                                 # trades it does not hold
        assert "removed 10 trades from SQLite that the log does not hold" in server.output()
        assert await _get(f"{server.url}/trades?limit=1000") == []
        await _trade_a_little(server.url, 1)
        (trade,) = await _get(f"{server.url}/trades?limit=1000")
        assert trade["tradeId"] == 1 and trade["price"] == 100
    finally:
        server.kill()


def _symbols_only(log: bytes) -> int:
    """Where the log's leading AddSymbol records end."""
    offset = len(FILE_HEADER)
    while offset < len(log):
        length = int.from_bytes(log[offset:offset + 4], "little")
        if not isinstance(decode_record(log[offset + 8:offset + 8 + length]).command, AddSymbol):
            break
        offset += 8 + length
    return offset


async def test_a_missing_log_beside_a_trade_store_is_refused_not_taken_for_a_new_exchange(tmp_path: Path) -> None:
    import sqlite3

    server = ServerProcess(tmp_path / "data", extra=NO_SNAPSHOTS).start()
    try:
        await _trade_a_little(server.url)
        server.stop()
        for emptied in ("removed", "empty"):
            log = server.data / "wal.log"
            kept = log.read_bytes()
            if emptied == "removed":
                log.unlink()
            else:
                log.write_bytes(b"")
            with pytest.raises(RuntimeError, match="is missing or empty, but .* holds 10 trades: refusing"):
                server.start()
            with sqlite3.connect(server.data / "trades.sqlite") as db:
                assert db.execute("SELECT COUNT(*) FROM trades").fetchone() == (10,)  # nothing deleted
            log.write_bytes(kept)
        server.start()
        assert len(await _get(f"{server.url}/trades?limit=1000")) == 10
        server.stop()
        (server.data / "wal.log").unlink()
        for part in server.data.glob("trades.sqlite*"):  # moved aside, as the message says
            part.rename(part.with_name(part.name.replace("trades", "old-trades")))
        server.start()
        assert await _get(f"{server.url}/trades?limit=1000") == []
    finally:
        server.kill()


async def test_a_damaged_trade_store_is_set_aside_and_rebuilt(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        await _trade_a_little(server.url, 4)
        trades = await _get(f"{server.url}/trades?limit=1000")
        server.stop()
        store = server.data / "trades.sqlite"
        data = bytearray(store.read_bytes())
        data[:100] = b"not a database" * 7 + b"xx"
        store.write_bytes(bytes(data))
        server.start()
        assert "is damaged" in server.output() and "rebuilding it from the log" in server.output()
        assert await _get(f"{server.url}/trades?limit=1000") == trades
        assert [p.name for p in server.data.glob("trades.sqlite.damaged-*")]
    finally:
        server.kill()


def _damage_the_last_page(store: Path) -> None:
    """A table the server never reads at its start, its last page overwritten: only a full check finds it."""
    import sqlite3

    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE junk (n INTEGER PRIMARY KEY, text TEXT)")
        db.executemany("INSERT INTO junk VALUES (?, ?)", ((i, "x" * 200) for i in range(2000)))
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        page = db.execute("PRAGMA page_size").fetchone()[0]
    data = bytearray(store.read_bytes())
    data[-page + 8:-8] = os.urandom(page - 16)
    store.write_bytes(bytes(data))


async def test_a_trade_store_damaged_deep_inside_is_found_after_the_start_and_set_aside_at_the_next(
        tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        await _trade_a_little(server.url, 4)
        trades = await _get(f"{server.url}/trades?limit=1000")
        server.stop()
        _damage_the_last_page(server.data / "trades.sqlite")
        server.start()  # the start reads only what costs the same for any size of store: it serves
        health = await until(lambda: _degraded(server.url), 30, message="/health degraded by the background check")
        assert "trades.sqlite is damaged" in health["error"]
        assert "tickflow_trade_store_check_failures_total 1" in await _text(f"{server.url}/metrics")
        await _trade_a_little(server.url, 1)  # orders still flow
        assert (server.data / "trades.sqlite.check-failed").exists()
        assert "is damaged" in server.output()
        server.stop()
        server.start()  # checked whole before use this time: set aside and rebuilt from the log
        assert "rebuilding it from the log" in server.output()
        assert [p.name for p in server.data.glob("trades.sqlite.damaged-*")]
        assert not (server.data / "trades.sqlite.check-failed").exists()
        assert (await _get(f"{server.url}/trades?limit=1000"))[:len(trades)] == trades
        assert (await _get(f"{server.url}/health"))["status"] == "ok"
    finally:
        server.kill()


async def _degraded(url: str) -> dict[str, Any] | None:
    health = await _get(f"{url}/health")
    return health if health["status"] == "degraded" else None


async def _text(url: str) -> str:
    async with aiohttp.ClientSession() as s:
        async with s.get(url) as r:
            return await r.text()


async def test_startup_failures_exit_with_a_message_and_free_the_data_directory(tmp_path: Path) -> None:
    import subprocess
    import sys

    first = ServerProcess(tmp_path / "first").start()
    try:
        first.stop()
        first.start()  # what a second server on the same port must leave alone: a log with records
        second = ServerProcess(tmp_path / "second")
        second.port = first.port
        shutil.copytree(first.data, second.data, ignore=shutil.ignore_patterns("LOCK"))
        log = (second.data / "wal.log").read_bytes()
        with pytest.raises(RuntimeError, match=r"cannot listen on 127.0.0.1:\d+"):
            second.start(timeout=30)  # exits: does not hang with SQLite's threads alive
        assert "Traceback" not in second.output()
        assert "replayed" not in second.output()  # refused before the replay, not after it
        assert (second.data / "wal.log").read_bytes() == log  # and nothing written: no symbol added
        second.port = 0
        second.start()  # the lock went with the process
        second.kill()
    finally:
        first.kill()
    (tmp_path / "a-file").write_text("")
    for data, message in ((tmp_path / "a-file", "it is not a directory"),
                          (tmp_path / "a-file" / "below", "cannot use")):
        out = subprocess.run([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(data), "--port", "0"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 1 and message in out.stderr and "Traceback" not in out.stderr, out.stderr
    for flags, message in ((["--port", "70000"], "not a port number"), (["--port", "-1"], "not a port number"),
                           (["--ws-buffer", "-5"], "not a whole number of at least 1"),
                           (["--web", str(tmp_path / "nowhere")], "no index.html there"),
                           (["--data", ""], "must not be empty")):
        out = subprocess.run([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(tmp_path / "x"), *flags],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr, (flags, out.stderr)
    assert not (tmp_path / "x").exists()


async def test_sighup_does_not_stop_the_server_and_sigterm_stops_it_cleanly(tmp_path: Path) -> None:
    import signal

    server = ServerProcess(tmp_path / "data").start()
    await _trade_a_little(server.url, 2)
    assert server.proc is not None
    server.proc.send_signal(signal.SIGHUP)  # reloads --tokens (issue 27): here, there is none to reload
    await _trade_a_little(server.url, 2)
    assert server.proc.poll() is None
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(20) == 0
    assert not (server.data / "trades.sqlite-wal").exists()  # SQLite closed properly


# ------------------------------------------------------------------ what the server may not change

PR_CAPBSET_DROP = 24
CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2


def _modes_bind_root_too() -> None:
    """In the child before exec: give up root's power to ignore file modes, so a mode refuses the
    server as it refuses any user (the tests run as root here and in CI)."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
        if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _serve_once(data: Path) -> subprocess.CompletedProcess[str]:
    """`tickflow serve` on `data` where file modes bind it; for a start that is expected to be refused."""
    root = os.geteuid() == 0
    try:
        return subprocess.run([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(data), "--port", "0",
                               "--symbols", "ACME,GLOBEX"], capture_output=True, text=True, timeout=60,
                              preexec_fn=_modes_bind_root_too if root else None)
    except subprocess.TimeoutExpired:
        raise
    except subprocess.SubprocessError as e:  # the preexec_fn failed
        pytest.skip(f"cannot make file modes bind root here ({e}): no CAP_SETPCAP?")


@contextlib.contextmanager
def _immutable(path: Path) -> Iterator[None]:
    """`chattr +i path` for the block: not even root may change it, create in it or open it for writing."""
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.skip(f"chattr +i does not work here: {made.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


@contextlib.contextmanager
def _mode(path: Path, mode: int) -> Iterator[None]:
    before = stat.S_IMODE(path.stat().st_mode)
    path.chmod(mode)
    try:
        yield
    finally:
        path.chmod(before)


def _files(data: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data.iterdir())}


@pytest.fixture(scope="module")
def traded_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data directory a server traded in and stopped, whose log has a flipped bit in the middle:
    a server that read and replayed it would refuse to start, naming that corruption."""
    import asyncio

    server = ServerProcess(tmp_path_factory.mktemp("traded") / "data").start()
    try:
        asyncio.run(_trade_a_little(server.url, 3))
    finally:
        server.stop()
    (server.data / "server.log").unlink()
    log = server.data / "wal.log"
    data = bytearray(log.read_bytes())
    data[30] ^= 0x01
    log.write_bytes(bytes(data))
    return server.data


@pytest.mark.parametrize("target, how, says", [
    ("wal.log", 0o444, "cannot open the log {path} to read and write it: Permission denied"),
    ("wal.log", 0o200, "cannot open the log {path} to read and write it: Permission denied"),  # may not read it
    ("trades.sqlite", 0o444, "cannot open the trade store {path} to read and write it: Permission denied"),
    ("LOCK", 0o444, "cannot open the lock file {path} to read and write it: Permission denied"),
    (".", 0o555, "cannot create files in the data directory {path}: Permission denied"),
    ("wal.log", "immutable", "cannot open the log {path} to read and write it: Operation not permitted"),
    ("trades.sqlite", "immutable", "cannot open the trade store {path} to read and write it: Operation not permitted"),
    (".", "immutable", "cannot create files in the data directory {path}: Operation not permitted"),
], ids=["read-only-log", "unreadable-log", "read-only-store", "read-only-lock", "read-only-dir",
        "immutable-log", "immutable-store", "immutable-dir"])
def test_what_the_server_may_not_change_is_refused_before_the_log_is_read(
        traded_dir: Path, tmp_path: Path, target: str, how: int | str, says: str) -> None:
    data = tmp_path / "data"
    shutil.copytree(traded_dir, data)
    path = data if target == "." else data / target
    before = _files(data)
    with _immutable(path) if how == "immutable" else _mode(path, int(how)):
        out = _serve_once(data)
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith(f"tickflow: {says.format(path=path)}. "), out.stderr
        assert ("chattr -i" if how == "immutable" else "(chown, chmod)") in out.stderr  # what to do
        assert "Nothing was read or changed." in out.stderr
        assert "corrupt record" not in out.stderr and "replayed" not in out.stderr  # before the log was read
        assert "Traceback" not in out.stderr
    assert _files(data) == before  # not a byte, not a new file (no SQLite journal, no lock written)


def test_a_new_data_directory_the_server_may_not_write_in_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    with _mode(data, 0o555):
        out = _serve_once(data)
    assert out.returncode == 1 and "cannot create files in the data directory" in out.stderr, out.stderr
    assert list(data.iterdir()) == []


async def test_two_servers_started_together_on_one_port_the_second_refuses_at_once(tmp_path: Path) -> None:
    """Both used to bind the port (SO_REUSEADDR, and neither listening yet), both replayed their logs,
    and the one to listen second failed only then."""
    log = tmp_path / "wal.log"
    write_log(str(log), commands(60_000))  # about a second of replay each: their start-ups overlap
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs: dict[Path, subprocess.Popen[bytes]] = {}
    for name in ("a", "b"):
        data = tmp_path / name
        data.mkdir()
        shutil.copy(log, data / "wal.log")
        with open(tmp_path / f"{name}.out", "wb") as out:
            procs[data] = subprocess.Popen(
                [sys.executable, "-m", "tickflow.cli", "serve", "--data", str(data), "--port", str(port),
                 "--symbols", "ACME"], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        wait_until(lambda: all(p.poll() is not None or "listening on" in _out(d) for d, p in procs.items()),
                   timeout=60, interval=0.05, message=lambda: str({d.name: _out(d) for d in procs}))
        refused = [d for d, p in procs.items() if p.poll() is not None]
        assert len(refused) == 1, {d.name: _out(d) for d in procs}
        loser, (winner,) = refused[0], [d for d in procs if d not in refused]
        said = _out(loser)
        assert procs[loser].returncode == 1
        # Told that the other is starting (or, on a machine so slow that the other was listening before
        # this one bound the port, that the port is in use): either way at once, before its own replay.
        assert re.search(rf"cannot listen on 127.0.0.1:{port}: (another tickflow server is starting on it"
                         r"|Address already in use)", said), said
        assert "replayed 60000 records" not in said and "Traceback" not in said
        assert (loser / "wal.log").read_bytes() == log.read_bytes()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10) as r:
            assert r.status == 200
        assert "60000 records replayed" in _out(winner)
    finally:
        for p in procs.values():
            p.terminate()
            p.wait(20)


def _out(data: Path) -> str:
    return (data.parent / f"{data.name}.out").read_text(errors="replace")


async def test_a_port_another_program_takes_during_the_replay_is_refused_with_nothing_logged(tmp_path: Path) -> None:
    """A program that is not tickflow is not held off the bound port: it can bind and listen while the
    server replays. The server then says so, without a traceback (uvloop used to drop the failed
    listen, and the server died on it later), and before the symbols of --symbols are logged."""
    write_log(str(tmp_path / "wal.log"), commands(60_000))  # ACME only; GLOBEX would be logged at start-up
    log = (tmp_path / "wal.log").read_bytes()
    for attempt in range(5):
        data = tmp_path / f"data{attempt}"
        data.mkdir()
        (data / "wal.log").write_bytes(log)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        with open(tmp_path / f"{data.name}.out", "wb") as out:
            proc = subprocess.Popen([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(data), "--port",
                                     str(port), "--symbols", "ACME,GLOBEX"], stdout=out,
                                    stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        # Its claim on the address shows it has bound the port; it replays before it listens. Stopped
        # there, it gives another program all the time in the world (a replay takes a fifth of a second
        # here). Whether it was stopped in time is then looked up, not assumed: on a busy machine it may
        # have been listening already, and that start is tried again.
        claim = f"@tickflow-listen 127.0.0.1 {port}"
        wait_until(lambda: claim in Path("/proc/net/unix").read_text() or proc.poll() is not None,
                   timeout=30, interval=0.001, message=lambda: _out(data))
        assert proc.poll() is None, _out(data)
        os.kill(proc.pid, signal.SIGSTOP)
        wait_until(lambda: procfs.state(proc.pid) == "T", message="the server stopped")
        if not _listening_on(port):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("the server was listening each of 5 times it was stopped just after binding the port")
    taker = socket.socket()
    try:
        taker.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        taker.bind(("127.0.0.1", port))
        try:
            taker.listen()
        except OSError as e:
            pytest.fail(f"the server listened before it could be stopped: {e}")
        os.kill(proc.pid, signal.SIGCONT)
        assert proc.wait(60) == 1
    finally:
        proc.kill()
        taker.close()
    said = _out(data)
    assert f"cannot listen on 127.0.0.1:{port}: Address already in use" in said and "Traceback" not in said, said
    assert (data / "wal.log").read_bytes() == log


def _listening_on(port: int) -> bool:
    """A socket listens on 127.0.0.1:`port` (/proc/net/tcp: state 0A)."""
    address = f"0100007F:{port:04X}"
    with open("/proc/net/tcp") as f:
        return any(fields[1] == address and fields[3] == "0A" for fields in (line.split() for line in f)
                   if len(fields) > 3)


# ------------------------------------------------------------------ tickflow log --upgrade

IN_OPEN, IN_CLOSE_NOWRITE = 0x20, 0x10


@contextlib.contextmanager
def _reads_of(path: Path) -> Iterator[list[int]]:
    """Count, with inotify, how often `path` (this file, not a later one renamed over it) is opened
    and closed without being written: each full read of it. The count is in the list after the block."""
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
    if fd < 0:
        pytest.skip("no inotify here")
    reads: list[int] = []
    try:
        assert libc.inotify_add_watch(fd, os.fsencode(path), IN_OPEN | IN_CLOSE_NOWRITE) >= 0
        yield reads
        # Each close follows an open, so no two closes come in a row, where inotify would merge them.
        masks = []
        with contextlib.suppress(BlockingIOError):
            while events := os.read(fd, 65536):
                offset = 0
                while offset < len(events):
                    _, mask, _, length = struct.unpack_from("iIII", events, offset)
                    masks.append(mask)
                    offset += 16 + length
        reads.append(sum(1 for mask in masks if mask & IN_CLOSE_NOWRITE))
    finally:
        os.close(fd)


def _headerless(data: Path) -> bytes:
    """A log as tickflow wrote them before they had a header, alone in `data`."""
    data.mkdir()
    log = data / "wal.log"
    write_log(str(log), commands(200))
    old = log.read_bytes()[len(FILE_HEADER):]
    log.write_bytes(old)
    return old


def _tickflow_log(data: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tickflow.cli", "log", "--data", str(data), *extra],
                          capture_output=True, text=True, timeout=60)


def test_tickflow_log_upgrade_reads_the_old_log_once_and_keeps_its_mode(tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = _headerless(data)
    log = data / "wal.log"
    log.chmod(0o640)  # a log not everyone may read stays so
    with _reads_of(log) as reads:
        out = _tickflow_log(data, "--upgrade")
    assert out.returncode == 0 and "added the header" in out.stdout and "200 records" in out.stdout, out.stderr
    assert reads == [1]
    assert log.read_bytes() == FILE_HEADER + old
    assert stat.S_IMODE(log.stat().st_mode) == 0o640
    assert sorted(p.name for p in data.iterdir()) == ["LOCK", "wal.log"]  # no new file left beside it
    assert _tickflow_log(data).returncode == 0


def test_tickflow_log_upgrade_refuses_at_once_where_it_cannot_write(tmp_path: Path) -> None:
    data = tmp_path / "data"
    old = _headerless(data)
    with _immutable(data):
        out = _tickflow_log(data, "--upgrade")
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith(f"tickflow log: not upgraded: cannot create files in the data directory {data}: "
                                 "Operation not permitted."), out.stderr
    assert "chattr -i" in out.stderr and "Traceback" not in out.stderr
    assert _files(data) == {"wal.log": old}
    with _immutable(data / "wal.log"):  # the new log could not be renamed over it
        out = _tickflow_log(data, "--upgrade")
    assert out.returncode == 1 and f"cannot open the log {data / 'wal.log'} to read and write it" in out.stderr
    assert "Traceback" not in out.stderr
    assert _files(data) == {"wal.log": old}


@pytest.mark.parametrize("content", [random.Random(790).randbytes(5000), b"\0" * 100,
                                     b"hello, this is somebody's notes\n"], ids=["random", "zeros", "notes"])
def test_tickflow_log_upgrade_refuses_a_file_that_is_no_old_log(tmp_path: Path, content: bytes) -> None:
    """Given the header, a foreign file would read as a torn first record, and the next start would cut it."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "wal.log").write_bytes(content)
    out = _tickflow_log(data, "--upgrade")
    assert out.returncode == 1, out.stdout
    assert "does not start with a whole tickflow record" in out.stderr and "Traceback" not in out.stderr
    assert (data / "wal.log").read_bytes() == content
    assert not (data / "wal.log.upgrading").exists()


def test_the_server_lifts_a_low_limit_on_open_files(tmp_path: Path) -> None:
    """Each connection holds a descriptor: started under a soft limit of 256, the server raises it."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard <= 256:
        pytest.skip(f"the hard limit here is {hard}")

    def low() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))

    with open(tmp_path / "out", "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "tickflow.cli", "serve", "--data", str(tmp_path / "data"),
                                 "--port", "0", "--symbols", "ACME"], stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, preexec_fn=low)
    try:
        wait_until(lambda: "listening on" in (tmp_path / "out").read_text(errors="replace") or proc.poll() is not None,
                   timeout=30, interval=0.05, message=lambda: (tmp_path / "out").read_text())
        assert proc.poll() is None, (tmp_path / "out").read_text()
        limits = Path(f"/proc/{proc.pid}/limits").read_text()
        (line,) = [x for x in limits.splitlines() if x.startswith("Max open files")]
        raised = int(line.split()[3])
        assert raised == (65_536 if hard == resource.RLIM_INFINITY else min(65_536, hard)), line
    finally:
        proc.terminate()
        proc.wait(20)
