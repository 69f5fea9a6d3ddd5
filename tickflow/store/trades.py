"""The SQLite history store: every trade, paged in trade-id order, and OHLC/VWAP bars computed in SQL; and
every finished order's final state (the engine keeps only live orders; `GET /orders/{id}` of a finished
one reads it here).

SQLite is a copy, not the source of truth: trades and finished orders are re-derived from the log on
replay, so inserts are idempotent (on trade_id, order_id) and `synchronous=NORMAL` is enough (a power cut
can lose the last commits, which the next replay puts back, as long as the log segments holding them are
there: `sync_files` makes the commits durable before a snapshot lets those segments go). Trades need no
watermark (their ids run 1, 2, 3, ...); finished orders have one, `orders_seq`: every order closed by a
record up to it is here. It is written in the same transaction as the rows it covers.

The SQL lives in module constants so the benchmark runs exactly these statements with stdlib sqlite3.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import time
from pathlib import Path
from typing import Any, AsyncIterator, Final

import aiosqlite
import msgspec

from tickflow.core.types import OrderState, Trade
from tickflow.store.datadir import sync_dir

CREATE_TABLE: Final = """
CREATE TABLE IF NOT EXISTS trades (
    trade_id      INTEGER PRIMARY KEY,
    symbol        TEXT    NOT NULL,
    price         INTEGER NOT NULL,
    qty           INTEGER NOT NULL,
    buy_order_id  INTEGER NOT NULL,
    sell_order_id INTEGER NOT NULL,
    buy_account   TEXT    NOT NULL,
    sell_account  TEXT    NOT NULL,
    aggressor     TEXT    NOT NULL,
    seq           INTEGER NOT NULL,
    ts            INTEGER NOT NULL
)"""

BARS_INDEX: Final = "trades_symbol_ts"
SYMBOL_INDEX: Final = "trades_symbol"
CREATE_INDEXES: Final = (
    # (symbol, ts) finds a bar range; price and qty ride along so bars never read the table itself
    # (the rowid, trade_id, is in every index already). Same insert cost as a bare (symbol, ts).
    f"CREATE INDEX IF NOT EXISTS {BARS_INDEX} ON trades (symbol, ts, price, qty)",
    # Really (symbol, trade_id): paging and snapshots of one symbol in trade-id order without a sort.
    # (symbol, ts) cannot serve them: it would sort every trade of the symbol to return 100.
    f"CREATE INDEX IF NOT EXISTS {SYMBOL_INDEX} ON trades (symbol)",
)
ACCOUNT_INDEXES: Final = (
    # Really (account, trade_id) for each side: an account's fills from a trade id on, in order.
    "CREATE INDEX IF NOT EXISTS trades_buy_account ON trades (buy_account)",
    "CREATE INDEX IF NOT EXISTS trades_sell_account ON trades (sell_account)",
)
DROP_INDEXES: Final = (f"DROP INDEX IF EXISTS {BARS_INDEX}", f"DROP INDEX IF EXISTS {SYMBOL_INDEX}")

INSERT_SQL: Final = """
INSERT OR IGNORE INTO trades (trade_id, symbol, price, qty, buy_order_id, sell_order_id,
                              buy_account, sell_account, aggressor, seq, ts)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"""

# A whole batch in one statement: the rows arrive as one JSON array of trades (their wire form) and
# SQLite unpacks it itself. executemany binds every row holding the GIL and releases it around every
# step, so under load, with the event loop holding the GIL, the SQLite thread queues for it twice per
# row and slows the loop; one statement takes the GIL once per batch, for a little more work in
# SQLite's own thread (docs/decisions.md, "One INSERT per batch").
INSERT_JSON_SQL: Final = """
INSERT OR IGNORE INTO trades (trade_id, symbol, price, qty, buy_order_id, sell_order_id,
                              buy_account, sell_account, aggressor, seq, ts)
