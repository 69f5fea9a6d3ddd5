"""A long log is framed by a helper process while this one decodes and applies: the same replay, to the byte.

Every case replays the same file twice, once framed here alone and once with the helper (the size
from which it starts set to 0), and the two must agree: records, state, the cut (on disk too) or the
corruption refused at the same offset with the file unchanged. The helper failing, at any point, only
means this process frames the rest itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from helpers.logs import commands, payloads, write_log

import tickflow.store.log.helpers as log_helpers
from tickflow.store.log import frames
from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol, Record
from tickflow.store.log.codec import encode_record
from tickflow.store.recovery import recover
from tickflow.store.log.wal import FILE_HEADER, CorruptLog, Wal, frame
from tickflow.core.snapshot import state_hash

CMDS = commands(10_000)  # three batches of 4,096 and a part


@pytest.fixture
def long_log(tmp_path: Path) -> tuple[str, list[int]]:
    path = str(tmp_path / "long.wal")
    return path, write_log(path, CMDS)


def replay(path: str, helper: bool, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Open and replay `path` (in a copy, so both ways start from the same bytes); what came of it."""
    copy = f"{path}.{'helper' if helper else 'here'}"
    Path(copy).write_bytes(Path(path).read_bytes())
    monkeypatch.setattr(Wal, "FRAME_ELSEWHERE_FROM", 0 if helper else 1 << 62)
    wal = Wal.open(copy)
    engine = Engine()
    try:
        recovery = recover(wal, engine)
    except CorruptLog as e:
        return {"corrupt": (e.offset, e.why, e.because), "file": Path(copy).read_bytes() == Path(path).read_bytes()}
    finally:
        wal.close()
    return {"records": recovery.records, "state": state_hash(engine), "framed_elsewhere": wal.framed_elsewhere,
            "cut": recovery.cut, "size": os.path.getsize(copy), "wal_size": wal.size}


