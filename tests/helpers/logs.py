"""Building small logs for tests: records with consecutive sequence numbers, written as the log does."""

from __future__ import annotations

from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol, Cancel, Command, NewOrder, Record, Side
from tickflow.store.log.codec import encode_record
from tickflow.store.recovery import Recovery, recover
from tickflow.store.log.wal import FILE_HEADER, FileOps, Wal, frame


def commands(n: int, symbol: str = "ACME") -> list[Command]:
    """A symbol, then orders that rest, cross and get cancelled (deterministic)."""
    out: list[Command] = [AddSymbol(symbol)]
    for i in range(1, n):
        if i % 7 == 0:
            out.append(Cancel(f"acct{i % 3}", i // 2))
        else:
            side: Side = "buy" if i % 2 else "sell"
            price = 100 + (i * 7) % 11 - (3 if side == "buy" else 0)
            out.append(NewOrder(f"acct{i % 3}", symbol, side, "limit", price, 1 + i % 9,
                                client_order_id=f"c{i}"))
    return out


def payloads(cmds: list[Command], first_seq: int = 1, ts: int = 1_700_000_000_000) -> list[bytes]:
    return [encode_record(Record(first_seq + i, ts + i, c)) for i, c in enumerate(cmds)]


def write_log(path: str, cmds: list[Command]) -> list[int]:
    """Write `cmds` as a log at `path`; returns each record's start offset, and the end offset last."""
    offsets = [len(FILE_HEADER)]
    with open(path, "wb") as f:
        f.write(FILE_HEADER)
        for p in payloads(cmds):
            data = frame(p)
            f.write(data)
            offsets.append(offsets[-1] + len(data))
    return offsets


def open_log(path: str, ops: FileOps | None = None) -> tuple[Wal, Engine, Recovery]:
    wal = Wal.open(path, ops)
    engine = Engine()
    return wal, engine, recover(wal, engine)


def replayed(path: str) -> tuple[Engine, Recovery]:
    """Replay a log and close it."""
    wal, engine, recovery = open_log(path)
    wal.close()
    return engine, recovery
