"""SQL bars: minute OHLC and VWAP for one symbol over 1M trades, with and without the index.

    .venv/bin/python bench/bench_bars.py [--trades N] [--repeats R] [--json]

Builds a day of synthetic trades (four symbols, ACME among them, random-walk prices, seeded) through
TradeStore.insert in 256-trade transactions, the sequencer's batch size, into a temporary file. Then
times the shipped bars query (tickflow.store.trades.BARS_SQL) for the last hour and the whole day with
stdlib sqlite3: with the shipped covering index, with a bare (symbol, ts) index, and with no index;
the same for a FIRST_VALUE/LAST_VALUE window-function query, the obvious alternative, which must return
identical rows. Each figure is the median of R runs after one untimed warm-up run. Last, the same
bars through TradeStore (aiosqlite), which is what the server pays, and the CPU a trade costs to insert
through TradeStore by how many trades share a commit (80, 400, 1600; 64 accounts, as the end-to-end
benchmark's clients), which is what the trade writer's linger buys.

Seed (C#): last hour 16.3 ms with the index, 82.2 ms without; "a full day: 1.1x", read here as the
index's speed-up for a whole day (a day's bars read a quarter of the table, so an index helps little).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from typing import Any, Awaitable, Callable

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tickflow.core.types import Trade  # noqa: E402
from tickflow.store.trades import BARS_SQL, CREATE_INDEXES, DROP_INDEXES, TradeStore  # noqa: E402

SYMBOLS = ("ACME", "BOLT", "CORE", "DYNE")
T0 = 1_764_633_600_000
DAY = 86_400_000
HOUR = 3_600_000
MINUTE = 60_000
COMMIT_SIZES = (80, 400, 1600)
BATCH = 256
SEED_MS = {"hour_index": 16.3, "hour_no_index": 82.2, "day_ratio": 1.1}

# The textbook form: open and close by window functions over each bucket, ordered by trade id.
BARS_WINDOW_SQL = """
SELECT t, MIN(open), MAX(price), MIN(price), MIN(close), SUM(qty), CAST(SUM(price * qty) AS REAL) / SUM(qty)
FROM (
    SELECT ts - ts % :interval AS t, price, qty,
           FIRST_VALUE(price) OVER bucket AS open, LAST_VALUE(price) OVER bucket AS close
    FROM trades
    WHERE symbol = :symbol AND ts >= :from AND ts < :to
    WINDOW bucket AS (PARTITION BY ts - ts % :interval ORDER BY trade_id
                      ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
)
GROUP BY t
ORDER BY t"""

QUERIES = {"aggregate + PK lookup (shipped)": BARS_SQL, "window functions": BARS_WINDOW_SQL}
INDEXES: dict[str, tuple[str, ...]] = {
    "(symbol, ts, price, qty) (shipped)": CREATE_INDEXES,
    "(symbol, ts)": ("CREATE INDEX trades_symbol_ts ON trades (symbol, ts)",),
    "none": (),
}


def synthetic_trades(n: int, seed: int = 42, accounts: int = 16) -> list[Trade]:
    """n trades spread evenly over one day (time never runs backwards, as in the log), among `accounts`."""
    rng = random.Random(seed)
    prices = dict.fromkeys(SYMBOLS, 10_000)
    trades = []
    for trade_id in range(1, n + 1):
        symbol = rng.choice(SYMBOLS)
        prices[symbol] = max(1, prices[symbol] + rng.randint(-3, 3))
        buy = rng.random() < 0.5
        trades.append(Trade(trade_id, symbol, prices[symbol], rng.randint(1, 100), 2 * trade_id,
                            2 * trade_id + 1, f"acct{trade_id % accounts}", f"acct{(trade_id + 1) % accounts}",
                            "buy" if buy else "sell", trade_id, T0 + (trade_id - 1) * DAY // n))
    return trades


def median_ms(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    result = fn()  # warm-up, untimed: steady state, not the first read of a fresh connection
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1000, result


async def build(path: str, trades: list[Trade], size: int = BATCH) -> tuple[float, float]:
    """Insert `trades` through TradeStore in commits of `size`: wall seconds, and CPU seconds of this
    process (all threads, SQLite's among them)."""
    store = await TradeStore.open(path)
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(0, len(trades), size):
            await store.insert(trades[i:i + size])
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await store.close()


def commit_costs(tmp: str, n: int = 40_000, seed: int = 42) -> dict[str, float]:
    """CPU microseconds a trade costs SQLite by how many share a commit (the trade writer's linger sets
    that): the server's load has 64 accounts, so every commit rewrites up to 64 pages of each account index."""
    trades = synthetic_trades(n, seed, accounts=64)
    costs = {}
    for size in COMMIT_SIZES:
        _, cpu = asyncio.run(build(os.path.join(tmp, f"commits-{size}.db"), trades, size))
        costs[str(size)] = round(cpu / n * 1e6, 1)
    return costs


async def through_store(
    path: str, ranges: dict[str, dict[str, Any]], page_after: int, repeats: int
) -> dict[str, float]:
    """What the server pays: the same bars, a /trades page and a snapshot's trades via aiosqlite."""
    store = await TradeStore.open(path)
    try:
        calls: dict[str, Callable[[], Awaitable[Any]]] = {
            name: lambda p=p: store.bars(p["symbol"], p["interval"], p["from"], p["to"]) for name, p in ranges.items()
        }
        calls["trades_page"] = lambda: store.trades("ACME", page_after, 100)
        calls["recent_50"] = lambda: store.recent("ACME", 50)
        out = {}
        for name, call in calls.items():
            await call()  # warm-up, untimed
            times = []
            for _ in range(repeats):
                started = time.perf_counter()
                await call()
                times.append(time.perf_counter() - started)
            out[name] = statistics.median(times) * 1000
        return out
    finally:
        await store.close()


def run(n: int = 1_000_000, repeats: int = 5, seed: int = 42) -> dict:
    trades = synthetic_trades(n, seed)
    ranges = {
        "hour": {"symbol": "ACME", "interval": MINUTE, "from": T0 + DAY - HOUR, "to": T0 + DAY},
        "day": {"symbol": "ACME", "interval": MINUTE, "from": T0, "to": T0 + DAY},
    }
    in_range = {name: sum(1 for t in trades if t.symbol == "ACME" and p["from"] <= t.ts < p["to"])
                for name, p in ranges.items()}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trades.db")
        insert_rate = len(trades) / asyncio.run(build(path, trades))[0]
        del trades
        size = sum(os.path.getsize(os.path.join(tmp, f)) for f in os.listdir(tmp))
        results: list[dict[str, Any]] = []
        reference: dict[str, list] = {}
        db = sqlite3.connect(path)
        try:
            for index, creates in INDEXES.items():
                for sql in DROP_INDEXES:
                    db.execute(sql)
                for sql in creates:
                    db.execute(sql)
                db.commit()
                for query, sql in QUERIES.items():
                    row: dict[str, Any] = {"query": query, "index": index}
                    for name, p in ranges.items():
                        ms, bars = median_ms(lambda: db.execute(sql, p).fetchall(), repeats)
                        # Every variant must give the very same bars, or its time means nothing.
                        assert bars == reference.setdefault(name, bars), (query, index, name)
                        row[f"{name}_ms"] = round(ms, 2)
                    results.append(row)
            for sql in DROP_INDEXES:
                db.execute(sql)
            for sql in CREATE_INDEXES:
                db.execute(sql)
            db.commit()
        finally:
            db.close()
        store_ms = asyncio.run(through_store(path, ranges, n // 2, repeats))
        per_trade = commit_costs(tmp)

    def pick(query: str, index: str, name: str) -> float:
        return next(r[f"{name}_ms"] for r in results if r["query"].startswith(query) and r["index"].startswith(index))

    shipped = {name: pick("aggregate", "(symbol, ts, price", name) for name in ranges}
    bare = {name: pick("aggregate", "none", name) for name in ranges}
    return {
        "trades": n,
        "acme_trades": {name: in_range[name] for name in ranges},
        "bars": {name: len(reference[name]) for name in ranges},
        "insert_trades_per_s": round(insert_rate),
        "file_bytes": size,
        "repeats": repeats,
        "results": results,
        "hour_ms_with_index": shipped["hour"],
        "hour_ms_without_index": bare["hour"],
        "day_ms_with_index": shipped["day"],
        "day_ms_without_index": bare["day"],
        "hour_speedup": round(bare["hour"] / shipped["hour"], 1),
        "day_speedup": round(bare["day"] / shipped["day"], 1),
        "through_trade_store_ms": {k: round(v, 2) for k, v in store_ms.items()},
        "insert_cpu_us_per_trade_by_commit": per_trade,
        "seed": SEED_MS,
        "sqlite_version": sqlite3.sqlite_version,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trades", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    r = run(args.trades, args.repeats)
    if args.json:
        print(json.dumps(r))
        return
    print(f"{r['trades']:,} trades over one day, SQLite {r['sqlite_version']}, file {r['file_bytes'] / 1e6:.0f} MB; "
          f"built through TradeStore.insert at {r['insert_trades_per_s']:,} trades/s ({BATCH} per transaction)")
    print(f"ACME minute bars: last hour {r['acme_trades']['hour']:,} trades -> {r['bars']['hour']} bars, "
          f"full day {r['acme_trades']['day']:,} trades -> {r['bars']['day']} bars; median of {r['repeats']} runs")
    print()
    print(f"{'query':34} {'index':36} {'last hour':>10} {'full day':>10}")
    for row in r["results"]:
        print(f"{row['query']:34} {row['index']:36} {row['hour_ms']:>7.1f} ms {row['day_ms']:>7.1f} ms")
    s = r["through_trade_store_ms"]
    print(f"{'shipped, through TradeStore.bars':71} {s['hour']:>7.1f} ms {s['day']:>7.1f} ms")
    print(f"TradeStore.trades('ACME', after, 100): {s['trades_page']:.2f} ms; "
          f"recent('ACME', 50): {s['recent_50']:.2f} ms")
    print("CPU per trade inserted through TradeStore, 64 accounts, by trades per commit: " + ", ".join(
        f"{size}: {us} us" for size, us in r["insert_cpu_us_per_trade_by_commit"].items()))
    print()
    seed = r["seed"]
    print(f"seed (C#): Last hour: {seed['hour_index']} ms with the index, {seed['hour_no_index']} ms without. "
          f"A full day: {seed['day_ratio']}x.")
    print(f"tickflow:  Last hour: {r['hour_ms_with_index']:.1f} ms with the index, "
          f"{r['hour_ms_without_index']:.1f} ms without ({r['hour_speedup']}x). "
          f"A full day: {r['day_ms_with_index']:.0f} ms with, {r['day_ms_without_index']:.0f} ms without "
          f"({r['day_speedup']}x).")


if __name__ == "__main__":
    main()
