"""Giving a log written before logs had a header its header (`tickflow log --upgrade`)."""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from tickflow.store.datadir import sync_dir
from tickflow.store.log.helpers import write_all
from tickflow.store.log.wal import FILE_HEADER


def add_header(path: str, old: bytes) -> None:
    """Give a log written before logs had a header its header. `old` is the log's content, read once
    by the caller while it holds the data directory's lock (so nothing appends meanwhile).

    The header and `old` go to a new file beside it, synced, then renamed over the log, so a crash
    leaves one or the other whole; on an error the new file is removed and the log is as it was. The
    new file keeps the log's mode (a log only its owner may read stays so) and, where allowed, its
    owner (so the user the server runs as can still append to it)."""
    if old.startswith(FILE_HEADER):
        raise ValueError(f"{path} already starts with its header")
    before = os.stat(path)
    upgraded = f"{path}.upgrading"
    fd = os.open(upgraded, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        try:
            _keep_mode_and_owner(fd, before)
            write_all(fd, FILE_HEADER)
            write_all(fd, old)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(upgraded, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(upgraded)
        raise
    sync_dir(Path(os.path.abspath(path)).parent)


def _keep_mode_and_owner(fd: int, before: os.stat_result) -> None:
    os.fchmod(fd, stat.S_IMODE(before.st_mode))
    with contextlib.suppress(PermissionError):  # only root may give a file away
        os.fchown(fd, before.st_uid, before.st_gid)
