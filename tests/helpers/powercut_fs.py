"""A FUSE file system for the tests that models a disk with a volatile write cache, so that a power cut
sees what every process did: the server, its sync helper, its snapshot child and SQLite alike.

The model (in memory, in its own process):

- A file's content has a cached version (what reads see) and a durable one. fsync or fdatasync of the
  file makes its current content durable; close does not.
- A directory's entries (create, mkdir, rename, unlink, rmdir) have a cached listing and a durable one:
  fsync of the directory makes its current listing durable. Nothing else does: not the fsync of a file
  just created in it, nor a rename alone. ext4 may keep such an entry without the directory's fsync or may
  not; the model takes the adversarial side, which tickflow's code (it syncs the directory after each
  create and rename that matters) must survive.
- Entries name inodes, so a file renamed over another, or unlinked, is still there in the durable listing
  with its own durable content until the directory is synced.
- A cut (`cut SEED MODE` on the control socket) replaces every file and directory with its durable
  version; files no durable listing reaches are gone. For a file whose cached content is its durable
  content plus appended bytes, MODE says what the disk had written of them anyway, as in
  tests/helpers/fileops.py: "drop" none, "keep" all, "torn" a random prefix, "zero" such a prefix with a
  zeroed tail, "random" one of these per file. After a cut every operation fails with EIO, until the next
  mount, which starts from the state the cut left (saved to STATE_FILE when the cut is made).
- Faults: `fault ERRNO GLOB` makes each write to a file whose name matches GLOB fail with ERRNO (ENOSPC,
  EIO); `fault off` ends them. They are switched while processes use the mount.

    python tests/helpers/powercut_fs.py MOUNTPOINT STATE_FILE CONTROL_SOCKET     # the file system process
    PowerCutMount(mountpoint, state_dir).start() / .fault() / .cut() / .unmount()  # the tests' handle
"""

from __future__ import annotations

import ctypes
import errno
import fnmatch
import functools
import json
import logging
import os
import pickle
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


@dataclass
class Node:
    mode: int
    data: bytearray = field(default_factory=bytearray)
    durable: bytes = b""
    entries: dict[str, Node] = field(default_factory=dict)
    durable_entries: dict[str, Node] = field(default_factory=dict)
    mtime: int = field(default_factory=time.time_ns)

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


