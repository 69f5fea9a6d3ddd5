"""The trade writer: durable batches reach SQLite together, and a waiting reader never waits the linger out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import msgspec
import pytest
from helpers.wait import turns, until

from tickflow.core.engine import Engine
from tickflow.core.types import Cancel, CancelAll, Command, NewOrder, OrderState, Outcome, Quote, Trade
from tickflow.net.exchange.fanout import Feed
from tickflow.net.exchange.trade_writer import TradeWriter
from tickflow.store.trades import TradeStore


def batch(seq: int) -> list[Outcome]:
    """One durable batch of one command that made one trade (trade id = seq)."""
    trade = Trade(seq, "ACME", 100 + seq % 7, 1 + seq % 5, 2 * seq, 2 * seq + 1, "a", "b", "buy", seq,
                  1_700_000_000_000 + seq)
    return [Outcome(seq, None, None, [trade], [], [])]


class CountingStore:
    """A real trade store that counts its inserts (each is one SQLite transaction)."""

    def __init__(self, store: TradeStore) -> None:
        self.store = store
        self.inserts = 0

    async def insert(self, trades: list[Trade], orders: list[OrderState] | None = None,
                     orders_seq: int | None = None) -> None:
        self.inserts += 1
        await self.store.insert(trades, orders, orders_seq)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


async def open_store(tmp_path: Path) -> CountingStore:
    return CountingStore(await TradeStore.open(str(tmp_path / "trades.db")))


async def test_batches_published_together_share_one_insert(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    writer = TradeWriter(store)  # type: ignore[arg-type]
    writer.start()
    for seq in range(1, 201):
        writer.publish(batch(seq))
    await writer.caught_up(200)
    assert store.inserts == 1
    assert await store.count() == 200
    await writer.stop()
    await store.close()


async def test_a_waiting_reader_is_served_without_waiting_out_the_linger(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    writer = TradeWriter(store, linger=600.0)  # type: ignore[arg-type]  # a linger no test would sit through
    writer.start()
    writer.publish(batch(1))
    await turns()  # the writer takes it in and lingers
    await asyncio.wait_for(writer.caught_up(1), 30)
    assert [t["tradeId"] for t in await store.trades("ACME", 0, 10)] == [1]
    writer.publish(batch(2))
    await asyncio.wait_for(writer.stop(), 30)  # stopping flushes what is pending, linger or not
    assert await store.count() == 2
    await store.close()


async def test_trades_published_during_an_insert_get_their_own_turn(tmp_path: Path) -> None:
    store = await open_store(tmp_path)
    writer = TradeWriter(store, linger=0.001)  # type: ignore[arg-type]
    writer.start()
    for seq in range(1, 51):
        writer.publish(batch(seq))
        if seq % 10 == 0:  # the writer takes these ten into an insert; the next ten come during it, or after
            await until(lambda: not writer.pending, message="the writer to take the trades published")
    await asyncio.wait_for(writer.caught_up(50), 30)
    assert await store.count() == 50
    assert 1 < store.inserts <= 50
    await writer.stop()
    await store.close()


class FullDiskStore(CountingStore):
    """A real store whose next `failures` inserts fail, as SQLite does on a full disk."""

    def __init__(self, store: TradeStore, failures: int) -> None:
        super().__init__(store)
        self.failures = failures

    async def insert(self, trades: list[Trade], orders: list[OrderState] | None = None,
                     orders_seq: int | None = None) -> None:
        self.inserts += 1
        if self.failures > 0:
            self.failures -= 1
            raise OSError(28, "database or disk is full")
        await self.store.insert(trades, orders, orders_seq)


async def test_a_failed_insert_is_retried_in_order_and_readers_wait_for_it(tmp_path: Path) -> None:
    store = FullDiskStore(await TradeStore.open(str(tmp_path / "trades.db")), failures=3)
    writer = TradeWriter(store, linger=0.0)  # type: ignore[arg-type]
    writer.retry_delay = 0.01
    writer.start()
    try:
        writer.publish(batch(1))
        reader = asyncio.ensure_future(writer.caught_up(1))
        await until(lambda: writer.error is not None, message="the first insert to fail")
        assert writer.error is not None and "disk is full" in writer.error and not reader.done()
        for seq in range(2, 6):  # more trades arrive while SQLite refuses: they queue behind the failed ones
            writer.publish(batch(seq))
        await asyncio.wait_for(writer.caught_up(5), 10)
        assert reader.done() and writer.error is None and store.failures == 0
        assert [t["tradeId"] for t in await store.trades("ACME", 0, 10)] == [1, 2, 3, 4, 5]
    finally:
        await writer.stop()
        await store.close()  # SQLite's threads would keep the test run from exiting


class RecordingFullDisk(FullDiskStore):
    """A full-disk store that notes how many trades each insert tried."""

    def __init__(self, store: TradeStore, failures: int) -> None:
        super().__init__(store, failures)
        self.sizes: list[int] = []

    async def insert(self, trades: list[Trade], orders: list[OrderState] | None = None,
                     orders_seq: int | None = None) -> None:
        if trades:  # (a commit with no trade only moves the orders watermark)
            self.sizes.append(len(trades))
        await super().insert(trades, orders, orders_seq)


async def test_a_backlog_is_retried_in_bounded_chunks_not_one_ever_larger_transaction(tmp_path: Path) -> None:
    store = RecordingFullDisk(await TradeStore.open(str(tmp_path / "trades.db")), failures=4)
    writer = TradeWriter(store, linger=0.0, max_chunk=10)  # type: ignore[arg-type]
    writer.retry_delay = 0.01
    writer.start()
    try:
        for seq in range(1, 101):  # the disk is full while they come
            writer.publish(batch(seq))
        await asyncio.wait_for(writer.caught_up(100), 30)
        assert max(store.sizes) == 10 and store.failures == 0
        assert [t["tradeId"] for t in await store.trades("ACME", 0, 1000)] == list(range(1, 101))
    finally:
        await writer.stop()
        await store.close()


async def test_a_command_whose_trades_straddle_two_chunks_is_flushed_only_once_both_are_in(tmp_path: Path) -> None:
    store = RecordingFullDisk(await TradeStore.open(str(tmp_path / "trades.db")), failures=0)
    writer = TradeWriter(store, linger=600.0, max_chunk=3)  # type: ignore[arg-type]
    writer.start()
    try:
        sweep = [Trade(i, "ACME", 100, 1, 10 + i, 9, "a", "b", "sell", 1, 1_700_000_000_000) for i in range(1, 6)]
        writer.publish([Outcome(1, None, None, sweep, [], [])])
        await asyncio.wait_for(writer.caught_up(1), 30)
        assert store.sizes == [3, 2] and await store.count() == 5
    finally:
        await writer.stop()
        await store.close()


async def test_past_the_bound_the_writer_leaves_the_trades_to_the_log_and_readers_are_told(tmp_path: Path) -> None:
    """An outage that outlasts what memory may hold: the writer stops holding trades (the log has them
    and the next start puts them in SQLite), and readers get an answer at once, not a 10 s wait."""
    store = FullDiskStore(await TradeStore.open(str(tmp_path / "trades.db")), failures=1_000_000)
    writer = TradeWriter(store, linger=0.0, max_buffered=20, max_chunk=5)  # type: ignore[arg-type]
    writer.retry_delay = 0.001
    writer.start()
    try:
        for seq in range(1, 31):
            writer.publish(batch(seq))
        await until(lambda: writer.behind is not None, message="the writer to give the backlog up to the log")
        assert writer.pending == [] and "next start" in (writer.error or "")
        for seq in range(31, 1031):  # orders keep flowing; nothing more is held
            writer.publish(batch(seq))
        assert writer.pending == []
        with pytest.raises(TimeoutError, match="next start"):
            await asyncio.wait_for(writer.caught_up(1030, timeout=600), 5)
    finally:
        await asyncio.wait_for(writer.stop(), 10)
        await store.close()


async def test_readers_that_time_out_leave_no_waiter_behind(tmp_path: Path) -> None:
    """Every timed-out /trades, /bars or /fills (and durable-seq read) while SQLite or the log is stuck
    must not leave its waiter in the gate."""
    store = FullDiskStore(await TradeStore.open(str(tmp_path / "trades.db")), failures=1_000_000)
    writer = TradeWriter(store, linger=0.0)  # type: ignore[arg-type]
    writer.retry_delay = 0.001
    writer.start()
    feed = Feed()
    try:
        writer.publish(batch(1))
        results = await asyncio.gather(*(writer.caught_up(1, timeout=0.01) for _ in range(200)),
                                       *(feed.wait_durable(5, timeout=0.01) for _ in range(200)),
                                       return_exceptions=True)
        assert all(isinstance(r, TimeoutError) for r in results)
        assert writer.flushed.waiting == 0 and feed.mirror.durable.waiting == 0
    finally:
        await asyncio.wait_for(writer.stop(), 10)


async def test_finished_orders_reach_sqlite_with_their_trades_and_the_watermark(tmp_path: Path) -> None:
    """Every order an outcome finishes (the taker, the makers it filled, a cancel, a cancel-all's, a rejected
    one, a quote's replaced ones) is stored in its final state; live ones are not; the watermark follows."""
    store = await open_store(tmp_path)
    writer = TradeWriter(store, linger=0.0)  # type: ignore[arg-type]
    writer.start()
    engine = Engine(["ACME"])
    commands: list[Command] = [NewOrder("s", "ACME", "sell", "limit", 100, 5), NewOrder("s", "ACME", "sell", "limit", 101, 5),
                NewOrder("b", "ACME", "buy", "limit", 101, 7),  # fills 1, takes 2 of 2, the taker filled
                NewOrder("b", "ACME", "buy", "limit", 90, 1), Cancel("b", 4),
                NewOrder("b", "ACME", "buy", "limit", 0, 1),  # rejected
                NewOrder("c", "ACME", "buy", "limit", 80, 1), CancelAll("c"),
                Quote("q", "ACME", [(70, 1)], []), Quote("q", "ACME", [(71, 1)], []),  # 9 replaced by 10
                NewOrder("l", "ACME", "buy", "limit", 60, 1)]  # stays live
    outcomes = [engine.apply(seq, 1000 + seq, c) for seq, c in enumerate(commands, 1)]
    writer.publish(outcomes[:5])
    writer.publish(outcomes[5:])
    await asyncio.wait_for(writer.caught_up(len(commands)), 10)
    stored = {i: await store.order(i) for i in range(1, engine.next_order_id)}
    assert {i: s.status for i, s in stored.items() if s is not None} == {
        1: "filled", 3: "filled", 4: "cancelled", 5: "rejected", 6: "cancelled", 7: "cancelled"}
    assert stored[3] == OrderState(3, None, "b", "ACME", "buy", "limit", 101, 7, "gtc", False, "filled", 7, 0, [],
                                   None, 3, 1003)
    assert engine.order_state("s", 2) is not None and stored[2] is None  # partly filled: live
    assert await store.orders_seq() == len(commands)
    await writer.stop()
    await store.close()


async def test_finished_orders_are_read_from_memory_until_sqlite_holds_them(tmp_path: Path) -> None:
    """A cancel of a finished order, or GET of one, must never miss it: until its commit it is read from the
    writer's memory (also while SQLite refuses writes), afterwards from SQLite; always without its fills."""
    store = FullDiskStore(await TradeStore.open(str(tmp_path / "trades.db")), failures=2)
    writer = TradeWriter(store, linger=0.0)  # type: ignore[arg-type]
    writer.retry_delay = 0.01
    engine = Engine(["ACME"])
    outcomes = [engine.apply(1, 1001, NewOrder("s", "ACME", "sell", "limit", 100, 5)),
                engine.apply(2, 1002, NewOrder("b", "ACME", "buy", "limit", 100, 5))]
    writer.publish(outcomes)  # before the writer runs: nothing committed yet
    taker = outcomes[1].result
    assert taker is not None
    expected = {i: msgspec.structs.replace(s, fills=[]) for i, s in ((1, outcomes[1].updates[0]), (2, taker))}
    assert await writer.finished_orders([1, 2, 3]) == expected
    writer.start()
    try:
        await until(lambda: writer.error is not None, message="the first insert to fail")
        assert await writer.finished_orders([1, 2, 3]) == expected and await store.order(1) is None
        await asyncio.wait_for(writer.caught_up(2), 10)
        assert writer.unflushed == {}
        assert await writer.finished_orders([1, 2, 3]) == expected == {1: await store.order(1), 2: await store.order(2)}
    finally:
        await writer.stop()
        await store.close()
