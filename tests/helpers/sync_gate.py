"""The test's side of tests/helpers/wrapped_sync_helper.py: which helper a server runs, holding its
syncs, and what its syncs truly made durable.

The sync helper is chosen through the seam in tickflow/store/log/syncer.py (TICKFLOW_SYNC_HELPER);
`env()` gives the variables to set, in os.environ, before the log's ProcessSyncer starts (a server
started by tests/server_process.py inherits them)."""

from __future__ import annotations

import os
import select
import struct
import time
from pathlib import Path

WRAPPER = str(Path(__file__).with_name("wrapped_sync_helper.py"))


class SyncGate:
    """Holds the helper's syncs while `hold()` is in force: each one that starts then waits in the
    helper, before its fdatasync, until `release()` lets it go."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        directory.mkdir(parents=True, exist_ok=True)
        os.mkfifo(directory / "entered")
        os.mkfifo(directory / "release")
        # O_RDWR: opening a FIFO so never waits for the other end (Linux).
        self._entered = os.open(directory / "entered", os.O_RDWR | os.O_NONBLOCK)
        self._release = os.open(directory / "release", os.O_RDWR)

    def env(self) -> dict[str, str]:
        return {"TICKFLOW_SYNC_HELPER": WRAPPER, "TICKFLOW_TEST_SYNC_GATE": str(self.dir)}

    def hold(self) -> None:
        """Syncs that start from now on wait for `release()`."""
        (self.dir / "hold").touch()

    def entered(self, timeout: float = 10.0) -> bool:
        """Wait until a held sync is waiting in the helper; False if none came within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._entered], [], [], left)[0]:
                return False
            try:
                if os.read(self._entered, 1):
                    return True
            except BlockingIOError:
                continue

    def release(self, stop_holding: bool = True) -> None:
        """Let the held sync go on (and, with `stop_holding`, hold no later one)."""
        if stop_holding:
            (self.dir / "hold").unlink(missing_ok=True)
        os.write(self._release, b"r")

    def close(self) -> None:
        (self.dir / "hold").unlink(missing_ok=True)
        os.write(self._release, b"r" * 64)  # whatever may still wait goes on
        os.close(self._entered)
        os.close(self._release)


def recorder_env(record: Path, delay: float = 0.0) -> dict[str, str]:
    """Variables for a helper that notes, after each fdatasync, the log size that sync truly covered."""
    return {"TICKFLOW_SYNC_HELPER": WRAPPER, "TICKFLOW_TEST_SYNC_RECORD": str(record),
            "TICKFLOW_TEST_SYNC_DELAY": str(delay)}


def durable_size(record: Path, log: Path) -> int:
    """The largest size of the log file (segment) `log` a recorded fdatasync covered (0 if none returned)."""
    data = record.read_bytes() if record.exists() else b""
    inode = log.stat().st_ino
    return max((size for size, ino in struct.iter_unpack("<qq", data[: len(data) - len(data) % 16]) if ino == inode),
               default=0)
