"""The fdatasync helper process (see syncer.ProcessSyncer); run by path, it imports only the standard library.

    python -I -S sync_helper.py LOG_FD REQUESTS_FD REPLIES_FD PARALLEL

Each request is a ticket; the helper answers it with (ticket, errno or 0, seconds) once an fdatasync
of the log that began after the request was read has returned. It exits when the requests pipe
closes, or with its parent.
"""

import errno
import os
import struct
import sys
import threading
import time

REQUEST = struct.Struct("<q")
REPLY = struct.Struct("<qid")  # ticket, errno (0: synced), seconds


def serve(fd: int, requests: int, replies: int, parallel: int) -> None:
    lock = threading.Lock()

    def worker() -> None:
        while True:
            data = os.read(requests, REQUEST.size)  # a pipe hands each 8-byte write to one reader whole
            if len(data) < REQUEST.size:
                return
            (ticket,) = REQUEST.unpack(data)
            started = time.perf_counter()
            try:
                os.fdatasync(fd)
                code = 0
            except OSError as e:
                code = e.errno or errno.EIO
            reply = REPLY.pack(ticket, code, time.perf_counter() - started)
            with lock:
                os.write(replies, reply)

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(max(1, parallel))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


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
    serve(*(int(a) for a in sys.argv[1:5]))
