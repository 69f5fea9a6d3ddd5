"""Restart cost against history: the same live state reached after more and more churn.

    .venv/bin/python bench/bench_restart.py [--live 100000] [--idempotent 10000]
                                            [--churn 1000000,10000000] [--json]

For each churn size, a data directory is built as a server that ran with snapshots would leave it: a log
of `--live` resting orders (the first `--idempotent` of them with a clientOrderId), then `churn` commands
of cancel/replace traffic (an order placed away from the spread, then cancelled), in segments of
`--segment-bytes`; a snapshot every `--snapshot-every` records and the one a clean stop writes at its end,
the newest `--keep-snapshots` of them kept and the segments wholly before the oldest kept deleted (the
server's own prune and retire); and the SQLite history it leaves (every finished order, the orders
watermark at the end: otherwise the start would pass over the snapshot to re-derive them). Then
`tickflow serve` starts on it; reported: seconds from spawn until /health answers, the server's peak RSS
(VmHWM) once it answers, the bytes of the log and snapshots on disk (and, apart, of trades.sqlite), and
how many segments were deleted.

Bar (issue 26): the largest churn restarts within 1.3x the time of the smallest, with peak RSS and disk
within 1.2x, measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tickflow.core.engine import Engine  # noqa: E402
from tickflow.core.orders import finished  # noqa: E402
from tickflow.core.snapshot import capture  # noqa: E402
from tickflow.core.types import AddSymbol, Cancel, Command, NewOrder, Record, Rules  # noqa: E402
from tickflow.net.wire.limits import IDEMPOTENCY_WINDOW, MAX_OPEN_ORDERS  # noqa: E402
from tickflow.demo import ServerProcess  # noqa: E402
from tickflow.store import snapshots  # noqa: E402
from tickflow.store import trades  # noqa: E402
from tickflow.store.datadir import TRADES_FILE, WAL_FILE  # noqa: E402
from tickflow.net.exchange.snapshotter import KEEP_SNAPSHOTS, SNAPSHOT_EVERY  # noqa: E402
from tickflow.store.log import segments  # noqa: E402
from tickflow.store.log.segments import NAME as SEGMENT, SEGMENT_BYTES  # noqa: E402
from tickflow.store.log.codec import encode_record  # noqa: E402
from tickflow.store.log.wal import FILE_HEADER, frame  # noqa: E402

SYMBOL = "ACME"
SNAPSHOT = snapshots.NAME
T0 = time.time_ns() // 1_000_000 - 12 * 3_600_000
"""The first record's stamp: records are a millisecond apart, so even 10M of them end hours before the
server starts, and the clientOrderIds are inside its default idempotency window when it does."""


def history(live: int, idempotent: int, churn: int):  # type: ignore[no-untyped-def]
    """The commands, in order: the rules a default server logs (so it logs none), the symbol, the live book,
    then the churn."""
    yield Rules(MAX_OPEN_ORDERS, 0, IDEMPOTENCY_WINDOW)
    yield AddSymbol(SYMBOL)
    for i in range(live):
        buy = i % 2 == 1
        yield NewOrder(f"m{i % 1000}", SYMBOL, "buy" if buy else "sell", "limit",
                       9_000 - i % 500 if buy else 11_000 + i % 500, 10,
                       client_order_id=f"c{i}" if i < idempotent else None)
    next_id = live + 1
    for i in range(churn // 2):
        yield NewOrder(f"t{i % 64}", SYMBOL, "buy", "limit", 5_000 + i % 100, 1)
        yield Cancel(f"t{i % 64}", next_id)
        next_id += 1


def build(data: Path, live: int, idempotent: int, churn: int, *, segment_bytes: int = SEGMENT_BYTES,
          snapshot_every: int = SNAPSHOT_EVERY, keep: int = KEEP_SNAPSHOTS) -> tuple[int, int]:
    """Write the log's segments, the snapshots kept and SQLite's finished orders; the number of records and
    of segments deleted."""
    data.mkdir(parents=True)
    engine = Engine()
    seq = 0
    chunk: list[bytes] = []
    rows: list[tuple[object, ...]] = []
    deleted = 0
    db = sqlite3.connect(data / TRADES_FILE)
    for sql in (trades.CREATE_TABLE, trades.CREATE_ORDERS, trades.CREATE_WATERMARKS):
        db.execute(sql)
    log = open(data / WAL_FILE, "wb")
    log.write(FILE_HEADER)
    size = len(FILE_HEADER)

    def flush() -> None:
        log.write(b"".join(chunk))
        chunk.clear()
        db.executemany(trades.INSERT_ORDERS_SQL, rows)
        db.commit()
        rows.clear()

    def snapshot() -> int:
        """The snapshot at `seq`, then the server's prune and retire; segments deleted."""
        flush()
        log.flush()
        blob = snapshots.encode(seq, size, T0 + 1, capture(engine))
        snapshots.publish(snapshots.write_temporary(data, seq, blob))
        snapshots.prune(data, keep)
        oldest = SNAPSHOT.match(snapshots.on_disk(data)[-1].name)
        return len(segments.retire(data, int(oldest.group(1)) if oldest else 0))

    command: Command
    for command in history(live, idempotent, churn):
        seq += 1
        rows.extend(trades.order_row(s) for s in finished(engine.apply(seq, T0 + seq, command)))
        framed = frame(encode_record(Record(seq, T0 + seq, command)))
        chunk.append(framed)
        size += len(framed)
        if len(chunk) == 65_536:
            flush()
        if snapshot_every and seq % snapshot_every == 0:
            deleted += snapshot()
        if size >= segment_bytes:  # the sequencer rolls between batches: here, after any record
            flush()
            log.close()
            log = open(data / segments.segment_name(seq + 1), "wb")
            log.write(FILE_HEADER)
            size = len(FILE_HEADER)
    db.execute(trades.SET_ORDERS_SEQ_SQL, (seq,))
    deleted += snapshot()  # the clean stop's
    log.close()
    db.close()
    return seq, deleted


