"""The trade writer: durable batches reach SQLite together, and a waiting reader never waits the linger out."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from helpers.wait import turns, until

from tickflow.core.types import Outcome, Trade
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

    async def insert(self, trades: list[Trade]) -> None:
        self.inserts += 1
        await self.store.insert(trades)

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

    async def insert(self, trades: list[Trade]) -> None:
        self.inserts += 1
        if self.failures > 0:
            self.failures -= 1
            raise OSError(28, "database or disk is full")
        await self.store.insert(trades)


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

    async def insert(self, trades: list[Trade]) -> None:
        self.sizes.append(len(trades))
        await super().insert(trades)


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
        await store.close()
