"""A sequencer in a child process, for kill -9 tests: commands in on stdin, durable answers out on stdout.

    python tests/helpers/seq_child.py LOG_PATH {none,group,order}

On start it replays the log and prints one line, `{"ready": ..., "records": ..., "last_seq": ..., "cut": ...}`.
Then each stdin line is a JSON `[id, command]` (a command as msgspec encodes it, e.g.
`["n", account, symbol, side, type, price, qty, tif, post_only, client_order_id]`); each is submitted
concurrently, and when its answer comes back (so only once its record is durable) one line
`[id, seq, error, replayed, result, next order id]` is printed, or `[id, null, "stopped: ...", false, null]`.
"""

from __future__ import annotations

import asyncio
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import msgspec  # noqa: E402

from tickflow.core.engine import Engine  # noqa: E402
from tickflow.core.types import AddSymbol, Command  # noqa: E402
from tickflow.net.exchange.sequencer import Sequencer, SequencerStopped  # noqa: E402
from tickflow.store.recovery import recover  # noqa: E402
from tickflow.store.log.wal import Wal  # noqa: E402

SYMBOL = "ACME"
_decode = msgspec.json.Decoder(tuple[int, Command]).decode
_encode = msgspec.json.encode


def emit(line: object) -> None:
    sys.stdout.buffer.write(_encode(line) + b"\n")
    sys.stdout.buffer.flush()


async def serve(path: str, mode: str) -> None:
    wal = Wal.open(path)
    engine = Engine()
    recovery = recover(wal, engine)
    sequencer = Sequencer(engine, wal, mode)
    await sequencer.start()
    if SYMBOL not in engine.books:
        await sequencer.submit(AddSymbol(SYMBOL))
    emit({"ready": True, "records": recovery.records, "last_seq": recovery.last_seq,
          "cut": str(recovery.cut) if recovery.cut else None})

    async def answer(ident: int, command: Command) -> None:
        try:
            o = await sequencer.submit(command)
        except SequencerStopped as e:
            emit([ident, None, f"stopped: {e}", False, None])
            return
        # For an answer without a record (seq 0), given at once: how many order ids were out then.
        emit([ident, o.seq, o.error, o.replayed, o.result, sequencer.engine.next_order_id])

    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    tasks: set[asyncio.Task[None]] = set()
    while line := await reader.readline():
        ident, command = _decode(line)
        task = asyncio.create_task(answer(ident, command))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)
    await sequencer.stop()


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2]))