def _fail(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _locked(method: F) -> F:
    @functools.wraps(method)
    def run(self: PowerCutFS, *args: Any) -> Any:
        with self.mutex:
            if self.dead:
                raise _fail(errno.EIO)
            return method(self, *args)
    return run  # type: ignore[return-value]


class PowerCutFS:
    """The FUSE operations (mfusepy's high-level API) over the model; one lock, so the control thread
    sees a consistent disk."""

    use_ns = True

    def __init__(self, root: Node, state_file: Path) -> None:
        self.root = root
        self.state_file = state_file
        self.mutex = threading.Lock()
        self.dead = False
        self.handles: dict[int, tuple[Node, str]] = {}
        self.next_handle = 1
        self.faults: list[tuple[int, str]] = []
        self.counts = {"write": 0, "fsync": 0, "fsyncdir": 0, "rename": 0, "faulted": 0}

    # -------------------------------------------------------------- paths and handles

    def _lookup(self, path: str) -> Node:
        node = self.root
        for part in path.strip("/").split("/"):
            if part:
                if not node.is_dir:
                    raise _fail(errno.ENOTDIR)
                if part not in node.entries:
                    raise _fail(errno.ENOENT)
                node = node.entries[part]
        return node

    def _parent(self, path: str) -> tuple[Node, str]:
        head, _, name = path.rstrip("/").rpartition("/")
        parent = self._lookup(head or "/")
        if not parent.is_dir:
            raise _fail(errno.ENOTDIR)
        return parent, name

    def _handle(self, node: Node, path: str) -> int:
        fh = self.next_handle
        self.next_handle += 1
        self.handles[fh] = (node, path.rpartition("/")[2])
        return fh

    def _node(self, path: str | None, fh: int | None) -> Node:
        if fh and fh in self.handles:
            return self.handles[fh][0]
        if path is None:
            raise _fail(errno.ENOENT)
        return self._lookup(path)

    # -------------------------------------------------------------- the operations

    def init_with_config(self, conn: Any, config: Any) -> None:
        if config is not None:
            config.nullpath_ok = 1  # an unlinked file that is still open is reached through its handle

    @_locked
    def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
        node = self._node(path, fh)
        size = len(node.data) if not node.is_dir else 4096
        return {"st_mode": node.mode, "st_nlink": 2 if node.is_dir else 1, "st_size": size,
                "st_blocks": (size + 511) // 512, "st_uid": os.getuid(), "st_gid": os.getgid(),
                "st_atime": node.mtime, "st_mtime": node.mtime, "st_ctime": node.mtime}

    @_locked
    def readdir(self, path: str, fh: int) -> list[str]:
        return [".", "..", *self._node(path, fh).entries]

    @_locked
    def mkdir(self, path: str, mode: int) -> int:
        parent, name = self._parent(path)
        if name in parent.entries:
            raise _fail(errno.EEXIST)
        parent.entries[name] = Node(stat.S_IFDIR | (mode & 0o7777))
        return 0

    @_locked
    def rmdir(self, path: str) -> int:
        parent, name = self._parent(path)
        node = self._lookup(path)
        if node.entries:
            raise _fail(errno.ENOTEMPTY)
        del parent.entries[name]
        return 0

    @_locked
    def unlink(self, path: str) -> int:
        parent, name = self._parent(path)
        self._lookup(path)
        del parent.entries[name]
        return 0

    @_locked
    def rename(self, old: str, new: str) -> int:
        old_parent, old_name = self._parent(old)
        new_parent, new_name = self._parent(new)
        node = self._lookup(old)
        if new_name in new_parent.entries and new_parent.entries[new_name].is_dir:
            if new_parent.entries[new_name].entries:
                raise _fail(errno.ENOTEMPTY)
        del old_parent.entries[old_name]
        new_parent.entries[new_name] = node
        self.counts["rename"] += 1
        return 0

    @_locked
    def create(self, path: str, mode: int, flags: int) -> int:
        parent, name = self._parent(path)
        node = parent.entries.get(name)
        if node is None:
            node = parent.entries[name] = Node(stat.S_IFREG | (mode & 0o7777))
        elif flags & os.O_TRUNC:
            del node.data[:]
        return self._handle(node, path)

    @_locked
    def open(self, path: str, flags: int) -> int:
        node = self._lookup(path)
        if flags & os.O_TRUNC:
            del node.data[:]
        return self._handle(node, path)

    @_locked
    def opendir(self, path: str) -> int:
        return self._handle(self._lookup(path), path)

    @_locked
    def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
        return bytes(self._node(path, fh).data[offset:offset + size])

    @_locked
    def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
        node = self._node(path, fh)
        name = self.handles[fh][1] if fh in self.handles else (path or "").rpartition("/")[2]
        for code, pattern in self.faults:
            if fnmatch.fnmatchcase(name, pattern):
                self.counts["faulted"] += 1
                raise _fail(code)
        if offset > len(node.data):
            node.data.extend(bytes(offset - len(node.data)))
        node.data[offset:offset + len(data)] = data
        node.mtime = time.time_ns()
        self.counts["write"] += 1
        return len(data)

    @_locked
    def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
        node = self._node(path, fh)
        if length < len(node.data):
            del node.data[length:]
        else:
            node.data.extend(bytes(length - len(node.data)))
        return 0

    @_locked
    def fsync(self, path: str | None, datasync: int, fh: int) -> int:
        node = self._node(path, fh)
        node.durable = bytes(node.data)
        self.counts["fsync"] += 1
        return 0

    @_locked
    def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
        node = self._node(path, fh)
        node.durable_entries = dict(node.entries)
        self.counts["fsyncdir"] += 1
        return 0

    def release(self, path: str | None, fh: int) -> int:
        with self.mutex:
            self.handles.pop(fh, None)
        return 0

    def releasedir(self, path: str | None, fh: int) -> int:
        return self.release(path, fh)

    def flush(self, path: str | None, fh: int) -> int:
        return 0

    @_locked
    def chmod(self, path: str, mode: int) -> int:
        node = self._lookup(path)
        node.mode = stat.S_IFMT(node.mode) | (mode & 0o7777)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        return 0

    def access(self, path: str, amode: int) -> int:
        return 0

    def statfs(self, path: str) -> dict[str, int]:
        return {"f_bsize": 4096, "f_frsize": 4096, "f_blocks": 1 << 20, "f_bfree": 1 << 19,
                "f_bavail": 1 << 19, "f_files": 1 << 16, "f_ffree": 1 << 15, "f_namemax": 255}

    # -------------------------------------------------------------- the power cut

    def cut(self, rng: random.Random, mode: str) -> dict[str, int]:
        """Everything back to its durable version; the file system is dead from here on."""
        with self.mutex:
            self.dead = True
            kept = {"files": 0, "unsynced_bytes_kept": 0, "unsynced_bytes_lost": 0}
            seen: set[int] = set()

            def settle(node: Node) -> None:
                if id(node) in seen:
                    return
                seen.add(id(node))
                if node.is_dir:
                    node.entries = dict(node.durable_entries)
                    for child in node.entries.values():
                        settle(child)
                    return
                kept["files"] += 1
                tail = b""
                if len(node.data) > len(node.durable) and node.data.startswith(node.durable):
                    unsynced = bytes(node.data[len(node.durable):])
                    how = rng.choice(["drop", "keep", "torn", "torn", "zero"]) if mode == "random" else mode
                    if how == "keep":
                        tail = unsynced
                    elif how in ("torn", "zero"):
                        tail = unsynced[:rng.randint(0, len(unsynced))]
                        if how == "zero" and tail:
                            zeros = rng.randint(1, len(tail))
                            tail = tail[:len(tail) - zeros] + bytes(zeros)
                    kept["unsynced_bytes_kept"] += len(tail)
                    kept["unsynced_bytes_lost"] += len(unsynced) - len(tail)
                node.durable = node.durable + tail
                node.data = bytearray(node.durable)

            settle(self.root)
            save(self.root, self.state_file)
            return kept


def save(root: Node, state_file: Path) -> None:
    """The disk as it is (cached = durable after a cut) for the next mount."""
    def tree(node: Node) -> Any:
        if node.is_dir:
            return (node.mode, {name: tree(child) for name, child in node.entries.items()})
        return (node.mode, bytes(node.data))
    temporary = state_file.with_name(state_file.name + ".tmp")
    temporary.write_bytes(pickle.dumps(tree(root)))
    os.replace(temporary, state_file)


def load(state_file: Path) -> Node:
    """The saved disk, everything durable (a fresh empty one when there is none)."""
    def node(saved: Any) -> Node:
        mode, content = saved
        if stat.S_ISDIR(mode):
            entries = {name: node(child) for name, child in content.items()}
            return Node(mode, entries=entries, durable_entries=dict(entries))
        return Node(mode, data=bytearray(content), durable=content)
    if not state_file.exists():
        return Node(stat.S_IFDIR | 0o755)
    return node(pickle.loads(state_file.read_bytes()))


def _serve_control(fs: PowerCutFS, control: Path) -> None:
    """One command a connection, one line back: ping, stats, fault ERRNO GLOB, fault off, cut SEED MODE."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(control))
    server.listen(4)
    while True:
        conn, _ = server.accept()
        with conn, conn.makefile("rwb") as stream:
            words = stream.readline().decode().split()
            try:
                if words == ["ping"] or words == ["stats"]:
                    with fs.mutex:
                        answer: Any = dict(fs.counts)
                elif words == ["fault", "off"]:
                    with fs.mutex:
                        fs.faults = []
                    answer = "ok"
                elif len(words) == 3 and words[0] == "fault":
                    with fs.mutex:
                        fs.faults.append((getattr(errno, words[1]), words[2]))
                    answer = "ok"
                elif len(words) == 3 and words[0] == "cut":
                    answer = fs.cut(random.Random(int(words[1])), words[2])
                else:
                    answer = {"error": f"unknown command {words}"}
            except Exception as e:  # a bad command is answered, never the end of the file system
                answer = {"error": repr(e)}
            stream.write(json.dumps(answer).encode() + b"\n")
            stream.flush()


def main(argv: list[str]) -> None:
    import mfusepy

    class FUSE(mfusepy.FUSE):
        def truncate_fuse_3(self, path: bytes | None, length: int, fip: Any) -> int:
            # mfusepy drops the handle, and with nullpath_ok an ftruncate has no path: pass the handle on
            fh = fip.contents.fh if fip else None
            return int(self.operations.truncate(None if path is None else path.decode(), length, fh))

    mountpoint, state_file, control = argv
    if os.environ.get("POWERCUT_FS_DEBUG"):
        logging.basicConfig(level=logging.DEBUG)
    fs = PowerCutFS(load(Path(state_file)), Path(state_file))
    threading.Thread(target=_serve_control, args=(fs, Path(control)), daemon=True).start()
    # One FUSE thread: the operations are in memory; hard_remove so an unlinked open file is not renamed
    # to .fuse_hidden* (which would be a directory entry of its own).
    try:
        FUSE(fs, mountpoint, foreground=True, nothreads=True, hard_remove=True, fsname="powercut")
    except RuntimeError:
        pass  # libfuse's exit status after fusermount -u -z: the mount is gone either way
    with fs.mutex:
        if not fs.dead:  # unmounted without a cut: a clean shutdown, which writes the cache out
            save(fs.root, fs.state_file)


# ------------------------------------------------------------------ the tests' handle

FUSERMOUNT = "fusermount3"


def fuse_missing() -> str | None:
    """Why a FUSE file system cannot be mounted here, or None."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which(FUSERMOUNT) is None:
        return f"no {FUSERMOUNT} (Debian package fuse3; scripts/ci-fuse.sh installs it)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError, EnvironmentError) as e:
        return f"mfusepy or libfuse missing ({e}); scripts/ci-fuse.sh installs them"
    return None


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG


class PowerCutMount:
    """The file system mounted at `mountpoint` in a process of its own; its durable state is kept in
    `state_dir` between mounts."""

    def __init__(self, mountpoint: Path, state_dir: Path) -> None:
        self.mountpoint = mountpoint
        self.state_file = state_dir / "disk.pickle"
        self.control = state_dir / "control.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        state_dir.mkdir(parents=True, exist_ok=True)
        self.output = open(state_dir / "fs.log", "ab")
        mountpoint.mkdir(parents=True, exist_ok=True)

    def start(self, timeout: float = 10.0) -> PowerCutMount:
        self.control.unlink(missing_ok=True)
        self.proc = subprocess.Popen(
            [sys.executable, __file__, str(self.mountpoint), str(self.state_file), str(self.control)],
            stdin=subprocess.DEVNULL, stdout=self.output, stderr=subprocess.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + timeout
        while not (self.mounted() and self.control.exists()):
            if self.proc.poll() is not None:
                out = (self.output.name and Path(self.output.name).read_text(errors="replace"))[-2000:]
                raise RuntimeError(f"the power-cut file system exited with {self.proc.returncode}: {out}")
            if time.monotonic() > deadline:
                self.unmount()
                raise RuntimeError(f"the power-cut file system is not mounted after {timeout} s")
            time.sleep(0.01)
        return self

    def mounted(self) -> bool:
        """From the mount table: after a cut the file system answers EIO even to a stat of its root."""
        with open("/proc/self/mountinfo") as f:
            return any(line.split()[4] == str(self.mountpoint) for line in f)

    def command(self, line: str) -> Any:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(30)
            s.connect(str(self.control))
            s.sendall(line.encode() + b"\n")
            answer = json.loads(s.makefile("rb").readline())
        if isinstance(answer, dict) and "error" in answer:
            raise RuntimeError(f"power-cut file system: {line!r}: {answer['error']}")
        return answer

    def stats(self) -> dict[str, int]:
        return dict(self.command("stats"))

    def fault(self, code: str, pattern: str) -> None:
        """Writes to files named like `pattern` fail with errno `code` ("ENOSPC", "EIO")."""
        self.command(f"fault {code} {pattern}")

    def faults_off(self) -> None:
        self.command("fault off")

    def cut(self, seed: int, mode: str = "random") -> dict[str, int]:
        """The power cut: every file and directory back to its durable version; then unmounted."""
        kept = dict(self.command(f"cut {seed} {mode}"))
        self.unmount()
        return kept

    def unmount(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        if self.mounted():
            # lazy: a process that had files open when the power went may not be gone yet
            subprocess.run([FUSERMOUNT, "-u", "-z", str(self.mountpoint)], check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout)
        self.proc = None


if __name__ == "__main__":
    main(sys.argv[1:])
