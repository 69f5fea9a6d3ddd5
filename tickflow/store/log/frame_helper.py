"""The framing helper process (see wal.Wal.replay_batches); run by path, it imports only the standard
library and frames.py and helper_formats.py beside it.

    python -I -S frame_helper.py DATA_FD START OUT_FD

DATA_FD holds the log's bytes (a memory file the replaying process filled). From byte START it checks
records as replay does (frames.good_records) and writes each batch of good ones to OUT_FD as
`BATCH` (first record's offset, records, bytes) then their payloads back to back, without the
headers: what the replaying process would have cut out and joined itself. It ends with a `BATCH` of
0 records whose offset is where it stopped: the end of the data, or a record that failed its checks
(the replaying process looks at that one itself). This process does the one pass over every record
that is pure framing, on the other core, while the replaying process decodes and applies.
"""

import mmap
import os
import sys

# Last on the path, so that nothing here can shadow the standard library.
sys.path.append(os.path.dirname(os.path.abspath(__file__)))
import frames  # noqa: E402
from helper_formats import BATCH  # noqa: E402


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def main() -> None:
    data_fd, start, out = (int(a) for a in sys.argv[1:4])
    size = os.fstat(data_fd).st_size
    data = mmap.mmap(data_fd, size, prot=mmap.PROT_READ) if size else b""
    stop = start
    for first, payloads in frames.good_records(data, start):
        joined = b"".join(payloads)
        _write_all(out, BATCH.pack(first, len(payloads), len(joined)) + joined)
        stop = frames.batch_end(first, payloads)
    _write_all(out, BATCH.pack(stop, 0, 0))


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # the replaying process stopped reading (it failed, or found the log corrupt)
        pass
