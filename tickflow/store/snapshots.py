"""Snapshot files: the engine's whole state at a sequence number, and where the log goes on after it.

A file is `snap-<seq, 20 digits>.bin`:

    tickflow snapshot v1\\n                     the format, by name (a later one is refused by name)
    [seq u64][log offset u64][first ts i64]     little-endian: the last command it holds, the log's byte
                                                offset of the record after it, the log's first stamp
    [state length u64][state]                   core.snapshot.EngineState as msgpack
    [CRC32 u32]                                 over every byte before it

It is written under a temporary name, fsynced, renamed and its directory fsynced, so a crash leaves
either the whole file or a temporary one that the next start deletes. A file that fails its checksum
(torn, or damaged) is reported and passed over for an older one, whose log records are still there.
"""

from __future__ import annotations

import os
import re
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

import msgspec

from tickflow.core.snapshot import EngineState
from tickflow.store.datadir import sync_dir

MAGIC = b"tickflow snapshot v1\n"
_MAGIC_STEM = b"tickflow snapshot v"
_HEAD = struct.Struct("<QQqQ")
_CRC = struct.Struct("<I")
NAME = re.compile(r"\Asnap-(\d{20})\.bin\Z")
TEMPORARY = re.compile(r"\A\.snap-(\d{20})\.tmp\Z")
_decoder = msgspec.msgpack.Decoder(EngineState)
_encoder = msgspec.msgpack.Encoder()


class SnapshotError(Exception):
    """A snapshot file that cannot be used: the message says which and why."""


class NewerSnapshot(SnapshotError):
    """A snapshot in a format this tickflow does not know: refused, never passed over."""


@dataclass(frozen=True)
class Snapshot:
    """A verified snapshot file, its state not yet decoded."""

    path: Path
    seq: int
    log_offset: int
    first_ts: int | None
    """The time stamped on the log's first record: it names the exchange (None for an empty log)."""
    _state: bytes

    def state(self) -> EngineState:
        try:
            return _decoder.decode(self._state)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise SnapshotError(f"{self.path}: its checksum holds but it is no engine state: {e}") from None


def file_name(seq: int) -> str:
    return f"snap-{seq:020d}.bin"


def encode(seq: int, log_offset: int, first_ts: int | None, state: EngineState) -> bytes:
    body = _encoder.encode(state)
    head = MAGIC + _HEAD.pack(seq, log_offset, -1 if first_ts is None else first_ts, len(body))
    crc = zlib.crc32(body, zlib.crc32(head))
    return head + body + _CRC.pack(crc)


def write_temporary(directory: Path, seq: int, data: bytes) -> Path:
    """`data` in a new temporary snapshot file of `directory`, fsynced; OSError (a full disk) if not."""
    path = directory / f".snap-{seq:020d}.tmp"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def publish(temporary: Path) -> Path:
    """Give a written temporary snapshot its name, durably (rename, then fsync the directory)."""
    seq = int(TEMPORARY.match(temporary.name).group(1))  # type: ignore[union-attr]
    final = temporary.with_name(file_name(seq))
    os.rename(temporary, final)
    sync_dir(final.parent)
    return final


def read(path: Path) -> Snapshot:
    """The snapshot in `path`, checked whole; SnapshotError if it is torn or damaged, NewerSnapshot for a
    later format."""
    data = path.read_bytes()
    if not data.startswith(MAGIC):
        line = data[: len(MAGIC) + 8].split(b"\n", 1)[0]
        if data.startswith(_MAGIC_STEM) and b"\n" in data[: len(MAGIC) + 8]:
            version = line[len(_MAGIC_STEM):].decode("ascii", "replace")
            raise NewerSnapshot(f"{path} is a snapshot in format v{version}, which this tickflow cannot read "
                                "(it reads v1): written by a newer tickflow? Run that version, or move the "
                                "file aside to start from the one before it")
        raise SnapshotError(f"{path} is not a tickflow snapshot (it does not start with {MAGIC.strip()!r})")
    end_of_head = len(MAGIC) + _HEAD.size
    if len(data) < end_of_head + _CRC.size:
        raise SnapshotError(f"{path} is torn: {len(data)} bytes, shorter than a snapshot's frame")
    seq, log_offset, first_ts, length = _HEAD.unpack_from(data, len(MAGIC))
    if len(data) != end_of_head + length + _CRC.size:
        raise SnapshotError(f"{path} is torn or damaged: {len(data)} bytes where its header says "
                            f"{end_of_head + length + _CRC.size}")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: len(data) - _CRC.size]) != crc:
        raise SnapshotError(f"{path} fails its checksum: damaged")
    if NAME.match(path.name) and int(NAME.match(path.name).group(1)) != seq:  # type: ignore[union-attr]
        raise SnapshotError(f"{path} holds seq {seq}, not the one its name says")
    return Snapshot(path, seq, log_offset, None if first_ts < 0 else first_ts, data[end_of_head:-_CRC.size])


def on_disk(directory: Path) -> list[Path]:
    """The snapshot files of `directory`, newest first."""
    found = [p for p in directory.iterdir() if NAME.match(p.name)] if directory.is_dir() else []
    return sorted(found, key=lambda p: p.name, reverse=True)


def remove_temporaries(directory: Path) -> list[Path]:
    """Delete what a crash left of snapshots being written; the paths deleted."""
    gone = [p for p in directory.iterdir() if TEMPORARY.match(p.name) and p.is_file()] if directory.is_dir() else []
    for path in gone:
        path.unlink(missing_ok=True)
    return gone


def prune(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` snapshots; the paths deleted."""
    gone = on_disk(directory)[keep:]
    for path in gone:
        path.unlink(missing_ok=True)
    if gone:
        sync_dir(directory)
    return gone
