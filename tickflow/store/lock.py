"""The data directory's lock file (`LOCK`, flock): one process at a time may change what is in it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class DataDirBusy(Exception):
    """Another process holds the data directory."""


def lock_data_dir(data: Path) -> int:
    """Hold an exclusive lock on the data directory until the returned descriptor is closed (or the
    process ends); raises DataDirBusy naming the holder's pid, or OSError if the file cannot be made."""
    path = data / "LOCK"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirBusy(f"another tickflow server (pid {holder}) is using {data}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
