"""The log as a chain of segment files in the data directory: their names, the log that replays them in
order and appends to the last, the roll to a new one, and the deletion of those a snapshot has made
unnecessary.

A segment is named by the sequence number of its first record, `wal-<seq, 20 digits>.log`, so names sort
in log order; `wal.log` is the first segment (seq 1), the log of a data directory from before segments,
and of every new one. Each segment starts with the file header (`wal.FILE_HEADER`). Only the last segment
is ever appended to; the others are sealed, synced whole before the next one was created.

Replay reads one segment at a time. The torn-tail rules (`Wal.replay_batches`) apply to the last segment
only: a bad record in a sealed one is corruption, refused with its file and offset. So is a gap, a segment
whose first seq does not follow the records of the one before it.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from tickflow.store.datadir import WAL_FILE, sync_dir
from tickflow.store.log.wal import FILE_HEADER, CorruptLog, Cut, FileOps, OsFileOps, Wal

log = logging.getLogger("tickflow")

SEGMENT_BYTES = 64 << 20
"""A segment is sealed, and the next one begun, once it holds this many bytes (`serve --segment-bytes`)."""
MIN_SEGMENT_BYTES = 4096
NAME = re.compile(r"\Awal-(\d{20})\.log\Z")
PROGRESS_EVERY = 2.0
"""Seconds between the lines a long replay logs about how far it has come."""


class MissingSegment(CorruptLog):
    """The records between two segments, or before the first one a start needs, are not on disk."""

    def __init__(self, path: str, why: str) -> None:
        Exception.__init__(self, f"{path}: {why}; refusing to start without them (nothing was changed)")
        self.path = path
        self.offset = 0
        self.why = why
        self.because = ""


def segment_name(first_seq: int) -> str:
    return WAL_FILE if first_seq == 1 else f"wal-{first_seq:020d}.log"


@dataclass(frozen=True)
class Segment:
    path: Path
    first_seq: int


def listing(directory: Path) -> list[Segment]:
    """The segments in `directory`, in log order (`wal.log` is the one that begins at seq 1)."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        if path.name == WAL_FILE:
            found.append(Segment(path, 1))
        elif (named := NAME.match(path.name)) is not None:
            found.append(Segment(path, int(named.group(1))))
    found.sort(key=lambda s: s.first_seq)
    for a, b in zip(found, found[1:]):
        if a.first_seq == b.first_seq:
            raise MissingSegment(str(b.path), f"{a.path.name} begins at the same seq {a.first_seq}")
    return found


def current_path(directory: Path) -> Path:
    """The segment a server appends to: the last one, or `wal.log` for a new log."""
    found = listing(directory)
    return found[-1].path if found else directory / WAL_FILE


def on_disk(directory: Path) -> tuple[int, int]:
    """Bytes of the log's segments on disk and how many there are."""
    total = count = 0
    for segment in listing(directory):
        try:
            total += segment.path.stat().st_size
            count += 1
        except FileNotFoundError:  # deleted meanwhile by retention
            pass
    return total, count


def retire(directory: Path, upto_seq: int) -> list[Path]:
    """Delete the segments whose every record has a seq at or before `upto_seq` (the oldest snapshot
    kept), never the last one, and sync the directory; the paths deleted.

    A segment's last seq is the next one's first minus one, so only whole sealed segments go, from the
    front: a start from that snapshot reads none of them."""
    found = listing(directory)
    gone = []
    for segment, after in zip(found, found[1:]):
        if after.first_seq - 1 > upto_seq:
            break
        segment.path.unlink(missing_ok=True)
        gone.append(segment.path)
    if gone:
        sync_dir(directory)
    return gone


