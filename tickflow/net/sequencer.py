"""The sequencer: the one task that writes the log and applies commands to the engine.

    submit() -> bounded queue -> take up to 256 -> stamp seq + time -> one write -> apply
             -> make durable (per mode) -> resolve each caller -> publish to listeners

In `group` mode a separate task runs fdatasync in a thread over everything written so far, so
the next batch is read, written and matched while the previous one's sync is in flight; nothing
is resolved or published before the sync that covers its record has returned.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from tickflow.core.engine import Engine
from tickflow.core.types import Command, NewOrder, Outcome, Reason, Record
from tickflow.store.records import encode_record
from tickflow.store.wal import LogError, Wal

log = logging.getLogger(__name__)


class Durability(str, enum.Enum):
    NONE = "none"
    """Acknowledge once written to the file (page cache): survives a process crash."""
    GROUP = "group"
    """Acknowledge after one fdatasync covering the whole batch: survives power loss."""
    ORDER = "order"
    """One fdatasync per command: survives power loss, at the cost of one sync per order."""


class SequencerStopped(Exception):
    """The sequencer is not accepting commands: shutting down, or the log device failed."""


Listener = Callable[[list[Outcome]], None]
"""Called on the event loop with each durable batch's outcomes, in sequence order. Must not block."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Stats:
    """Counters the server exposes as metrics."""

    BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    SYNC_BUCKETS_MS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 25, 50, 100, 250, 1000)

    def __init__(self) -> None:
        self.commands = 0
        self.batches = 0
        self.batch_sizes = [0] * (len(self.BATCH_BUCKETS) + 1)
        self.syncs = 0
        self.sync_seconds = 0.0
        self.sync_hist = [0] * (len(self.SYNC_BUCKETS_MS) + 1)

    def batch(self, size: int) -> None:
        self.commands += size
        self.batches += 1
        self.batch_sizes[_bucket(self.BATCH_BUCKETS, size)] += 1

    def sync(self, seconds: float) -> None:
        self.syncs += 1
        self.sync_seconds += seconds
        self.sync_hist[_bucket(self.SYNC_BUCKETS_MS, seconds * 1000)] += 1


def _bucket(bounds: tuple[float, ...], value: float) -> int:
    for i, bound in enumerate(bounds):
        if value <= bound:
            return i
    return len(bounds)


_Item = tuple[Command, "asyncio.Future[Outcome]"]
_STOP = object()