def both_ways(path: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    here = replay(path, False, monkeypatch)
    helper = replay(path, True, monkeypatch)
    assert here.pop("framed_elsewhere", 0) == 0
    framed = helper.pop("framed_elsewhere", None)
    assert helper == here
    if "records" in helper:
        assert framed == helper["records"] > 0, "the helper framed every good record"
    return here


def test_an_intact_long_log_replays_the_same_framed_by_the_helper(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch) -> None:
    path, offsets = long_log
    result = both_ways(path, monkeypatch)
    assert result["records"] == len(CMDS) and result["cut"] is None and result["size"] == offsets[-1]


@pytest.mark.parametrize("damage", ["torn last record", "torn at a batch's end", "zeros", "garbage"])
def test_a_torn_tail_is_cut_the_same(long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch,
                                     damage: str) -> None:
    path, offsets = long_log
    with open(path, "r+b") as f:
        if damage == "torn last record":
            f.truncate(offsets[-1] - 3)
        elif damage == "torn at a batch's end":
            f.truncate(offsets[4096] + 5)  # inside the first record of the second batch
        elif damage == "zeros":
            f.seek(0, 2)
            f.write(b"\0" * 5000)
        else:
            f.seek(0, 2)
            f.write(b"\xff\x13 not a record at all" * 20)
    result = both_ways(path, monkeypatch)
    assert result["cut"] is not None and result["size"] == result["wal_size"] == result["cut"].offset
    assert result["records"] == (4096 if damage == "torn at a batch's end" else
                                 len(CMDS) - 1 if damage == "torn last record" else len(CMDS))


@pytest.mark.parametrize("at", [1, 4095, 4096, 9000])
@pytest.mark.parametrize("fault", ["flipped bit", "checksummed junk", "sequence hole"])
def test_corruption_is_refused_at_the_same_offset_with_the_file_unchanged(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch, at: int, fault: str) -> None:
    path, offsets = long_log
    data = bytearray(Path(path).read_bytes())
    if fault == "flipped bit":
        data[offsets[at] + 12] ^= 0x10
    else:
        # A record whose checksum holds in place of record `at` (same length, so the rest still frames).
        length = offsets[at + 1] - offsets[at] - 8
        seq = at + 3 if fault == "sequence hole" else None
        payload = encode_record(Record(seq, 0, AddSymbol("X" * 40))) if seq else b"\xc1" * length
        record = frame(payload.ljust(length, b"\0") if seq is None else payload)
        data[offsets[at]:offsets[at + 1]] = record
    Path(path).write_bytes(bytes(data))
    result = both_ways(path, monkeypatch)
    assert result["corrupt"][0] == offsets[at] and result["file"] is True


def replay_with_helper(path: str, script: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[int, dict[str, Any]]:
    """Replay with `script` as the framing helper: the records it framed, and what else came of it."""
    monkeypatch.setattr(log_helpers, "FRAME_HELPER", str(script))
    result = replay(path, True, monkeypatch)
    return result.pop("framed_elsewhere"), result


def test_the_replay_completes_when_the_helper_cannot_start_or_dies_part_way(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path, _ = long_log
    here = replay(path, False, monkeypatch)
    del here["framed_elsewhere"]
    frames_dir = os.path.dirname(log_helpers.FRAME_HELPER)
    assert replay_with_helper(path, tmp_path / "no such helper.py", monkeypatch) == (0, here)
    # A helper that sends the first batch, half of the second, and dies.
    dying = tmp_path / "dying_helper.py"
    dying.write_text(
        "import os, struct, sys\n"
        f"sys.path.insert(0, {frames_dir!r})\n"
        "import frames, mmap\n"
        "fd, start, out = (int(a) for a in sys.argv[1:4])\n"
        "data = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)\n"
        "batches = frames.good_records(data, start)\n"
        "first, payloads = next(batches)\n"
        "joined = b''.join(payloads)\n"
        "os.write(out, struct.pack('<qII', first, len(payloads), len(joined)) + joined)\n"
        "first, payloads = next(batches)\n"
        "joined = b''.join(payloads)\n"
        "os.write(out, struct.pack('<qII', first, len(payloads), len(joined)) + joined[: len(joined) // 2])\n"
    )
    assert replay_with_helper(path, dying, monkeypatch) == (4096, here)


def test_a_helper_that_answers_out_of_turn_is_not_believed(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Batches that do not follow on from the last one stop the helper's part: this process frames the rest."""
    path, _ = long_log
    here = replay(path, False, monkeypatch)
    del here["framed_elsewhere"]
    liar = tmp_path / "liar.py"
    liar.write_text(
        "import os, struct, sys\n"
        "out = int(sys.argv[3])\n"
        "os.write(out, struct.pack('<qII', 12345, 1, 3) + b'abc')\n"
    )
    assert replay_with_helper(path, liar, monkeypatch) == (0, here)


def lying_helper(tmp_path: Path, send: str) -> Path:
    """A helper that frames honestly, then sends the batches as `send` (Python, with `batches` and
    `send_batch(first, n, joined)`) says."""
    script = tmp_path / "lying_helper.py"
    script.write_text(
        "import mmap, os, struct, sys\n"
        f"sys.path.insert(0, {os.path.dirname(frames.__file__)!r})\n"
        "import frames\n"
        "fd, start, out = (int(a) for a in sys.argv[1:4])\n"
        "data = mmap.mmap(fd, os.fstat(fd).st_size, prot=mmap.PROT_READ)\n"
        "batches = list(frames.good_records(data, start))\n"
        "def send_batch(first, n, joined):\n"
        "    os.write(out, struct.pack('<qII', first, n, len(joined)) + joined)\n"
        + send
    )
    return script


def test_a_batch_past_the_end_of_the_bytes_is_not_believed(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A batch whose records would end beyond the bytes read (a torn last record taken for whole, or a
    length no log holds) stops the helper's part, and the torn tail is cut as without it."""
    path, offsets = long_log
    with open(path, "r+b") as f:
        f.truncate(offsets[-1] - 3)
    here = replay(path, False, monkeypatch)
    del here["framed_elsewhere"]
    assert here["cut"] is not None
    overshoot = lying_helper(tmp_path, (
        "for first, ps in batches[:-1]:\n"
        "    send_batch(first, len(ps), b''.join(ps))\n"
        "first, ps = batches[-1]\n"
        "send_batch(first, len(ps), b''.join(ps) + bytes(200))\n"))
    assert replay_with_helper(path, overshoot, monkeypatch) == (8192, here)
    huge = tmp_path / "huge.py"
    huge.write_text("import os, struct, sys\n"
                    "os.write(int(sys.argv[3]), struct.pack('<qII', int(sys.argv[2]), 4096, 0xFFFFFFF0))\n")
    assert replay_with_helper(path, huge, monkeypatch) == (0, here)


def test_a_batch_that_does_not_match_the_bytes_is_not_believed_or_refuses(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A batch whose first record or last byte is not what the log holds is framed here instead; one
    that claims junk in the log's middle for records is refused, never skipped over."""
    path, offsets = long_log
    here = replay(path, False, monkeypatch)
    del here["framed_elsewhere"]
    forged_first = lying_helper(tmp_path, (
        "first, ps = batches[0]\n"
        "send_batch(first, len(ps), b'\\x00' + b''.join(ps)[1:])\n"))
    assert replay_with_helper(path, forged_first, monkeypatch) == (0, here)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: offsets[3000]] + b"\xee" * 50 + data[offsets[3000]:])
    refused = replay(path, False, monkeypatch)
    assert refused["corrupt"][0] == offsets[3000]
    junk = lying_helper(tmp_path, (
        "first, ps = batches[0]\n"
        "send_batch(first, len(ps), b''.join(ps) + b'\\xee' * 50)\n"))
    monkeypatch.setattr(log_helpers, "FRAME_HELPER", str(junk))
    result = replay(path, True, monkeypatch)
    assert "framing helper" in result["corrupt"][1] and result["file"] is True


def test_a_helper_that_hangs_is_given_up_on(
        long_log: tuple[str, list[int]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path, _ = long_log
    here = replay(path, False, monkeypatch)
    del here["framed_elsewhere"]
    # The silence is counted from the helper's start, so it must cover an interpreter starting and framing
    # the whole log before its first batch (0.3 s was not always enough on a loaded machine); the hang
    # after that batch is given up on once it has lasted as long.
    monkeypatch.setattr(Wal, "FRAME_HELPER_SILENCE", 3.0)
    silent = lying_helper(tmp_path, (
        "first, ps = batches[0]\n"
        "send_batch(first, len(ps), b''.join(ps))\n"
        "import time; time.sleep(60)\n"))
    assert replay_with_helper(path, silent, monkeypatch) == (4096, here)


def test_the_helpers_work_with_stdin_closed(tmp_path: Path) -> None:
    """Started with stdin closed, a new file can be descriptor 0, which a helper's own stdin would cover:
    the framing helper would read /dev/null and the sync helper sync it. Both must see the log."""
    path = str(tmp_path / "x.wal")
    write_log(path, CMDS)
    script = (
        "import asyncio, os, sys\n"
        "os.close(0)\n"
        "from tickflow.core.engine import Engine\n"
        "from tickflow.core.types import AddSymbol\n"
        "from tickflow.net.exchange.sequencer import Sequencer\n"
        "from tickflow.store.recovery import recover\n"
        "from tickflow.store.log.wal import Wal\n"
        "Wal.FRAME_ELSEWHERE_FROM = 0\n"
        "wal = Wal.open(sys.argv[1])\n"
        "engine = Engine()\n"
        "recovery = recover(wal, engine)\n"
        "print('log fd', wal.fileno(), 'records', recovery.records, 'framed elsewhere', wal.framed_elsewhere)\n"
        "async def main():\n"
        "    sequencer = Sequencer(engine, wal, 'group')\n"
        "    await sequencer.start()\n"
        "    outcome = await sequencer.submit(AddSymbol('NEW'))\n"
        "    print('synced', sequencer.stats.syncs, 'seq', outcome.seq, 'failed', sequencer.failed)\n"
        "    await sequencer.stop()\n"
        "asyncio.run(main())\n"
    )
    out = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stderr
    assert f"log fd 0 records {len(CMDS)} framed elsewhere {len(CMDS)}" in out.stdout
    assert f"synced 1 seq {len(CMDS) + 1} failed None" in out.stdout


def test_the_helper_starts_from_4_mib_and_only_with_a_second_core(tmp_path: Path) -> None:
    """With the shipped threshold: a log just under it is framed here, one over it by the helper, and
    not when this process may run on one CPU only (the helper would only take turns with it)."""
    under, over = str(tmp_path / "under.wal"), str(tmp_path / "over.wal")
    per_record = write_log(under, CMDS)[-1] / len(CMDS)
    threshold = Wal.FRAME_ELSEWHERE_FROM
    write_log(under, commands(int(threshold / per_record * 0.95)))
    write_log(over, commands(int(threshold / per_record * 1.05)))
    script = (
        "import os, sys\n"
        "from tickflow.core.engine import Engine\n"
        "from tickflow.store.recovery import recover\n"
        "from tickflow.store.log.wal import Wal\n"
        "if sys.argv[1] == 'one':\n"
        "    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "for path in sys.argv[2:]:\n"
        "    wal = Wal.open(path)\n"
        "    recovery = recover(wal, Engine())\n"
        "    print(recovery.records, wal.framed_elsewhere)\n"
    )
    sizes = [os.path.getsize(under), os.path.getsize(over)]
    assert sizes[0] < threshold < sizes[1]
    for cpus in ("all", "one"):
        out = subprocess.run([sys.executable, "-c", script, cpus, under, over], capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        (n_under, framed_under), (n_over, framed_over) = (map(int, line.split()) for line in out.stdout.split("\n")[:2])
        assert framed_under == 0 and n_under > 0
        assert framed_over == (n_over if cpus == "all" and len(os.sched_getaffinity(0)) > 1 else 0)


def test_the_helper_reads_what_was_read_not_the_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It frames the bytes this process holds (a log being checked in memory has no such file)."""
    path = str(tmp_path / "x.wal")
    monkeypatch.setattr(Wal, "FRAME_ELSEWHERE_FROM", 0)
    data = FILE_HEADER + b"".join(frame(p) for p in payloads(CMDS[:5000]))
    wal = Wal.checking(path, data)  # no file at `path` at all
    engine = Engine()
    recovery = recover(wal, engine)
    assert recovery.records == 5000 and wal.framed_elsewhere == 5000 and not os.path.exists(path)
