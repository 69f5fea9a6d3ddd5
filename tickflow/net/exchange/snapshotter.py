"""Taking snapshots without stopping the sequencer: a fork()ed child writes the engine as it was.

Every `every` records the sequencer, between two batches, forks. The child holds a copy-on-write image
of the engine at that batch's seq: it encodes it, writes and fsyncs a temporary file, and exits; the
parent goes on matching at once, paying only the fork. Once the child is done, the parent waits until
the log is durable up to that seq and SQLite holds its trades, fsyncs SQLite's files (so a power cut
cannot take from SQLite what only the deleted segments could give back), then renames the file into place (and
fsyncs the directory), deletes the snapshots beyond the newest `keep`, and then the log segments whose
records are all at or before the oldest snapshot kept (a thread does the disk work). A snapshot is so never ahead
of the durable log, and the records before it are never needed to rebuild SQLite. A failed snapshot
(a full disk, a child that dies) is logged and counted, and the next one is tried `every` records
later; it never fails the server or an order. A clean stop writes one more, in this process.
`every` 0 turns snapshots off: the whole log is replayed at every start.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from tickflow.core.engine import Engine
from tickflow.core.snapshot import capture
from tickflow.store import snapshots
from tickflow.store.log import segments

log = logging.getLogger("tickflow")

SNAPSHOT_EVERY = 1_000_000
"""Records between snapshots by default (`serve --snapshot-every`): a start then replays at most this
many records after the newest snapshot, a second or two, and a busy server writes one every few minutes."""
KEEP_SNAPSHOTS = 2
STOP_WAIT = 10.0
"""Seconds a stopping server waits for a snapshot being written before it gives up on it."""


class Snapshotter:
    """Decides when to snapshot, runs the child, publishes and prunes."""

    def __init__(self, directory: Path, engine: Engine, *, every: int = SNAPSHOT_EVERY, keep: int = KEEP_SNAPSHOTS,
                 first_ts: Callable[[], int | None], durable: Callable[[int], Awaitable[None]],
                 history_durable: Callable[[], None] | None = None, last_seq: int = 0) -> None:
        self.directory = directory
        self.engine = engine
        self.every = every
        self.keep = max(1, keep)
        self.first_ts = first_ts
        self.durable = durable
        """Waits until the log is durable and SQLite holds the trades up to a seq."""
        self.history_durable = history_durable
        """Makes what SQLite holds durable (blocking, so run in a thread): once a snapshot is published the
        segments before it may go, and with them the records that could re-derive SQLite's last commits."""
        self.last_seq = last_seq
        """The seq of the newest snapshot on disk (or the one recovery started from)."""
        self.last_time = time.time()
        self.next_at = last_seq + every
        self.failures = 0
        self.taken = 0
        self.task: asyncio.Task[None] | None = None

    @property
    def busy(self) -> bool:
        return self.task is not None and not self.task.done()

    def after_batch(self, seq: int, log_offset: int) -> None:
        """The sequencer applied a batch ending at `seq`, whose records end at `log_offset`: fork for a
        snapshot when one is due and none is being written."""
        if self.every <= 0 or seq < self.next_at or self.busy:
            return
        self.next_at = seq + self.every
        try:
            pid = os.fork()
        except OSError as e:
            self._failed(seq, f"cannot fork a snapshot writer: {e}")
            return
        if pid == 0:  # the child: write and leave, touching nothing the parent's threads hold
            _child(self.directory, seq, log_offset, self.first_ts(), self.engine)
        self.task = asyncio.ensure_future(self._finish(pid, seq))

    async def _finish(self, pid: int, seq: int) -> None:
        loop = asyncio.get_running_loop()
        temporary = self.directory / f".snap-{seq:020d}.tmp"
        try:
            _, status = await loop.run_in_executor(None, os.waitpid, pid, 0)
            code = os.waitstatus_to_exitcode(status)
        except (OSError, ValueError) as e:
            code = -1
            log.error("cannot wait for the snapshot writer %d: %s", pid, e)
        if code != 0:
            _discard(temporary)
            self._failed(seq, f"the snapshot writer exited with status {code}")
            return
        try:
            await self.durable(seq)
            if self.history_durable is not None:
                await loop.run_in_executor(None, self.history_durable)
            await loop.run_in_executor(None, snapshots.publish, temporary)
        except Exception as e:  # a log that failed, SQLite that never caught up, a full disk
            _discard(temporary)
            self._failed(seq, f"cannot publish the snapshot at seq {seq}: {e!r}")
            return
        self._published(seq)
        try:
            await loop.run_in_executor(None, self._retire)
        except OSError as e:  # the next snapshot tries again
            log.error("deleting old snapshots or log segments failed: %s", e)

    def _retire(self) -> None:
        """Delete the snapshots beyond the newest `keep`, then the log segments none of those kept needs.

        Called once the newest is durable (renamed, directory synced); an older kept one is what a start
        falls back to if the newest fails its checksum, so its segments stay."""
        snapshots.prune(self.directory, self.keep)
        kept = snapshots.on_disk(self.directory)
        if not kept:
            return
        oldest = snapshots.NAME.match(kept[-1].name)
        for path in segments.retire(self.directory, int(oldest.group(1)) if oldest else 0):
            log.info("deleted log segment %s: every record in it is before the snapshots kept", path.name)

    def _published(self, seq: int) -> None:
        self.last_seq = seq
        self.last_time = time.time()
        self.taken += 1
        log.info("snapshot at seq %d written", seq)

    def _failed(self, seq: int, why: str) -> None:
        self.failures += 1
        log.error("snapshot at seq %d failed (%s); the next is tried %d records later", seq, why, self.every)

    async def stop(self, seq: int, log_offset: int, trades_flushed: int) -> None:
        """Let a snapshot being written finish (for a while); then, if the log has moved on since the
        newest snapshot and SQLite holds every trade, write one more here. Called once the sequencer
        has stopped, so everything it wrote is durable."""
        if self.task is not None:
            done, _ = await asyncio.wait({self.task}, timeout=STOP_WAIT)
            if not done:
                self.task.cancel()
                await asyncio.gather(self.task, return_exceptions=True)
        if self.every <= 0 or seq <= self.last_seq:  # snapshots off, or nothing new since the last
            return
        if trades_flushed < seq:
            log.warning("no snapshot at the stop: SQLite is behind the log (it holds trades up to seq %d of %d)",
                        trades_flushed, seq)
            return
        try:
            if self.history_durable is not None:
                await asyncio.get_running_loop().run_in_executor(None, self.history_durable)
            data = snapshots.encode(seq, log_offset, self.first_ts(), capture(self.engine))
            snapshots.publish(snapshots.write_temporary(self.directory, seq, data))
        except OSError as e:
            snapshots.remove_temporaries(self.directory)
            self._failed(seq, f"cannot sync SQLite or write the snapshot at a clean stop: {e}")
            return
        self._published(seq)
        try:
            self._retire()
        except OSError as e:
            log.error("deleting old snapshots or log segments failed: %s", e)


def _discard(path: Path) -> None:
    """Delete what a failed snapshot left, if anything can be deleted (a start deletes it otherwise)."""
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass


def _child(directory: Path, seq: int, log_offset: int, first_ts: int | None, engine: Engine) -> None:
    """In the forked child: encode the engine, write the temporary file, exit 0 (1 on any failure)."""
    gc.disable()  # a collection would touch (and so copy) every page of the image
    code = 1
    try:
        data = snapshots.encode(seq, log_offset, first_ts, capture(engine))
        snapshots.write_temporary(directory, seq, data)
        code = 0
    except BaseException as e:  # nothing may escape into the parent's event loop, copied here
        try:
            os.write(2, f"tickflow snapshot writer: {e!r}\n".encode())
        except OSError:
            pass
    finally:
        os._exit(code)
    sys.exit(code)  # not reached: keeps type checkers certain the child never returns
