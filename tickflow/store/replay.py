"""Rebuild an engine from its log: every record applied in order, stamps taken from the record."""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass
from typing import Callable

from tickflow.core.engine import Engine
from tickflow.core.types import Outcome
from tickflow.store.records import DecodeErrors, decode_record
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
    """Replay `wal` into `engine`; `on_outcome` sees each result (to re-derive trades for SQLite).

    Raises CorruptLog for a record whose checksum holds but which is not a record, or whose sequence
    number does not follow the one before: acknowledged records may lie behind it, so nothing is cut.
    """
    started = time.perf_counter()
    # Replay allocates millions of short-lived, acyclic objects (reference counting frees them);
    # the cyclic collector would rescan the growing books over and over for nothing.
    collecting = gc.isenabled()
    gc.disable()
    try:
        seq, ts = _apply_all(wal, engine, on_outcome)
    finally:
        if collecting:
            gc.enable()
    return Recovery(wal.records, seq, ts, wal.cut, time.perf_counter() - started)


def _apply_all(wal: Wal, engine: Engine, on_outcome: Callable[[Outcome], None] | None) -> tuple[int, int]:
    apply = engine.apply
    decode = decode_record
    seq = engine.last_seq
    ts = engine.last_ts
    for offset, payload in wal.replay():
        try:
            record = decode(payload)
        except DecodeErrors as e:
            raise CorruptLog(wal.path, offset, f"checksum ok but not a record: {e}") from None
        seq += 1
        if record.seq != seq:
            raise CorruptLog(wal.path, offset, f"sequence {record.seq} follows {seq - 1}")
        ts = record.ts
        outcome = apply(seq, ts, record.command)
        if on_outcome is not None:
            on_outcome(outcome)
    return seq, ts
