"""Replay: the same log always rebuilds the same engine and re-derives the same outcomes."""

from __future__ import annotations

import random
from pathlib import Path

import msgspec
import pytest
from helpers.logs import commands, open_log, replayed, write_log

from tickflow.core.engine import Engine
from tickflow.core.orders import finished
from tickflow.core.types import AddSymbol, Amend, Cancel, CancelAll, Command, NewOrder, OrderType, Outcome, Record
from tickflow.store.log.codec import decode_record, encode_record
from tickflow.store.recovery import recover
from tickflow.store.log.wal import FILE_HEADER, CorruptLog, Wal, frame
from tickflow.core.snapshot import state_hash


def mixed_commands(n: int, seed: int) -> list[Command]:
    """Every kind of command and order, self-trades and retries included."""
    rng = random.Random(seed)
    out: list[Command] = [AddSymbol("ACME"), AddSymbol("GLOBEX")]
    for i in range(n):
        account = f"a{rng.randrange(4)}"
        roll = rng.random()
        if roll < 0.1:
            out.append(Cancel(account, rng.randint(1, i + 1)))
        elif roll < 0.15:
            out.append(Amend(account, rng.randint(1, i + 1), rng.choice([None, rng.randint(1, 50)]),
                             rng.choice([None, 100 + rng.randint(-5, 5)])))
        elif roll < 0.16:
            out.append(CancelAll(account, rng.choice([None, "ACME", "NOPE"]), rng.choice([None, "buy", "sell"])))
        elif roll < 0.17:
            out.append(AddSymbol(rng.choice(["ACME", "NEW"])))
        else:
            kind: OrderType = rng.choice(["limit", "limit", "limit", "market"])
            out.append(NewOrder(
                account, rng.choice(["ACME", "GLOBEX", "NOPE"]), rng.choice(["buy", "sell"]), kind,
                100 + rng.randint(-6, 6) if kind == "limit" else 0, rng.randint(1, 30),
                rng.choice(["gtc", "gtc", "ioc", "fok"]), rng.random() < 0.1 and kind == "limit",
                rng.choice([None, f"c{rng.randrange(200)}"]),
            ))
    return out


def test_replaying_the_same_log_twice_gives_identical_engines(tmp_path: Path) -> None:
    path = str(tmp_path / "x.wal")
    cmds = mixed_commands(3000, seed=5)
    write_log(path, cmds)
    first: list[bytes] = []
    second: list[bytes] = []
    enc = msgspec.msgpack.encode
    engine_a, engine_b = Engine(), Engine()
    wal = Wal.open(path)
    recover(wal, engine_a, lambda o: first.append(enc(o)))
    wal.close()
    wal = Wal.open(path)
    recover(wal, engine_b, lambda o: second.append(enc(o)))
    wal.close()
    assert state_hash(engine_a) == state_hash(engine_b)
    assert first == second and len(first) == len(cmds)


def test_replay_reproduces_what_the_live_engine_answered(tmp_path: Path) -> None:
    path = str(tmp_path / "x.wal")
    cmds = mixed_commands(3000, seed=6)
    write_log(path, cmds)
    live = Engine()
    answered = [live.apply(seq, 1_700_000_000_000 + seq - 1, c) for seq, c in enumerate(cmds, 1)]
    rebuilt = Engine()
    outcomes: list[Outcome] = []
    wal = Wal.open(path)
    recovery = recover(wal, rebuilt, outcomes.append)
    wal.close()
    assert state_hash(rebuilt) == state_hash(live)
    assert msgspec.msgpack.encode(outcomes) == msgspec.msgpack.encode(answered)
    assert recovery.last_seq == len(cmds) and recovery.last_ts == 1_700_000_000_000 + len(cmds) - 1
    assert rebuilt.idempotency == live.idempotency
    assert any(o.trades for o in outcomes), "the workload should trade"


