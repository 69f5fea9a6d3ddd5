"""Where a child process is, read from /proc (Linux): which system call it is in, whether it is stopped,
how many writes it has made. Tests use it to act at a known point of a helper process's work (inside
its fdatasync, or back waiting for a request) instead of guessing with a sleep."""

from __future__ import annotations

import platform

READ = 0
RECVMSG = {"x86_64": 47, "aarch64": 212}.get(platform.machine())
"""recvmsg's system call number: the sync helper waits for a request in it (a socket, which can carry
the log's next segment)."""
FDATASYNC = {"x86_64": 75, "aarch64": 83}.get(platform.machine())
"""fdatasync's system call number here (None on a machine these tests do not know)."""


def syscall(pid: int) -> tuple[int, list[int]] | None:
    """(number, arguments) of the system call `pid` is blocked or stopped in; None while it runs, -1 as
    the number when it is blocked outside one. A stopped process shows the call it stopped on leaving:
    it takes a stop signal on its way back from the kernel, before its next instruction."""
    with open(f"/proc/{pid}/syscall") as f:
        fields = f.read().split()
    if not fields or fields[0] == "running":
        return None
    return int(fields[0]), [int(a, 16) for a in fields[1:7]]


def state(pid: int) -> str:
    """The one-letter state: R running, S sleeping, D in uninterruptible I/O, T stopped, Z zombie."""
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def writes(pid: int) -> int:
    """How many write system calls `pid` has made (syscw of /proc/PID/io)."""
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    raise AssertionError(f"no syscw in /proc/{pid}/io")


def argv(pid: int) -> list[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return [a.decode() for a in f.read().split(b"\0") if a]


def reading(pid: int, fd: int) -> bool:
    """`pid` is waiting in read() or recvmsg() on its descriptor `fd`."""
    now = syscall(pid)
    return now is not None and now[0] in (READ, RECVMSG) and now[1][0] == fd and state(pid) == "S"
