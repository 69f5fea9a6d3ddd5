"""`tickflow serve`: recover from the log, bring SQLite in line, serve until SIGTERM, SIGINT or SIGHUP."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import gc
import logging
import os
import signal
import socket
import sqlite3
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from tickflow.net.wire.args import port_number
from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol
from tickflow.net.gateway.app import BODY_TIMEOUT, MAX_WEBSOCKETS, Exchange, make_app
from tickflow.net.exchange.feed import BUFFER_MESSAGES, RECENT_TRADES, Feed
from tickflow.net.wire.limits import SYMBOL_PATTERN
from tickflow.net.exchange.sequencer import Durability, Sequencer
from tickflow.net.wire.tokens import TokensError, read_tokens
from tickflow.net.exchange.trade_writer import TradeWriter
from tickflow.store.datadir import (
    LOCK_FILE,
    TRADES_FILE,
    WAL_FILE,
    WRITTEN_FILES,
    DataDirBusy,
    NotWritable,
    check_writable,
    how_to_fix,
    lock_data_dir,
)
from tickflow.store.recovery import recover
from tickflow.store.trades import TradeStore
from tickflow.store.log.wal import CorruptLog, Wal

log = logging.getLogger("tickflow")

DEFAULT_SYMBOLS = "ACME,GLOBEX,INITECH"
IDLE_TIMEOUT = 75.0
"""Seconds an HTTP connection may sit idle (before its first request or between requests), as nginx."""
BACKLOG = 1024


class StartupError(Exception):
    """The server cannot start; the message says why and what to do."""


def _positive_seconds(text: str) -> float:
    value = float(text)
    if not 0 < value < 86_400:
        raise argparse.ArgumentTypeError(f"{text} is not a number of seconds between 0 and a day")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of at least 1")
    return value


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tickflow serve", description="Run the tickflow exchange server.")
    p.add_argument("--data", type=_nonempty, default="tickflow-data",
                   help="data directory (log, SQLite); default ./tickflow-data")
    p.add_argument("--host", type=_nonempty, default="127.0.0.1")
    p.add_argument("--port", type=port_number, default=8080, help="0 picks a free port")
    p.add_argument("--durability", choices=[d.value for d in Durability], default="group",
                   help="none: ack after write (survives kill -9); group: one fdatasync per batch; "
                        "order: one fdatasync per order (both survive power loss)")
    p.add_argument("--symbols", default=DEFAULT_SYMBOLS,
                   help="comma-separated symbols to open, besides those the log already holds (a book, once "
                        "opened, stays open: its orders rest on across restarts)")
    p.add_argument("--tokens", help="JSON file {token: account}; without it, demo mode: the token is the account")
    p.add_argument("--web", help="directory of the browser page (default: the web/ beside the package)")
    p.add_argument("--ws-buffer", type=_positive_int, default=BUFFER_MESSAGES, metavar="N",
                   help="messages a WebSocket subscriber may fall behind before it is resynced")
    p.add_argument("--body-timeout", type=_positive_seconds, default=BODY_TIMEOUT, metavar="SECONDS",
                   help="how long a request body may take to arrive once its headers have (408 after)")
    p.add_argument("--idle-timeout", type=_positive_seconds, default=IDLE_TIMEOUT, metavar="SECONDS",
                   help="close an HTTP connection that sends nothing for this long (WebSockets are exempt)")
    p.add_argument("--max-websockets", type=_positive_int, default=MAX_WEBSOCKETS, metavar="N",
                   help="WebSocket connections open at once; more are answered 503 (default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="log warnings only")
    args = p.parse_args(argv)
    if args.web is not None and not Path(args.web, "index.html").is_file():
        p.error(f"--web {args.web}: no index.html there")
    return args


def load_tokens(path: str | None) -> dict[str, str] | None:
    """The --tokens file: a JSON object of token -> account, every entry usable as sent."""
    if path is None:
        return None
    try:
        return read_tokens(path)
    except TokensError as e:
        raise StartupError(str(e)) from None


def bind(host: str, port: int) -> list[socket.socket]:
    """The listening address, bound before the log is touched but not yet listening.

    A port in use is refused at once, before a long replay and before anything is written to the
    log; until `listen` (when the server is ready) connections are refused, as with no server."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}")
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:  # one free port for every address of the host
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except OSError as e:
        for sock in sockets:
            sock.close()
        raise StartupError(f"cannot listen on {host}:{port}: {e.strerror or e}")
    return sockets


