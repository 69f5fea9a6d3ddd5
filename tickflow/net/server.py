"""`tickflow serve`: recover from the log, bring SQLite in line, serve until SIGTERM or SIGINT; SIGHUP reloads tokens."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from tickflow.net.exchange.fanout import BUFFER_MESSAGES
from tickflow.net.exchange.sequencer import Durability
from tickflow.net.exchange.snapshotter import KEEP_SNAPSHOTS, SNAPSHOT_EVERY
from tickflow.net.exchange.startup import MIN_SEGMENT_BYTES, SEGMENT_BYTES, StartupError, start_exchange
from tickflow.net.gateway.app import close_websockets, make_app
from tickflow.net.gateway.auth import Accounts
from tickflow.net.gateway.logburst import LogBurst
from tickflow.net.gateway.ratelimit import MAX_ORDER_RATE, OrderRate
from tickflow.net.wire.limits import IDEMPOTENCY_WINDOW, MAX_IDEMPOTENCY_WINDOW, MAX_OPEN_ORDERS
from tickflow.net.gateway.context import BODY_TIMEOUT, MAX_WEBSOCKETS, Gateway
from tickflow.net.gateway.room import AUTH_TIMEOUT, MAX_PER_ACCOUNT, Room, default_max_anonymous
from tickflow.net.gateway.security import allowed_host_argument, host_name, origin_argument
from tickflow.net.wire.args import port_number
from tickflow.net.wire.limits import SYMBOL_PATTERN
from tickflow.net.wire.tokens import TokensError, read_tokens
from tickflow.store.datadir import (
    LOCK_FILE,
    WRITTEN_FILES,
    DataDirBusy,
    NotWritable,
    check_writable,
    how_to_fix,
    lock_data_dir,
    make_data_dir,
)

log = logging.getLogger("tickflow")

DEFAULT_SYMBOLS = "ACME,GLOBEX,INITECH"
IDLE_TIMEOUT = 75.0
"""Seconds an HTTP connection may sit idle (before its first request or between requests), as nginx."""
BACKLOG = 1024


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


def _whole_number(text: str) -> int:
    if not text.strip().isdigit() or int(text) > 1 << 62:
        raise argparse.ArgumentTypeError(f"{text} is not a whole number of at least 0")
    return int(text)


_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(text: str) -> int:
    """A duration as a whole number with a unit (ms, s, m, h, d; seconds when none) in milliseconds."""
    number = text.strip().rstrip("mshd")
    unit = text.strip()[len(number):] or "s"
    if not number.isdigit() or unit not in _UNITS or int(number) * _UNITS[unit] > MAX_IDEMPOTENCY_WINDOW:
        raise argparse.ArgumentTypeError(f"{text} is not a duration from 0 to 366d (a whole number with ms, s, m, "
                                         "h or d)")
    return int(number) * _UNITS[unit]


def _allowed_hosts(names: list[str], listen_host: str) -> frozenset[str]:
    """`--allow-host`, and the name `--host` gives (its clients reach it by that name)."""
    own = host_name(listen_host)
    return frozenset(names) | ({own} if own else set())


def _segment_bytes(text: str) -> int:
    if not text.strip().isdigit() or not MIN_SEGMENT_BYTES <= int(text) <= 1 << 40:
        raise argparse.ArgumentTypeError(f"{text} is not a number of bytes from {MIN_SEGMENT_BYTES} to 2**40")
    return int(text)


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
    p.add_argument("--tokens", help="JSON file {token: account} (tokens of 16 characters or more); without it, "
                                    "demo mode: the token is the account, on a loopback --host only. SIGHUP "
                                    "reads the file again")
    p.add_argument("--open-accounts", action="store_true",
                   help="allow demo mode (no --tokens) on a --host other machines can reach: anyone who can "
                        "reach the port then trades as any account")
    p.add_argument("--allow-origin", action="append", default=[], type=origin_argument, metavar="ORIGIN",
                   help="a web origin (scheme://host[:port]) whose pages may open the WebSocket, besides the "
                        "server's own; repeatable")
    p.add_argument("--allow-host", action="append", default=[], type=allowed_host_argument, metavar="NAME",
                   help="a host name requests may reach the server by (its Host header), besides its addresses, "
                        "localhost and the name --host gives; repeatable; * for any. Other names are refused (403): "
                        "DNS rebinding would let a web page reach the server by a name of its own")
    p.add_argument("--web", help="directory of the browser page (default: the web/ beside the package)")
    p.add_argument("--ws-buffer", type=_positive_int, default=BUFFER_MESSAGES, metavar="N",
                   help="messages a WebSocket subscriber may fall behind before it is resynced")
    p.add_argument("--body-timeout", type=_positive_seconds, default=BODY_TIMEOUT, metavar="SECONDS",
                   help="how long a request body may take to arrive once its headers have (408 after)")
    p.add_argument("--idle-timeout", type=_positive_seconds, default=IDLE_TIMEOUT, metavar="SECONDS",
                   help="close an HTTP connection that sends nothing for this long (WebSockets are exempt)")
    p.add_argument("--snapshot-every", type=_whole_number, default=SNAPSHOT_EVERY, metavar="N",
                   help="records between snapshots of the engine, also taken at a clean stop (0: none, every "
                        "start replays the whole log); a start replays the records after the newest one "
                        "(default %(default)s)")
    p.add_argument("--keep-snapshots", type=_positive_int, default=KEEP_SNAPSHOTS, metavar="K",
                   help="snapshots kept in the data directory (default %(default)s); log segments wholly "
                        "before the oldest one kept are deleted")
    p.add_argument("--segment-bytes", type=_segment_bytes, default=SEGMENT_BYTES, metavar="BYTES",
                   help="a log segment file is sealed and the next begun once it holds this many bytes "
                        "(default %(default)s, 64 MiB)")
    p.add_argument("--max-open-orders", type=_whole_number, default=MAX_OPEN_ORDERS, metavar="N",
                   help=f"open orders one account may have (default {MAX_OPEN_ORDERS}; 0: no limit): a limit order "
                        "that could rest past it is rejected (too_many_open_orders). Logged, so a replay keeps "
                        "the limit that was in force")
    p.add_argument("--price-band", type=_whole_number, default=0, metavar="BPS",
                   help="how far a limit price may be from its symbol's last trade, in basis points (100 = 1%%; "
                        "default 0: no band): an order past it is rejected (outside_price_band). Logged like "
                        "--max-open-orders")
    p.add_argument("--idempotency-window", type=_duration_ms, default=IDEMPOTENCY_WINDOW, metavar="DURATION",
                   help="how long a clientOrderId is remembered after its order, in the log's time (e.g. 90s, 30m, "
                        "24h; default 24h; 0: for ever, and the table grows with history): a retry inside it gets "
                        "the first answer, after it the id is a new order. Logged like --max-open-orders")
    p.add_argument("--max-order-rate", type=_whole_number, default=MAX_ORDER_RATE, metavar="N",
                   help=f"new orders, amends and quotes a second one account may send, as many at once at most "
                        f"(default {MAX_ORDER_RATE}; 0: no limit); past it: 429 with Retry-After, nothing logged. "
                        "Cancels are never limited")
    p.add_argument("--max-websockets", type=_positive_int, default=MAX_WEBSOCKETS, metavar="N",
                   help="WebSocket connections open at once; more are answered 503 (default %(default)s)")
    p.add_argument("--max-anonymous-websockets", type=_positive_int, metavar="N",
                   help="of those, connections not signed in (market-data viewers, and any connection before "
                        "its sign-in); more are answered 503, so the rest stays for signed-in traders (default: "
                        "four fifths of --max-websockets)")
    p.add_argument("--max-websockets-per-account", type=_positive_int, default=MAX_PER_ACCOUNT, metavar="N",
                   help="connections one account may have signed in; more are answered 429, or their sign-in "
                        "refused (default %(default)s)")
    p.add_argument("--auth-timeout", type=_positive_seconds, default=AUTH_TIMEOUT, metavar="SECONDS",
                   help="close a WebSocket that neither signs in nor subscribes within this long, with 1008 "
                        "(default %(default)s)")
    p.add_argument("--quiet", action="store_true", help="log warnings only")

    # Issue 26: the one way past a trade store the log can no longer rebuild (store/recovery.py).
    p.add_argument("--accept-history-gap", action="store_true",
                   help="start even when trades.sqlite is missing, damaged or behind every snapshot and the log "
                        "no longer holds the records before them: start from the newest snapshot, and record that "
                        "the history before it is missing from SQLite (the start refuses without this)")

    args = p.parse_args(argv)
    if args.max_anonymous_websockets is None:
        args.max_anonymous_websockets = default_max_anonymous(args.max_websockets)
    elif args.max_anonymous_websockets > args.max_websockets:
        p.error(f"--max-anonymous-websockets {args.max_anonymous_websockets} is more than --max-websockets "
                f"{args.max_websockets}: it is a part of them")
    if args.open_accounts and args.tokens is not None:
        p.error("--open-accounts and --tokens exclude each other: with --tokens only its tokens are accounts")
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


def reachable_from_elsewhere(host: str) -> bool:
    """True unless every address `host` names is a loopback one (127.0.0.0/8, ::1): 0.0.0.0, ::, a
    LAN address or a name for one can be reached from other machines."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise StartupError(f"cannot listen on {host}: {e.strerror or e}") from None
    for info in infos:
        address = ipaddress.ip_address(str(info[4][0]).split("%")[0])
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            address = address.ipv4_mapped
        if not address.is_loopback:
            return True
    return False


