"""Where the log's fdatasync runs, off the event loop: a thread pool, or a helper process.

The sequencer asks `request(ticket)` after writing; the syncer calls `done(ticket, error, seconds)`
on the event loop once an fdatasync that began after the request has returned. Several requests may
be in flight at once (up to `parallel`); each covers everything written before it was made.

Why a helper process: a sync thread must take the GIL back to report, and the event loop thread
holds it while matching, so completions arrive late exactly when the writer is busiest. A helper
process shares the open file (fdatasync syncs the file, whoever wrote it) and answers through a
pipe the loop watches; it never waits for this process's GIL.
"""

from __future__ import annotations

import asyncio
import os
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Protocol

from tickflow.store.wal import OsFileOps, Wal

Done = Callable[[int, "str | None", float], None]
"""(ticket, why the sync failed or None, seconds it took)"""

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sync_helper.py")
REQUEST = struct.Struct("<q")
REPLY = struct.Struct("<qid")  # ticket, errno (0: synced), seconds: as in sync_helper.py


class Syncer(Protocol):
    parallel: int

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None: ...
    def request(self, ticket: int) -> None: ...
    def close(self) -> None: ...


class ThreadSyncer:
    """fdatasync through `Wal.sync` in a pool of threads (honours the Wal's FileOps, so tests can inject faults)."""

    def __init__(self, wal: Wal, parallel: int = 1) -> None:
        self.wal = wal
        self.parallel = parallel
        self._executor = ThreadPoolExecutor(parallel, thread_name_prefix="tickflow-fsync")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: Done | None = None

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        self._loop = loop
        self._done = done

    def request(self, ticket: int) -> None:
        loop, done = self._loop, self._done
        assert loop is not None and done is not None

        def finished(f: "asyncio.Future[tuple[str | None, float]]") -> None:
            loop.call_soon_threadsafe(done, ticket, *f.result())

        self._executor.submit(self._sync).add_done_callback(finished)  # type: ignore[arg-type]

    def _sync(self) -> tuple[str | None, float]:
        started = time.perf_counter()
        try:
            self.wal.sync()
        except Exception as e:  # LogError from the device, or anything unexpected: no ack either way
            return str(e) or repr(e), time.perf_counter() - started
        return None, time.perf_counter() - started

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class ProcessSyncer:
    """fdatasync in a helper process that shares the log's file descriptor; answers come through a pipe."""

    def __init__(self, wal: Wal, parallel: int = 1) -> None:
        self.wal = wal
        self.parallel = parallel
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: Done | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._req = -1
        self._resp = -1
        self._pending: set[int] = set()
        self._buf = b""
        self._dead: str | None = None

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        self._loop = loop
        self._done = done
        fd = self.wal.fileno()
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", HELPER, str(fd), str(req_r), str(resp_w), str(self.parallel)],
                pass_fds=(fd, req_r, resp_w), stdin=subprocess.DEVNULL, close_fds=True,
            )
        finally:
            os.close(req_r)
            os.close(resp_w)
        self._req = req_w
        self._resp = resp_r
        os.set_blocking(resp_r, False)
        loop.add_reader(resp_r, self._readable)

    @property
    def pid(self) -> int | None:
        """The helper process, once started."""
        return self._proc.pid if self._proc is not None else None

    def request(self, ticket: int) -> None:
        if self._dead is not None:
            self._report(ticket, self._dead, 0.0)
            return
        self._pending.add(ticket)
        try:
            os.write(self._req, REQUEST.pack(ticket))
        except OSError as e:
            self._died(f"the sync helper is gone: {e}")

    def _report(self, ticket: int, error: str | None, seconds: float) -> None:
        assert self._loop is not None and self._done is not None
        self._loop.call_soon(self._done, ticket, error, seconds)

    def _readable(self) -> None:
        try:
            data = os.read(self._resp, 64 * REPLY.size)
        except BlockingIOError:
            return
        except OSError as e:
            self._died(f"the sync helper is gone: {e}")
            return
        if not data:
            self._died("the sync helper exited")
            return
        buf = self._buf + data
        size = REPLY.size
        end = len(buf) - len(buf) % size
        done = self._done
        assert done is not None
        for ticket, code, seconds in REPLY.iter_unpack(buf[:end]):
            self._pending.discard(ticket)
            if code:
                why = f"fdatasync of {self.wal.path} failed: [Errno {code}] {os.strerror(code)}"
                self.wal.fail(why)
                done(ticket, why, seconds)
            else:
                done(ticket, None, seconds)
        self._buf = buf[end:]

    def _died(self, why: str) -> None:
        if self._dead is None:
            self._dead = why
            self.wal.fail(why)
            if self._loop is not None:
                self._loop.remove_reader(self._resp)
        for ticket in sorted(self._pending):
            self._report(ticket, why, 0.0)
        self._pending.clear()

    def close(self) -> None:
        if self._proc is None:
            return
        if self._loop is not None and self._dead is None:
            self._loop.remove_reader(self._resp)
        os.close(self._req)  # the helper exits on end of file, after the syncs it has taken
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._resp)
        self._proc = None


def default_syncer(wal: Wal) -> Syncer:
    """The helper process for a real file; a thread when the Wal's FileOps is not the real file system (tests)."""
    return ProcessSyncer(wal) if type(wal.ops) is OsFileOps else ThreadSyncer(wal)
