"""`tickflow simulate`: a lively market against a running server, for demos and soak tests.

Market makers quote a ladder of levels on both sides of a mid price that drifts (a random walk pulled
back towards where it started), each re-quote ONE mass quote that replaces the maker's whole quote in a
symbol (levels whose price and size stay keep their place in the queue; the others move); takers cross
the spread with IOC and market orders. Every simulated trader is a WebSocket order-entry client of
`tickflow.net.client`, so the simulation exercises exactly what real clients use, reconnects included.
Makers sign in with cancel on disconnect, as a real one would: when the simulator stops (or dies, or
loses its connection) the server takes their quotes off the book (`--keep-quotes` leaves them). Runs
until interrupted, or for `--duration` seconds.

    tickflow simulate --url http://127.0.0.1:8080 --rate 50 --symbols ACME,BETA
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import signal
import sys
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TypeVar

from tickflow.net.wire.args import positive_number, server_url
from tickflow.net.client import (
    ApiError,
    AuthFailed,
    Client,
    ConnectionLost,
    NotConnected,
    Order,
    ProtocolError,
    Quote,
    Session,
    SymbolInfo,
    TickflowError,
    Updates,
)
from tickflow.net.wire.tokens import TokensError, read_tokens

PREFIX = re.compile(r"\A[A-Za-z0-9._:@-]{1,50}\Z")
"""Account names are `PREFIX-mmN` / `PREFIX-takerN`; the server takes 1-64 of these characters as a name."""
CONNECT_TIMEOUT = 5.0
T = TypeVar("T", Order, Quote)


class SimulateError(Exception):
    """The market cannot run: the server is unreachable, lacks a symbol, or refuses the accounts."""


@dataclass
class Stats:
    sent: int = 0
    ok: int = 0
    filled_qty: int = 0
    errors: int = 0
    races: int = 0
    """404/409 answers: a cancel or amend that lost the race to a fill. Normal in a busy market."""
    not_connected: int = 0
    unanswered: int = 0
    """Calls still on the wire when the run ended: sent, but neither a success nor an error."""
    by_kind: dict[str, int] = field(default_factory=dict)
    by_reason: dict[str, int] = field(default_factory=dict)
    """Errors and calls not carried out, by what the server or the connection said."""

    def count(self, kind: str) -> None:
        self.sent += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1

    def fail(self, reason: str) -> None:
        self.by_reason[reason] = self.by_reason.get(reason, 0) + 1

    def reasons(self, most: int = 5) -> str:
        """The commonest reasons with their counts, most frequent first."""
        ranked = sorted(self.by_reason.items(), key=lambda kv: (-kv[1], kv[0]))
        text = "; ".join(f"{reason}: {n}" for reason, n in ranked[:most])
        return text + (f"; {len(ranked) - most} other reasons" if len(ranked) > most else "")

    def failure(self) -> str | None:
        """Why the run achieved nothing, or None when at least one call succeeded."""
        if self.ok:
            return None
        if not self.sent:
            return "no order was sent"
        answered = self.sent - self.unanswered
        if not answered:
            return f"none of the {self.sent} calls was answered"
        return f"all {answered} answered calls failed ({self.reasons()})"


@dataclass
class Fair:
    """A symbol's fair value: a random walk in ticks, pulled back towards `anchor`."""

    anchor: float
    value: float
    vol: float = 0.8
    pull: float = 0.01

    def step(self, rng: random.Random) -> None:
        self.value += rng.gauss(0, self.vol) + self.pull * (self.anchor - self.value)
        self.value = max(10.0, self.value)

    @property
    def mid(self) -> int:
        return round(self.value)