def restart(data: Path) -> dict:
    server = ServerProcess(data, symbols=[SYMBOL])
    started = time.perf_counter()
    server.start(timeout=600)
    seconds = time.perf_counter() - started
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    with urllib.request.urlopen(server.url + "/health", timeout=30) as response:
        health = json.loads(response.read())
    recovery = health["recovery"]
    # The live state is what was built: the first order's clientOrderId is still remembered (a retry gets
    # order 1 back and logs nothing), and the server logged no rules of its own.
    retry = urllib.request.Request(server.url + "/orders", method="POST", headers={
        "Authorization": "Bearer m0", "Content-Type": "application/json"}, data=json.dumps(
        {"symbol": SYMBOL, "side": "sell", "price": 11_000, "qty": 10, "clientOrderId": "c0"}).encode())
    with urllib.request.urlopen(retry, timeout=30) as response:
        assert json.loads(response.read())["orderId"] == 1, "the clientOrderIds were not kept"
    with urllib.request.urlopen(server.url + "/health", timeout=30) as response:
        assert json.loads(response.read())["seq"] == health["seq"], "the retry or the rules were logged"
    server.stop()
    disk = sum(p.stat().st_size for p in data.iterdir()
               if p.name == WAL_FILE or SEGMENT.match(p.name) or p.name.startswith("snap-"))
    sqlite_bytes = sum(p.stat().st_size for p in data.iterdir() if p.name.startswith(TRADES_FILE))
    return {"restart_seconds": round(seconds, 2), "peak_rss_mb": round(peak_kb / 1024, 1),
            "log_and_snapshot_mb": round(disk / 1e6, 1), "sqlite_mb": round(sqlite_bytes / 1e6, 1),
            "segments": len(segments.listing(data)), "recovery": recovery}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--live", type=int, default=100_000)
    p.add_argument("--idempotent", type=int, default=10_000)
    p.add_argument("--churn", default="1000000,10000000", help="comma-separated churn sizes, smallest first")
    p.add_argument("--segment-bytes", type=int, default=SEGMENT_BYTES)
    p.add_argument("--snapshot-every", type=int, default=SNAPSHOT_EVERY)
    p.add_argument("--keep-snapshots", type=int, default=KEEP_SNAPSHOTS)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tickflow-bench-restart-") as tmp:
        for churn in (int(c) for c in args.churn.split(",")):
            data = Path(tmp) / f"churn-{churn}"
            began = time.perf_counter()
            records, deleted = build(data, args.live, args.idempotent, churn, segment_bytes=args.segment_bytes,
                                     snapshot_every=args.snapshot_every, keep=args.keep_snapshots)
            row = {"churn": churn, "records": records, "build_seconds": round(time.perf_counter() - began, 1),
                   "segments_deleted": deleted, **restart(data)}
            rows.append(row)
            if not args.json:
                print(f"churn {churn:>11,}: restart {row['restart_seconds']} s, peak RSS {row['peak_rss_mb']} MB, "
                      f"log + snapshots {row['log_and_snapshot_mb']} MB ({row['segments']} segments kept, "
                      f"{deleted} deleted), trades.sqlite {row['sqlite_mb']} MB ({row['recovery']})", flush=True)
    first, last = rows[0], rows[-1]
    ratios = {key: round(last[key] / first[key], 2) for key in ("restart_seconds", "peak_rss_mb", "log_and_snapshot_mb")}
    result = {"benchmark": "restart", "live": args.live, "idempotent": args.idempotent, "rows": rows,
              "ratios_largest_to_smallest": ratios,
              "bars": {"restart_seconds": 1.3, "peak_rss_mb": 1.2, "log_and_snapshot_mb": 1.2}}
    if args.json:
        print(json.dumps(result))
    else:
        print(f"largest / smallest: restart {ratios['restart_seconds']}x (bar 1.3x), peak RSS "
              f"{ratios['peak_rss_mb']}x (bar 1.2x), disk {ratios['log_and_snapshot_mb']}x (bar 1.2x)")


if __name__ == "__main__":
    main()
