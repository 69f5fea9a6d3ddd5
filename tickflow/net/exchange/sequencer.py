"""The sequencer: the one task that writes the log and applies commands to the engine.

    submit() -> bounded queue -> take a batch (<= 256) -> stamp seq + time -> one write -> start a sync
             -> apply -> resolve each caller once the sync returns -> publish to listeners

In `group` mode the fdatasync starts as soon as a batch is written, so the disk works while the
batch is matched (store/syncer.py: in a helper process for a real file). A sync covers every batch
written before it began; when it returns the next sync has already started over whatever was written
meanwhile, and those batches are answered, in order. Nothing is resolved or published before a sync
that began after its record was written has returned. `order` mode takes batches of one and waits for
each one's sync; `none` answers right after the write.

Some commands are answered at `submit` without a record: a retried clientOrderId (from the engine's
memory, or the attempt still in flight), and a cancel or amend that is certain to be refused.
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import deque
from typing import Callable

from tickflow.core.engine import Engine
from tickflow.core.types import Amend, Cancel, CancelAll, Command, NewOrder, Outcome, Reason, Record
from tickflow.net.exchange.certain import certain_refusal, nothing_to_cancel
from tickflow.net.exchange.inflight import InFlight, Item, Resubmit
from tickflow.net.exchange.stats import Stats
from tickflow.store.log.codec import decode_record, decode_records, encode_record
from tickflow.store.log.syncer import NoSyncer, Syncer, default_syncer, roll
from tickflow.store.log.segments import SegmentedLog
from tickflow.store.log.wal import MAX_PAYLOAD, Wal

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


class BadCommand(ValueError):
    """The command cannot be logged as given (a field of the wrong type): it was not sequenced."""


Listener = Callable[[list[Outcome]], None]
"""Called on the event loop with each durable batch's outcomes, in sequence order. Must not block."""


def now_ms() -> int:
    return time.time_ns() // 1_000_000


_Batch = tuple[list[Item], list[Outcome]]


class _Unacked:
    """A batch written to the log and matched, waiting for the sync that makes it durable."""

    __slots__ = ("end", "items", "outcomes")

    def __init__(self, end: int, items: list[Item], outcomes: list[Outcome]) -> None:
        self.end = end
        """The log's size after the batch (`wal.size`: bytes over every segment written since the start,
        so ordered across rolls): a sync that covers this many bytes makes it durable."""
        self.items = items
        self.outcomes = outcomes


