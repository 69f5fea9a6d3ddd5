"""Rebuild an engine from its log: every record applied in order, stamps taken from the record."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import msgspec

from tickflow.core.engine import Engine
from tickflow.core.types import Outcome
from tickflow.store.records import decode_record
from tickflow.store.wal import CorruptLog, Cut, Wal


@dataclass(frozen=True)
class Recovery:
    records: int
    last_seq: int
    last_ts: int
    cut: Cut | None
    seconds: float

    def __str__(self) -> str:
        text = f"replayed {self.records} records (last seq {self.last_seq}) in {self.seconds:.3f}s"
        return f"{text}; {self.cut}" if self.cut else text


def recover(wal: Wal, engine: Engine, on_outcome: Callable[[Outcome], None] | None = None) -> Recovery:
    """Replay `wal` into `engine`; `on_outcome` sees each result (to re-derive trades for SQLite)."""
    started = time.perf_counter()
    apply = engine.apply
    seq = engine.last_seq
    ts = engine.last_ts
    for offset, payload in wal.replay():
        try:
            record = decode_record(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptLog(wal.path, offset, f"checksum ok but not a record: {e}") from None
        if record.seq != seq + 1:
            raise CorruptLog(wal.path, offset, f"sequence {record.seq} follows {seq}")
        seq = record.seq
        ts = record.ts
        outcome = apply(seq, ts, record.command)
        if on_outcome is not None:
            on_outcome(outcome)
    return Recovery(wal.records, seq, ts, wal.cut, time.perf_counter() - started)
