"""The fdatasync helper process (see syncer.ProcessSyncer); run by path, it imports only the standard library.

    python -I -S sync_helper.py LOG_FD REQUESTS_SOCKET_FD REPLIES_FD

A request wakes it; one that carries a descriptor (SCM_RIGHTS) is the log's next segment, which it syncs
from then on instead of the last, closed (the server sends it only once the last is durable whole). It notes the log's size, runs fdatasync, and answers (that size, errno or 0,
seconds, again): everything before that size is durable. `again` says the file grew during the
sync and it is already syncing again; it goes back to waiting for a request only after an answer
with `again` false. It exits when the requests pipe closes, or with its parent.
"""

import errno
import os
import socket
import sys
import time

# Last on the path, so that nothing here can shadow the standard library.
sys.path.append(os.path.dirname(os.path.abspath(__file__)))
from helper_formats import SYNC_REPLY as REPLY, SYNC_REQUEST as REQUEST  # noqa: E402


def serve(fd: int, requests: int, replies: int) -> None:
    channel = socket.socket(fileno=requests)
    while True:
        request, fds, _, _ = socket.recv_fds(channel, REQUEST.size, 1)
        if len(request) < REQUEST.size:  # one 8-byte message arrives whole
            return
        if fds:
            os.close(fd)
            fd = fds[0]
            continue
        again = True
        while again:
            size = os.fstat(fd).st_size
            started = time.perf_counter()
            try:
                os.fdatasync(fd)
                code = 0
            except OSError as e:
                code = e.errno or errno.EIO
            seconds = time.perf_counter() - started
            again = code == 0 and os.fstat(fd).st_size > size
            os.write(replies, REPLY.pack(size, code, seconds, again))


def die_with_parent() -> None:
    try:
        import ctypes
        import signal

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the requests pipe closing still ends the helper
        pass


if __name__ == "__main__":
    die_with_parent()
    if os.getppid() == 1:  # the parent died before prctl took effect
        sys.exit(0)
    serve(*(int(a) for a in sys.argv[1:4]))
