"""The log's repair rules, after etcd's repair_test: torn tails are cut, corruption is refused.

Every case checks exactly which records come back, what cut is reported, that the file on disk
matches, and that the log takes new records that survive a reopen.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.logs import commands, open_log, payloads, replayed, write_log

from tickflow.core.types import Command, NewOrder
from tickflow.store.log.upgrade import add_header
from tickflow.store.log.wal import FILE_HEADER, HEADER_SIZE, CorruptLog, Cut, NotALog, Wal, frame
from tickflow.core.snapshot import state_hash

N = 24
CMDS = commands(N)


@pytest.fixture
def log(tmp_path: Path) -> tuple[str, list[int], bytes]:
    path = str(tmp_path / "test.wal")
    offsets = write_log(path, CMDS)
    return path, offsets, Path(path).read_bytes()


def expected_hash(count: int) -> str:
    """The state after the first `count` commands, applied straight to an engine."""
    from tickflow.core.engine import Engine

    engine = Engine()
    for seq, command in enumerate(CMDS[:count], 1):
        engine.apply(seq, 1_700_000_000_000 + seq - 1, command)
    return state_hash(engine)


HASHES = [expected_hash(i) for i in range(N + 1)]


def check_recovers(path: str, count: int, cut: Cut | None) -> None:
    """Opens to exactly `count` records with `cut`; the cut is on disk; appends survive a reopen."""
    wal, engine, recovery = open_log(path)
    assert (recovery.records, recovery.last_seq) == (count, count)
    if cut:
        assert recovery.cut is not None and (recovery.cut.offset, recovery.cut.dropped) == (cut.offset, cut.dropped)
    else:
        assert recovery.cut is None
    assert state_hash(engine) == HASHES[count]
    size = os.path.getsize(path)
    assert size == wal.size
    more: list[Command] = [NewOrder("late", "ACME", "buy", "limit", 90, 3, client_order_id=f"late{count}")]
    if count == 0:
        more.insert(0, CMDS[0])
    wal.append(payloads(more, first_seq=count + 1))
    wal.sync()
    wal.close()
    engine, again = replayed(path)
    assert again.cut is None
    assert again.records == again.last_seq == count + len(more)
    assert engine.idempotency[("late", f"late{count}")].seq == count + len(more)


def test_an_intact_log_opens_whole(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, _ = log
    check_recovers(path, N, None)


def test_truncating_the_last_record_at_every_byte_keeps_the_ones_before(
    log: tuple[str, list[int], bytes],
) -> None:
    path, offsets, data = log
    start = offsets[-2]
    for keep in range(start, offsets[-1]):
        Path(path).write_bytes(data[:keep])
        dropped = keep - start
        check_recovers(path, N - 1, Cut(start, dropped, "") if dropped else None)


def test_truncating_anywhere_keeps_exactly_the_complete_records(
    log: tuple[str, list[int], bytes],
) -> None:
    path, offsets, data = log
    for size in range(0, len(data) + 1, 3):
        Path(path).write_bytes(data[:size])
        count = sum(1 for end in offsets[1:] if end <= size)
        wal, engine, recovery = open_log(path)
        wal.close()
        assert recovery.records == count
        assert state_hash(engine) == HASHES[count]
        assert os.path.getsize(path) == offsets[count]  # a torn file header is written whole again
        assert Path(path).read_bytes()[: len(FILE_HEADER)] == FILE_HEADER
        assert (recovery.cut is None) == (size in (0, offsets[count]))  # an empty file is a new log


def test_a_zeroed_tail_is_cut(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    start = offsets[-2]
    for zero_from in range(start, offsets[-1]):
        zeroed = data[:zero_from] + bytes(len(data) - zero_from)
        Path(path).write_bytes(zeroed)
        if zeroed == data:  # the record already ended in zero bytes: nothing changed
            check_recovers(path, N, None)
        else:
            check_recovers(path, N - 1, Cut(start, len(data) - start, ""))


def test_preallocated_zeros_after_the_last_record_are_cut(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    Path(path).write_bytes(data + bytes(4096))
    check_recovers(path, N, Cut(len(data), 4096, ""))


def test_garbage_after_the_log_is_cut(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    rng = random.Random(7)
    for length in (1, 3, HEADER_SIZE - 1, HEADER_SIZE, HEADER_SIZE + 1, 40, 300):
        garbage = rng.randbytes(length)
        Path(path).write_bytes(data + garbage)
        check_recovers(path, N, Cut(len(data), length, ""))


def test_a_valid_record_anywhere_in_garbage_after_a_bad_one_is_found(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    rng = random.Random(9)
    hidden = data[offsets[3]:offsets[4]]  # a whole record, somewhere in 20 KB of random bytes
    for at in (0, 1, 2, 3, 5_001, 20_000):
        garbage = rng.randbytes(20_000)
        Path(path).write_bytes(data[:offsets[-2]] + b"\xff" + garbage[:at] + hidden + garbage[at:])
        with pytest.raises(CorruptLog, match=f"byte offset {offsets[-2]} "):
            list(Wal.open(path).replay())


def test_garbage_after_a_torn_record_is_cut(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    rng = random.Random(8)
    start = offsets[-2]
    for keep in (start + 1, start + HEADER_SIZE, offsets[-1] - 1):
        garbage = rng.randbytes(50)
        Path(path).write_bytes(data[:keep] + garbage)
        check_recovers(path, N - 1, Cut(start, keep - start + 50, ""))


def test_a_header_claiming_more_than_the_file_holds_is_a_torn_tail(
    log: tuple[str, list[int], bytes],
) -> None:
    path, offsets, data = log
    Path(path).write_bytes(data + frame(b"x" * 100)[:HEADER_SIZE + 10])
    check_recovers(path, N, Cut(len(data), HEADER_SIZE + 10, ""))


def test_a_bad_last_record_is_indistinguishable_from_a_tear_and_is_cut(
    log: tuple[str, list[int], bytes],
) -> None:
    path, offsets, data = log
    start = offsets[-2]
    flipped = bytearray(data)
    flipped[start + HEADER_SIZE + 3] ^= 0x10
    Path(path).write_bytes(bytes(flipped))
    check_recovers(path, N - 1, Cut(start, len(data) - start, ""))


def assert_refused(path: str, offset: int, before: bytes, why: str = "") -> CorruptLog:
    for _ in range(2):  # and refused again: the failed open changed nothing
        with pytest.raises(CorruptLog) as info:
            open_log(path)
        assert info.value.offset == offset
        assert f"offset {offset}" in str(info.value)
        assert why in info.value.why
        assert Path(path).read_bytes() == before, "a refused open must not truncate or change the file"
    return info.value


def test_a_flipped_bit_in_any_middle_record_refuses_to_open(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    rng = random.Random(1)
    for i in range(N - 1):
        start, end = offsets[i], offsets[i + 1]
        position = rng.randrange(start, end)
        flipped = bytearray(data)
        flipped[position] ^= 1 << rng.randrange(8)
        Path(path).write_bytes(bytes(flipped))
        assert_refused(path, start, bytes(flipped))


def test_every_byte_of_a_middle_record_is_covered(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    i = N // 2
    for position in range(offsets[i], offsets[i + 1]):
        flipped = bytearray(data)
        flipped[position] ^= 0x80
        Path(path).write_bytes(bytes(flipped))
        assert_refused(path, offsets[i], bytes(flipped))


def test_a_zeroed_middle_record_refuses_to_open(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    i = 3
    zeroed = data[: offsets[i]] + bytes(offsets[i + 1] - offsets[i]) + data[offsets[i + 1]:]
    Path(path).write_bytes(zeroed)
    error = assert_refused(path, offsets[i], zeroed, "bad length 0")
    assert "refusing to open" in str(error) and path in str(error)


@pytest.mark.parametrize("payload_length", [100, 256, 512])
def test_a_long_run_of_zeros_before_a_valid_record_is_still_corruption(
    log: tuple[str, list[int], bytes], payload_length: int
) -> None:
    """The search for a valid record after a bad one skips runs of zeros at once; a record just
    after the run is found even when its length's first byte is zero (256, 512)."""
    path, offsets, data = log
    damaged = data[: offsets[3]] + bytes(1 << 20) + frame(b"p" * payload_length)
    Path(path).write_bytes(damaged)
    assert_refused(path, offsets[3], damaged, "bad length 0")


