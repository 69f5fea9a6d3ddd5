"""FileOps layers for tests: a disk that can lose what was never synced, faults, and a gated sync.

They wrap the real file system (so the log is a real file in tmp_path) and are thread-safe enough
for the sequencer, which writes on the event loop and syncs in a thread.
"""

from __future__ import annotations

import errno
import os
import random
import threading

from tickflow.store.log.wal import FileOps, OsFileOps


class PowerLossOps(OsFileOps):
    """The real file system, remembering how much of each file a sync has made durable.

    `cut_power()` rewrites the file as a power failure could leave it: everything synced, then
    none, all or a random prefix of what was written after (optionally with a zeroed tail, as when
    the size reached the disk but the data did not). After the cut every operation fails, as a
    dead machine does nothing more; the sequencer sees OSError and acknowledges nothing.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.paths: dict[int, str] = {}
        self.synced: dict[str, int] = {}
        self.dead = False

    def _alive(self) -> None:
        if self.dead:
            raise OSError(errno.EIO, "the power is off")

    def read(self, path: str) -> bytes:
        data = super().read(path)
        with self.lock:
            self.synced.setdefault(path, len(data))
        return data

    def open_append(self, path: str) -> int:
        self._alive()
        fd = super().open_append(path)
        with self.lock:
            self.paths[fd] = path
            self.synced.setdefault(path, os.fstat(fd).st_size)
        return fd

    def write(self, fd: int, data: bytes | memoryview) -> int:
        with self.lock:
            self._alive()
            return super().write(fd, data)

    def sync(self, fd: int) -> None:
        # Only what was written before the sync began is known to be covered by it.
        with self.lock:
            self._alive()
            size = os.fstat(fd).st_size
        super().sync(fd)
        with self.lock:
            self._alive()
            path = self.paths[fd]
            self.synced[path] = max(self.synced[path], size)

    def truncate(self, fd: int, size: int) -> None:
        with self.lock:
            self._alive()
            super().truncate(fd, size)
            path = self.paths[fd]
            # An unsynced truncate may or may not survive; the log syncs right after every one.
            self.synced[path] = min(self.synced[path], size)

    def close(self, fd: int) -> None:
        with self.lock:
            self.paths.pop(fd, None)
        super().close(fd)

    def cut_power(self, path: str, rng: random.Random, mode: str = "random") -> tuple[int, int]:
        """Leave `path` as a power cut could; returns (synced bytes, bytes kept after them).

        mode: "drop" keeps only synced bytes, "keep" keeps everything written, "torn" keeps a
        random prefix of the unsynced bytes, "zero" keeps such a prefix with a zeroed tail,
        "random" picks one of these.
        """
        with self.lock:
            self.dead = True
            with open(path, "rb") as f:
                data = f.read()
            synced = min(self.synced.get(path, 0), len(data))
            unsynced = len(data) - synced
            if mode == "random":
                mode = rng.choice(["drop", "keep", "torn", "torn", "zero"])
            if mode == "drop":
                kept, tail = 0, b""
            elif mode == "keep":
                kept, tail = unsynced, data[synced:]
            else:
                kept = rng.randint(0, unsynced)
                tail = data[synced : synced + kept]
                if mode == "zero" and kept:
                    zeros = rng.randint(1, kept)
                    tail = tail[: kept - zeros] + bytes(zeros)
            with open(path, "wb") as f:
                f.write(data[:synced] + tail)
            return synced, kept


class FaultyOps:
    """Fails the Nth write or sync (counting from 1) with an OSError, and every one after it.

    With `partial`, the Nth write first succeeds for half its bytes (a short write, as a filling
    disk gives) and the failure comes on the call that tries to write the rest.
    """

    def __init__(self, inner: FileOps, *, write_at: int | None = None, sync_at: int | None = None,
                 code: int = errno.ENOSPC, partial: bool = False) -> None:
        self.inner = inner
        self.write_at = write_at
        self.sync_at = sync_at
        self.code = code
        self.partial = partial
        self.writes = 0
        self.syncs = 0

    def _error(self) -> OSError:
        return OSError(self.code, os.strerror(self.code))

    def read(self, path: str) -> bytes:
        return self.inner.read(path)

    def open_append(self, path: str) -> int:
        return self.inner.open_append(path)

    def write(self, fd: int, data: bytes | memoryview) -> int:
        self.writes += 1
        if self.write_at is not None and self.writes >= self.write_at:
            if self.partial and self.writes == self.write_at and len(data) > 1:
                return self.inner.write(fd, data[: len(data) // 2])
            raise self._error()
        return self.inner.write(fd, data)

    def sync(self, fd: int) -> None:
        self.syncs += 1
        if self.sync_at is not None and self.syncs >= self.sync_at:
            raise self._error()
        self.inner.sync(fd)

    def truncate(self, fd: int, size: int) -> None:
        self.inner.truncate(fd, size)

    def close(self, fd: int) -> None:
        self.inner.close(fd)


class GatedOps(OsFileOps):
    """Real files, but every sync while serving blocks until the test sets `gate`; `entered` is set
    while one waits. The sync that ends opening the log (its new header, or what was replayed) is
    neither gated nor counted in `syncs`."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.syncs = 0
        self._opening = False

    def open_append(self, path: str) -> int:
        self._opening = True
        return super().open_append(path)

    def sync(self, fd: int) -> None:
        if self._opening:
            self._opening = False
            super().sync(fd)
            return
        self.entered.set()
        if not self.gate.wait(timeout=30):
            raise OSError(errno.ETIMEDOUT, "test gate never opened")
        self.syncs += 1
        super().sync(fd)