class Sequencer:
    """Owns the engine and the log once started; everything else talks to it through `submit`."""

    def __init__(
        self,
        engine: Engine,
        wal: Wal | SegmentedLog,
        durability: Durability | str = Durability.GROUP,
        *,
        max_batch: int = 256,
        queue_size: int = 4096,
        clock: Callable[[], int] = now_ms,
        syncer: Syncer | None = None,
        log_started: int | None = None,
    ) -> None:
        self.engine = engine
        self.wal = wal
        self.durability = Durability(durability)
        self.max_batch = max_batch if self.durability is not Durability.ORDER else 1
        self.queue_size = queue_size
        self.clock = clock
        self.seq = engine.last_seq
        self.last_ts = engine.last_ts
        self.log_started = log_started
        """The time stamped on the log's first record (`Recovery.first_ts`; set when this sequencer
        writes it to an empty log): it names the log. Not yet durable until the first sync after that."""
        self.listeners: list[Listener] = []
        self.after_batch: Callable[[int, int], None] | None = None
        """Called with (seq, log size) after each batch is written and applied, before the next is taken:
        the engine then holds exactly the records up to that size (the snapshotter forks here)."""
        self.stats = Stats()
        self.failed: str | None = None
        self._items: deque[Item] = deque()
        self._wakeup: asyncio.Future[None] | None = None
        self._room: deque[asyncio.Future[None]] = deque()
        self._admitted = 0
        """Callers let in from `_room` that have not queued their command yet."""
        self._inflight = InFlight()
        self._unacked: deque[_Unacked] = deque()
        """Batches written, not yet durable, oldest first."""
        self._unsynced = 0
        self._durable = wal.size
        """How much of the log the last sync made durable (a replayed log counts as durable)."""
        self._synced_all: asyncio.Future[None] | None = None
        if syncer is None:
            syncer = NoSyncer() if self.durability is Durability.NONE else default_syncer(wal)
        self._syncer = syncer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._closing = False
        self._stopped: asyncio.Future[None] | None = None

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._syncer.start(self._loop, self._synced)
        self._task = asyncio.create_task(self._run(), name="sequencer")

    async def stop(self) -> None:
        """Stop taking commands, finish what is queued and in flight, close the log.

        Callers still waiting for room in a full queue were never queued: they get SequencerStopped.
        """
        if self._stopped is not None:
            return await asyncio.shield(self._stopped)
        self._stopped = asyncio.get_running_loop().create_future()
        self._closing = True
        try:
            self._release_room()
            self._wake()
            if self._task is not None:
                await asyncio.gather(self._task, return_exceptions=True)
            if self._items:  # never started: nothing will take them
                self._refuse(list(self._items), "shutting down: the sequencer was never started")
                self._items.clear()
            await self._synced_all_future()
            self._syncer.close()
            if self.durability is Durability.NONE:
                self._final_sync()
            self.wal.close()
        finally:
            self._stopped.set_result(None)

    def _final_sync(self) -> None:
        """durability=none promised only the page cache; a clean stop still leaves the log on the disk."""
        if self.failed:
            return
        try:
            self.wal.sync()
        except Exception as e:  # nothing waits on it: say so and close anyway
            log.error("final sync of the log at shutdown failed: %s", e)

    @property
    def queue_depth(self) -> int:
        return len(self._items)

    @property
    def syncer(self) -> Syncer:
        """Where this sequencer's fdatasyncs run (a helper process for a real file; for tests to watch)."""
        return self._syncer

    # ------------------------------------------------------------------ submitting

    async def submit(self, command: Command) -> Outcome:
        """Sequence `command` and return its outcome once its record is durable."""
        self._check_taking()
        taken = self._take(command)
        if type(taken) is not Item:
            return await taken if isinstance(taken, asyncio.Future) else taken  # type: ignore[return-value]
        if len(self._items) >= self.queue_size:
            try:
                await self._wait_for_room()
            except BaseException as e:
                self._inflight.never_queued(taken, e)
                raise
        self._items.append(taken)
        if self._wakeup is not None:
            self._wake()
        # A cancelled caller cancels only its own future; the command still runs and its retries
        # (which wait on futures of their own) still get the answer.
        return await taken.future

    async def submit_many(self, commands: list[Command]) -> list[Outcome | Exception]:
        """Sequence `commands` one after another with nothing between them; each one's outcome, or the
        exception `submit` would have raised for it, in order. The batch waits for room once and then goes
        in whole, so the queue may hold up to one batch more than its size."""
        self._check_taking()
        if len(self._items) >= self.queue_size:
            await self._wait_for_room()
        answers: list[Outcome | asyncio.Future[Outcome]] = []
        for command in commands:
            taken = self._take(command)
            if type(taken) is Item:
                self._items.append(taken)
                answers.append(taken.future)
            else:
                answers.append(taken)  # type: ignore[arg-type]
        if self._wakeup is not None:
            self._wake()
        results: list[Outcome | Exception] = []
        for answer in answers:
            if type(answer) is Outcome:
                results.append(answer)
                continue
            try:
                results.append(await answer)  # type: ignore[misc]
            except (SequencerStopped, BadCommand) as e:
                results.append(e)
        return results

    def _check_taking(self) -> None:
        if self.failed:
            raise SequencerStopped(self.failed)
        if self._closing:
            raise SequencerStopped("shutting down: no new commands are taken")

    def _take(self, command: Command) -> Item | Outcome | asyncio.Future[Outcome]:
        """`command` as an item to queue; or its answer when it needs no record (a retried clientOrderId, a
        cancel or amend certain to be refused, a cancel-all of nothing); or, for a retry of an attempt still
        in flight, a future of that attempt's answer."""
        key = None
        if type(command) is NewOrder:  # nearly all the traffic: one type test for it
            if command.client_order_id is not None:
                key = (command.account, command.client_order_id)
                first = self._inflight.get(key)
                if first is not None:
                    return asyncio.ensure_future(self._same_answer(command, first, self._inflight.wait_on(first)))
                # Stamped now, a record would find an entry whose window has passed forgotten.
                duplicate = self.engine.check_duplicate(command, max(self.clock(), self.last_ts))
                if duplicate is not None:
                    return duplicate
        elif type(command) is Cancel or type(command) is Amend:
            # Commands queued or waiting for room are applied first: they may still be given ids.
            in_flight = len(self._items) + len(self._room) + self._admitted
            refused = certain_refusal(self.engine, command, self._durable_seq(), in_flight)
            if refused is not None:
                return refused
        elif type(command) is CancelAll and not (self._unacked or self._room or self._admitted):
            nothing = nothing_to_cancel(self.engine, command, (item.command for item in self._items))
            if nothing is not None:
                return nothing
        # The loop kept from start(): asyncio.get_running_loop() costs a getpid() system call.
        future: asyncio.Future[Outcome] = (self._loop or asyncio.get_running_loop()).create_future()
        item = Item(command, future, key)
        if key is not None:
            self._inflight.add(item)
        return item

    def _durable_seq(self) -> int:
        """The last sequence number whose record is durable (in `none` mode: the last applied)."""
        if self._unacked:
            return self._unacked[0].outcomes[0].seq - 1
        return self.engine.last_seq

    async def _wait_for_room(self) -> None:
        """Backpressure: wait, in turn, until the writer has taken something from a full queue."""
        loop = asyncio.get_running_loop()
        while len(self._items) >= self.queue_size:
            waiter: asyncio.Future[None] = loop.create_future()
            self._room.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._admitted -= 1  # let in, then cancelled before it could queue
                waiter.cancel()
                try:
                    self._room.remove(waiter)
                except ValueError:
                    pass
                if len(self._items) < self.queue_size and not waiter.cancelled():
                    self._release_room(1)  # the room we were given goes to the next in line
                raise
            self._admitted -= 1
            if self.failed:
                raise SequencerStopped(self.failed)
            if self._closing:
                raise SequencerStopped("shutting down: the command was still waiting for room and was not taken")

    async def _same_answer(self, command: NewOrder, first: Item, waiter: asyncio.Future[Outcome]) -> Outcome:
        """A retry of an order that is still in flight: the first attempt's answer."""
        try:
            outcome = await waiter
        except Resubmit:
            return await self.submit(command)
        return self._inflight.same_answer(command, first, outcome)

    # ------------------------------------------------------------------ the writer

    async def _run(self) -> None:
        items = self._items
        popleft = items.popleft
        loop = asyncio.get_running_loop()
        group = self.durability is Durability.GROUP
        batch: list[Item] = []
        try:
            while True:
                # With the disk stalled, stop matching ahead: the queue fills and callers wait.
                if not items or (group and self._unsynced >= self.queue_size):
                    if self._closing and not items:
                        return
                    self._wakeup = loop.create_future()
                    await self._wakeup
                    continue
                if isinstance(self.wal, SegmentedLog) and self.wal.roll_due and not self.failed:
                    # Before the batch leaves the queue: what `submit` counts as in flight stays true meanwhile.
                    await self._roll(self.wal)
                    continue
                n = min(len(items), self.max_batch)
                batch = [popleft() for _ in range(n)]
                self._release_room(n)
                if self.failed:
                    self._refuse(batch, self.failed)
                    continue
                done = self._write_and_apply(batch)
                batch = []
                if done is None:
                    continue
                if self.after_batch is not None:
                    self.after_batch(self.seq, self.wal.position)
                if self.durability is Durability.NONE:
                    self._resolve(*done)
                else:
                    self._unacked.append(_Unacked(self.wal.size, *done))
                    self._unsynced += len(done[0])
                    if not group:
                        await self._synced_all_future()
                await asyncio.sleep(0)  # let answered callers and the sync's completion in
        except Exception as e:
            log.exception("sequencer failed")
            self._fail(batch, f"sequencer failed: {e!r}")
            self._refuse(list(items), self.failed or "sequencer failed")
            items.clear()
            if not self._syncer.busy:
                for unacked in self._unacked:
                    self._refuse(unacked.items, self.failed or "sequencer failed")
                self._unacked.clear()
        finally:
            if self.failed or self._closing:
                self._release_room()

    async def _roll(self, wal: SegmentedLog) -> None:
        """Seal the log's segment once durable whole (`none`: by one fdatasync), then begin the next."""
        if self.durability is not Durability.NONE:
            await self._synced_all_future()
        try:
            if not self.failed:
                roll(wal, self._syncer, self.seq + 1, sync=self.durability is Durability.NONE)
        except Exception as e:  # LogError, OSError: no segment to write to, nothing more is taken
            self._fail([], f"cannot begin a new log segment: {e}")

    def _write_and_apply(self, batch: list[Item]) -> _Batch | None:
        """Stamp, log and match a batch; None when the log refused it (the callers have been told)."""
        ts = self.clock()
        if ts < self.last_ts:
            ts = self.last_ts  # the log's time never runs backwards
        records, commands, taken = self._encode(batch, self.seq, ts)
        if not records:
            return None
        try:
            self.wal.append(records)
        except Exception as e:  # LogError: the device failed, nothing of this batch is acknowledged
            self._fail(taken, str(e))
            return None
        self.last_ts = ts
        if self.seq == 0:
            self.log_started = ts
        if self.durability is not Durability.NONE:
            self._syncer.grown(self.wal.size)  # in the file: the sync can run while they are matched
        apply = self.engine.apply
        outcomes = []
        seq = self.seq
        for command in commands:
            seq += 1
            outcomes.append(apply(seq, ts, command))
        self.seq = seq
        self.stats.batch(len(taken))
        return taken, outcomes

    def _encode(self, batch: list[Item], seq: int, ts: int) -> tuple[list[bytes], list[Command], list[Item]]:
        """The batch's records from `seq + 1`, the commands to apply, and the items they belong to.

        What is applied is what replay will read back, so each record is decoded again, and a command
        that would not decode (a wrong field type) is refused here rather than poisoning the log."""
        try:
            records = [encode_record(Record(seq + i, ts, item.command)) for i, item in enumerate(batch, 1)]
            if max(map(len, records)) <= MAX_PAYLOAD:
                return records, [r.command for r in decode_records(records)], batch
        except Exception:
            pass  # one of them is bad: find it, one by one
        records = []
        commands = []
        taken = []
        for item in batch:
            try:
                payload = encode_record(Record(seq + 1, ts, item.command))
                if len(payload) > MAX_PAYLOAD:  # replay would take it for garbage and refuse the log
                    raise ValueError(f"its record would be {len(payload)} bytes, over the log's {MAX_PAYLOAD}")
                commands.append(decode_record(payload).command)
            except Exception as e:
                self._refuse([item], f"command cannot be logged: {e}", BadCommand)
                continue
            seq += 1
            records.append(payload)
            taken.append(item)
        return records, commands, taken

    # ------------------------------------------------------------------ durability

    def _synced(self, upto: int, error: str | None, seconds: float) -> None:
        """A sync returned: the log's first `upto` bytes are durable; answer every batch within them.

        Also after a later write failed: those records are in the log, so their callers are told so.
        A failed sync refuses every batch not yet durable and cuts them from the log, so a caller
        told "not taken" never finds the order live after a restart."""
        unacked = self._unacked
        if error is not None:
            self._fail([], error)
            if unacked:
                for written in unacked:
                    self._unsynced -= len(written.items)
                    self._refuse(written.items, self.failed or error)
                unacked.clear()
                if not self.wal.discard_after(self._durable):
                    log.error("could not cut the log back to its last durable byte %d: commands refused "
                              "after the failed sync may still be replayed at the next start", self._durable)
        else:
            self.stats.sync(seconds)
            self._durable = max(self._durable, upto)
        while unacked and unacked[0].end <= upto:
            written = unacked.popleft()
            self._unsynced -= len(written.items)
            self._resolve(written.items, written.outcomes)
        if self._wakeup is not None:
            self._wake()
        if not self._syncer.busy and self._synced_all is not None and not self._synced_all.done():
            self._synced_all.set_result(None)

    async def _synced_all_future(self) -> None:
        """Wait until everything written is durable (order mode: the one command just written)."""
        if self._syncer.busy:
            self._synced_all = asyncio.get_running_loop().create_future()
            await self._synced_all

    # ------------------------------------------------------------------ answers

    def _resolve(self, batch: list[Item], outcomes: list[Outcome]) -> None:
        for item, outcome in zip(batch, outcomes):
            future = item.future
            if not future.done():
                future.set_result(outcome)
            if item.key is not None:
                self._inflight.finish(item, outcome, None)
        for listener in self.listeners:
            try:
                listener(outcomes)
            except Exception:  # a broken subscriber must not stop the writer
                log.exception("listener %r failed", listener)

    def _fail(self, batch: list[Item], why: str) -> None:
        """No acknowledgement for records that are not durable; the log takes nothing more."""
        if self.failed is None:
            self.failed = why
            log.error("sequencer stopped: %s", why)
            self._release_room()
        self._refuse(batch, why)

    def _refuse(self, batch: list[Item], why: str, kind: type[Exception] = SequencerStopped) -> None:
        for item in batch:
            error = kind(why)
            if not item.future.done():
                item.future.set_exception(error)
            if item.key is not None:
                self._inflight.finish(item, None, error)

    def _wake(self) -> None:
        wakeup, self._wakeup = self._wakeup, None
        if wakeup is not None and not wakeup.done():
            wakeup.set_result(None)

    def _release_room(self, n: int | None = None) -> None:
        """Let up to `n` (or all) callers waiting on a full queue try again."""
        room = self._room
        while room and (n is None or n > 0):
            waiter = room.popleft()
            if not waiter.done():
                waiter.set_result(None)
                self._admitted += 1
                if n is not None:
                    n -= 1
