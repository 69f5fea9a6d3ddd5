"""Running the log's helper processes: descriptors handed to a child, and the framing helper
(frame_helper.py) driven from the replaying process."""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import subprocess
import sys
from typing import Iterator

from tickflow.store.log.frames import HEADER, HEADER_SIZE, MAX_PAYLOAD
from tickflow.store.log.helper_formats import BATCH

FRAME_HELPER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "frame_helper.py")


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def other_cores() -> bool:
    """True when this process may run on more than one CPU, so a helper process runs beside it."""
    try:
        return len(os.sched_getaffinity(0)) > 1
    except (AttributeError, OSError):
        return (os.cpu_count() or 1) > 1


def above_stdio(fd: int) -> int:
    """`fd`, or a close-on-exec copy of it numbered 3 or above (closing `fd`), to hand to a child:
    with this process's stdin, stdout or stderr closed, a new file can take their numbers, and the
    child's own standard streams (stdin=DEVNULL) would then cover it."""
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def _read_exactly(fd: int, size: int, silence: float) -> bytearray | None:
    """`size` bytes from the pipe `fd`; None if it ends first or stays silent `silence` seconds."""
    buf = bytearray(size)
    view = memoryview(buf)
    got = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while got < size:
        if not poller.poll(silence * 1000):
            return None
        n = os.readv(fd, [view[got:]])
        if not n:
            return None
        got += n
    return buf


def framed_elsewhere(data: bytes, start: int, silence: float) -> Iterator[tuple[int, int, bytes | bytearray]]:
    """Batches of `data`'s good records from `start`, framed and checked by the framing helper process;
    stops early, without a word, if the helper cannot start, fails, stays silent `silence` seconds or
    sends what cannot be right for these bytes (the caller frames the rest)."""
    fds: list[int] = []
    helper: subprocess.Popen[bytes] | None = None
    end_of_data = len(data)
    try:
        # A memory file the helper maps: exactly the bytes being replayed, whatever the file holds.
        copy = above_stdio(os.memfd_create("tickflow-log-replay", os.MFD_CLOEXEC))
        fds.append(copy)
        write_all(copy, data)
        out_r, out_w = os.pipe()
        fds.append(out_r)
        with contextlib.suppress(AttributeError, OSError):  # a batch in one write, not 64 KiB turns
            fcntl.fcntl(out_r, fcntl.F_SETPIPE_SZ, 1 << 20)
        try:
            out_w = above_stdio(out_w)
            helper = subprocess.Popen(
                [sys.executable, "-I", "-S", FRAME_HELPER, str(copy), str(start), str(out_w)],
                pass_fds=(copy, out_w), stdin=subprocess.DEVNULL, close_fds=True,
            )
        finally:
            os.close(out_w)
        while True:
            head = _read_exactly(out_r, BATCH.size, silence)
            if head is None:
                return  # the helper died or hangs
            first, n, size = BATCH.unpack(head)
            end = first + n * HEADER_SIZE + size
            if n == 0 or not (start <= first and 0 < size <= n * MAX_PAYLOAD and end <= end_of_data):
                return  # it stopped where the caller takes over, or it is confused
            joined = _read_exactly(out_r, size, silence)
            if joined is None or not _agrees(data, first, end, joined):
                return
            yield first, n, joined
    except (AttributeError, OSError, TypeError, ValueError, subprocess.SubprocessError):
        return  # no memfd_create, no memory, no process, no interpreter to run: frame here
    finally:
        for fd in fds:
            os.close(fd)  # the helper, if it is still writing, gets EPIPE and exits
        if helper is not None:
            helper.kill()
            helper.wait()


def _agrees(data: bytes, first: int, end: int, joined: bytearray) -> bool:
    """A batch's two ends match the log's bytes: its first record whole, and the last byte of its
    last (whose length is the helper's word, like all of the middle: checking that here would be
    framing it again; a batch that does not decode to its count of records fails the replay)."""
    length = HEADER.unpack_from(data, first)[0]
    return (0 < length <= len(joined) and data[first + HEADER_SIZE : first + HEADER_SIZE + length] == joined[:length]
            and data[end - 1] == joined[-1])