def claim(sockets: list[socket.socket]) -> list[socket.socket]:
    """Hold each bound address against other tickflow servers until the returned sockets are closed.

    A bound socket that does not listen yet does not keep another SO_REUSEADDR socket off its port:
    two servers started together on one port both bound it, both replayed their logs, and the one to
    listen second failed only then (with its `--symbols` already logged). An abstract Unix socket
    named after the address is exclusive from its bind, and the kernel drops it with the process.
    (A program that is not tickflow, binding and listening during the replay, still wins the port.)"""
    claims: list[socket.socket] = []
    for sock in sockets:
        address, port = sock.getsockname()[:2]
        held = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            held.bind(f"\0tickflow-listen {address} {port}".encode())
        except OSError as e:
            held.close()
            if e.errno != errno.EADDRINUSE:  # no abstract sockets here (not Linux): no claim to make
                continue
            for other in claims:
                other.close()
            raise StartupError(f"cannot listen on {address}:{port}: another tickflow server is starting on "
                               "it (bound, and it listens once its log is replayed); stop it or pick another "
                               "--port") from None
        claims.append(held)
    return claims


def listen(sockets: list[socket.socket], address: str) -> None:
    """Start listening, before the symbols of `--symbols` are logged: a port taken meanwhile (by a
    program that is not tickflow, which the claims do not hold off) leaves the log as it was.

    Here and not in aiohttp's sites: under uvloop, a site whose listen fails starts without a word
    and the server failed later with a traceback."""
    try:
        for sock in sockets:
            sock.listen(BACKLOG)
    except OSError as e:
        raise StartupError(f"cannot listen on {address}: {e.strerror or e}") from None


def data_dir(path: str) -> Path:
    """The data directory, made if missing, once sure this process may change what is in it."""
    data = Path(path)
    try:
        data.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise StartupError(f"cannot use {data} as the data directory: it is not a directory") from None
    except OSError as e:
        raise StartupError(f"cannot use {data} as the data directory: {e.strerror or e}") from None
    try:
        check_writable(data, WRITTEN_FILES)
    except NotWritable as e:
        raise StartupError(f"{e} Nothing was read or changed.") from None
    return data


async def serve(args: argparse.Namespace) -> int:
    data = data_dir(args.data)
    symbols = [s.strip() for s in args.symbols.split(",") if s.strip()]
    bad = [s for s in symbols if not SYMBOL_PATTERN.match(s)]
    if bad:
        raise StartupError(f"bad symbol names {bad}: use 1-16 of A-Z 0-9 . _ -, starting with a letter or digit")
    tokens = load_tokens(args.tokens)
    _raise_file_limit()
    try:
        lock = lock_data_dir(data)
    except DataDirBusy as e:
        raise StartupError(f"{e}; stop it or pick another --data") from None
    except OSError as e:
        raise StartupError(f"cannot lock {data / LOCK_FILE}: {e.strerror or e}. {how_to_fix(e)}") from None
    try:
        async with contextlib.AsyncExitStack() as stack:
            sockets = bind(args.host, args.port)
            for sock in sockets:
                stack.callback(sock.close)
            for held in claim(sockets):
                stack.callback(held.close)
            return await _serve_locked(args, data, symbols, tokens, sockets, stack)
    finally:
        os.close(lock)  # only after everything above is closed: no second server meanwhile


async def _open_store(path: Path) -> TradeStore:
    """The trade store; a damaged one is set aside and rebuilt, since the log holds every trade."""
    try:
        return await TradeStore.open(str(path))
    except sqlite3.Error as e:
        damaged = getattr(e, "sqlite_errorname", "") in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or \
            str(e).startswith("integrity check")
        if not damaged:  # a full disk, a directory in the way, no permission: nothing to rebuild from here
            raise StartupError(f"cannot open the trade store {path}: {e}")
        aside = path.with_name(f"{path.name}.damaged-{time.strftime('%Y%m%d-%H%M%S')}")
        for suffix in ("", "-wal", "-shm"):
            part = Path(f"{path}{suffix}")
            if part.exists():
                part.rename(f"{aside}{suffix}")
        log.warning("the trade store %s is damaged (%s): moved it to %s; rebuilding it from the log", path, e, aside)
        try:
            return await TradeStore.open(str(path))
        except sqlite3.Error as again:
            raise StartupError(f"cannot create the trade store {path}: {again}")


