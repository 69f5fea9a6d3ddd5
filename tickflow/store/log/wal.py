"""The write-ahead log: a 16-byte file header, then `[length u32][CRC32 u32][payload]` records,
little-endian, appended in batches.

The header (`tickflow wal v1` and a newline) says what the file is and its format: a file that does
not start with it is refused, never cut (unless it is empty, or a header torn while the log was
created, followed by nothing but zeros), and a later format is refused by name.

`Wal.open` first makes sure the file can be appended to (a log this process may not write is refused
before it is read, not after a long replay), then reads it; iterating `replay()` (or `replay_batches()`,
which has a long log framed by a helper process meanwhile)
to the end checks it, cuts a torn tail, writes a header torn at creation again, syncs, and opens the
file for appending. A bad record with nothing valid after it is a torn tail from a crash: the file is
cut back to the last good record and the cut is reported. A bad record that is followed by a valid one
is corruption: acknowledged records may sit behind it, so opening fails with the offset and nothing is
truncated. `Wal.checking` replays bytes already read, reporting what a start would cut and changing no
file (`tickflow log`).
"""

from __future__ import annotations

import logging
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Protocol

# The framing lives in frames.py (the framing helper process imports it alone); its names are the log's.
from tickflow.store.datadir import sync_dir
from tickflow.store.log.frames import HEADER, HEADER_SIZE, MAX_PAYLOAD, batch_end, frame, good_records  # noqa: F401
from tickflow.store.log.helpers import above_stdio, framed_elsewhere, other_cores, write_all  # noqa: F401

FILE_HEADER = b"tickflow wal v1\n"
"""The first bytes of every log: what the file is, and the format of the records after it."""
log = logging.getLogger(__name__)
_FILE_HEADER_STEM = b"tickflow wal v"
_NONZERO = re.compile(rb"[^\x00]")
_PLAUSIBLE_LENGTH = re.compile(rb"[\x00-\x10]\x00")
"""Bytes 2 and 3 of a little-endian length up to MAX_PAYLOAD (0x100000)."""


class LogError(Exception):
    """The log device failed (ENOSPC, EIO, ...): nothing written since the last sync is durable."""


class CorruptLog(Exception):
    """A bad record is followed by valid ones: refusing to drop what lies behind it."""

    NOT_THE_TAIL = "followed by valid records, so it is no torn tail"
    WHOLE = "its checksum holds, so it is no torn write"
    UNREADABLE = "its checksum holds, so it is no torn write (a log written by a newer tickflow?)"

    def __init__(self, path: str, offset: int, why: str, because: str = NOT_THE_TAIL) -> None:
        super().__init__(
            f"{path}: corrupt record at byte offset {offset} ({why}), {because}; refusing to open "
            "rather than drop acknowledged records (a torn tail would be cut)"
        )
        self.path = path
        self.offset = offset
        self.why = why
        self.because = because


class NotALog(CorruptLog):
    """The file does not start with a log header this version reads: another file, or a later format."""

    def __init__(self, path: str, why: str) -> None:
        Exception.__init__(self, f"{path}: {why}; refusing to open it (nothing was changed)")
        self.path = path
        self.offset = 0
        self.why = why
        self.because = ""


@dataclass(frozen=True)
class Cut:
    """A torn tail that was truncated on open."""

    offset: int
    dropped: int
    why: str

    def __str__(self) -> str:
        return f"cut a torn tail at byte {self.offset}: {self.dropped} bytes dropped ({self.why})"


class FileOps(Protocol):
    """The few file operations the log needs; tests swap in a layer that can lose unsynced bytes."""

    def read(self, path: str) -> bytes: ...
    def open_append(self, path: str) -> int: ...
    def write(self, fd: int, data: bytes | memoryview) -> int: ...
    def sync(self, fd: int) -> None: ...
    def truncate(self, fd: int, size: int) -> None: ...
    def close(self, fd: int) -> None: ...


class OsFileOps:
    """The real file system."""

    def read(self, path: str) -> bytes:
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return b""

    def open_append(self, path: str) -> int:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # orders are nobody else's business
        sync_dir(Path(os.path.abspath(path)).parent)
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        return os.write(fd, data)

    def sync(self, fd: int) -> None:
        os.fdatasync(fd)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def close(self, fd: int) -> None:
        os.close(fd)


def _read_from(path: str, start: int) -> bytes:
    """The file header and the bytes from `start` on (what a replay from a snapshot reads)."""
    try:
        with open(path, "rb") as f:
            head = f.read(len(FILE_HEADER))
            f.seek(start)
            return head + f.read()
    except FileNotFoundError:
        return b""