class SegmentedLog:
    """The log of a data directory: replayed segment by segment from where a start begins, then appended
    to in its last segment, and rolled to a new one by the sequencer between batches.

    `size` counts every byte written since this process opened the log, over all its segments (sealed
    ones in full, then the current one), so sizes from before and after a roll stay ordered; the
    sequencer and the syncer compare them. `position` is the place in the current segment."""

    def __init__(self, directory: Path, ops: FileOps, chain: list[tuple[Segment, int]], next_seq: int, *,
                 segment_bytes: int = SEGMENT_BYTES, checking: bool = False) -> None:
        self.directory = directory
        self.ops = ops
        self.segment_bytes = segment_bytes
        self._chain = chain
        self._next_seq = next_seq
        self._checking = checking
        self._current: Wal | None = None
        self._sealed = 0
        """Bytes of the segments sealed since the replay (the log's sizes start at the last one's)."""
        self._replayed = 0
        self._appended = 0
        self.framed_elsewhere = 0
        self.cut: Cut | None = None
        self.replayed_segments: list[tuple[Segment, int, int]] = []
        """(segment, records replayed, bytes read) for each segment the replay went through."""

    @classmethod
    def open(cls, directory: Path, ops: FileOps | None = None, *, after_seq: int = 0, offset: int = 0,
             segment_bytes: int = SEGMENT_BYTES, checking: bool = False) -> "SegmentedLog":
        """The log of `directory`, to replay from the record after `after_seq` (a snapshot's seq; 0 for
        the whole log), which is at byte `offset` of the segment holding record `after_seq`.

        Raises MissingSegment when the segment that record is in was deleted or lost."""
        found = listing(directory)
        if not found:
            found = [Segment(directory / WAL_FILE, 1)]  # a new log
        want = after_seq + 1
        index = max((i for i, s in enumerate(found) if s.first_seq <= want), default=None)
        if index is None:
            first = found[0]
            where = f"the snapshot at seq {after_seq}" if after_seq else "the first record"
            raise MissingSegment(str(first.path), f"the log begins at seq {first.first_seq}, so the records "
                                 f"from seq {want} (after {where}) to {first.first_seq - 1} are missing")
        start = found[index]
        # A snapshot's offset is in the segment holding its own last record; one that begins right after
        # it is read from its start.
        chain = [(start, 0 if start.first_seq == want else offset)] + [(s, 0) for s in found[index + 1:]]
        return cls(directory, ops or OsFileOps(), chain, want, segment_bytes=segment_bytes, checking=checking)

    # ------------------------------------------------------------------ replay

    def replay_batches(self, size: int = 4096) -> Iterator[tuple[int, int, bytes | bytearray]]:
        """`Wal.replay_batches` over each segment in turn (offsets are the current segment's: `path` and
        `base` name it). The last segment is opened for appending afterwards (unless checking)."""
        expected = self._next_seq
        total = sum(_size(s.path) - at for s, at in self._chain) or 1
        done = 0
        said = time.monotonic()
        for i, (segment, at) in enumerate(self._chain):
            last = i == len(self._chain) - 1
            if i and segment.first_seq != expected:
                before = self._chain[i - 1][0].path.name
                raise MissingSegment(str(segment.path), f"it begins at seq {segment.first_seq}, but {before} ends "
                                     f"at seq {expected - 1}: the segment holding the records between is missing")
            path = str(segment.path)
            wal = Wal.open(path, self.ops, at) if last and not self._checking else Wal.sealed(path, self.ops, at)
            self._current = wal
            for batch in wal.replay_batches(size):
                yield batch
                if time.monotonic() - said >= PROGRESS_EVERY:
                    said = time.monotonic()
                    read = done + wal.base + batch[0] + len(batch[2]) - at
                    log.info("replaying the log: %d records, %d%% of the way (%s)", self._replayed + wal.records
                             + batch[1], min(99, 100 * read // total), segment.path.name)
            if wal.cut is not None and not last:
                raise CorruptLog(path, wal.cut.offset, wal.cut.why,
                                 f"in a sealed segment ({self._chain[i + 1][0].path.name} follows it), so it is "
                                 "no torn tail")
            self.cut = wal.cut
            expected += wal.records
            self._replayed += wal.records
            self.framed_elsewhere += wal.framed_elsewhere
            self.replayed_segments.append((segment, wal.records, wal.size - at if at else wal.size))
            done += _size(segment.path) - at
            if not last:
                wal.close()

    def payloads(self, offset: int, count: int) -> list[memoryview]:
        return self._wal.payloads(offset, count)

    @property
    def path(self) -> str:
        return self._wal.path

    @property
    def base(self) -> int:
        return self._wal.base

    @property
    def records(self) -> int:
        """Records replayed, and appended since."""
        return self._replayed + self._appended

    @property
    def _wal(self) -> Wal:
        if self._current is None:
            raise RuntimeError("replay the log first")
        return self._current

    # ------------------------------------------------------------------ appending

    @property
    def size(self) -> int:
        return self._sealed + self._wal.size

    @property
    def position(self) -> int:
        return self._wal.size

    @property
    def failed(self) -> str | None:
        return self._wal.failed

    @property
    def roll_due(self) -> bool:
        return self._wal.size >= self.segment_bytes

    def roll(self, first_seq: int) -> None:
        """Seal the current segment and go on in a new one whose first record will be `first_seq`. The
        caller has made the current one durable whole; the new one's directory entry and header are
        made durable here, before any record goes in. OSError (LogError) if it cannot be created."""
        new = Wal.create(str(self.directory / segment_name(first_seq)), self.ops)
        old = self._wal
        self._sealed += old.size
        old.close()
        self._current = new
        self._chain.append((Segment(Path(new.path), first_seq), 0))
        log.info("log segment %s begun", Path(new.path).name)

    def append(self, payloads: list[bytes]) -> None:
        self._wal.append(payloads)
        self._appended += len(payloads)

    def sync(self) -> None:
        self._wal.sync()

    def discard_after(self, durable: int) -> bool:
        # A roll waits until the segment it seals is durable whole, so the tail is in the current one.
        return self._wal.discard_after(max(durable - self._sealed, len(FILE_HEADER)))

    def fileno(self) -> int:
        return self._wal.fileno()

    def fail(self, why: str) -> None:
        self._wal.fail(why)

    def on_disk(self) -> tuple[int, int]:
        return on_disk(self.directory)

    def close(self) -> None:
        if self._current is not None:
            self._current.close()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0