SELECT json_extract(value, '$.tradeId'), json_extract(value, '$.symbol'), json_extract(value, '$.price'),
       json_extract(value, '$.qty'), json_extract(value, '$.buyOrderId'), json_extract(value, '$.sellOrderId'),
       json_extract(value, '$.buyAccount'), json_extract(value, '$.sellAccount'),
       json_extract(value, '$.aggressor'), json_extract(value, '$.seq'), json_extract(value, '$.ts')
FROM json_each(?)"""

_WIRE_COLUMNS: Final = "trade_id, symbol, price, qty, buy_order_id, sell_order_id, aggressor, seq, ts"
WIRE_KEYS: Final = ("tradeId", "symbol", "price", "qty", "buyOrderId", "sellOrderId", "aggressor", "seq", "ts")

TRADES_SQL: Final = {
    (by_symbol, order): f"SELECT {_WIRE_COLUMNS} FROM trades WHERE {'symbol = ? AND ' if by_symbol else ''}"
                        f"trade_id > ? AND trade_id < ? ORDER BY trade_id {order} LIMIT ?"
    for by_symbol in (False, True) for order in ("ASC", "DESC")
}
"""(by symbol?, ASC or DESC) -> a range of trades by id; each walks the primary key from its start."""

# One pass over the covering index groups trades by bucket; open and close are the prices of the
# bucket's lowest and highest trade_id, fetched by primary key (two lookups per bar, not per trade).
# FIRST_VALUE/LAST_VALUE window functions give the same rows more slowly (bench/bench_bars.py measures
# both): they add a second sort and per-row window steps on top of the GROUP BY.
# TOTAL, not SUM, for price * qty: it cannot overflow (SUM raises), and is exact below 2**53.
_BARS_TEMPLATE: Final = """
SELECT t,
       (SELECT price FROM trades WHERE trade_id = first_id) AS open,
       high, low,
       (SELECT price FROM trades WHERE trade_id = last_id) AS close,
       volume, vwap
FROM (
    SELECT ts - ts % :interval AS t,
           MIN(trade_id) AS first_id, MAX(trade_id) AS last_id,
           MAX(price) AS high, MIN(price) AS low,
           SUM(qty) AS volume, TOTAL(price * qty) / SUM(qty) AS vwap
    FROM trades
    WHERE symbol = :symbol AND ts >= :from AND ts < :to{cut}
    GROUP BY t
)
ORDER BY t"""
BARS_SQL: Final = _BARS_TEMPLATE.format(cut="")
# The same over the trades with ids below :before only, so a client's bars end exactly at a trade it
# holds (many trades can share its millisecond). The trade id is the rowid, which every index entry
# holds: the cut is checked in the same covering-index pass, never by reading the table.
BARS_BEFORE_SQL: Final = _BARS_TEMPLATE.format(cut=" AND trade_id < :before")
BAR_KEYS: Final = ("t", "open", "high", "low", "close", "volume", "vwap")

# An account's side of its trades. Self-trades cannot happen, so each trade is the account's on one side
# only; each branch walks its index from :after and stops at :limit rows, then the two are merged.
_FILL_BRANCH: Final = """
    SELECT * FROM (
        SELECT trade_id, symbol, {side}_order_id, '{side}', price, qty,
               CASE aggressor WHEN '{side}' THEN 'taker' ELSE 'maker' END, seq, ts
        FROM trades
        WHERE {side}_account = :account AND trade_id > :after AND trade_id < :before{symbol}
        ORDER BY trade_id {order} LIMIT :limit)"""
FILLS_SQL: Final = {
    (by_symbol, order): _FILL_BRANCH.format(side="buy", order=order, symbol=" AND symbol = :symbol" * by_symbol)
    + "\n    UNION ALL"
    + _FILL_BRANCH.format(side="sell", order=order, symbol=" AND symbol = :symbol" * by_symbol)
    + f"\nORDER BY 1 {order} LIMIT :limit"
    for by_symbol in (False, True) for order in ("ASC", "DESC")
}
"""(by symbol?, ASC or DESC) -> an account's fills with after < trade id < before."""
FILL_KEYS: Final = ("tradeId", "symbol", "orderId", "side", "price", "qty", "liquidity", "seq", "ts")