class Trader:
    """One simulated account with its own WebSocket session."""

    updates: Updates = True
    """The private updates its session signs in for."""

    def __init__(self, name: str, url: str, symbols: list[str], fair: dict[str, Fair], stats: Stats,
                 rng: random.Random, *, subscribe: bool, token: str | None = None,
                 cancel_on_disconnect: bool = False) -> None:
        self.name = name
        """The account; without a token, its name is its token (a server in open demo mode)."""
        self.fair = fair
        self.stats = stats
        self.rng = rng
        self.symbols = symbols
        self.session = Session(url, token or name, symbols=symbols if subscribe else (), updates=self.updates,
                               cancel_on_disconnect=cancel_on_disconnect)

    @property
    def open(self) -> Mapping[int, Order]:
        """Its open orders, as its session keeps them (a late answer never reopens a filled quote)."""
        return self.session.orders

    async def call(self, kind: str, coro: Awaitable[T]) -> T | None:
        self.stats.count(kind)
        try:
            answer = await coro
        except asyncio.CancelledError:
            self.stats.unanswered += 1  # the run ended while it was on the wire
            raise
        except (NotConnected, ConnectionLost) as e:
            self.stats.not_connected += 1
            self.stats.fail(f"connection: {e}")
            await asyncio.sleep(0.2)
            return None
        except ApiError as e:
            if e.status in (404, 409):
                self.stats.races += 1
            else:
                self.stats.errors += 1
                self.stats.fail(f"{e.status} {e.message}")
            return None
        except (TickflowError, asyncio.TimeoutError) as e:
            self.stats.errors += 1
            self.stats.fail(f"{type(e).__name__}: {e}".rstrip(": "))
            return None
        self.stats.ok += 1
        orders = answer.orders if isinstance(answer, Quote) else [answer]
        self.stats.filled_qty += sum(f.qty for order in orders for f in order.fills)
        return answer

    async def act(self) -> None:
        raise NotImplementedError


class MarketMaker(Trader):
    """Quotes `levels` prices a side, one tick apart, around its symbol's fair mid; every act re-quotes one
    symbol with a mass quote. Sizes mostly stay from one quote to the next (those levels keep their
    place in the queue); one level a side is re-drawn each time, and a mid that moved moves the ladder.
    A quote changes up to ten orders at once: its session takes their updates as lists."""

    updates: Updates = "lists"
    levels = 5
    sizes_drawn = (1, 2, 5, 10, 10, 20, 25, 50)

    @cached_property
    def sizes(self) -> dict[str, dict[str, list[int]]]:
        """Per symbol, the size of each level of each side, best first."""
        return {}

    def ladder(self, symbol: str) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """The next quote of `symbol`: bids below the mid and asks above it, best first."""
        sizes = self.sizes.get(symbol)
        if sizes is None:
            sizes = self.sizes[symbol] = {side: [self.rng.choice(self.sizes_drawn) for _ in range(self.levels)]
                                          for side in ("buy", "sell")}
        else:
            for side in ("buy", "sell"):
                sizes[side][self.rng.randrange(self.levels)] = self.rng.choice(self.sizes_drawn)
        mid = self.fair[symbol].mid  # at least 10: every bid is above 0
        bids = [(mid - 1 - i, qty) for i, qty in enumerate(sizes["buy"])]
        asks = [(mid + 1 + i, qty) for i, qty in enumerate(sizes["sell"])]
        return bids, asks

    async def act(self) -> None:
        symbol = self.rng.choice(self.symbols)
        bids, asks = self.ladder(symbol)
        await self.call("quote", self.session.quote(symbol, bids, asks))


class Taker(Trader):
    async def act(self) -> None:
        symbol = self.rng.choice(self.symbols)
        book = self.session.books.get(symbol)
        side = self.rng.choice(("buy", "sell"))
        fair = self.fair[symbol].mid
        # Lean with the fair value: buy more often when the book's mid is below it.
        if book is not None and book.mid is not None:
            side = "buy" if self.rng.random() < (0.65 if fair > book.mid else 0.35) else "sell"
        qty = self.rng.choice((1, 1, 2, 3, 5, 8, 13))
        if self.rng.random() < 0.25 or book is None:
            await self.call("market", self.session.place_order(symbol, side, qty))  # type: ignore[arg-type]
            return
        best = book.best_ask if side == "buy" else book.best_bid
        if best is None:
            return
        price = best.price + (1 if side == "buy" else -1) * self.rng.randint(0, 2)
        await self.call("take", self.session.place_order(symbol, side, qty, max(1, price), tif="ioc"))  # type: ignore[arg-type]


async def _server_symbols(url: str, timeout: float, stop: asyncio.Event) -> dict[str, SymbolInfo]:
    """The server's symbols, asked until it answers or `timeout` passes (it may be starting)."""
    deadline = time.monotonic() + timeout
    async with Client(url, timeout=max(0.5, timeout)) as http:
        while True:
            try:
                return {s.symbol: s for s in await http.symbols()}
            except (ApiError, ProtocolError) as e:
                raise SimulateError(f"{url} does not look like a tickflow server: GET /symbols answered {e}") from e
            except (TickflowError, OSError, asyncio.TimeoutError) as e:
                if stop.is_set():
                    raise SimulateError("stopped before the server answered") from e
                if time.monotonic() > deadline:
                    raise SimulateError(f"cannot reach the server at {url} within {timeout:g} s: {_why(e)}") from e
            await asyncio.sleep(0.2)