def test_a_replay_without_answers_rebuilds_the_same_engine_and_keeps_the_trades_asked_for(tmp_path: Path) -> None:
    path = str(tmp_path / "x.wal")
    cmds = mixed_commands(3000, seed=7)
    write_log(path, cmds)
    answered: list[Outcome] = []
    with_answers = Engine()
    wal = Wal.open(path)
    recover(wal, with_answers, answered.append)
    wal.close()
    trades = [t for o in answered for t in o.trades]
    assert len(trades) > 100
    for keep_after in (None, 0, len(trades) // 2, len(trades)):
        quiet = Engine()
        wal = Wal.open(path)
        recovery = recover(wal, quiet, keep_trades_after=keep_after)
        wal.close()
        assert state_hash(quiet) == state_hash(with_answers)
        assert quiet.idempotency == with_answers.idempotency
        assert recovery.trades == ([] if keep_after is None else trades[keep_after:])
        assert recovery.records == len(cmds) and not quiet.quiet
        # With answers too, the same trades are kept.
        wal = Wal.open(path)
        recovery = recover(wal, Engine(), lambda outcome: None, keep_trades_after=keep_after)
        wal.close()
        assert recovery.trades == ([] if keep_after is None else trades[keep_after:])
    # Each book knows the last command that listed it, traded in it or changed a level: the feed's seq.
    for symbol, book in quiet.books.items():
        touching = [o.seq for o, c in zip(answered, cmds)
                    if any(t.symbol == symbol for t in o.trades) or any(ch.symbol == symbol for ch in o.book)
                    or (c == AddSymbol(symbol) and o.error is None)]
        assert book.seq == touching[-1] == with_answers.books[symbol].seq


def append_raw(path: str, *payloads: bytes) -> list[int]:
    offsets = []
    with open(path, "ab") as f:
        if f.tell() == 0:
            f.write(FILE_HEADER)
        for p in payloads:
            offsets.append(f.tell())
            f.write(frame(p))
    return offsets


@pytest.mark.parametrize("junk", [b"\x93\x01", b"not msgpack at all", encode_record(AddSymbol("X"))])
@pytest.mark.parametrize("where", ["middle", "last"])
def test_a_checksummed_record_that_does_not_decode_refuses(tmp_path: Path, junk: bytes, where: str) -> None:
    path = str(tmp_path / "x.wal")
    write_log(path, commands(5))
    [offset] = append_raw(path, junk)
    if where == "middle":
        append_raw(path, encode_record(Record(6, 0, AddSymbol("Y"))))
    before = Path(path).read_bytes()
    with pytest.raises(CorruptLog) as info:
        open_log(path)
    assert info.value.offset == offset
    assert "not a record" in str(info.value) and "its checksum holds, so it is no torn write" in str(info.value)
    assert "followed by valid records" not in str(info.value)  # it may well be the last one
    assert Path(path).read_bytes() == before


@pytest.mark.parametrize("seqs", [(6, 8), (6, 6), (5,), (7,), (6, 7, 9, 10)])
def test_a_sequence_hole_or_repeat_refuses(tmp_path: Path, seqs: tuple[int, ...]) -> None:
    path = str(tmp_path / "x.wal")
    write_log(path, commands(5))
    offsets = append_raw(path, *(encode_record(Record(s, 0, AddSymbol(f"S{s}"))) for s in seqs))
    before = Path(path).read_bytes()
    expected = 5
    for offset, seq in zip(offsets, seqs):
        if seq != expected + 1:
            break
        expected = seq
    with pytest.raises(CorruptLog) as info:
        open_log(path)
    assert info.value.offset == offset
    assert f"sequence {seq} follows {expected}" in str(info.value)
    assert Path(path).read_bytes() == before


@pytest.mark.parametrize("fault", ["hole", "junk"])
@pytest.mark.parametrize("at", [4095, 4096, 4097, 9000])
def test_faults_far_into_a_long_log_name_their_offset(tmp_path: Path, fault: str, at: int) -> None:
    """Replay decodes in batches; the offset named must still be the record's own."""
    path = str(tmp_path / "x.wal")
    seqs = list(range(1, 10_001))
    payloads = [encode_record(Record(s, 0, AddSymbol(f"S{s}"))) for s in seqs]
    if fault == "hole":
        payloads[at] = encode_record(Record(at + 2, 0, AddSymbol("hole")))
    else:
        payloads[at] = b"\x93\x01"
    offsets = append_raw(path, *payloads)
    with pytest.raises(CorruptLog) as info:
        open_log(path)
    assert info.value.offset == offsets[at]


def test_the_first_record_must_be_sequence_one(tmp_path: Path) -> None:
    path = str(tmp_path / "x.wal")
    append_raw(path, encode_record(Record(2, 0, AddSymbol("X"))))
    with pytest.raises(CorruptLog, match="sequence 2 follows 0"):
        open_log(path)


def test_recovery_describes_itself(tmp_path: Path) -> None:
    path = str(tmp_path / "x.wal")
    write_log(path, commands(5))
    with open(path, "ab") as f:
        f.write(b"\x01\x02\x03")
    _, recovery = replayed(path)
    assert str(recovery).startswith("replayed 5 records (last seq 5) in ")
    assert recovery.cut is not None
    assert str(recovery).endswith("; cut a torn tail at byte %d: 3 bytes dropped (short header)" % recovery.cut.offset)


def test_records_round_trip() -> None:
    for command in mixed_commands(200, seed=9):
        record = Record(12, 34, command)
        assert decode_record(encode_record(record)) == record
        assert decode_record(memoryview(encode_record(record))) == record


def test_a_replay_re_derives_the_orders_closed_after_a_seq_with_or_without_answers(tmp_path: Path) -> None:
    """What SQLite's orders table needs after a crash: the final state of every order closed by a record after
    its watermark, the same from a quiet replay (collected where orders close) as from the answers."""
    path = str(tmp_path / "x.wal")
    cmds = mixed_commands(3000, seed=5)
    write_log(path, cmds)
    answered: list[Outcome] = []
    wal = Wal.open(path)
    recover(wal, Engine(), answered.append)
    wal.close()
    for after in (None, 0, 1500, len(cmds)):
        told = {} if after is None else {
            s.order_id: msgspec.structs.replace(s, fills=[]) for o in answered if o.seq > after for s in finished(o)}
        for quiet in (True, False):
            wal = Wal.open(path)
            recovery = recover(wal, Engine(), None if quiet else (lambda outcome: None), keep_closed_after_seq=after)
            wal.close()
            got = {s.order_id: msgspec.structs.replace(s, fills=[]) for s in recovery.closed}
            assert len(got) == len(recovery.closed) and got == told, (after, quiet)
    assert len({s.order_id for o in answered for s in finished(o)}) > 1000