CREATE_ORDERS: Final = """
CREATE TABLE IF NOT EXISTS orders (
    order_id INTEGER PRIMARY KEY,
    seq      INTEGER NOT NULL,
    state    BLOB    NOT NULL
)"""
"""A finished order's final state as one msgpack blob: it is only ever read whole, by id, and a row of three
values costs the writer thread a fraction of sixteen columns (every order finishes, so every order is a row)."""
CREATE_WATERMARKS: Final = "CREATE TABLE IF NOT EXISTS watermarks (name TEXT PRIMARY KEY, seq INTEGER NOT NULL)"
# A finished order never changes again, so a second insert (a replay) writes the same row.
INSERT_ORDERS_SQL: Final = "INSERT OR REPLACE INTO orders (order_id, seq, state) VALUES (?, ?, ?)"
ORDERS_SQL: Final = "SELECT state FROM orders WHERE order_id IN ({marks})"
MAX_ORDERS_READ: Final = 256
"""Ids per read of `orders` (a batch's ops at most)."""
ORDERS_SEQ_SQL: Final = "SELECT COALESCE(MAX(seq), 0) FROM watermarks WHERE name = 'orders'"
SET_ORDERS_SEQ_SQL: Final = "INSERT OR REPLACE INTO watermarks (name, seq) VALUES ('orders', ?)"

CREATE_GAPS: Final = """
CREATE TABLE IF NOT EXISTS history_gaps (
    trades_after INTEGER NOT NULL,
    trades_upto  INTEGER NOT NULL,
    orders_after INTEGER NOT NULL,
    orders_upto  INTEGER NOT NULL,
    snapshot     TEXT    NOT NULL,
    accepted_ms  INTEGER NOT NULL
)"""
"""History a start was told to go on without (`serve --accept-history-gap`): the trades with ids in
(trades_after, trades_upto] and the orders finished by records in (orders_after, orders_upto] are not here."""
INSERT_GAP_SQL: Final = "INSERT INTO history_gaps VALUES (?, ?, ?, ?, ?, ?)"
MISSING_TRADES_SQL: Final = "SELECT COALESCE(SUM(trades_upto - trades_after), 0) FROM history_gaps"

COUNT_SQL: Final = "SELECT n FROM counts WHERE name = 'trades'"
CREATE_COUNTS: Final = (
    "CREATE TABLE IF NOT EXISTS counts (name TEXT PRIMARY KEY, n INTEGER NOT NULL)",
    # Kept by the database itself, so that any write (a hand edit too) keeps it exact: a start reads it
    # rather than counting the rows, which would grow with the history.
    "CREATE TRIGGER IF NOT EXISTS trades_counted_in AFTER INSERT ON trades "
    "BEGIN UPDATE counts SET n = n + 1 WHERE name = 'trades'; END",
    "CREATE TRIGGER IF NOT EXISTS trades_counted_out AFTER DELETE ON trades "
    "BEGIN UPDATE counts SET n = n - 1 WHERE name = 'trades'; END",
)
"""The rows of `trades`, counted as they come and go (a store made before the count is counted once, at open)."""
COUNT_ONCE_SQL: Final = "INSERT INTO counts (name, n) SELECT 'trades', COUNT(*) FROM trades"
MAX_TRADE_ID_SQL: Final = "SELECT COALESCE(MAX(trade_id), 0) FROM trades"


def _connect(path: str) -> aiosqlite.Connection:
    """An aiosqlite connection whose worker thread does not keep the process alive.

    aiosqlite (since 0.22) runs each connection on a non-daemon thread, so a store left open by a
    path that failed (a crashed start, a failing test) would hang the interpreter at exit. The store
    only mirrors the log: an insert cut short by the exit is rolled back by SQLite at the next open,
    and the next start inserts it again from the log. Every normal path still closes the store."""
    connection = aiosqlite.connect(path)
    thread = getattr(connection, "_thread", None)
    if thread is not None:
        thread.daemon = True
    return connection