def _why(error: BaseException) -> str:
    """The operating system's words for a failed connection (connection refused, name not known), if any."""
    cause = error.__cause__
    os_error = getattr(cause, "os_error", None) or (cause if isinstance(cause, OSError) else None)
    if isinstance(os_error, OSError) and (os_error.errno or os_error.strerror):
        # asyncio's strerror is "Connect call failed (...)"; the errno says what happened.
        errno = os_error.errno or 0
        words = os.strerror(errno) if errno > 0 else (os_error.strerror or "")
        return words[:1].lower() + words[1:]
    return str(error) or type(error).__name__


def _start_mids(known: dict[str, SymbolInfo], symbols: list[str]) -> dict[str, Fair]:
    """Start each fair value where the market is (its mid or last trade), or at 10,000."""
    fair: dict[str, Fair] = {}
    for symbol in symbols:
        info = known.get(symbol)
        start = 10_000.0
        if info is not None:
            if info.best_bid and info.best_ask:
                start = (info.best_bid + info.best_ask) / 2
            elif info.last:
                start = float(info.last)
        fair[symbol] = Fair(anchor=start, value=start)
    return fair


async def simulate(url: str, symbols: list[str], *, rate: float = 20.0, makers: int = 3, takers: int = 2,
                   duration: float | None = None, seed: int | None = None, report_every: float = 5.0,
                   stop: asyncio.Event | None = None, quiet: bool = False, prefix: str = "sim",
                   connect_timeout: float = CONNECT_TIMEOUT, tokens: dict[str, str] | None = None,
                   keep_quotes: bool = False) -> Stats:
    """Run the market until `stop` is set or `duration` passes; return what was sent, or raise SimulateError.

    With `tokens` (token -> account, as a server's --tokens file), the traders are those accounts, makers
    first, in the file's order; without, they are `PREFIX-mmN` and `PREFIX-takerN`, each name its token.
    The makers' quotes are cancelled by the server when their connections close (after this returns,
    the cancel may still be on its way), unless `keep_quotes`."""
    rng = random.Random(seed)
    stop = stop or asyncio.Event()
    stats = Stats()
    known = await _server_symbols(url, connect_timeout, stop)
    unknown = [s for s in symbols if s not in known]
    if unknown:
        raise SimulateError(f"the server has no symbol {', '.join(unknown)} (it has {', '.join(known) or 'none'})")
    fair = _start_mids(known, symbols)
    names: list[tuple[str | None, str]]
    if tokens is None:
        names = [(None, f"{prefix}-mm{i + 1}") for i in range(makers)]
        names += [(None, f"{prefix}-taker{i + 1}") for i in range(takers)]
    else:
        if len(tokens) < makers + takers:
            raise SimulateError(f"{makers} makers and {takers} takers need {makers + takers} tokens; "
                                f"the tokens file has {len(tokens)}")
        names = [(token, account) for token, account in list(tokens.items())[: makers + takers]]
    traders: list[Trader] = [
        (MarketMaker if i < makers else Taker)(name, url, symbols, fair, stats, random.Random(rng.random()),
                                               subscribe=i >= makers, token=token,
                                               cancel_on_disconnect=i < makers and not keep_quotes)
        for i, (token, name) in enumerate(names)
    ]
    # Makers act more often than takers, so the book stays deep.
    weights = [3.0 if isinstance(t, MarketMaker) else 1.0 for t in traders]
    share = sum(weights)

    async def run_trader(trader: Trader, weight: float) -> None:
        per_second = rate * weight / share
        while not stop.is_set():
            await asyncio.sleep(trader.rng.expovariate(per_second) if per_second > 0 else 1.0)
            if trader.session.connected:
                await trader.act()

    async def drift() -> None:
        while not stop.is_set():
            await asyncio.sleep(0.5)
            for f in fair.values():
                f.step(rng)

    async def report() -> None:
        start = time.monotonic()
        while not stop.is_set():
            await asyncio.sleep(report_every)
            elapsed = time.monotonic() - start
            mids = " ".join(f"{s}~{f.mid}" for s, f in fair.items())
            print(f"simulate: {elapsed:6.0f} s  sent {stats.sent}  filled {stats.filled_qty}  "
                  f"races {stats.races}  errors {stats.errors}  waiting {stats.not_connected}  {mids}", flush=True)

    tasks: list[asyncio.Task[None]] = []
    try:
        await _connect(traders, connect_timeout)
        tasks = [asyncio.create_task(run_trader(t, w)) for t, w in zip(traders, weights, strict=True)]
        tasks.append(asyncio.create_task(drift()))
        if not quiet:
            tasks.append(asyncio.create_task(report()))
        if duration is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), duration)
        else:
            await stop.wait()
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.gather(*(t.session.close() for t in traders), return_exceptions=True)
    return stats


