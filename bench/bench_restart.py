"""Restart cost against history: the same live state reached after more and more churn.

    .venv/bin/python bench/bench_restart.py [--live 100000] [--idempotent 10000]
                                            [--churn 1000000,10000000] [--json]

For each churn size, a data directory is built as a server that ran with snapshots would leave it: a log
of `--live` resting orders (the first `--idempotent` of them with a clientOrderId), then `churn` commands
of cancel/replace traffic (an order placed away from the spread, then cancelled), the snapshot a clean
stop writes at its end, and the SQLite history it leaves (every finished order, the orders watermark at the
end: otherwise the start would pass over the snapshot to re-derive them). Then `tickflow serve` starts on it; reported: seconds from spawn until /health
answers, the server's peak RSS (VmHWM) once it answers, and the bytes of the log and snapshots on disk.

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
from tickflow.core.types import AddSymbol, Cancel, Command, NewOrder, Record  # noqa: E402
from tickflow.demo import ServerProcess  # noqa: E402
from tickflow.store import snapshots  # noqa: E402
from tickflow.store import trades  # noqa: E402
from tickflow.store.datadir import TRADES_FILE, WAL_FILE  # noqa: E402
from tickflow.store.log.segments import NAME as SEGMENT  # noqa: E402
from tickflow.store.log.codec import encode_record  # noqa: E402
from tickflow.store.log.wal import FILE_HEADER, frame  # noqa: E402

SYMBOL = "ACME"
T0 = 1_700_000_000_000


def history(live: int, idempotent: int, churn: int):  # type: ignore[no-untyped-def]
    """The commands, in order: the symbol, the live book, then the churn."""
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


def build(data: Path, live: int, idempotent: int, churn: int) -> int:
    """Write the log, the final snapshot and SQLite's finished orders; the number of records."""
    data.mkdir(parents=True)
    engine = Engine()
    seq = 0
    chunk: list[bytes] = []
    rows: list[tuple[object, ...]] = []
    db = sqlite3.connect(data / TRADES_FILE)
    for sql in (trades.CREATE_TABLE, trades.CREATE_ORDERS, trades.CREATE_WATERMARKS):
        db.execute(sql)
    with open(data / WAL_FILE, "wb") as log:
        log.write(FILE_HEADER)
        command: Command
        for command in history(live, idempotent, churn):
            seq += 1
            rows.extend(trades.order_row(s) for s in finished(engine.apply(seq, T0 + seq, command)))
            chunk.append(frame(encode_record(Record(seq, T0 + seq, command))))
            if len(chunk) == 65_536:
                log.write(b"".join(chunk))
                chunk.clear()
                db.executemany(trades.INSERT_ORDERS_SQL, rows)
                rows.clear()
        log.write(b"".join(chunk))
        offset = log.tell()
    db.executemany(trades.INSERT_ORDERS_SQL, rows)
    db.execute(trades.SET_ORDERS_SEQ_SQL, (seq,))
    db.commit()
    db.close()
    blob = snapshots.encode(seq, offset, T0 + 1, capture(engine))
    snapshots.publish(snapshots.write_temporary(data, seq, blob))
    return seq


def restart(data: Path) -> dict:
    server = ServerProcess(data, symbols=[SYMBOL])
    started = time.perf_counter()
    server.start(timeout=600)
    seconds = time.perf_counter() - started
    assert server.proc is not None
    status = Path(f"/proc/{server.proc.pid}/status").read_text()
    peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    with urllib.request.urlopen(server.url + "/health", timeout=30) as response:
        recovery = json.loads(response.read())["recovery"]
    server.stop()
    disk = sum(p.stat().st_size for p in data.iterdir()
               if p.name == WAL_FILE or SEGMENT.match(p.name) or p.name.startswith("snap-"))
    return {"restart_seconds": round(seconds, 2), "peak_rss_mb": round(peak_kb / 1024, 1),
            "log_and_snapshot_mb": round(disk / 1e6, 1), "recovery": recovery}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--live", type=int, default=100_000)
    p.add_argument("--idempotent", type=int, default=10_000)
    p.add_argument("--churn", default="1000000,10000000", help="comma-separated churn sizes, smallest first")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="tickflow-bench-restart-") as tmp:
        for churn in (int(c) for c in args.churn.split(",")):
            data = Path(tmp) / f"churn-{churn}"
            began = time.perf_counter()
            records = build(data, args.live, args.idempotent, churn)
            row = {"churn": churn, "records": records, "build_seconds": round(time.perf_counter() - began, 1),
                   **restart(data)}
            rows.append(row)
            if not args.json:
                print(f"churn {churn:>11,}: restart {row['restart_seconds']} s, peak RSS {row['peak_rss_mb']} MB, "
                      f"log + snapshots {row['log_and_snapshot_mb']} MB ({row['recovery']})", flush=True)
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
