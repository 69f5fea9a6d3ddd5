"""`tickflow simulate`: a lively market against a running server, for demos and soak tests.

Market makers quote both sides around a mid price that drifts (a random walk pulled back towards where
it started), cancel quotes the mid has left behind, and refill; takers cross the spread with IOC and
market orders. Every simulated trader is a WebSocket order-entry client of `tickflow.net.client`, so the
simulation exercises exactly what real clients use, reconnects included. Runs until interrupted, or for
`--duration` seconds.

    tickflow simulate --url http://127.0.0.1:8080 --rate 50 --symbols ACME,BETA
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from tickflow.net.client import (
    ApiError,
    Client,
    ConnectionLost,
    NotConnected,
    Order,
    OrderChanged,
    Session,
    TickflowError,
)


@dataclass
class Stats:
    sent: int = 0
    filled_qty: int = 0
    errors: int = 0
    races: int = 0
    """404/409 answers: a cancel or amend that lost the race to a fill. Normal in a busy market."""
    not_connected: int = 0
    by_kind: dict[str, int] = field(default_factory=dict)

    def count(self, kind: str) -> None:
        self.sent += 1
        self.by_kind[kind] = self.by_kind.get(kind, 0) + 1


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

    def __init__(self, name: str, url: str, symbols: list[str], fair: dict[str, Fair], stats: Stats,
                 rng: random.Random, *, subscribe: bool) -> None:
        self.name = name
        self.fair = fair
        self.stats = stats
        self.rng = rng
        self.symbols = symbols
        self.session = Session(url, name, symbols=symbols if subscribe else ())
        self.open: dict[int, Order] = {}
        self.session.add_listener(self._on_event)

    def _on_event(self, event: object) -> None:
        if isinstance(event, OrderChanged):
            o = event.order
            if o.is_open:
                self.open[o.order_id] = o
            else:
                self.open.pop(o.order_id, None)

    async def call(self, kind: str, coro: object) -> Order | None:
        self.stats.count(kind)
        try:
            order = await coro  # type: ignore[misc]
        except (NotConnected, ConnectionLost):
            self.stats.not_connected += 1
            await asyncio.sleep(0.2)
            return None
        except ApiError as e:
            if e.status in (404, 409):
                self.stats.races += 1
            else:
                self.stats.errors += 1
            return None
        except (TickflowError, asyncio.TimeoutError):
            self.stats.errors += 1
            return None
        self.stats.filled_qty += sum(f.qty for f in order.fills)
        self._on_event(OrderChanged(order))
        return order

    async def act(self) -> None:
        raise NotImplementedError


class MarketMaker(Trader):
    levels = 12
    max_open = 30

    async def act(self) -> None:
        symbol = self.rng.choice(self.symbols)
        mid = self.fair[symbol].mid
        mine = [o for o in self.open.values() if o.symbol == symbol]
        # Quotes the mid has left behind (or too many) go first.
        stale = [o for o in mine if o.price is not None and abs(o.price - mid) > self.levels + 2]
        if stale or len(mine) >= self.max_open:
            victim = stale[0] if stale else self.rng.choice(mine)
            await self.call("cancel", self.session.cancel_order(victim.order_id))
            return
        if mine and self.rng.random() < 0.1:
            victim = self.rng.choice(mine)
            if victim.qty - victim.filled_qty > 1:  # shrink a quote: keeps its queue place
                await self.call("amend", self.session.amend_order(victim.order_id, qty=victim.qty - 1))
                return
        side = self.rng.choice(("buy", "sell"))
        offset = 1 + min(self.levels - 1, int(self.rng.expovariate(0.3)))
        price = mid - offset if side == "buy" else mid + offset
        qty = self.rng.choice((1, 2, 5, 10, 10, 20, 25, 50))
        await self.call("quote", self.session.place_order(symbol, side, qty, max(1, price)))  # type: ignore[arg-type]


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


async def _start_mids(url: str, symbols: list[str], rng: random.Random) -> dict[str, Fair]:
    """Start each fair value where the market is (its mid or last trade), or at 10,000."""
    fair: dict[str, Fair] = {}
    known = {}
    async with Client(url) as http:
        with contextlib.suppress(TickflowError, OSError, asyncio.TimeoutError):
            known = {s.symbol: s for s in await http.symbols()}
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
                   stop: asyncio.Event | None = None, quiet: bool = False, prefix: str = "sim") -> Stats:
    """Run the market until `stop` is set or `duration` passes; return what was sent."""
    rng = random.Random(seed)
    stop = stop or asyncio.Event()
    stats = Stats()
    fair = await _start_mids(url, symbols, rng)
    traders: list[Trader] = [
        MarketMaker(f"{prefix}-mm{i + 1}", url, symbols, fair, stats, random.Random(rng.random()), subscribe=False)
        for i in range(makers)
    ] + [
        Taker(f"{prefix}-taker{i + 1}", url, symbols, fair, stats, random.Random(rng.random()), subscribe=True)
        for i in range(takers)
    ]
    # Makers act more often than takers, so the book stays deep.
    weights = [3.0 if isinstance(t, MarketMaker) else 1.0 for t in traders]
    share = sum(weights)

    async def run_trader(trader: Trader, weight: float) -> None:
        await trader.session.start(wait=False)
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

    tasks = [asyncio.create_task(run_trader(t, w)) for t, w in zip(traders, weights, strict=True)]
    tasks.append(asyncio.create_task(drift()))
    if not quiet:
        tasks.append(asyncio.create_task(report()))
    try:
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickflow simulate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="the server (default %(default)s)")
    parser.add_argument("--rate", type=float, default=20.0, help="orders per second, all traders together")
    parser.add_argument("--symbols", default="ACME", help="comma-separated symbols (default %(default)s)")
    parser.add_argument("--makers", type=int, default=3, help="market-maker accounts (default %(default)s)")
    parser.add_argument("--takers", type=int, default=2, help="taker accounts (default %(default)s)")
    parser.add_argument("--duration", type=float, help="stop after this many seconds (default: run until ^C)")
    parser.add_argument("--seed", type=int, help="random seed, for a repeatable run")
    parser.add_argument("--prefix", default="sim", help="account name prefix, to run several simulators (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    symbols = [s.strip() for s in args.symbols.split(",") if s.strip()]

    async def run() -> Stats:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        return await simulate(args.url, symbols, rate=args.rate, makers=args.makers, takers=args.takers,
                              duration=args.duration, seed=args.seed, stop=stop, quiet=args.quiet,
                              prefix=args.prefix)

    stats = asyncio.run(run())
    if not args.quiet:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(stats.by_kind.items()))
        print(f"simulate: done: sent {stats.sent} ({kinds}), filled {stats.filled_qty}, "
              f"lost races {stats.races}, errors {stats.errors}")
    return 0