class Sequencer:
    """Owns the engine and the log once started; everything else talks to it through `submit`."""

    def __init__(
        self,
        engine: Engine,
        wal: Wal,
        durability: Durability | str = Durability.GROUP,
        *,
        max_batch: int = 256,
        queue_size: int = 4096,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.engine = engine
        self.wal = wal
        self.durability = Durability(durability)
        self.max_batch = max_batch if self.durability is not Durability.ORDER else 1
        self.clock = clock
        self.seq = engine.last_seq
        self.last_ts = engine.last_ts
        self.listeners: list[Listener] = []
        self.stats = Stats()
        self.failed: str | None = None
        self._queue: asyncio.Queue[_Item | object] = asyncio.Queue(queue_size)
        self._inflight: dict[tuple[str, str], _Item] = {}
        self._pending: list[tuple[list[_Item], list[Outcome]]] = []
        self._pending_ready = asyncio.Event()
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="tickflow-fsync")
        self._tasks: list[asyncio.Task[None]] = []
        self._closing = False

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._tasks = [asyncio.create_task(self._run(), name="sequencer")]
        if self.durability is Durability.GROUP:
            self._tasks.append(asyncio.create_task(self._sync_loop(), name="group-commit"))

    async def stop(self) -> None:
        """Stop taking commands, finish what is queued and in flight, close the log."""
        if self._closing:
            return
        self._closing = True
        if self._tasks:
            await self._queue.put(_STOP)
            await asyncio.gather(*self._tasks, return_exceptions=True)
        self._executor.shutdown(wait=True)
        self.wal.close()

    @property
    def queue_depth(self) -> int:
        return self._queue.qsize()

    # ------------------------------------------------------------------ submitting

    async def submit(self, command: Command) -> Outcome:
        """Sequence `command` and return its outcome once its record is durable."""
        if self.failed:
            raise SequencerStopped(self.failed)
        if self._closing:
            raise SequencerStopped("shutting down")
        if type(command) is NewOrder and command.client_order_id is not None:
            key = (command.account, command.client_order_id)
            inflight = self._inflight.get(key)
            if inflight is not None:
                return await self._same_answer(command, inflight)
            duplicate = self.engine.check_duplicate(command)
            if duplicate is not None:
                return duplicate
            future = asyncio.get_running_loop().create_future()
            item = (command, future)
            self._inflight[key] = item
            future.add_done_callback(lambda _f: self._inflight.pop(key, None))
        else:
            future = asyncio.get_running_loop().create_future()
            item = (command, future)
        try:
            await self._queue.put(item)
        except BaseException:
            # Never queued: anyone waiting on this attempt must not wait forever.
            if not future.done():
                future.cancel()
            raise
        return await asyncio.shield(future)

    async def _same_answer(self, command: NewOrder, inflight: _Item) -> Outcome:
        """A retry of an order that is still in flight: wait for the first attempt's answer."""
        first, future = inflight
        try:
            outcome = await asyncio.shield(future)
        except asyncio.CancelledError:
            if future.cancelled() and not asyncio.current_task().cancelling():  # type: ignore[union-attr]
                return await self.submit(command)  # the first attempt never reached the queue
            raise
        error = None if first == command else Reason.DUPLICATE_MISMATCH
        return Outcome(outcome.seq, outcome.result, error, [], [], [], replayed=True)

    # ------------------------------------------------------------------ the writer

    async def _run(self) -> None:
        queue = self._queue
        get_nowait = queue.get_nowait
        apply = self.engine.apply
        stopping = False
        while not stopping:
            first = await queue.get()
            if first is _STOP:
                break
            batch: list[_Item] = [first]  # type: ignore[list-item]
            while len(batch) < self.max_batch and not queue.empty():
                item = get_nowait()
                if item is _STOP:
                    stopping = True
                    break
                batch.append(item)  # type: ignore[arg-type]
            if self.failed:
                self._fail(batch, self.failed)
                continue
            ts = self.clock()
            if ts < self.last_ts:
                ts = self.last_ts  # the log's time never runs backwards
            self.last_ts = ts
            seq = self.seq
            records = []
            for command, _ in batch:
                seq += 1
                records.append(encode_record(Record(seq, ts, command)))
            try:
                self.wal.append(records)
            except LogError as e:
                self._fail(batch, str(e))
                continue
            outcomes = []
            seq = self.seq
            for command, _ in batch:
                seq += 1
                outcomes.append(apply(seq, ts, command))
            self.seq = seq
            self.stats.batch(len(batch))
            if self.durability is Durability.NONE:
                self._resolve(batch, outcomes)
            elif self.durability is Durability.ORDER:
                await self._sync_now([(batch, outcomes)])
            else:
                self._pending.append((batch, outcomes))
                self._pending_ready.set()
        self._pending_ready.set()
        # Whatever arrived after the stop marker is refused rather than left hanging.
        while not queue.empty():
            item = get_nowait()
            if item is not _STOP:
                self._fail([item], "shutting down")  # type: ignore[list-item]

    async def _sync_loop(self) -> None:
        """Group commit: one fdatasync covers every batch written since the last one started."""
        run = self._tasks[0]
        while True:
            await self._pending_ready.wait()
            self._pending_ready.clear()
            if self._pending:
                taken, self._pending = self._pending, []
                await self._sync_now(taken)
            elif run.done():
                return

    async def _sync_now(self, taken: list[tuple[list[_Item], list[Outcome]]]) -> None:
        if self.failed:
            for batch, _ in taken:
                self._fail(batch, self.failed)
            return
        started = time.perf_counter()
        try:
            await asyncio.get_running_loop().run_in_executor(self._executor, self.wal.sync)
        except LogError as e:
            for batch, _ in taken:
                self._fail(batch, str(e))
            return
        self.stats.sync(time.perf_counter() - started)
        for batch, outcomes in taken:
            self._resolve(batch, outcomes)

    def _resolve(self, batch: list[_Item], outcomes: list[Outcome]) -> None:
        for (_, future), outcome in zip(batch, outcomes):
            if not future.done():
                future.set_result(outcome)
        for listener in self.listeners:
            try:
                listener(outcomes)
            except Exception:  # a broken subscriber must not stop the writer
                log.exception("listener %r failed", listener)

    def _fail(self, batch: list[_Item], why: str) -> None:
        """No acknowledgement for records that are not durable; the log takes nothing more."""
        if self.failed is None:
            self.failed = why
        for _, future in batch:
            if not future.done():
                future.set_exception(SequencerStopped(why))
