"""Where the log's fdatasync runs, off the event loop: a thread, or a helper process.

The sequencer calls `grown(size)` after each write; the syncer calls `done(size, error, seconds)` on
the event loop each time an fdatasync returns, `size` being how much of the file that sync made
durable (everything written before it began). One sync runs at a time; when the file grew during
one, the next starts before the last is reported (the helper process starts it by itself, without
waiting for the event loop). `busy` is False only when everything written so far is durable (or failed).

Why a helper process: a sync thread must take the GIL back to report, and the event loop thread
holds it while matching, so completions arrive late exactly when the writer is busiest. A helper
process shares the open file (fdatasync syncs the file, whoever wrote it) and answers through a
pipe the loop watches; it never waits for this process's GIL. It goes on to the next sync as soon
as it sees the file has grown, rather than waiting for a busy event loop to read its answer and ask
again (under WebSocket load an answer could wait a whole loop turn, up to a millisecond or more).
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Protocol

from tickflow.store.log.helper_formats import SYNC_REPLY as REPLY, SYNC_REQUEST as REQUEST
from tickflow.store.log.segments import SegmentedLog
from tickflow.store.log.wal import OsFileOps, Wal, above_stdio

Done = Callable[[int, "str | None", float], None]
"""(bytes of the log now durable, why the sync failed or None, seconds it took)"""

HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sync_helper.py")
HELPER_SEAM = "TICKFLOW_SYNC_HELPER"
"""Test seam: an environment variable naming a script to run instead of HELPER, with the same arguments
and pipe protocol (tests/helpers/wrapped_sync_helper.py runs the real helper with its fdatasync held or
noted, so a simulated power cut sees the helper's syncs). Unset in production."""


class Syncer(Protocol):
    busy: bool

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None: ...
    def grown(self, size: int) -> None: ...
    def switch(self, fd: int, base: int) -> None: ...
    def close(self) -> None: ...


def roll(log: SegmentedLog, syncer: Syncer, first_seq: int, *, sync: bool) -> None:
    """Seal `log`'s segment and begin the next, whose first record is `first_seq`; `syncer` syncs the new
    one from then on. The caller has waited until `syncer` is idle, so the sealed segment is durable
    whole; with `sync` (no syncer runs: durability none) it is synced here first."""
    if sync:
        log.sync()
    log.roll(first_seq)
    syncer.switch(log.fileno(), log.size - log.position)


def _idle(syncer: Syncer) -> None:
    if syncer.busy:
        raise RuntimeError("a sync is running: the log is switched to a new segment only once all is durable")


class ThreadSyncer:
    """fdatasync through `Wal.sync` on a thread (honours the Wal's FileOps, so tests can inject faults)."""

    def __init__(self, wal: Wal | SegmentedLog) -> None:
        self.wal = wal
        self.busy = False
        self._want = 0
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tickflow-fsync")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: Done | None = None

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        self._loop = loop
        self._done = done

    def grown(self, size: int) -> None:
        self._want = max(self._want, size)
        if not self.busy:
            self._sync()

    def switch(self, fd: int, base: int) -> None:
        _idle(self)  # (Wal.sync syncs whichever segment is current)

    def _sync(self) -> None:
        loop = self._loop
        assert loop is not None
        self.busy = True
        upto = self._want

        def finished(f: "asyncio.Future[tuple[str | None, float]]") -> None:
            loop.call_soon_threadsafe(self._finished, upto, *f.result())

        self._executor.submit(self._run).add_done_callback(finished)  # type: ignore[arg-type]

    def _run(self) -> tuple[str | None, float]:
        started = time.perf_counter()
        try:
            self.wal.sync()
        except Exception as e:  # LogError from the device, or anything unexpected: no ack either way
            return str(e) or repr(e), time.perf_counter() - started
        return None, time.perf_counter() - started

    def _finished(self, upto: int, error: str | None, seconds: float) -> None:
        assert self._done is not None
        self.busy = False
        if error is None and self._want > upto:
            self._sync()  # the next one first: the disk works while the sequencer answers
        self._done(upto, error, seconds)

    def close(self) -> None:
        self._executor.shutdown(wait=True)


class ProcessSyncer:
    """fdatasync in a helper process that shares the log's file descriptor; answers come through a pipe.

    The helper is asked only when it is idle; while it is busy it sees growth for itself (it compares
    the file's size before and after each sync) and says in each answer whether it is syncing again."""

    def __init__(self, wal: Wal | SegmentedLog) -> None:
        self.wal = wal
        self.busy = False
        self._want = 0
        self._base = 0
        """Where the segment the helper syncs begins in the log's sizes (`SegmentedLog.size`, which start
        at the segment open after a replay: 0 until the first roll)."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._done: Done | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._req = -1
        self._req_sock: socket.socket | None = None
        self._resp = -1
        self._buf = b""
        self._dead: str | None = None

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        self._loop = loop
        self._done = done
        fd = self.wal.fileno()
        # The helper's stdin is /dev/null: a log numbered 0 (this process started with stdin closed)
        # would be covered by it, and the helper would sync /dev/null.
        log_fd = above_stdio(os.dup(fd))  # a copy for the child, closed once it has its own
        # Requests go through a socket, which can carry a descriptor: the next segment's, at a roll.
        req_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        req_r, req_w = child_sock.detach(), req_sock.fileno()
        resp_r, resp_w = os.pipe()
        req_r, resp_w = above_stdio(req_r), above_stdio(resp_w)
        helper = os.environ.get(HELPER_SEAM) or HELPER
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", helper, str(log_fd), str(req_r), str(resp_w)],
                pass_fds=(log_fd, req_r, resp_w), stdin=subprocess.DEVNULL, close_fds=True,
            )
        finally:
            os.close(req_r)
            os.close(resp_w)
            os.close(log_fd)
        self._req = req_w
        self._req_sock = req_sock
        self._resp = resp_r
        os.set_blocking(resp_r, False)
        loop.add_reader(resp_r, self._readable)

    @property
    def pid(self) -> int | None:
        """The helper process, once started."""
        return self._proc.pid if self._proc is not None else None

    def grown(self, size: int) -> None:
        self._want = max(self._want, size)
        if self._dead is not None:
            self._report(self._want, self._dead, 0.0)
        elif not self.busy:
            self._ask()

    def switch(self, fd: int, base: int) -> None:
        """From now on the helper syncs `fd` (a new segment beginning at `base`), and closes the last."""
        _idle(self)
        self._base = base
        if self._dead is None and self._req_sock is not None:
            try:
                socket.send_fds(self._req_sock, [REQUEST.pack(-1)], [fd])
            except OSError as e:
                self._died(f"the sync helper is gone: {e}")

    def _ask(self) -> None:
        self.busy = True
        try:
            os.write(self._req, REQUEST.pack(self._want))
        except OSError as e:
            self._died(f"the sync helper is gone: {e}")

    def _report(self, size: int, error: str | None, seconds: float) -> None:
        assert self._loop is not None and self._done is not None
        self._loop.call_soon(self._done, size, error, seconds)

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
        self._buf = buf[end:]
        done = self._done
        assert done is not None
        for synced, code, seconds, again in REPLY.iter_unpack(buf[:end]):
            synced += self._base
            if code:
                why = f"fdatasync of {self.wal.path} failed: [Errno {code}] {os.strerror(code)}"
                self.wal.fail(why)
                self.busy = False
                done(max(synced, self._want), why, seconds)
                continue
            if not again:
                self.busy = False
                if self._want > synced:
                    self._ask()  # written after the helper last looked: the next one first
            done(synced, None, seconds)

    def _died(self, why: str) -> None:
        was_busy = self.busy
        self.busy = False
        if self._dead is None:
            self._dead = why
            self.wal.fail(why)
            if self._loop is not None:
                self._loop.remove_reader(self._resp)
        if was_busy:
            self._report(self._want, why, 0.0)

    def close(self) -> None:
        if self._proc is None:
            return
        if self._loop is not None and self._dead is None:
            self._loop.remove_reader(self._resp)
        if self._req_sock is not None:
            self._req_sock.close()  # the helper exits on end of file, after the sync it is running
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._resp)
        self._proc = None


class NoSyncer:
    """durability=none: nothing is synced while serving, so no thread or helper process either."""

    busy = False

    def start(self, loop: asyncio.AbstractEventLoop, done: Done) -> None:
        pass

    def grown(self, size: int) -> None:
        raise RuntimeError("durability=none never asks for a sync")

    def switch(self, fd: int, base: int) -> None:
        pass

    def close(self) -> None:
        pass


def default_syncer(wal: Wal | SegmentedLog) -> Syncer:
    """The helper process for a real file; a thread when the Wal's FileOps is not the real file system (tests)."""
    return ProcessSyncer(wal) if type(wal.ops) is OsFileOps else ThreadSyncer(wal)