def reload_tokens(path: str | None, accounts: Accounts) -> None:
    """SIGHUP: read the --tokens file again; a file that cannot be used leaves the tokens as they were."""
    if path is None or accounts.tokens is None:
        log.warning("SIGHUP: there is no --tokens file to read again; the server goes on (SIGTERM or SIGINT "
                    "stop it)")
        return
    try:
        tokens = read_tokens(path)
    except TokensError as e:
        log.error("SIGHUP: kept the %d tokens in use, as the file cannot be used: %s", len(accounts.tokens), e)
        return
    before = len(accounts.tokens)
    signed_out = accounts.replace(tokens)
    log.info("SIGHUP: read %s again: %d tokens (%d before); %d WebSocket sign-ins whose token is gone or now "
             "names another account signed out", path, len(tokens), before, signed_out)


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
        make_data_dir(data)
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
    accounts = Accounts(load_tokens(args.tokens))
    # Before anything else can take long: SIGHUP reads the tokens again, it never stops the server.
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, reload_tokens, args.tokens, accounts)
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
            return await _serve_locked(args, data, symbols, accounts, sockets, stack)
    finally:
        os.close(lock)  # only after everything above is closed: no second server meanwhile


async def _serve_locked(args: argparse.Namespace, data: Path, symbols: list[str], accounts: Accounts,
                        sockets: list[socket.socket], stack: contextlib.AsyncExitStack) -> int:
    # A signal during start-up (the replay of a long log) stops the server before it listens.
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    warning = None
    if accounts.open and getattr(args, "reachable", False):
        warning = (f"open accounts on --host {args.host}, which other machines can reach: anyone who can reach "
                   "the port trades, cancels and reads fills as any account (--open-accounts)")
        log.warning("%s", warning)
    started = await start_exchange(data, args.durability, args.ws_buffer, stack, snapshot_every=args.snapshot_every,
                                   keep_snapshots=args.keep_snapshots, segment_bytes=args.segment_bytes,
                                   accept_history_gap=args.accept_history_gap)
    service, recovery = started.service, started.recovery
    if not symbols and not service.order_symbols:
        raise StartupError("no symbols: name at least one with --symbols")
    if stop.is_set():
        log.warning("stopped during start-up, before listening")
        return 0
    listen(sockets, f"{args.host}:{args.port}")
    # In force before the first book opens.
    await service.set_rules(args.max_open_orders, args.price_band, args.idempotency_window)
    for symbol in symbols:
        await service.add_symbol(symbol)

    gateway = Gateway(service, accounts, body_timeout=args.body_timeout, max_websockets=args.max_websockets,
                      room=Room(args.max_anonymous_websockets, args.max_websockets_per_account),
                      auth_timeout=args.auth_timeout, allowed_origins=frozenset(args.allow_origin), warning=warning,
                      allowed_hosts=_allowed_hosts(args.allow_host, args.host),
                      order_rate=OrderRate(args.max_order_rate))
    if args.web:
        gateway.web_dir = Path(args.web)
    # aiohttp's own default keeps an idle connection an hour: enough idle sockets would use up the
    # process's file descriptors and lock everyone out.
    runner = web.AppRunner(make_app(gateway), access_log=None, handle_signals=False, shutdown_timeout=2.0,
                           keepalive_timeout=args.idle_timeout, auto_decompress=False)  # inputs.py decodes bodies
    await runner.setup()
    stack.push_async_callback(runner.cleanup)
    sites = [web.SockSite(runner, sock, backlog=BACKLOG) for sock in sockets]
    for site in sites:
        await site.start()
    port = runner.addresses[0][1] if runner.addresses else args.port
    print(f"tickflow listening on http://{args.host}:{port} (durability {service.durability.value}, "
          f"data {data}, {recovery.records} records replayed)", flush=True)

    await stop.wait()
    log.info("shutting down: finishing the batch in flight")
    for site in sites:
        await site.stop()
    await close_websockets(gateway)
    await service.stop()  # the batch in flight is answered before HTTP stops
    await runner.cleanup()
    if service.failed:
        log.error("stopped after the log failed (%s); durable up to seq %d", service.failed, service.durable_seq)
        return 1
    log.info("stopped cleanly at seq %d", service.sequenced)
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