def _check(data: bytes, offset: int) -> str | None:
    """Why the record at `offset` is not valid, or None if it is."""
    size = len(data)
    if offset + HEADER_SIZE > size:
        return "short header"
    length, crc = HEADER.unpack_from(data, offset)
    if length == 0 or length > MAX_PAYLOAD:
        return f"bad length {length}"
    end = offset + HEADER_SIZE + length
    if end > size:
        return "short payload"
    if zlib.crc32(memoryview(data)[offset + HEADER_SIZE : end]) != crc:
        return "bad CRC"
    return None


def _valid_record_after(data: bytes, offset: int) -> bool:
    """True when some byte position after `offset` starts a valid record (so `offset` is no tear)."""
    start = offset + 1
    last = len(data) - HEADER_SIZE
    while start < last:
        # Only where a length could be at most MAX_PAYLOAD: one position in thousands of random bytes.
        plausible = _PLAUSIBLE_LENGTH.search(data, start + 2)
        if plausible is None:
            return False
        start = plausible.start() - 2
        if start >= last:
            return False
        if data[start : start + 4] == b"\0\0\0\0":  # a zero length: skip the whole run of zeros
            found = _NONZERO.search(data, start)
            if found is None:
                return False
            start = max(start + 1, found.start() - 3)
            continue
        if _check(data, start) is None:
            return True
        start += 1
    return False


def starts_with_record(data: bytes) -> bool:
    """True when `data` begins with a whole record whose checksum holds: a log from before logs had a
    header does; a foreign file almost never does (its first 8 bytes would have to frame a CRC-32)."""
    return _check(data, 0) is None


def _records_start(path: str, data: bytes) -> int | None:
    """Where the records begin: after the file header; None for a file that holds no log yet.

    An empty file, or one whose header was torn by a crash while it was created (a part of the
    header, then nothing but zeros), holds no log yet: the header is synced before any record is
    written, so no record can have been acknowledged in it. Anything else without the header is
    refused: cutting it would empty somebody else's file."""
    if data[: len(FILE_HEADER)] == FILE_HEADER:
        return len(FILE_HEADER)
    head = data[: len(FILE_HEADER)].rstrip(b"\0")
    if FILE_HEADER.startswith(head) and not _NONZERO.search(data, len(FILE_HEADER)):
        return None
    if data.startswith(_FILE_HEADER_STEM) and b"\n" in head:
        version = head[len(_FILE_HEADER_STEM) : head.index(b"\n")].decode("ascii", "replace")
        raise NotALog(path, f"a log in format v{version}, which this tickflow cannot read (it reads v1): "
                            "written by a newer tickflow?")
    first_line = FILE_HEADER.decode().strip()
    if starts_with_record(data):
        raise NotALog(path, f'it starts with a whole record but not with "{first_line}": a log written before '
                            "tickflow logs had a header? `tickflow log --upgrade` gives it one")
    raise NotALog(path, f'it does not start with "{first_line}" (a tickflow log\'s first line), '
                        "so it is no tickflow log")


