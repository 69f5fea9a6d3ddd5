"""`tickflow serve`: recover from the log, bring SQLite in line, serve until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import fcntl
import gc
import json
import logging
import os
import signal
import sys
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol, Outcome, Trade
from tickflow.net.app import Exchange, make_app
from tickflow.net.feed import BUFFER_MESSAGES, RECENT_TRADES, Feed
from tickflow.net.protocol import SYMBOL_PATTERN
from tickflow.net.sequencer import Durability, Sequencer
from tickflow.net.trade_writer import TradeWriter
from tickflow.store.replay import recover
from tickflow.store.trades import TradeStore
from tickflow.store.wal import CorruptLog, Wal

log = logging.getLogger("tickflow")

DEFAULT_SYMBOLS = "ACME,GLOBEX,INITECH"
WAL_FILE = "wal.log"
TRADES_FILE = "trades.sqlite"


class StartupError(Exception):
    """The server cannot start; the message says why and what to do."""


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="tickflow serve", description="Run the tickflow exchange server.")
    p.add_argument("--data", default="tickflow-data", help="data directory (log, SQLite); default ./tickflow-data")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    p.add_argument("--durability", choices=[d.value for d in Durability], default="group",
                   help="none: ack after write (survives kill -9); group: one fdatasync per batch; "
                        "order: one fdatasync per order (both survive power loss)")
    p.add_argument("--symbols", default=DEFAULT_SYMBOLS, help="comma-separated symbols to open")
    p.add_argument("--tokens", help="JSON file {token: account}; without it, demo mode: the token is the account")
    p.add_argument("--web", help="directory of the browser page (default: the web/ beside the package)")
    p.add_argument("--ws-buffer", type=int, default=BUFFER_MESSAGES, metavar="N",
                   help="messages a WebSocket subscriber may fall behind before it is resynced")
    p.add_argument("--quiet", action="store_true", help="log warnings only")
    return p.parse_args(argv)


def lock_data_dir(data: Path) -> int:
    """Hold an exclusive lock on the data directory for the life of the process."""
    path = data / "LOCK"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise StartupError(f"another tickflow server (pid {holder}) is using {data}; stop it or pick another --data")
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def load_tokens(path: str | None) -> dict[str, str] | None:
    if path is None:
        return None
    try:
        tokens = json.loads(Path(path).read_text())
    except (OSError, ValueError) as e:
        raise StartupError(f"cannot read tokens from {path}: {e}")
    if not isinstance(tokens, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tokens.items()):
        raise StartupError(f"{path} must be a JSON object of token -> account name")
    return tokens


async def serve(args: argparse.Namespace) -> int:
    data = Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    symbols = [s.strip() for s in args.symbols.split(",") if s.strip()]
    bad = [s for s in symbols if not SYMBOL_PATTERN.match(s)]
    if bad:
        raise StartupError(f"bad symbol names {bad}: use 1-16 of A-Z 0-9 . _ -")
    tokens = load_tokens(args.tokens)
    lock = lock_data_dir(data)
    try:
        return await _serve_locked(args, data, symbols, tokens)
    finally:
        os.close(lock)


async def _serve_locked(args: argparse.Namespace, data: Path, symbols: list[str],
                        tokens: dict[str, str] | None) -> int:
    store = await TradeStore.open(str(data / TRADES_FILE))
    engine = Engine()
    wal = Wal.open(str(data / WAL_FILE))
    stored = await store.max_trade_id()
    missing: list[Trade] = []
    # Each book's feed seq is its last update's, as the live feed keeps it (feed.publish).
    symbol_seq: dict[str, int] = {}
    books = engine.books

    def collect(outcome: Outcome) -> None:
        for trade in outcome.trades:
            symbol_seq[trade.symbol] = outcome.seq
            if trade.trade_id > stored:
                missing.append(trade)
        for change in outcome.book:
            symbol_seq[change.symbol] = outcome.seq
        if len(books) > len(symbol_seq):  # AddSymbol: a book's seq starts at the command that listed it
            for symbol in books:
                symbol_seq.setdefault(symbol, outcome.seq)

    try:
        recovery = recover(wal, engine, collect)
    except CorruptLog as e:
        await store.close()
        raise StartupError(str(e))
    # A cut tail is worth a warning even in --quiet; a clean replay is routine.
    log.log(logging.WARNING if recovery.cut else logging.INFO, "%s", recovery)
    for start in range(0, len(missing), 10_000):
        await store.insert(missing[start:start + 10_000])
    if missing:
        log.warning("brought SQLite in line with the log: %d trades inserted", len(missing))

    feed = Feed(max(1, args.ws_buffer))
    for symbol in engine.books:
        bids, asks = engine.depth(symbol)
        book = engine.books[symbol]
        feed.load(symbol, symbol_seq.get(symbol, engine.last_seq), [book.change(level) for level in bids],
                  [book.change(level) for level in asks], await store.recent(symbol, RECENT_TRADES))
    feed.durable_seq = engine.last_seq

    _settle_gc()
    sequencer = Sequencer(engine, wal, args.durability)
    writer = TradeWriter(store, engine.last_seq)
    sequencer.listeners += [feed.publish, writer.publish]
    await sequencer.start()
    writer.start()
    for symbol in symbols:
        if symbol not in engine.books:
            await sequencer.submit(AddSymbol(symbol))
            feed.add_symbol(symbol, sequencer.seq)

    exchange = Exchange(engine, sequencer, feed, store, writer, tokens)
    if args.web:
        exchange.web_dir = Path(args.web)
    app = make_app(exchange)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, args.host, args.port, reuse_address=True, backlog=1024)
    await site.start()
    port = runner.addresses[0][1] if runner.addresses else args.port
    print(f"tickflow listening on http://{args.host}:{port} (durability {sequencer.durability.value}, "
          f"data {data}, {recovery.records} records replayed)", flush=True)

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    log.info("shutting down: finishing the batch in flight")
    await site.stop()
    for sub in list(feed.subscribers):
        await sub.ws.close(code=1001, message=b"server shutting down")
    await sequencer.stop()
    await writer.stop()
    await runner.cleanup()
    await store.close()
    log.info("stopped cleanly at seq %d", sequencer.seq)
    return 0


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
    log. They become one WARNING line naming the client and the problem (aiohttp answers 400)."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.msg = f"{record.getMessage()}: {error.message or error!r}"
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
