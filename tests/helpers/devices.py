"""File systems that fail on demand, for a real server's data directory (root only: mount, losetup).

- `full_tmpfs`: a small tmpfs; the test fills it, and the next write of the log fails with ENOSPC.
- `failing_disk`: ext4 on a loop device whose backing file lives on a tmpfs; `fail()` shrinks the device
  under the mounted file system, so writes reach the page cache but their writeback, and so the log's
  next fdatasync, fail with EIO (as a dying disk's would).

Both are unmounted and detached at the end, whatever happened. Where the host does not allow mounts
(not root, no loop devices), the test is skipped with the reason.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path
from typing import Iterator

import pytest


def _run(*cmd: str) -> str:
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    if done.returncode:
        raise OSError(f"{' '.join(cmd)}: {done.stderr.strip() or done.returncode}")
    return done.stdout.strip()


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a file system that fails needs root (CI runs as root)")


@contextlib.contextmanager
def _mounted(what: list[str], where: Path) -> Iterator[Path]:
    where.mkdir(parents=True, exist_ok=True)
    try:
        _run("mount", *what, str(where))
    except OSError as e:
        pytest.skip(f"cannot mount here: {e}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True, timeout=60)


@contextlib.contextmanager
def full_tmpfs(where: Path, size: str = "4m") -> Iterator[Path]:
    """A tmpfs of `size` at `where`; `fill(where)` takes all the room left."""
    _need_root()
    with _mounted(["-t", "tmpfs", "-o", f"size={size}", "tmpfs"], where):
        yield where


def fill(directory: Path) -> None:
    """Take every byte left on `directory`'s file system (with a file named `filler`)."""
    fd = os.open(directory / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for size in (1 << 20, 64 << 10, 4096, 1):
            with contextlib.suppress(OSError):
                while os.write(fd, b"\0" * size):
                    pass
    finally:
        os.close(fd)


class FailingDisk:
    def __init__(self, image: Path, loop: str, mount: Path) -> None:
        self.image = image
        self.loop = loop
        self.mount = mount

    def fail(self) -> None:
        """From now on, writing back to the device fails (EIO): it shrinks to 1 MiB under ext4."""
        os.truncate(self.image, 1 << 20)
        _run("losetup", "-c", self.loop)


@contextlib.contextmanager
def failing_disk(where: Path, size: int = 64 << 20) -> Iterator[FailingDisk]:
    _need_root()
    with _mounted(["-t", "tmpfs", "-o", f"size={size + (8 << 20)}", "tmpfs"], where / "backing"):
        image = where / "backing" / "disk.img"
        image.touch()
        os.truncate(image, size)
        try:
            loop = _run("losetup", "-f", "--show", str(image))
        except OSError as e:
            pytest.skip(f"no loop device: {e}")
        try:
            _run("mkfs.ext4", "-q", "-O", "^has_journal", loop)
            with _mounted([loop], where / "disk") as mount:
                yield FailingDisk(image, loop, mount)
        finally:
            subprocess.run(["losetup", "-d", loop], capture_output=True, timeout=60)