async def _serve_locked(args: argparse.Namespace, data: Path, symbols: list[str], tokens: dict[str, str] | None,
                        sockets: list[socket.socket], stack: contextlib.AsyncExitStack) -> int:
    # A signal during start-up (the replay of a long log) stops the server before it listens.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    wal_path = data / WAL_FILE
    try:
        wal = Wal.open(str(wal_path))
    except OSError as e:
        raise StartupError(f"cannot open the log {wal_path} to read and append to it: {e.strerror or e}. "
                           f"{how_to_fix(e)}") from None
    stack.callback(wal.close)
    store = await _open_store(data / TRADES_FILE)
    stack.push_async_callback(store.close)
    engine = Engine()
    stored = await store.max_trade_id()
    # Trade ids run 1, 2, 3, ...: a store holding fewer rows than its highest id has gaps (a failed
    # write, a hand edit), and then every trade is offered again; otherwise only those after it.
    stored_count = await store.count()
    stored_whole = stored_count == stored
    if not stored_whole:
        log.warning("the trade store has gaps (%d trades, highest id %d): re-inserting every trade from the log",
                    stored_count, stored)
    after = stored if stored_whole else 0
    try:
        recovery = recover(wal, engine, keep_trades_after=after)
    except CorruptLog as e:
        raise StartupError(str(e))
    except OSError as e:
        raise StartupError(f"cannot repair or sync the log {wal_path}: {e.strerror or e}")
    # A cut tail is worth a warning even in --quiet; a clean replay is routine.
    log.log(logging.WARNING if recovery.cut else logging.INFO, "%s", recovery)
    last_trade = engine.next_trade_id - 1
    if recovery.records == 0 and stored > 0:
        raise StartupError(
            f"the log {wal_path} is missing or empty, but {data / TRADES_FILE} holds {stored_count} trades: "
            f"refusing to start a new exchange over them. Restore the log, or move {TRADES_FILE} aside to "
            "start afresh")
    if stored > last_trade:  # the log was cut or replaced: SQLite must not show trades it does not hold
        removed = await store.delete_after(last_trade)
        log.warning("removed %d trades from SQLite that the log does not hold (it ends at trade %d)",
                    removed, last_trade)
    missing = recovery.trades
    if missing:
        before = await store.count()
        for start in range(0, len(missing), 10_000):
            await store.insert(missing[start:start + 10_000])
        log.warning("brought SQLite in line with the log: %d trades inserted", await store.count() - before)

    feed = Feed(max(1, args.ws_buffer))
    for symbol in engine.books:
        bids, asks = engine.depth(symbol)
        book = engine.books[symbol]
        feed.load(symbol, book.seq, [book.change(level) for level in bids],
                  [book.change(level) for level in asks], await store.recent(symbol, RECENT_TRADES))
    feed.durable_seq = engine.last_seq

    _settle_gc()
    sequencer = Sequencer(engine, wal, args.durability, log_started=recovery.first_ts)
    writer = TradeWriter(store, engine.last_seq)
    sequencer.listeners += [feed.publish, writer.publish]
    runner: web.AppRunner | None = None
    stopped = False

    async def stop_serving() -> None:
        """The sequencer first (it finishes the batch in flight), then the trades it handed over, then HTTP."""
        nonlocal stopped
        if not stopped:
            stopped = True
            await sequencer.stop()
            await writer.stop()
            if runner is not None:
                await runner.cleanup()

    await sequencer.start()
    writer.start()
    stack.push_async_callback(stop_serving)
    if not symbols and not engine.books:
        raise StartupError("no symbols: name at least one with --symbols")
    if stop.is_set():
        log.warning("stopped during start-up, before listening")
        return 0
    listen(sockets, f"{args.host}:{args.port}")
    for symbol in symbols:
        if symbol not in engine.books:
            # The AddSymbol's own seq: commands from clients may have been applied since it was.
            listed = await sequencer.submit(AddSymbol(symbol))
            feed.add_symbol(symbol, listed.seq)

    exchange = Exchange(engine, sequencer, feed, store, writer, tokens, body_timeout=args.body_timeout,
                        max_websockets=args.max_websockets)
    if args.web:
        exchange.web_dir = Path(args.web)
    app = make_app(exchange)
    # aiohttp's own default keeps an idle connection an hour: enough idle sockets would use up the
    # process's file descriptors and lock everyone out.
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0,
                           keepalive_timeout=args.idle_timeout, auto_decompress=False)  # app.py decodes bodies
    await runner.setup()
    sites = [web.SockSite(runner, sock, backlog=BACKLOG) for sock in sockets]
    for site in sites:
        await site.start()
    port = runner.addresses[0][1] if runner.addresses else args.port
    print(f"tickflow listening on http://{args.host}:{port} (durability {sequencer.durability.value}, "
          f"data {data}, {recovery.records} records replayed)", flush=True)

    await stop.wait()
    log.info("shutting down: finishing the batch in flight")
    exchange.closing = True  # the WebSockets closed below keep their orders (no cancel on disconnect)
    for site in sites:
        await site.stop()
    for sub in list(feed.subscribers):
        await sub.ws.close(code=1001, message=b"server shutting down")
    await stop_serving()
    if sequencer.failed:
        log.error("stopped after the log failed (%s); durable up to seq %d", sequencer.failed, feed.durable_seq)
        return 1
    log.info("stopped cleanly at seq %d", sequencer.seq)
    return 0