class MalformedHttpFilter(logging.Filter):
    """aiohttp logs a request that is not valid HTTP (a bad request line, a huge header, a bad
    Content-Length) at ERROR with a traceback; any client can send those, so they would flood the
    log. They become one WARNING line naming the client and the problem (aiohttp answers 400), at most
    `burst` of them every `window` seconds; the first line after a quiet spell says how many were left out."""

    def __init__(self, burst: int = 10, window: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.burst = LogBurst("such requests", burst, window, clock)

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, web.RequestPayloadError) and isinstance(error.__cause__, HttpProcessingError):
            error = error.__cause__  # a body aiohttp could not read, such as bad chunks (the handler said 400)
        if not isinstance(error, HttpProcessingError):
            return True
        note = self.burst.allow()
        if note is None:
            return False
        # aiohttp's message quotes the offending bytes over several lines: one line, of bounded length.
        why = " ".join(str(error.message or repr(error)).split())
        record.msg = f"{record.getMessage()}: {why[:200]}{note}"
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
        args.reachable = reachable_from_elsewhere(args.host)
    except StartupError as e:
        print(f"tickflow: {e}", file=sys.stderr)
        return 1
    if args.reachable and args.tokens is None and not args.open_accounts:
        print(f"tickflow serve: refusing to serve --host {args.host} without --tokens: other machines can reach "
              "it, and anyone who can would trade, cancel and read fills as any account; give --tokens FILE, "
              "or --open-accounts to allow that on purpose", file=sys.stderr)
        return 2
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
