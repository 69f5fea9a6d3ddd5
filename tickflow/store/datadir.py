"""The data directory: the names of its files, its lock file (`LOCK`, flock), so one process at a time
may change what is in it, and the check that this process may change it at all, made before anything in
it is read."""

from __future__ import annotations

import errno
import fcntl
import os
from collections.abc import Mapping
from pathlib import Path

LOCK_FILE = "LOCK"
WAL_FILE = "wal.log"
TRADES_FILE = "trades.sqlite"
WRITTEN_FILES = {LOCK_FILE: "the lock file", WAL_FILE: "the log", TRADES_FILE: "the trade store",
                 f"{TRADES_FILE}-wal": "the trade store's journal", f"{TRADES_FILE}-shm": "the trade store's index"}
"""What the server writes in the data directory, and what each is (for a refusal)."""


class DataDirBusy(Exception):
    """Another process holds the data directory."""


class NotWritable(Exception):
    """This process may not change the data directory or a file in it; the message says what to do."""

    def __init__(self, what: str, error: OSError) -> None:
        super().__init__(f"{what}: {error.strerror or error}. {how_to_fix(error)}")


def how_to_fix(error: OSError) -> str:
    """What an operator can do about a file this process may not read or change, in a sentence."""
    if error.errno == errno.EROFS:
        return "It is on a read-only file system: remount it read-write, or give --data a directory elsewhere."
    if error.errno == errno.EPERM:
        return "Not even its owner may: an immutable or append-only flag? `lsattr` shows it, `chattr -i -a` clears it."
    if error.errno == errno.EACCES:
        return (f"This user (uid {os.geteuid()}) may not: let it (chown, chmod), or run as the user that owns "
                "the data directory.")
    if error.errno == errno.EISDIR:
        return "It is a directory: move it out of the way."
    return "Fix that, or give --data another directory."


def check_writable(data: Path, files: Mapping[str, str]) -> None:
    """Raise NotWritable unless this process can create files in `data` and open for reading and writing
    those of `files` (name -> what it is, for the message) that exist there; nothing is created or changed.

    SQLite opens a file it may not write read-only without a word, and the log is appended to only
    after its replay: without this check both were found out late (after a replay that can take many
    seconds, or by the first trade while serving)."""
    try:
        _probe_create(data)
    except OSError as e:
        raise NotWritable(f"cannot create files in the data directory {data}", e) from None
    for name, what in files.items():
        path = data / name
        try:
            os.close(os.open(path, os.O_RDWR))
        except FileNotFoundError:
            continue
        except OSError as e:
            raise NotWritable(f"cannot open {what} {path} to read and write it", e) from None


def _probe_create(data: Path) -> None:
    """Raise what creating a file in `data` would raise, without creating one that can be seen."""
    tmpfile = getattr(os, "O_TMPFILE", None)
    if tmpfile is not None:
        try:
            os.close(os.open(data, tmpfile | os.O_WRONLY, 0o600))  # an unnamed file, gone at close
            return
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):  # no O_TMPFILE there
                raise
    if not os.access(data, os.W_OK | os.X_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(data))


def make_data_dir(data: Path) -> None:
    """Create `data` (and its missing parents) unless it exists: the data directory itself only its owner
    may enter (0700), and each new directory entry is made durable (its parent synced), so a power cut
    cannot take away a directory whose log was already synced. FileExistsError if it is not a directory."""
    missing = []
    here = data.absolute()
    while not here.exists() and here != here.parent:
        if here.is_symlink():  # a dangling link: mkdir says what is wrong
            break
        missing.append(here)
        here = here.parent
    data.mkdir(mode=0o700, parents=True, exist_ok=True)
    for made in missing:
        try:
            sync_dir(made.parent)
        except PermissionError:  # a parent this user may search but not read: the kernel's own order then
            pass


def sync_dir(path: Path) -> None:
    """fsync a directory, so the entries made in it survive a power cut."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lock_data_dir(data: Path) -> int:
    """Hold an exclusive lock on the data directory until the returned descriptor is closed (or the
    process ends); raises DataDirBusy naming the holder's pid, or OSError if the file cannot be made."""
    path = data / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise DataDirBusy(f"another tickflow server (pid {holder}) is using {data}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
