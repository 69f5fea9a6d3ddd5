"""The real sync helper (tickflow/store/log/sync_helper.py) with its fdatasync wrapped, for tests.

Run it where the server would run the helper, through the documented seam in syncer.py:

    TICKFLOW_SYNC_HELPER=tests/helpers/wrapped_sync_helper.py

It replaces `os.fdatasync` in this process (which runs nothing but the helper) and then runs
sync_helper.py by path as `__main__`, with the same arguments: the helper's start (dying with its parent),
protocol, size bookkeeping and answers are the real ones. What the wrapper does around each
fdatasync is chosen by environment variables (isolated mode, -I, ignores only PYTHON* ones):

- TICKFLOW_TEST_SYNC_GATE=DIR: while the file DIR/hold exists, each fdatasync first writes one byte to
  the FIFO DIR/entered and then waits for one byte on the FIFO DIR/release (see sync_gate.py): the
  test holds a sync in flight and does what it likes meanwhile.
- TICKFLOW_TEST_SYNC_RECORD=FILE: after each fdatasync that succeeded, the size the log had when it
  began (what that sync truly made durable, whatever the helper then reports) and the file's inode
  (which segment of the log) are appended to FILE as two 8-byte little-endian numbers. A simulated
  power cut keeps each segment up to the largest such size.
- TICKFLOW_TEST_SYNC_DELAY=SECONDS: each fdatasync takes at least this long (a slow disk), so the
  sequencer writes batches while a sync is in flight.
"""

import os
import runpy
import struct
import time

REAL = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tickflow", "store",
                                     "log", "sync_helper.py"))
_fdatasync = os.fdatasync


class Wrapper:
    """What happens around each of the helper's fdatasyncs (see the module's docstring)."""

    def __init__(self) -> None:
        self._gate = os.environ.get("TICKFLOW_TEST_SYNC_GATE")
        self._entered = -1
        self._release = -1
        record = os.environ.get("TICKFLOW_TEST_SYNC_RECORD")
        self._record = os.open(record, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644) if record else -1
        self._delay = float(os.environ.get("TICKFLOW_TEST_SYNC_DELAY") or 0)

    def fdatasync(self, fd: int) -> None:
        if self._gate and os.path.exists(os.path.join(self._gate, "hold")):
            if self._entered < 0:  # O_RDWR: a FIFO opened so never waits for the other end
                self._entered = os.open(os.path.join(self._gate, "entered"), os.O_RDWR)
                self._release = os.open(os.path.join(self._gate, "release"), os.O_RDWR)
            os.write(self._entered, b"e")
            if not os.read(self._release, 1):
                raise OSError(5, "the test's gate closed")
        stat = os.fstat(fd)
        before = stat.st_size
        started = time.monotonic()
        _fdatasync(fd)
        left = self._delay - (time.monotonic() - started)
        if left > 0:
            time.sleep(left)
        if self._record >= 0:
            os.write(self._record, struct.pack("<qq", before, stat.st_ino))


if __name__ == "__main__":
    os.fdatasync = Wrapper().fdatasync  # type: ignore[assignment]  # the helper passes only ints
    runpy.run_path(REAL, run_name="__main__")