class Wal:
    """An append-only log file. `open` reads it; iterate `replay()` before appending."""

    FRAME_ELSEWHERE_FROM = 4 << 20
    """Bytes of records from which a replay starts the framing helper: below it, starting an interpreter
    costs more than the framing it would take off this process (docs/decisions.md, "Frame a long log
    in a helper process")."""
    FRAME_HELPER_SILENCE = 10.0
    """Seconds without a byte from the framing helper after which this process frames the rest itself
    (a batch takes it milliseconds: one that says nothing for this long hangs)."""

    def __init__(self, path: str, data: bytes, ops: FileOps, *, writable: bool = True) -> None:
        self.path = path
        self.ops = ops
        self._data = data
        self._writable = writable
        """False for a log checked in memory: its replay reports a torn tail but touches no file."""
        self.cut: Cut | None = None
        self.base = 0
        """File offset minus offset in the bytes read: how far into the file a replay from a snapshot began."""
        self.size = 0
        self.records = 0
        self.framed_elsewhere = 0
        """Records of the replay that the framing helper process framed and checked."""
        self._fd: int | None = None
        self.failed: str | None = None
        """Why the log takes nothing more (a write or a sync failed)."""
        self._sync_failed: str | None = None
        """Why no sync can be trusted any more; a failed write alone still lets earlier records be synced."""

    @classmethod
    def open(cls, path: str, ops: FileOps | None = None, start: int = 0) -> "Wal":
        """Read the log at `path` (created if missing), once sure it can be appended to: OSError if not.

        With `start` (a snapshot's log offset: a record boundary after the file header), only the
        header and the records from `start` on are read and replayed; offsets stay the file's."""
        ops = ops or OsFileOps()
        # The file is opened for appending for good only after the replay, which can take many
        # seconds; a log that cannot be written is refused now, before any of that work.
        ops.close(ops.open_append(path))
        return cls._read(path, ops, start, writable=True)

    @classmethod
    def sealed(cls, path: str, ops: FileOps | None = None, start: int = 0) -> "Wal":
        """A segment that is no longer appended to, read from `start` like `open` reads: its replay
        changes no file, and a torn tail is left in `cut` for the caller to judge."""
        return cls._read(path, ops or OsFileOps(), start, writable=False)

    @classmethod
    def _read(cls, path: str, ops: FileOps, start: int, *, writable: bool) -> "Wal":
        if not start:
            return cls(path, ops.read(path), ops, writable=writable)
        if type(ops) is OsFileOps:  # the records before `start` are never read
            size = os.path.getsize(path) if os.path.exists(path) else 0
            data = _read_from(path, start) if size >= start else b""
            head, rest = data[: len(FILE_HEADER)], data[len(FILE_HEADER):]
        else:
            data = ops.read(path)
            size, head, rest = len(data), data[: len(FILE_HEADER)], data[start:]
        if start < len(FILE_HEADER) or size < start:
            raise CorruptLog(path, size, f"the log ends at byte {size}, before byte {start} where the snapshot "
                             "says its records go on", "so the snapshot is ahead of the log")
        wal = cls(path, head + rest, ops, writable=writable)
        wal.base = start - len(FILE_HEADER)
        return wal

    @classmethod
    def create(cls, path: str, ops: FileOps | None = None) -> "Wal":
        """A new segment at `path`, open for appending: its directory entry and its header are durable
        before any record is written (FileExistsError if a file with records is in the way)."""
        ops = ops or OsFileOps()
        if ops.read(path):
            raise FileExistsError(f"{path}: a log segment of that name already exists")
        wal = cls(path, b"", ops)
        wal._fd = ops.open_append(path)  # (OsFileOps syncs the directory)
        try:
            wal._write(FILE_HEADER)
            ops.sync(wal._fd)
        except BaseException:
            wal.close()
            raise
        return wal

    @classmethod
    def checking(cls, path: str, data: bytes) -> "Wal":
        """The log whose content `data` was read from `path`, to replay without changing any file."""
        return cls(path, data, OsFileOps(), writable=False)

    def replay(self) -> Iterator[tuple[int, memoryview]]:
        """Yield (offset, payload) for every good record in order, then cut a torn tail, sync what is
        left, and open the file for appending (a log being checked only reports the cut in `cut`).

        Raises CorruptLog (after yielding the good records before it) if a bad record is not the tail.
        """
        for offset, count, _ in self.replay_batches():
            for payload in self.payloads(offset, count):
                yield offset, payload
                offset += HEADER_SIZE + len(payload)

    def replay_batches(self, size: int = 4096) -> Iterator[tuple[int, int, bytes | bytearray]]:
        """Like `replay`, in batches of up to `size` consecutive records: (the first one's offset, how
        many, their payloads joined). `payloads` splits a batch while the replay runs.

        A log of `FRAME_ELSEWHERE_FROM` bytes or more is framed by a helper process on another core
        (frame_helper.py: the same checks, from a copy of these bytes) while the caller decodes and
        applies; from where the helper stops (the end, a bad record, or its failure) this process
        goes on by itself, and decides alone what is a torn tail and what is corruption."""
        data = self._data
        end_of_data = len(data)
        start = _records_start(self.path, data)
        if start is None:  # no log yet: nothing to replay, and the header is (re)written below
            if data:
                self.cut = Cut(0, end_of_data, "a torn file header: the log was being created")
            start = end_of_data = 0
        offset = start
        count = 0
        if end_of_data - start >= self.FRAME_ELSEWHERE_FROM and other_cores():
            for first, n, joined in framed_elsewhere(data, start, self.FRAME_HELPER_SILENCE):
                if first != offset or not 0 < n <= size:  # (_framed_elsewhere checked its bytes)
                    break  # not what was asked for: frame the rest here
                count += n
                self.framed_elsewhere += n
                yield first, n, joined
                offset = first + n * HEADER_SIZE + len(joined)
        for first, payloads in good_records(data, offset, size):
            count += len(payloads)
            yield first, len(payloads), b"".join(payloads)
            offset = batch_end(first, payloads)
        base = self.base
        if offset < end_of_data:
            why = _check(data, offset) or "bad record"
            if _valid_record_after(data, offset):
                raise CorruptLog(self.path, base + offset, why)
            self.cut = Cut(base + offset, end_of_data - offset, why)
        self.records = count
        self._data = b""
        self.size = base + offset
        if not self._writable:
            return
        self._fd = self.ops.open_append(self.path)
        if self.cut is not None:
            self.ops.truncate(self._fd, base + offset)
        if offset == 0:
            self._write(FILE_HEADER)
        # The header is durable before any record follows it. And what was replayed counts as
        # durable from here on (a retry is answered from it, a cancel refused by it), but a crash in
        # `none` mode, or one before a group's sync returned, can leave records only in the page
        # cache: one sync makes them so.
        self.ops.sync(self._fd)

    def payloads(self, offset: int, count: int) -> list[memoryview]:
        """The payloads of a batch `replay_batches` just gave (its offset and count), one by one."""
        return next(good_records(self._data, offset, count), (offset, []))[1]

    def append(self, payloads: list[bytes]) -> None:
        """Write framed records in one write (page cache only; `sync` makes them durable)."""
        if self.failed:
            raise LogError(self.failed)
        if self._fd is None:
            raise RuntimeError("replay() the log before appending")
        pack = HEADER.pack
        crc32 = zlib.crc32
        buf = b"".join([pack(len(p), crc32(p)) + p for p in payloads])
        self._write(buf)
        self.records += len(payloads)

    def _write(self, buf: bytes) -> None:
        assert self._fd is not None
        view = memoryview(buf)
        start = self.size
        written = 0
        try:
            while written < len(buf):
                written += self.ops.write(self._fd, view[written:])
        except OSError as e:
            self._fail(f"write to {self.path} failed: {e}")
            # Take back the part of the batch that did reach the file, so no caller's record is
            # half there; the log is failed from here on either way.
            try:
                self.ops.truncate(self._fd, start)
            except OSError as cut:
                # The whole records of the part written would be replayed at the next start,
                # though their callers are told they were not taken: blank them instead.
                if written:
                    self._blank(start, start + written, f"cutting it back after the failed write failed: {cut}")
            raise LogError(self.failed) from e
        self.size = start + written

    def sync(self) -> None:
        """fdatasync: after it returns, everything appended before it began survives power loss.

        After a failed write it still syncs the records written before that one (their callers can
        then be answered truthfully); after a failed sync it refuses."""
        if self._sync_failed:
            raise LogError(self._sync_failed)
        assert self._fd is not None
        try:
            self.ops.sync(self._fd)
        except OSError as e:
            # After a failed fsync the kernel may have dropped the dirty pages: nothing unsynced
            # can be trusted, so the log stops here.
            self.fail(f"fdatasync of {self.path} failed: {e}")
            raise LogError(self.failed) from e

    def discard_after(self, durable: int) -> bool:
        """After a failed sync, cut the records no caller was told were taken (best effort: the device
        may be failing), so the next start does not replay them; False if the cut failed."""
        if self._fd is None or self.size <= durable:
            return True
        try:
            self.ops.truncate(self._fd, durable)
        except OSError as e:
            return self._blank(durable, self.size, f"cutting it back after the failed sync failed: {e}")
        try:
            self.ops.sync(self._fd)
        except OSError:
            return False
        self.size = durable
        return True

    def _blank(self, start: int, end: int, why: str) -> bool:
        """Overwrite the file's bytes [start, end) with zeros and sync them, when they could not be cut:
        a start then finds nothing valid from `start` on and cuts it as a torn tail, rather than replay
        records whose callers were told they were not taken. Logged either way; False if it failed too.

        Beside FileOps on purpose: the log's descriptor appends (O_APPEND), so it cannot write in place."""
        try:
            fd = os.open(self.path, os.O_WRONLY)
            try:
                zeros = bytes(min(end - start, 1 << 20))
                at = start
                while at < end:
                    at += os.pwrite(fd, zeros[: end - at], at)
                os.fdatasync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            log.error("%s: %s, and blanking its bytes %d-%d failed too (%s): the next start may replay "
                      "commands whose callers were told they were not taken; before restarting, cut the "
                      "log to %d bytes (truncate -s %d %s)", self.path, why, start, end, e, start, start,
                      self.path)
            return False
        log.error("%s: %s; its bytes %d-%d (the records no caller was told were taken) were blanked with "
                  "zeros instead, which the next start cuts as a torn tail", self.path, why, start, end)
        return True

    @property
    def position(self) -> int:
        """Bytes in this file: where the next record goes (a snapshot names its place by it)."""
        return self.size

    def on_disk(self) -> tuple[int, int]:
        """Bytes of the log on disk and how many files hold them."""
        return self.size, 1

    def fileno(self) -> int:
        """The open log file (for a sync done elsewhere: see store/syncer.py)."""
        if self._fd is None:
            raise RuntimeError("replay() the log before syncing it")
        return self._fd

    def fail(self, why: str) -> None:
        """A sync (here or done elsewhere) failed: take nothing more, and trust no later sync."""
        self._fail(why)
        if not self._sync_failed:
            self._sync_failed = why

    def _fail(self, why: str) -> None:
        if not self.failed:
            self.failed = why

    def close(self) -> None:
        if self._fd is not None:
            self.ops.close(self._fd)
            self._fd = None