QUICK_CHECK_SQL: Final = "PRAGMA quick_check(1)"


def whole_upto(highest: int, count: int, in_gaps: int) -> int:
    """The trade id up to which a store is whole: its highest, unless it holds fewer rows than that (trade ids
    run 1, 2, 3, ...: a failed write or a hand edit left holes), then 0, so every trade is offered again.
    Trades in accepted history gaps are no hole (>=: a gap accepted over a store that had holes counts
    some ids twice)."""
    return highest if count + in_gaps >= highest else 0


def sync_files(path: str) -> None:
    """Make every commit the store has made durable: fsync its `-wal` (the commits since the last
    checkpoint; synchronous=NORMAL leaves them to the page cache), the file itself (the pages a
    checkpoint copied in), and their directory (a `-wal` made since the last sync is only an entry in
    it). Blocking: run it in a thread. OSError if a sync fails."""
    for part in (f"{path}-wal", path):
        try:
            fd = os.open(part, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:  # no -wal: every commit is checkpointed into the file
            continue
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    sync_dir(Path(path).absolute().parent)


def open_for_check(path: str) -> sqlite3.Connection:
    """A read-only connection for `quick_check`, usable from another thread (to interrupt it)."""
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)


def quick_check(db: sqlite3.Connection) -> str | None:
    """What SQLite's quick_check finds wrong with the database of `db` (its first problem), or None when it
    is sound. It reads every page, so its time grows with the file: run it off the start's path."""
    rows = db.execute(QUICK_CHECK_SQL).fetchall()
    return None if [tuple(r) for r in rows] == [("ok",)] else str(rows[0][0])


_encode_state = msgspec.msgpack.Encoder().encode
_decode_state = msgspec.msgpack.Decoder(OrderState).decode


def order_row(o: OrderState) -> tuple[int, int, bytes]:
    """A finished order's row: its id, the seq that finished it, and its state without the fills of the
    command that finished it (a state, not an answer)."""
    return o.order_id, o.seq, _encode_state(msgspec.structs.replace(o, fills=[]) if o.fills else o)