async def _connect(traders: list[Trader], timeout: float) -> None:
    """Connect every trader's session; a refused token or no connection in time is a SimulateError."""
    async def one(trader: Trader) -> None:
        try:
            await trader.session.start(timeout=timeout)
        except AuthFailed as e:
            if trader.session.token != trader.name:
                raise SimulateError(f"the server refused the token of account {trader.name} ({e}): is it the "
                                    "tokens file the server was started with?") from e
            raise SimulateError(f"the server refused account {trader.name} ({e}): simulate sends each account's "
                                "name as its token, which a server started with --tokens does not accept; "
                                "give simulate the same file with --tokens") from e
        except NotConnected as e:
            raise SimulateError(f"no WebSocket session with {trader.session.url} within {timeout:g} s") from e

    await asyncio.gather(*(one(t) for t in traders))


def _count(text: str) -> int:
    """An argparse type: a whole number from 0 to 100."""
    if not text.strip().isdigit() or int(text) > 100:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number from 0 to 100")
    return int(text)


def _prefix(text: str) -> str:
    """An argparse type: an account-name prefix the server accepts."""
    if not PREFIX.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} would make account names the server refuses: "
                                         "use 1-50 of A-Z a-z 0-9 . _ : @ -")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickflow simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", type=server_url, default="http://127.0.0.1:8080",
                        help="the server, http(s)://host[:port] (default %(default)s)")
    parser.add_argument("--rate", type=positive_number, default=20.0,
                        help="calls per second, all traders together (a maker's mass quote is one)")
    parser.add_argument("--symbols", default="ACME", help="comma-separated symbols (default %(default)s)")
    parser.add_argument("--makers", type=_count, default=3, help="market-maker accounts (default %(default)s)")
    parser.add_argument("--takers", type=_count, default=2, help="taker accounts (default %(default)s)")
    parser.add_argument("--duration", type=positive_number, help="stop after this many seconds (default: run until ^C)")
    parser.add_argument("--seed", type=int, help="random seed, for a repeatable run")
    parser.add_argument("--prefix", type=_prefix, default="sim",
                        help="account name prefix, to run several simulators (default %(default)s)")
    parser.add_argument("--connect-timeout", type=positive_number, default=CONNECT_TIMEOUT, metavar="SECONDS",
                        help="give up when the server cannot be reached for this long (default %(default)s)")
    parser.add_argument("--tokens", metavar="FILE",
                        help="the server's tokens file (JSON token -> account): trade as its accounts, makers first")
    parser.add_argument("--keep-quotes", action="store_true",
                        help="leave the makers' quotes on the book when the simulator stops (default: the "
                             "server cancels them as each maker's connection closes)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    symbols = list(dict.fromkeys(s.strip() for s in args.symbols.split(",") if s.strip()))
    if not symbols:
        parser.error("--symbols: name at least one symbol")
    if args.makers + args.takers == 0:
        parser.error("--makers and --takers: at least one trader is needed")
    try:
        tokens = read_tokens(args.tokens) if args.tokens is not None else None
    except TokensError as e:
        parser.error(f"--tokens: {e}")

    async def run() -> Stats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        return await simulate(args.url, symbols, rate=args.rate, makers=args.makers, takers=args.takers,
                              duration=args.duration, seed=args.seed, stop=stop, quiet=args.quiet,
                              prefix=args.prefix, connect_timeout=args.connect_timeout, tokens=tokens,
                              keep_quotes=args.keep_quotes)

    try:
        stats = asyncio.run(run())
    except SimulateError as e:
        print(f"tickflow simulate: {e}", file=sys.stderr)
        return 1
    if not args.quiet:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_kind.items()))
        reasons = f" ({stats.reasons()})" if stats.by_reason else ""
        print(f"simulate: done: sent {stats.sent} ({kinds}), filled {stats.filled_qty}, "
              f"lost races {stats.races}, errors {stats.errors}, not connected {stats.not_connected}, "
              f"unanswered at the end {stats.unanswered}{reasons}",
              flush=True)
    failure = stats.failure()
    if failure:
        print(f"tickflow simulate: {failure}", file=sys.stderr)
        return 1
    return 0