def test_a_torn_record_before_a_long_run_of_zeros_is_cut(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    torn = data[: offsets[-1] - 5] + bytes(1 << 20)
    Path(path).write_bytes(torn)
    check_recovers(path, N - 1, Cut(offsets[-2], len(torn) - offsets[-2], ""))


def test_the_records_before_corruption_are_still_yielded(log: tuple[str, list[int], bytes]) -> None:
    """The refusal comes after the good prefix, so a tool can show how far the log is readable."""
    path, offsets, data = log
    flipped = bytearray(data)
    flipped[offsets[5] + HEADER_SIZE] ^= 1
    Path(path).write_bytes(bytes(flipped))
    wal = Wal.open(path)
    seen = []
    with pytest.raises(CorruptLog):
        for offset, _ in wal.replay():
            seen.append(offset)
    assert seen == offsets[:5]


def test_an_empty_or_missing_log_opens_empty(tmp_path: Path) -> None:
    path = str(tmp_path / "new.wal")
    check_recovers(path, 0, None)
    assert os.path.exists(path)


@pytest.mark.parametrize("text", [
    b"this is not a tickflow log\n" * 200,
    b"\x05\x00\x00\x00" + bytes(60),  # what could pass for a short first record
    bytes(len(FILE_HEADER)) + frame(payloads(CMDS[:1])[0]),  # a zeroed header before a record
    b"tickflow wal v1 " + bytes(40),  # almost the header
])
def test_a_file_that_is_no_log_is_refused_not_cut_to_nothing(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "test.wal"
    path.write_bytes(text)
    for _ in range(2):
        with pytest.raises(NotALog, match='does not start with "tickflow wal v1" .*so it is no tickflow log'):
            list(Wal.open(str(path)).replay())
        assert path.read_bytes() == text


def test_a_log_from_before_headers_is_refused_with_the_way_to_upgrade_it(tmp_path: Path) -> None:
    path = tmp_path / "test.wal"
    text = frame(payloads(CMDS[:3])[0]) + frame(payloads(CMDS[:3])[1])
    path.write_bytes(text)
    with pytest.raises(NotALog, match=r"starts with a whole record but not with \"tickflow wal v1\".*"
                                      r"`tickflow log --upgrade` gives it one"):
        list(Wal.open(str(path)).replay())
    assert path.read_bytes() == text
    add_header(str(path), text)
    assert path.read_bytes() == FILE_HEADER + text
    assert replayed(str(path))[1].records == 2


def test_a_log_in_a_later_format_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "test.wal"
    text = b"tickflow wal v2\n" + frame(b"whatever v2 holds")
    path.write_bytes(text)
    with pytest.raises(CorruptLog, match=r"a log in format v2, which this tickflow cannot read \(it reads v1\)"):
        list(Wal.open(str(path)).replay())
    assert path.read_bytes() == text


def test_a_torn_file_header_is_written_again(tmp_path: Path) -> None:
    """A crash while the log was created: part of the header (or none), then zeros. No record can
    have been acknowledged, since the header is synced before the first record is written."""
    path = str(tmp_path / "test.wal")
    for torn in (FILE_HEADER[:1], FILE_HEADER[:-1], FILE_HEADER[:5] + bytes(200), bytes(4096)):
        Path(path).write_bytes(torn)
        check_recovers(path, 0, Cut(0, len(torn), "torn file header"))
        assert Path(path).read_bytes().startswith(FILE_HEADER)


def test_a_torn_first_record_is_still_cut(tmp_path: Path) -> None:
    path = str(tmp_path / "test.wal")
    first = frame(payloads(CMDS[:1])[0])
    for torn in (first[:3], first[:-1], b"\0" * 64):  # a short header, a short payload, zeros
        Path(path).write_bytes(FILE_HEADER + torn)
        check_recovers(path, 0, Cut(len(FILE_HEADER), len(torn), "torn"))


@pytest.mark.parametrize("extra", ["field", "element"])
def test_a_record_with_more_fields_than_this_version_knows_is_refused(tmp_path: Path, extra: str) -> None:
    import msgspec

    path = str(tmp_path / "test.wal")
    write_log(path, CMDS[:3])
    order = ["n", "alice", "ACME", "buy", "limit", 100, 1, "gtc", False, "c1", "from-the-future"]
    record = [4, 1_700_000_000_003, order] if extra == "field" else [4, 1_700_000_000_003, order[:-1], 2]
    with open(path, "ab") as f:
        f.write(frame(msgspec.msgpack.encode(record)))
    before = Path(path).read_bytes()
    with pytest.raises(CorruptLog, match=r"not a record: .*a log written by a newer tickflow\?"):
        replayed(path)
    assert Path(path).read_bytes() == before


def test_cut_describes_itself() -> None:
    assert str(Cut(120, 7, "short payload")) == "cut a torn tail at byte 120: 7 bytes dropped (short payload)"


@contextlib.contextmanager
def unwritable(path: Path) -> Iterator[None]:
    """`path` may not be written by this process for the block: its mode for a plain user, and for root
    (whom modes do not stop) the immutable flag."""
    if os.geteuid() != 0:
        path.chmod(0o444)
        try:
            yield
        finally:
            path.chmod(0o644)
        return
    made = subprocess.run(["chattr", "+i", str(path)], capture_output=True) if shutil.which("chattr") else None
    if made is None or made.returncode != 0:
        pytest.skip("root, and no chattr +i here: nothing stops root from writing the file")
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_log_that_cannot_be_written_is_refused_before_it_is_read(log: tuple[str, list[int], bytes]) -> None:
    """Not after its replay, which for a big log takes many seconds: the file is opened for appending
    only at the end of it."""
    path, offsets, data = log
    flipped = bytearray(data)
    flipped[offsets[5] + HEADER_SIZE] ^= 1  # a replay would refuse this log, and yield five records first
    Path(path).write_bytes(bytes(flipped))
    with unwritable(Path(path)):
        with pytest.raises(PermissionError):
            Wal.open(path)
    assert Path(path).read_bytes() == bytes(flipped)


def test_a_log_checked_in_memory_reports_a_torn_tail_and_changes_no_file(log: tuple[str, list[int], bytes]) -> None:
    path, offsets, data = log
    torn = data[:-3]
    wal = Wal.checking(path, torn)  # the file itself still holds every record: it is never read
    seen = [offset for offset, _ in wal.replay()]
    assert seen == offsets[:-2]
    assert wal.cut == Cut(offsets[-2], len(torn) - offsets[-2], "short payload")
    assert Path(path).read_bytes() == data
    with pytest.raises(RuntimeError, match="replay"):
        wal.append(payloads(CMDS[:1]))
