"""The SQLite trade store against real files, with bars checked against a plain Python computation."""

from __future__ import annotations

import asyncio
import random
import subprocess
import sys
import sqlite3
from pathlib import Path
from typing import Any, AsyncIterator

import msgspec
import pytest

from tickflow.core.types import Trade
from tickflow.store.trades import BARS_BEFORE_SQL, BARS_SQL, TRADES_SQL, TradeStore

T0 = 1_764_633_600_000  # a midnight, so buckets of every interval start on it
MINUTE = 60_000
HOUR = 60 * MINUTE


def trade(trade_id: int, symbol: str = "ACME", price: int = 10_000, qty: int = 10, ts: int = T0) -> Trade:
    return Trade(trade_id, symbol, price, qty, 100 + trade_id, 200 + trade_id, "alice", "bob",
                 "buy" if trade_id % 2 else "sell", 1000 + trade_id, ts)


def wire(t: Trade) -> dict[str, Any]:
    return {"tradeId": t.trade_id, "symbol": t.symbol, "price": t.price, "qty": t.qty,
            "buyOrderId": t.buy_order_id, "sellOrderId": t.sell_order_id, "aggressor": t.aggressor,
            "seq": t.seq, "ts": t.ts}


def random_trades(rng: random.Random, n: int, symbols: tuple[str, ...], span_ms: int) -> list[Trade]:
    """Random-walk prices; times mostly rising with trade id but sometimes stepping back, so a bar's
    open and close (by trade id) differ from its earliest and latest trade by time."""
    prices = {s: 10_000 for s in symbols}
    trades = []
    ts = T0
    for trade_id in range(1, n + 1):
        symbol = rng.choice(symbols)
        prices[symbol] = max(1, prices[symbol] + rng.randint(-5, 5))
        ts = max(T0, ts + rng.randint(-30_000, 3 * span_ms // n))
        trades.append(trade(trade_id, symbol, prices[symbol], rng.randint(1, 500), ts))
    return trades


def reference_bars(trades: list[Trade], symbol: str, interval: int, start: int, end: int,
                   before: int = 1 << 62) -> list[dict[str, Any]]:
    buckets: dict[int, list[Trade]] = {}
    for t in sorted(trades, key=lambda t: t.trade_id):
        if t.symbol == symbol and start <= t.ts < end and t.trade_id < before:
            buckets.setdefault(t.ts - t.ts % interval, []).append(t)
    bars = []
    for t0, ts in sorted(buckets.items()):
        volume = sum(t.qty for t in ts)
        bars.append({"t": t0, "open": ts[0].price, "high": max(t.price for t in ts),
                     "low": min(t.price for t in ts), "close": ts[-1].price, "volume": volume,
                     "vwap": sum(t.price * t.qty for t in ts) / volume})
    return bars


@pytest.fixture(params=["one statement", "executemany"])
async def store(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[TradeStore]:
    """Every test runs on both insert paths: JSON batches, and row by row where SQLite lacks JSON."""
    s = await TradeStore.open(str(tmp_path / "trades.db"))
    s._json1 = request.param == "one statement"
    yield s
    await s.close()


async def test_every_column_is_stored_as_given(store: TradeStore, tmp_path: Path) -> None:
    trades = [trade(1), Trade(2, "X.Y-1", 1, 2**62, 2**53 + 1, 7, "al'ice", 'b"ob', "sell", 9, 2**62 + 3)]
    await store.insert(trades)
    with sqlite3.connect(tmp_path / "trades.db") as db:
        rows = db.execute(
            "SELECT *, typeof(price), typeof(ts), typeof(symbol) FROM trades ORDER BY trade_id").fetchall()
    assert rows == [(*msgspec.structs.astuple(t), "integer", "integer", "text") for t in trades]


async def test_new_store_is_empty(store: TradeStore) -> None:
    assert await store.max_trade_id() == 0
    assert await store.count() == 0
    assert await store.trades(None, 0, 100) == []
    assert await store.recent("ACME", 10) == []
    assert await store.bars("ACME", MINUTE, T0, T0 + HOUR) == []


async def test_file_is_wal_with_normal_sync(store: TradeStore, tmp_path: Path) -> None:
    with sqlite3.connect(tmp_path / "trades.db") as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    rows = await store._write.execute_fetchall("PRAGMA synchronous")
    assert list(rows)[0][0] == 1  # NORMAL


async def test_insert_is_idempotent_on_trade_id(store: TradeStore) -> None:
    first = [trade(i, price=10_000 + i) for i in range(1, 6)]
    await store.insert(first)
    # A replay inserts the same trades again, overlapping new ones; the stored row never changes.
    await store.insert(first)
    await store.insert([trade(4, price=1), *(trade(i, price=10_000 + i) for i in range(5, 9))])
    await store.insert([])
    assert await store.count() == 8
    assert await store.max_trade_id() == 8
    got = await store.trades(None, 0, 100)
    assert [t["tradeId"] for t in got] == list(range(1, 9))
    assert got[3]["price"] == 10_004


async def test_trades_carry_wire_keys_and_no_accounts(store: TradeStore) -> None:
    t = trade(7, "BOLT", 123, 45, T0 + 5)
    await store.insert([t])
    assert await store.trades("BOLT", 0, 1) == [wire(t)]
    assert await store.recent("BOLT", 1) == [wire(t)]


async def test_paging_walks_every_trade_once_in_id_order(store: TradeStore) -> None:
    trades = random_trades(random.Random(1), 500, ("ACME", "BOLT", "CORE"), HOUR)
    await store.insert(random.Random(2).sample(trades, len(trades)))  # insert order does not matter
    for symbol in (None, "ACME", "BOLT"):
        want = [wire(t) for t in trades if symbol is None or t.symbol == symbol]
        got: list[dict[str, Any]] = []
        after = 0
        while page := await store.trades(symbol, after, 7):
            assert len(page) <= 7
            got.extend(page)
            after = page[-1]["tradeId"]
        assert got == want
    assert await store.trades("ACME", 10**9, 10) == []
    assert await store.trades("NOPE", 0, 10) == []
    assert await store.trades(None, 0, 0) == []
    assert await store.trades(None, 0, -1) == []  # not SQLite's "no limit"


async def test_paging_back_from_the_newest_walks_every_trade_once(store: TradeStore) -> None:
    trades = random_trades(random.Random(4), 500, ("ACME", "BOLT", "CORE"), HOUR)
    await store.insert(trades)
    for symbol in (None, "ACME", "CORE"):
        want = [wire(t) for t in trades if symbol is None or t.symbol == symbol]
        got: list[dict[str, Any]] = []
        before = None
        while page := await store.trades(symbol, 0, 9, before=before, newest_first=True):
            assert len(page) <= 9 and [t["tradeId"] for t in page] == sorted((t["tradeId"] for t in page), reverse=True)
            got.extend(page)
            before = page[-1]["tradeId"]
        assert got == want[::-1]
    ids = [t.trade_id for t in trades]
    middle = await store.trades(None, ids[100], 1000, before=ids[110])  # both bounds, oldest first
    assert [t["tradeId"] for t in middle] == ids[101:110]
    assert await store.trades(None, 0, 10, before=ids[0]) == []


def reference_fills(trades: list[Trade], account: str, symbol: str | None) -> list[dict[str, Any]]:
    """The account's side of each of its trades, in trade-id order, worked out plainly."""
    out = []
    for t in sorted(trades, key=lambda t: t.trade_id):
        if account not in (t.buy_account, t.sell_account) or symbol not in (None, t.symbol):
            continue
        side = "buy" if t.buy_account == account else "sell"
        out.append({"tradeId": t.trade_id, "symbol": t.symbol,
                    "orderId": t.buy_order_id if side == "buy" else t.sell_order_id, "side": side,
                    "price": t.price, "qty": t.qty, "liquidity": "taker" if t.aggressor == side else "maker",
                    "seq": t.seq, "ts": t.ts})
    return out


async def test_an_accounts_fills_page_both_ways_through_exactly_its_trades(store: TradeStore) -> None:
    rng = random.Random(7)
    accounts = ("alice", "bob", "carol", "dave")
    trades = []
    for t in random_trades(rng, 600, ("ACME", "BOLT"), HOUR):
        buyer, seller = rng.sample(accounts, 2)  # never one account on both sides: self-trades are prevented
        trades.append(msgspec.structs.replace(t, buy_account=buyer, sell_account=seller))
    await store.insert(rng.sample(trades, len(trades)))
    for account in (*accounts, "nobody"):
        for symbol in (None, "ACME", "NOPE"):
            want = reference_fills(trades, account, symbol)
            got: list[dict[str, Any]] = []
            after = 0
            while page := await store.fills(account, symbol, after, 13):
                assert len(page) <= 13
                got.extend(page)
                after = page[-1]["tradeId"]
            assert got == want
            back: list[dict[str, Any]] = []
            before = None
            while page := await store.fills(account, symbol, 0, 11, before=before, newest_first=True):
                back.extend(page)
                before = page[-1]["tradeId"]
            assert back == want[::-1]
    assert {f["liquidity"] for f in reference_fills(trades, "alice", None)} == {"maker", "taker"}
    assert await store.fills("alice", None, 0, 0) == [] and await store.fills("alice", None, 0, -1) == []


async def test_recent_is_the_newest_trades_oldest_first(store: TradeStore) -> None:
    trades = random_trades(random.Random(3), 300, ("ACME", "BOLT"), HOUR)
    await store.insert(trades)
    acme = [wire(t) for t in trades if t.symbol == "ACME"]
    assert await store.recent("ACME", 20) == acme[-20:]
    assert await store.recent("ACME", 10_000) == acme
    assert await store.recent("ACME", 0) == []
    assert await store.recent("NOPE", 5) == []


@pytest.mark.parametrize("seed", [11, 12, 13])
async def test_bars_match_a_python_computation(store: TradeStore, seed: int) -> None:
    rng = random.Random(seed)
    span = 6 * HOUR
    trades = random_trades(rng, 3000, ("ACME", "BOLT"), span)
    await store.insert(trades)
    last = max(t.ts for t in trades)
    ranges = [(T0, last + 1), (T0 + HOUR, T0 + 2 * HOUR), (T0 - HOUR, T0 + span * 2)]
    # Arbitrary bounds, inside buckets and across their edges.
    for _ in range(8):
        low, high = sorted(rng.randint(T0 - MINUTE, last + MINUTE) for _ in range(2))
        ranges.append((low, high))
    for interval in (MINUTE, 5 * MINUTE, HOUR):
        for start, end in ranges:
            for symbol in ("ACME", "BOLT"):
                got = await store.bars(symbol, interval, start, end)
                want = reference_bars(trades, symbol, interval, start, end)
                assert got == [{**w, "vwap": pytest.approx(w["vwap"], rel=1e-12)} for w in want]
    for before in [1, 2, len(trades), len(trades) + 1, 1 << 62] + [rng.randint(1, len(trades)) for _ in range(8)]:
        for start, end in ranges[:1] + ranges[3:6]:
            got = await store.bars("ACME", MINUTE, start, end, before=before)
            want = reference_bars(trades, "ACME", MINUTE, start, end, before)
            assert got == [{**w, "vwap": pytest.approx(w["vwap"], rel=1e-12)} for w in want], before


async def test_bars_cut_by_trade_id_inside_one_millisecond(store: TradeStore) -> None:
    """One order sweeping a book makes many trades in one millisecond: `before` cuts between them,
    where no time can."""
    sweep = [trade(i, price=100 + i, qty=i, ts=T0 + 7) for i in range(1, 101)]
    await store.insert([trade(1000, price=1, ts=T0 + 8)] + sweep)  # a later trade the cuts leave out
    for before in (2, 51, 100, 101):
        [bar] = await store.bars("ACME", MINUTE, T0, T0 + MINUTE, before=before)
        assert bar == {"t": T0, "open": 101, "high": 100 + before - 1, "low": 101, "close": 100 + before - 1,
                       "volume": sum(range(before)), "vwap": pytest.approx(
                           sum((100 + i) * i for i in range(1, before)) / sum(range(before)))}
    assert await store.bars("ACME", MINUTE, T0, T0 + MINUTE, before=1) == []
    assert (await store.bars("ACME", MINUTE, T0, T0 + 8, before=1001))[0]["volume"] == sum(range(101))


async def test_bars_at_bucket_edges(store: TradeStore) -> None:
    await store.insert([
        trade(1, price=100, qty=1, ts=T0),                   # first millisecond of bucket 0
        trade(2, price=300, qty=3, ts=T0 + MINUTE - 1),      # last millisecond of bucket 0
        trade(3, price=200, qty=2, ts=T0 + MINUTE),          # first millisecond of bucket 1
        trade(4, price=50, qty=1, ts=T0 + MINUTE + 10),
        trade(5, price=400, qty=4, ts=T0 + 3 * MINUTE),      # after an empty bucket
    ])
    bars = await store.bars("ACME", MINUTE, T0, T0 + 4 * MINUTE)
    assert bars == [
        {"t": T0, "open": 100, "high": 300, "low": 100, "close": 300, "volume": 4, "vwap": 250.0},
        {"t": T0 + MINUTE, "open": 200, "high": 200, "low": 50, "close": 50, "volume": 3, "vwap": 150.0},
        {"t": T0 + 3 * MINUTE, "open": 400, "high": 400, "low": 400, "close": 400, "volume": 4, "vwap": 400.0},
    ]
    assert isinstance(bars[0]["vwap"], float)
    # `to` is exclusive, `from` inclusive; a `from` inside a bucket keeps only the trades from it on.
    assert [b["t"] for b in await store.bars("ACME", MINUTE, T0, T0 + MINUTE)] == [T0]
    assert (await store.bars("ACME", MINUTE, T0 + MINUTE - 1, T0 + MINUTE))[0]["open"] == 300
    assert await store.bars("ACME", MINUTE, T0 + 2 * MINUTE, T0 + 3 * MINUTE) == []
    five = await store.bars("ACME", 5 * MINUTE, T0, T0 + HOUR)
    assert five == [{"t": T0, "open": 100, "high": 400, "low": 50, "close": 400, "volume": 11,
                     "vwap": (100 + 900 + 400 + 50 + 1600) / 11}]


async def test_bars_open_and_close_follow_trade_id_not_time(store: TradeStore) -> None:
    await store.insert([trade(1, price=10, ts=T0 + 500), trade(2, price=20, ts=T0 + 100),
                        trade(3, price=30, ts=T0 + 900), trade(4, price=40, ts=T0 + 200)])
    [bar] = await store.bars("ACME", MINUTE, T0, T0 + MINUTE)
    assert (bar["open"], bar["close"]) == (10, 40)


async def test_bars_of_empty_and_backwards_ranges(store: TradeStore) -> None:
    await store.insert([trade(1, ts=T0 + 10)])
    assert await store.bars("ACME", MINUTE, T0 + 10, T0 + 10) == []
    assert await store.bars("ACME", MINUTE, T0 + MINUTE, T0) == []
    assert await store.bars("BOLT", MINUTE, T0, T0 + HOUR) == []
    with pytest.raises(ValueError, match="interval"):
        await store.bars("ACME", 0, T0, T0 + HOUR)


async def test_bars_vwap_does_not_overflow(store: TradeStore) -> None:
    big = 1_000_000_000  # MAX_PRICE and MAX_QTY: ten such trades overflow a 64-bit sum
    await store.insert([trade(i, price=big, qty=big, ts=T0 + i) for i in range(1, 11)])
    [bar] = await store.bars("ACME", MINUTE, T0, T0 + MINUTE)
    assert bar["volume"] == 10 * big and bar["vwap"] == float(big)


async def test_reopening_the_file_keeps_everything(tmp_path: Path) -> None:
    path = str(tmp_path / "trades.db")
    trades = random_trades(random.Random(5), 400, ("ACME", "BOLT"), HOUR)
    store = await TradeStore.open(path)
    await store.insert(trades[:300])
    before = (await store.trades(None, 0, 1000), await store.bars("ACME", MINUTE, T0, T0 + 2 * HOUR))
    await store.close()

    store = await TradeStore.open(path)
    try:
        assert await store.count() == 300
        assert await store.max_trade_id() == 300
        assert (await store.trades(None, 0, 1000), await store.bars("ACME", MINUTE, T0, T0 + 2 * HOUR)) == before
        await store.insert(trades)  # a replay after restart: only the missing ones are added
        assert await store.count() == 400
        assert await store.trades(None, 0, 1000) == [wire(t) for t in trades]
    finally:
        await store.close()


async def test_concurrent_inserts_and_reads(store: TradeStore) -> None:
    trades = [trade(i, ts=T0 + i) for i in range(1, 2001)]
    batches = [trades[i:i + 100] for i in range(0, len(trades), 100)]
    reads = [store.trades("ACME", 0, 1000) for _ in range(10)]
    await asyncio.gather(*(store.insert(b) for b in batches), *reads)
    assert await store.count() == 2000
    assert await store.max_trade_id() == 2000


async def test_a_failed_insert_stores_nothing_and_spares_the_one_beside_it(store: TradeStore) -> None:
    good = [trade(i) for i in range(1, 51)]
    broken = [trade(i) for i in range(51, 60)] + [trade(60, price=object())]  # type: ignore[arg-type]
    results = await asyncio.gather(store.insert(good), store.insert(broken), return_exceptions=True)
    # Row by row, SQLite refuses the bad value mid-batch; in one statement, encoding the batch does.
    assert results[0] is None and isinstance(results[1], (sqlite3.Error, TypeError))
    await store.insert([trade(100)])  # the next commit must not carry the broken batch's first rows
    assert await store.count() == 51
    assert [t["tradeId"] for t in await store.trades(None, 49, 10)] == [50, 100]


async def test_queries_use_the_indexes(store: TradeStore, tmp_path: Path) -> None:
    """The speed contract: bars read only the covering index; symbol pages and snapshots never sort."""
    path = tmp_path / "trades.db"

    def plan(sql: str, params: Any) -> str:
        with sqlite3.connect(path) as db:
            return " | ".join(row[-1] for row in db.execute("EXPLAIN QUERY PLAN " + sql, params))

    window = {"symbol": "ACME", "interval": MINUTE, "from": T0, "to": T0 + HOUR}
    for bars in (plan(BARS_SQL, window), plan(BARS_BEFORE_SQL, {**window, "before": 50})):
        assert "COVERING INDEX trades_symbol_ts (symbol=? AND ts>? AND ts<?)" in bars
        assert "SCAN trades" not in bars
    pages = [(sql, ("ACME", 0, 99, 10) if by_symbol else (0, 99, 10)) for (by_symbol, _), sql in TRADES_SQL.items()]
    for sql, params in pages:  # the snapshot's recent trades are the newest-first page
        p = plan(sql, params)
        assert "TEMP B-TREE" not in p and "SCAN" not in p, p


def test_a_store_left_open_does_not_keep_the_process_alive(tmp_path: Path) -> None:
    # A start that fails half-way, or a failing test, may never reach close(), and something (a
    # traceback, a fixture) may still hold the store when the interpreter exits: the process must
    # exit all the same, and what it inserted is there for the next open.
    script = (
        "import asyncio, sys\n"
        "from tickflow.store.trades import TradeStore\n"
        "from tickflow.core.types import Trade\n"
        "held = []\n"
        "async def main():\n"
        "    held.append(await TradeStore.open(sys.argv[1]))\n"
        "    await held[0].insert([Trade(1, 'ACME', 100, 5, 1, 2, 'a', 'b', 'buy', 3, 1_700_000_000_000)])\n"
        "asyncio.run(main())\n"
    )
    path = tmp_path / "trades.sqlite"
    done = subprocess.run([sys.executable, "-c", script, str(path)], timeout=30, capture_output=True)
    assert done.returncode == 0, done.stderr

    async def count() -> int:
        store = await TradeStore.open(str(path))
        try:
            return await store.count()
        finally:
            await store.close()

    assert asyncio.run(count()) == 1


async def test_a_store_cut_short_is_refused_at_the_open_and_a_sound_one_passes_the_full_check(tmp_path: Path) -> None:
    from tickflow.store.trades import open_for_check, quick_check

    path = tmp_path / "trades.sqlite"
    store = await TradeStore.open(str(path))
    await store.insert([trade(i) for i in range(1, 3001)])
    await store.close()
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    db = open_for_check(str(path))
    try:
        assert quick_check(db) is None
    finally:
        db.close()
    whole = path.read_bytes()
    path.write_bytes(whole[:-4096])  # a copy that stopped short of its last page: the header is whole
    with pytest.raises(sqlite3.DatabaseError) as refused:
        await TradeStore.open(str(path))
    assert refused.value.sqlite_errorname == "SQLITE_CORRUPT"  # what a start sets aside as damaged


async def test_the_count_a_start_reads_stays_exact_through_every_write_and_a_hand_edit(tmp_path: Path) -> None:
    """A start reads how many trades are stored (a store with fewer rows than its highest id has holes, and
    every trade is offered again) from a count the database keeps, not by counting the rows."""
    path = tmp_path / "trades.sqlite"
    store = await TradeStore.open(str(path))
    try:
        await store.insert([trade(i) for i in range(1, 11)])
        await store.insert([trade(i) for i in range(5, 16)])  # 5-10 again: skipped, not counted twice
        assert await store.count() == 15
        assert await store.delete_after(12) == 3
        assert await store.count() == 12
    finally:
        await store.close()
    with sqlite3.connect(path) as db:  # an operator's hand edit
        db.execute("DELETE FROM trades WHERE trade_id IN (3, 4)")
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT COUNT(*) FROM trades").fetchone()[0]
    store = await TradeStore.open(str(path))
    try:
        assert await store.count() == rows == 10 and await store.max_trade_id() == 12  # the holes show
    finally:
        await store.close()


async def test_a_store_made_before_the_count_is_counted_once_at_the_open(tmp_path: Path) -> None:
    path = tmp_path / "trades.sqlite"
    store = await TradeStore.open(str(path))
    await store.insert([trade(i) for i in range(1, 8)])
    await store.close()
    with sqlite3.connect(path) as db:  # as an older tickflow left it
        db.executescript("DROP TRIGGER trades_counted_in; DROP TRIGGER trades_counted_out; DROP TABLE counts;")
    store = await TradeStore.open(str(path))
    try:
        assert await store.count() == 7
        await store.insert([trade(8)])
        assert await store.count() == 8
    finally:
        await store.close()