def _raise_file_limit(want: int = 65_536) -> None:
    """Lift the soft limit on open files towards the hard one: each connection holds a descriptor, and
    a common default soft limit of 1,024 would lock everyone out (accept fails) at about a thousand."""
    try:
        import resource
    except ImportError:  # not a POSIX system
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError) as e:
            log.warning("open files limited to %d (cannot raise it to %d: %s)", soft, target, e)


def _settle_gc() -> None:
    """Keep the cyclic GC off the replayed state and out of the request path.

    The replayed books and order table are frozen out of every later collection, and the young
    generation is collected every 10,000 net allocations rather than 700: under HTTP load the
    default thresholds spent about 4.5% of the server's time in 180 collections a few seconds,
    these about 1% (pauses stay around a millisecond)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 10, 10)


class MalformedHttpFilter(logging.Filter):
    """aiohttp logs a request that is not valid HTTP (a bad request line, a huge header, a bad
    Content-Length) at ERROR with a traceback; any client can send those, so they would flood the
    log. They become one WARNING line naming the client and the problem (aiohttp answers 400), at most
    `burst` of them every `window` seconds; the first line after a quiet spell says how many were left out."""

    def __init__(self, burst: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = burst
        self.window = window
        self.clock = clock
        self.started = -window
        self.said = 0
        self.left_out = 0

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, web.RequestPayloadError) and isinstance(error.__cause__, HttpProcessingError):
            error = error.__cause__  # a body aiohttp could not read, such as bad chunks (the handler said 400)
        if not isinstance(error, HttpProcessingError):
            return True
        now = self.clock()
        if now - self.started >= self.window:
            self.started, self.said = now, 0
        if self.said >= self.burst:
            self.left_out += 1
            return False
        self.said += 1
        # aiohttp's message quotes the offending bytes over several lines: one line, of bounded length.
        why = " ".join(str(error.message or repr(error)).split())
        record.msg = f"{record.getMessage()}: {why[:200]}"
        if self.left_out:
            record.msg += f" ({self.left_out} more such requests were not logged)"
            self.left_out = 0
        elif self.said == self.burst:
            record.msg += f" (the next such requests within {self.window:g} s are not logged)"
        record.args = ()
        record.exc_info = None
        record.exc_text = None
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("aiohttp.server").addFilter(MalformedHttpFilter())
    try:
        import uvloop
        runner = asyncio.Runner(loop_factory=uvloop.new_event_loop)
    except ImportError:
        runner = asyncio.Runner()
    try:
        with runner:
            return runner.run(serve(args))
    except StartupError as e:
        print(f"tickflow: {e}", file=sys.stderr)
        return 1