class TradeStore:
    """Trades in one SQLite file: a writer connection and a reader, each on its own thread.

    Two connections so a long read (a day of bars) never holds up inserts; WAL lets them overlap.
    """

    def __init__(self, write: aiosqlite.Connection, read: aiosqlite.Connection, json1: bool = True) -> None:
        self._write = write
        self._read = read
        self._json1 = json1
        """SQLite has its JSON functions (built in since 3.38, and in most older builds): one statement per batch."""
        self._insert_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str, *, full_check: bool = False) -> TradeStore:
        """Open (or create) the store; sqlite3.DatabaseError if the file is not a sound SQLite database.

        Only what costs the same for any size of file is checked here (the header, the schema, and, by
        SQLite itself, the file's length against its page count); `full_check` adds `PRAGMA quick_check`,
        which reads every page and so grows with the history: a running server does it in the background
        (`quick_check`)."""
        if path != ":memory:" and not os.path.lexists(path):
            # Made here, only its owner's (SQLite would make it 0644, and its -wal and -shm take its mode):
            # every account's trades are in it. Anything wrong with the place is for SQLite to say.
            with contextlib.suppress(OSError):
                os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        write = await _connect(path)
        try:
            if full_check:
                rows = await write.execute_fetchall(QUICK_CHECK_SQL)
                if [tuple(r) for r in rows] != [("ok",)]:
                    raise sqlite3.DatabaseError(f"integrity check: {list(rows)[0][0]}")
            else:
                # Reads the header and the schema; SQLite refuses here a file shorter than its header's page
                # count (a copy cut short) as malformed.
                await write.execute_fetchall("SELECT COUNT(*) FROM sqlite_master")
            await write.execute("PRAGMA journal_mode=WAL")
            await write.execute("PRAGMA synchronous=NORMAL")
            # A batch is one multi-row INSERT, so SQLite keeps a statement journal of every page it
            # changes (the original, to undo the statement alone); in a temporary file that cost a
            # third of each insert's time. Its size is bounded by the pages one batch touches.
            await write.execute("PRAGMA temp_store=MEMORY")
            await write.execute(CREATE_TABLE)
            await write.execute(CREATE_ORDERS)
            await write.execute(CREATE_WATERMARKS)
            for sql in CREATE_COUNTS:  # the triggers before the count, so no row is missed
                await write.execute(sql)
            if not await write.execute_fetchall(COUNT_SQL):
                await write.execute(COUNT_ONCE_SQL)
            await write.execute(CREATE_GAPS)
            for sql in (*CREATE_INDEXES, *ACCOUNT_INDEXES):
                await write.execute(sql)
            await write.commit()
            try:
                await write.execute_fetchall("SELECT json_extract('[1]', '$[0]')")
                json1 = True
            except aiosqlite.OperationalError:
                json1 = False
            # An in-memory database is private to its connection, so it has to read through the writer.
            read = write if path == ":memory:" else await _connect(path)
        except BaseException:
            await write.close()
            raise
        return cls(write, read, json1)

    async def max_trade_id(self) -> int:
        rows = await self._read.execute_fetchall(MAX_TRADE_ID_SQL)
        return int(next(iter(rows))[0])

    async def count(self) -> int:
        """The trades stored (kept by triggers: no scan)."""
        rows = await self._read.execute_fetchall(COUNT_SQL)
        return int(next(iter(rows))[0])

    @contextlib.asynccontextmanager
    async def _writing(self) -> AsyncIterator[aiosqlite.Connection]:
        """One write transaction: committed if the block ends normally, rolled back otherwise."""
        # Without the lock two writers would share the connection's open transaction: one's commit
        # would commit the other's half, and one's rollback would undo the other's rows.
        async with self._insert_lock:
            try:
                yield self._write
                await self._write.commit()
            except BaseException:
                await self._write.rollback()
                raise

    async def delete_after(self, trade_id: int) -> int:
        """Remove trades with ids above `trade_id` (the log, which is the truth, ends there); how many."""
        async with self._writing() as db:
            cursor = await db.execute("DELETE FROM trades WHERE trade_id > ?", (trade_id,))
        return cursor.rowcount

    async def insert(self, trades: list[Trade], orders: list[OrderState] | None = None,
                     orders_seq: int | None = None) -> None:
        """Store `trades` and finished `orders` in one transaction, and with `orders_seq` say that every
        order closed by a record up to that seq is stored. Trade ids already stored are skipped, orders
        already stored written again (replays insert again)."""
        if not trades and not orders and orders_seq is None:
            return
        async with self._writing() as db:
            if trades:
                if self._json1:
                    await db.execute(INSERT_JSON_SQL, (msgspec.json.encode(trades),))
                else:  # Trade's field order is the column order of INSERT_SQL.
                    await db.executemany(INSERT_SQL, [msgspec.structs.astuple(t) for t in trades])
            if orders:
                await db.executemany(INSERT_ORDERS_SQL, [order_row(o) for o in orders])
            if orders_seq is not None:
                await db.execute(SET_ORDERS_SEQ_SQL, (orders_seq,))

    async def record_gap(self, trades_after: int, trades_upto: int, orders_after: int, orders_upto: int,
                         snapshot: str) -> None:
        """Say, in the store, that its history lacks these trades and finished orders for good."""
        async with self._writing() as db:
            await db.execute(INSERT_GAP_SQL, (trades_after, trades_upto, orders_after, orders_upto, snapshot,
                                              int(time.time() * 1000)))

    async def missing_trades(self) -> int:
        """How many trade ids the recorded history gaps account for."""
        rows = await self._read.execute_fetchall(MISSING_TRADES_SQL)
        return int(next(iter(rows))[0])

    async def orders_seq(self) -> int:
        """Every order closed by a record up to this seq is stored (0: none known)."""
        rows = await self._read.execute_fetchall(ORDERS_SEQ_SQL)
        return int(next(iter(rows))[0])

    async def order(self, order_id: int) -> OrderState | None:
        """The final state of the finished order `order_id` (with no fills: a state, not an answer), or None."""
        return (await self.orders([order_id])).get(order_id)

    async def orders(self, order_ids: list[int]) -> dict[int, OrderState]:
        """The final states of those of `order_ids` that are finished orders, by id, in one read."""
        unique = sorted(set(order_ids))
        found: dict[int, OrderState] = {}
        for start in range(0, len(unique), MAX_ORDERS_READ):
            chunk = unique[start:start + MAX_ORDERS_READ]
            rows = await self._read.execute_fetchall(ORDERS_SQL.format(marks=", ".join("?" * len(chunk))), chunk)
            for (blob,) in rows:
                state = _decode_state(blob)
                found[state.order_id] = state
        return found

    async def delete_orders_after(self, seq: int) -> int:
        """Remove the orders closed by records after `seq` (the log, which is the truth, ends there), and
        lower the watermark to it; how many were removed."""
        async with self._writing() as db:
            cursor = await db.execute("DELETE FROM orders WHERE seq > ?", (seq,))
            await db.execute(SET_ORDERS_SEQ_SQL, (seq,))
        return cursor.rowcount

    async def trades(self, symbol: str | None, after: int, limit: int, *, before: int | None = None,
                     newest_first: bool = False) -> list[dict[str, Any]]:
        """Up to `limit` trades with after < id < before, in trade-id order (the newest of them first, and
        so the newest `limit`, with `newest_first`); all symbols when `symbol` is None."""
        if limit <= 0:
            return []  # SQLite reads a negative LIMIT as "no limit"
        upper = (1 << 63) - 1 if before is None else before
        sql = TRADES_SQL[(symbol is not None, "DESC" if newest_first else "ASC")]
        params = (after, upper, limit) if symbol is None else (symbol, after, upper, limit)
        rows = await self._read.execute_fetchall(sql, params)
        return [dict(zip(WIRE_KEYS, row)) for row in rows]

    async def fills(self, account: str, symbol: str | None, after: int, limit: int, *, before: int | None = None,
                    newest_first: bool = False) -> list[dict[str, Any]]:
        """`account`'s side of up to `limit` of its trades with after < id < before, in trade-id order (the
        newest first with `newest_first`): its order, side, and whether it was the maker or the taker."""
        if limit <= 0:
            return []
        params = {"account": account, "after": after, "before": (1 << 63) - 1 if before is None else before,
                  "limit": limit, "symbol": symbol}
        sql = FILLS_SQL[(symbol is not None, "DESC" if newest_first else "ASC")]
        rows = await self._read.execute_fetchall(sql, params)
        return [dict(zip(FILL_KEYS, row)) for row in rows]

    async def recent(self, symbol: str, limit: int) -> list[dict[str, Any]]:
        """The newest `limit` trades of `symbol`, oldest first."""
        return (await self.trades(symbol, 0, limit, newest_first=True))[::-1]

    async def bars(self, symbol: str, interval_ms: int, from_ms: int, to_ms: int, *,
                   before: int | None = None) -> list[dict[str, Any]]:
        """OHLC, volume and VWAP per `interval_ms` bucket over trades with from_ms <= ts < to_ms (and, with
        `before`, trade id < before).

        Buckets start at multiples of the interval (`t`); only buckets with trades are returned, in
        time order. A `from_ms` inside a bucket gives that bucket over the trades from `from_ms` on.
        """
        if interval_ms <= 0:
            raise ValueError(f"interval_ms must be positive, got {interval_ms}")
        params: dict[str, Any] = {"symbol": symbol, "interval": interval_ms, "from": from_ms, "to": to_ms}
        if before is not None:
            params["before"] = before
        rows = await self._read.execute_fetchall(BARS_SQL if before is None else BARS_BEFORE_SQL, params)
        return [dict(zip(BAR_KEYS, row)) for row in rows]

    async def close(self) -> None:
        if self._read is not self._write:
            await self._read.close()
        await self._write.close()
