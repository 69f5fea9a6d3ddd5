"""`tickflow simulate` and `tickflow demo` against real servers started by the tests."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.probe import metric, sequenced_after, websockets_seen_closed
from helpers.wait import until

from tickflow.core.types import Status
from tickflow.demo import ServerProcess, free_port
from tickflow.net.client import Client, Order
from tickflow.simulate import MarketMaker, Stats, simulate


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("sim-server"), symbols=["ACME", "BETA"], durability="none")
    proc.start()
    yield proc
    proc.kill()


async def open_orders_of(url: str, accounts: list[str]) -> int:
    total = 0
    for account in accounts:
        async with Client(url, account) as http:
            total += len(await http.open_orders())
    return total


async def test_simulated_market_quotes_trades_and_cancels(server: ServerProcess) -> None:
    stop = asyncio.Event()
    commands = await metric(server.url, "tickflow_commands_total")
    run = asyncio.create_task(simulate(server.url, ["ACME", "BETA"], rate=300, makers=3, takers=2, stop=stop,
                                       seed=3, quiet=True, prefix="live"))

    async def busy_and_quoted() -> bool:
        """While it runs: both books quoted on both sides, trades in ACME, and as many commands sequenced
        as the two seconds it used to run for gave (about 600: quotes, their cancels and the takers')."""
        if run.done():
            return True  # (it failed: awaiting it below says why)
        async with Client(server.url) as http:
            for symbol in ("ACME", "BETA"):
                book = await http.book(symbol)
                if not (book.bids and book.asks):
                    return False
                assert book.bids[0].price < book.asks[0].price
            if not await http.trades("ACME", limit=1):
                return False
        return await metric(server.url, "tickflow_commands_total") - commands > 500

    # Stopped by what it has done, not after a time a busy machine may not get enough done in.
    await until(busy_and_quoted, timeout=120, interval=0.05, message="the simulated market to quote and trade")
    stop.set()
    stats = await run
    assert stats.sent > 200 and stats.errors == 0
    # Makers only quote (a mass quote replaces the last one: no cancels of their own); takers take.
    assert stats.by_kind.get("quote", 0) > 0 and set(stats.by_kind) <= {"quote", "take", "market"}
    assert stats.filled_qty > 0
    # The makers signed in with cancel on disconnect: their quotes leave with them.
    makers = [f"live-mm{i}" for i in (1, 2, 3)]

    async def quotes_gone() -> bool:
        return await open_orders_of(server.url, makers) == 0

    await until(quotes_gone, interval=0.05, message="the makers' quotes cancelled on disconnect")
    assert await open_orders_of(server.url, makers) == 0
    async with Client(server.url) as http:
        stored = await http.trades("ACME", limit=1000)  # a read waits for the trade store to hold the acks' trades
        assert stored and {t.aggressor for t in stored} <= {"buy", "sell"}


async def test_makers_mass_quotes_rest_and_are_traded_against(server: ServerProcess) -> None:
    """A maker's open orders are always one quote's ladder (each re-quote replaces the last, in one
    command): at most `levels` a side, one per price, bids below asks. Takers trade against them."""
    stop = asyncio.Event()
    run = asyncio.create_task(simulate(server.url, ["ACME"], rate=200, makers=2, takers=2, stop=stop, seed=11,
                                       quiet=True, prefix="mq"))
    seen: dict[str, object] = {}

    async def quoted_and_hit() -> bool:
        if run.done():
            return True  # (it failed: awaiting it below says why)
        async with Client(server.url, "mq-mm1") as maker, Client(server.url, "mq-taker1") as taker:
            resting = await maker.open_orders("ACME")
            made = [f for f in await maker.fills("ACME", limit=1000) if f.liquidity == "maker"]
            taken = [f for f in await taker.fills("ACME", limit=1000) if f.liquidity == "taker"]
        bids = [o.price for o in resting if o.side == "buy"]
        asks = [o.price for o in resting if o.side == "sell"]
        seen.update(bids=bids, asks=asks, made=len(made), taken=len(taken))
        for side in (bids, asks):
            assert len(side) <= MarketMaker.levels and len(set(side)) == len(side), seen
        assert not bids or not asks or max(p or 0 for p in bids) < min(p or 0 for p in asks), seen
        return len(bids) >= 2 and len(asks) >= 2 and bool(made) and bool(taken)

    await until(quoted_and_hit, timeout=60, interval=0.05,
                message=lambda: f"the makers' quotes resting and traded against (last seen {seen})")
    stop.set()
    stats = await run
    assert stats.errors == 0 and stats.by_kind.get("quote", 0) > 0
    assert stats.by_kind.get("take", 0) + stats.by_kind.get("market", 0) > 0


async def test_keep_quotes_leaves_the_makers_quotes_on_the_book(server: ServerProcess) -> None:
    await simulate(server.url, ["BETA"], rate=100, makers=2, takers=0, duration=1.0, seed=5, quiet=True,
                   prefix="keep", keep_quotes=True)
    # A cancel on disconnect would be under way once the server has seen the connections go, and in the
    # log before a command sequenced after that.
    await websockets_seen_closed(server.url)
    await sequenced_after(server.url, "BETA")
    assert await open_orders_of(server.url, ["keep-mm1", "keep-mm2"]) > 0


def test_a_stale_answer_never_reopens_a_quote_its_fill_closed() -> None:
    """A quote filled while its answer was on the way: the fill's update is read first, then the answer
    ("new", an older seq). The maker must not hold it as open, or it cancels it later for a 409."""
    stats = Stats()
    maker = MarketMaker("mm", "http://127.0.0.1:9", ["ACME"], {}, stats, random.Random(1), subscribe=False)

    def order(status: Status, seq: int, order_id: int = 7) -> Order:
        return Order(order_id, "mm", "ACME", "sell", "limit", 5, status, price=100, seq=seq)

    seen = maker.session.client_state.orders.track  # what the session does with each update and each call's answer
    seen(order("filled", 12))
    seen(order("new", 11))  # the answer, read late
    assert 7 not in maker.open
    seen(order("partially_filled", 15, order_id=8))
    seen(order("new", 14, order_id=8))  # older than what is held
    assert maker.open[8].status == "partially_filled"
    seen(order("new", 20, order_id=9))
    assert set(maker.open) == {8, 9}


def test_simulate_command_runs_for_its_duration(server: ServerProcess) -> None:
    start = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "tickflow.cli", "simulate", "--url", server.url, "--rate", "50",
                          "--symbols", "BETA", "--duration", "1", "--seed", "1"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert "simulate: done: sent" in out.stdout
    took = time.monotonic() - start
    assert 1.0 <= took < 15, took  # not less than its duration (more: a start, connections, a busy machine)


def test_demo_starts_server_and_market_and_stops_them(tmp_path: Path) -> None:
    port = free_port(0)
    demo = subprocess.Popen([sys.executable, "-m", "tickflow.cli", "demo", "--no-tui", "--data",
                             str(tmp_path / "data"), "--port", str(port), "--rate", "50"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        lines: list[str] = []
        assert demo.stdout is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            lines.append(line)
            if "browser page" in line:
                break
        assert any(f"http://127.0.0.1:{port}/" in line for line in lines), lines

        async def traded() -> int:
            async with Client(f"http://127.0.0.1:{port}") as http:
                await until(lambda: http.trades(limit=10), timeout=15, interval=0.05, message="a trade")
            return 1

        assert asyncio.run(traded()) == 1  # the simulated market is running
        demo.send_signal(signal.SIGINT)
        assert demo.wait(20) == 0
        with pytest.raises(OSError):
            import socket

            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        if demo.poll() is None:  # let it stop its children; kill only if it will not
            demo.send_signal(signal.SIGINT)
            try:
                demo.wait(20)
            except subprocess.TimeoutExpired:
                demo.kill()
