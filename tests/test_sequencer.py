"""The sequencer over real log files: batching, backpressure, idempotent retries, durability, stop."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any, Callable

import pytest
from helpers.aio import started
from helpers.fileops import GatedOps, PowerLossOps
from helpers.logs import open_log, replayed
from helpers.wait import turns, until

from tickflow.core.types import AddSymbol, Amend, Cancel, NewOrder, OrderState, Outcome, Reason, Side
from tickflow.net.exchange.sequencer import BadCommand, Sequencer, SequencerStopped
from tickflow.store.log.codec import decode_record
from tickflow.store.log.wal import MAX_PAYLOAD, Wal

MODES = ["none", "group", "order"]


def order(i: int, cid: str | None = None, qty: int = 5, account: str | None = None) -> NewOrder:
    side: Side = "buy" if i % 2 else "sell"
    return NewOrder(account or f"acct{i % 5}", "ACME", side, "limit", 100 + (i % 3) - (2 if side == "buy" else 0),
                    qty, client_order_id=cid)


def result(outcome: Outcome) -> OrderState:
    """The order an outcome is about (one that has none fails the test)."""
    assert outcome.result is not None, outcome
    return outcome.result


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "seq.wal")


async def with_symbol(path: str, mode: str = "group", **kwargs: Any) -> Sequencer:
    sequencer = await started(path, mode, **kwargs)
    await sequencer.submit(AddSymbol("ACME"))
    return sequencer


# ------------------------------------------------------------------ batching and backpressure


async def test_concurrent_submitters_share_batches_of_at_most_256(path: str) -> None:
    sequencer = await with_symbol(path)
    outcomes = await asyncio.gather(*(sequencer.submit(order(i)) for i in range(2000)))
    stats = sequencer.stats
    await sequencer.stop()
    assert sorted(o.seq for o in outcomes) == list(range(2, 2002))
    assert 1 < stats.largest_batch <= 256
    assert stats.commands == 2001 and stats.batches < 200
    assert 0 < stats.syncs < stats.batches + 1
    _, recovery = replayed(path)
    assert recovery.records == 2001


async def test_a_full_queue_makes_callers_wait_and_drops_nothing(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "group", ops, queue_size=8)
    tasks = [asyncio.create_task(sequencer.submit(order(i, f"o{i}"))) for i in range(100)]
    tasks.insert(0, asyncio.create_task(sequencer.submit(AddSymbol("ACME"))))
    await until(ops.entered.is_set, message="the first sync")
    depths: list[int] = []

    def full() -> bool:
        depths.append(sequencer.queue_depth)
        return depths[-1] >= 8

    # The disk is stalled: the writer stops matching ahead, the queue fills, the rest wait.
    await until(full, message=lambda: f"a full queue (depths seen: {sorted(set(depths))})")
    await turns()
    assert not any(t.done() for t in tasks)
    assert max(depths) == 8
    assert sequencer.seq < 100
    ops.gate.set()
    outcomes = await asyncio.gather(*tasks)
    await sequencer.stop()
    assert sorted(o.seq for o in outcomes) == list(range(1, 102))
    engine, recovery = replayed(path)
    assert recovery.records == 101
    assert {cid for _, cid in engine.idempotency} == {f"o{i}" for i in range(100)}


async def test_order_mode_takes_one_command_per_sync(path: str) -> None:
    sequencer = await with_symbol(path, "order")
    await asyncio.gather(*(sequencer.submit(order(i)) for i in range(30)))
    assert sequencer.stats.largest_batch == 1 and sequencer.stats.syncs == 31
    await sequencer.stop()


async def test_none_mode_never_syncs_while_serving_and_once_at_a_clean_stop(path: str) -> None:
    ops = GatedOps()  # the gate is shut: a sync while serving would hold the answers back
    sequencer = await started(path, "none", ops)
    outcomes = await asyncio.gather(sequencer.submit(AddSymbol("ACME")),
                                    *(sequencer.submit(order(i)) for i in range(50)))
    assert len(outcomes) == 51 and ops.syncs == 0 and not ops.entered.is_set()
    ops.gate.set()
    await sequencer.stop()
    assert ops.syncs == 1  # a clean stop leaves the log on the disk, not only in the page cache


async def test_a_clean_stop_in_none_mode_survives_a_power_cut(path: str) -> None:
    ops = PowerLossOps()
    sequencer = await started(path, "none", ops)
    await asyncio.gather(sequencer.submit(AddSymbol("ACME")), *(sequencer.submit(order(i)) for i in range(50)))
    await sequencer.stop()
    ops.cut_power(path, random.Random(1), "drop")  # the power fails: only what was synced is left
    assert replayed(path)[1].records == 51


# ------------------------------------------------------------------ durability before answers


@pytest.mark.parametrize("mode", ["group", "order"])
async def test_no_answer_or_listener_call_before_the_record_is_durable(path: str, mode: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, mode, ops)
    published: list[list[Outcome]] = []
    sequencer.listeners.append(published.append)
    tasks = [asyncio.create_task(sequencer.submit(AddSymbol("ACME")))]
    tasks += [asyncio.create_task(sequencer.submit(order(i))) for i in range(20)]
    await until(ops.entered.is_set, message="the first sync")
    # All that can be is written and matched while the first sync is stalled (all 21 in group mode, one
    # command per sync in order mode): any early answer is out by then.
    matched = 21 if mode == "group" else 1
    await until(lambda: sequencer.seq == matched and sequencer.queue_depth == 21 - matched,
                message=f"{matched} matched")
    await turns()
    assert sequencer.seq >= 1, "the record was written and matched"
    assert not any(t.done() for t in tasks) and published == []
    assert Path(path).stat().st_size > 0
    ops.gate.set()
    outcomes = await asyncio.gather(*tasks)
    await sequencer.stop()
    assert [o.seq for batch in published for o in batch] == [o.seq for o in outcomes] == list(range(1, 22))


async def test_listeners_see_durable_batches_in_order_and_a_broken_one_is_ignored(path: str) -> None:
    sequencer = await started(path, "group")
    seen: list[int] = []

    def broken(_: list[Outcome]) -> None:
        raise RuntimeError("subscriber bug")

    sequencer.listeners += [broken, lambda batch: seen.extend(o.seq for o in batch)]
    await sequencer.submit(AddSymbol("ACME"))
    for _ in range(5):
        await asyncio.gather(*(sequencer.submit(order(i)) for i in range(40)))
    await sequencer.stop()
    assert seen == list(range(1, 202))
    assert not sequencer.failed


class ManualSyncer:
    """A Syncer whose syncs return when the test says so, covering as many bytes as it says."""

    def __init__(self, wal: Wal) -> None:
        self.wal = wal
        self.busy = False
        self.sizes: list[int] = []
        self.done: Callable[[int, str | None, float], None] | None = None

    def start(self, loop: asyncio.AbstractEventLoop, done: Callable[[int, str | None, float], None]) -> None:
        self.done = done

    def grown(self, size: int) -> None:
        self.sizes.append(size)
        self.busy = True

    def finish(self, upto: int) -> None:
        assert self.done is not None
        self.wal.sync()
        self.busy = upto < self.sizes[-1]
        self.done(upto, None, 0.0)

    def switch(self, fd: int, base: int) -> None:
        pass

    def close(self) -> None:
        pass


async def test_a_sync_answers_exactly_the_batches_within_the_bytes_it_made_durable(path: str) -> None:
    wal, engine, _ = open_log(path, None)
    syncer = ManualSyncer(wal)
    sequencer = Sequencer(engine, wal, "group", syncer=syncer)
    await sequencer.start()
    published: list[list[int]] = []
    sequencer.listeners.append(lambda batch: published.append([o.seq for o in batch]))
    first = asyncio.create_task(sequencer.submit(AddSymbol("ACME")))
    await until(lambda: len(syncer.sizes) == 1, message="the first batch written")
    second = asyncio.create_task(sequencer.submit(order(1)))
    await until(lambda: len(syncer.sizes) == 2, message="the second batch, written while the first syncs")
    assert sequencer.seq == 2 and not first.done() and published == []
    syncer.finish(syncer.sizes[1] - 1)  # one byte short of the second batch
    assert (await first).seq == 1 and published == [[1]]  # (the second's answer would be given in the same call)
    await turns()
    assert not second.done()
    syncer.finish(syncer.sizes[1])
    assert (await second).seq == 2 and published == [[1], [2]]
    await sequencer.stop()
    assert replayed(path)[1].records == 2


# ------------------------------------------------------------------ refusals that need no log record


@pytest.mark.parametrize("mode", MODES)
async def test_a_cancel_or_amend_sure_to_be_refused_is_answered_without_a_log_record(path: str, mode: str) -> None:
    sequencer = await with_symbol(path, mode)
    mine = result(await sequencer.submit(order(1, account="alice")))
    done = result(await sequencer.submit(order(2, account="alice")))
    assert (await sequencer.submit(Cancel("alice", done.order_id))).error is None
    records = sequencer.wal.records
    answers = [
        await sequencer.submit(Cancel("bob", mine.order_id)),  # not bob's: as unknown
        await sequencer.submit(Amend("bob", mine.order_id, qty=1)),
        await sequencer.submit(Cancel("alice", done.order_id)),  # already cancelled
        await sequencer.submit(Amend("alice", done.order_id, qty=1)),
        await sequencer.submit(Cancel("bob", sequencer.engine.next_order_id + 5)),  # never given out
        await sequencer.submit(Amend("bob", (1 << 62) - 1, qty=1)),
    ]
    # Another account's order and a finished one are both "not live" to the engine, which keeps no finished
    # order (the exchange service tells them apart from SQLite: tests/test_http_api.py).
    assert [a.error for a in answers] == [Reason.NOT_LIVE, Reason.NOT_LIVE,
                                          Reason.NOT_LIVE, Reason.NOT_LIVE,
                                          Reason.UNKNOWN_ORDER, Reason.UNKNOWN_ORDER]
    assert all(a.seq == 0 and a.result is None for a in answers)
    assert sequencer.wal.records == records, "nothing was logged for them"
    # The same refusals from the engine itself, as replay would give them: the answers are unchanged.
    for command, answer in zip([Cancel("bob", mine.order_id), Cancel("alice", done.order_id)],
                               [answers[0], answers[2]]):
        applied = sequencer.engine.apply(0, 0, command)
        assert (applied.error, applied.result) == (answer.error, answer.result)
    await sequencer.stop()
    assert replayed(path)[1].records == records


async def test_an_id_an_order_in_flight_will_take_is_sequenced_not_refused(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "group", ops)
    symbol = asyncio.create_task(sequencer.submit(AddSymbol("ACME")))
    await until(ops.entered.is_set, message="the first sync")
    next_id = sequencer.engine.next_order_id
    placed = asyncio.create_task(sequencer.submit(order(1, account="alice")))
    cancel = asyncio.create_task(sequencer.submit(Cancel("alice", next_id)))
    beyond = asyncio.create_task(sequencer.submit(Cancel("alice", next_id + 10)))
    await until(beyond.done, message="the refusal of an id no command in flight can take")
    await turns()  # (the cancel was submitted before it)
    assert not cancel.done(), "the id is not given out yet: only the log's order can tell"
    assert beyond.done() and beyond.result().error == Reason.UNKNOWN_ORDER and beyond.result().seq == 0, \
        "no command in flight can be given that id"
    ops.gate.set()
    await symbol
    assert result(await placed).order_id == next_id
    assert (await cancel).error is None and result(await cancel).status == "cancelled"
    await sequencer.stop()


async def test_a_refusal_waits_for_the_log_while_what_it_reports_is_not_durable(path: str) -> None:
    wal, engine, _ = open_log(path, None)
    syncer = ManualSyncer(wal)
    sequencer = Sequencer(engine, wal, "group", syncer=syncer)
    await sequencer.start()
    tasks = [asyncio.create_task(sequencer.submit(AddSymbol("ACME")))]
    tasks.append(asyncio.create_task(sequencer.submit(order(1, account="alice"))))
    await until(lambda: sequencer.seq == 2, message="the order matched")
    order_id = sequencer.engine.next_order_id - 1
    tasks.append(asyncio.create_task(sequencer.submit(Cancel("alice", order_id))))
    await until(lambda: sequencer.seq == 3, message="the cancel matched")
    # The order is cancelled in the engine, but not durably: a power cut now would bring it back
    # live, so "not open" is not yet true. The second cancel goes through the log.
    again = asyncio.create_task(sequencer.submit(Cancel("alice", order_id)))
    await until(lambda: sequencer.seq == 4, message="the second cancel logged")
    assert not again.done()
    syncer.finish(syncer.sizes[-1])
    assert (await again).error == Reason.NOT_LIVE and (await again).seq == 4
    await asyncio.gather(*tasks)
    await sequencer.stop()
    assert replayed(path)[1].records == 4


# ------------------------------------------------------------------ idempotent retries


async def test_a_retry_of_an_order_in_flight_gets_the_same_answer_and_is_applied_once(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "group", ops)
    first = asyncio.create_task(sequencer.submit(AddSymbol("ACME")))
    await until(ops.entered.is_set, message="the first sync")
    # One retry while the order is queued behind the stalled sync, one after it is matched.
    original = asyncio.create_task(sequencer.submit(order(1, "abc")))
    queued_retry = asyncio.create_task(sequencer.submit(order(1, "abc")))
    await until(lambda: sequencer.seq == 2, message="the order written and matched")
    assert sequencer.seq == 2, "written and matched, not yet durable"
    matched_retry = asyncio.create_task(sequencer.submit(order(1, "abc")))
    await turns()  # the retry reaches its wait for the original's answer
    assert not any(t.done() for t in (first, original, queued_retry, matched_retry))
    ops.gate.set()
    a, b, c = await asyncio.gather(original, queued_retry, matched_retry)
    await first
    assert a.result is not None and not a.replayed
    for retry in (b, c):
        assert retry.replayed and retry.error is None
        assert retry.seq == a.seq and retry.result == a.result
    after = await sequencer.submit(order(1, "abc"))
    assert after.replayed and after.result == a.result
    await sequencer.stop()
    engine, recovery = replayed(path)
    assert recovery.records == 2 and engine.next_order_id == 2


async def test_same_client_order_id_with_other_fields_is_refused_and_the_original_stands(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "group", ops)
    setup = asyncio.create_task(sequencer.submit(AddSymbol("ACME")))
    await until(ops.entered.is_set)
    original = asyncio.create_task(sequencer.submit(order(1, "abc", qty=5)))
    in_flight = asyncio.create_task(sequencer.submit(order(1, "abc", qty=6)))
    await until(lambda: sequencer.seq == 2, message="the original written and matched, the other in flight")
    ops.gate.set()
    await setup
    a, b = await asyncio.gather(original, in_flight)
    c = await sequencer.submit(order(1, "abc", qty=7))
    d = await sequencer.submit(order(1, "abc", account="someone-else"))
    await sequencer.stop()
    assert a.error is None and a.result is not None and a.result.qty == 5
    for mismatch in (b, c):
        assert mismatch.error == Reason.DUPLICATE_MISMATCH
        assert mismatch.result == a.result and mismatch.replayed
    assert d.error is None and d.result is not None and d.result.order_id != a.result.order_id
    _, recovery = replayed(path)
    assert recovery.records == 3


@pytest.mark.parametrize("mode", MODES)
async def test_idempotency_survives_a_restart(path: str, mode: str) -> None:
    sequencer = await with_symbol(path, mode)
    originals = await asyncio.gather(*(sequencer.submit(order(i, f"c{i}")) for i in range(40)))
    await sequencer.submit(Cancel("acct1", originals[1].result.order_id))  # type: ignore[union-attr]
    await sequencer.stop()
    sequencer = await started(path, mode)
    last = sequencer.seq
    assert last == 42
    retries = await asyncio.gather(*(sequencer.submit(order(i, f"c{i}")) for i in range(40)))
    mismatch = await sequencer.submit(order(3, "c3", qty=99))
    await sequencer.stop()
    for before, after in zip(originals, retries):
        assert after.replayed and after.error is None
        assert after.seq == before.seq and after.result.order_id == before.result.order_id  # type: ignore[union-attr]
    # The retry answers with the order as it was placed, and replay reproduces it exactly.
    assert retries[5].result == originals[5].result
    assert mismatch.error == Reason.DUPLICATE_MISMATCH
    assert sequencer.seq == last, "no retry reached the log"


async def test_a_cancelled_caller_does_not_cancel_its_command_or_its_retries(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "group", ops)
    setup = asyncio.create_task(sequencer.submit(AddSymbol("ACME")))
    await until(ops.entered.is_set)
    impatient = asyncio.create_task(sequencer.submit(order(1, "x")))
    await until(lambda: sequencer.seq == 2, message="the order written and matched")
    retry = asyncio.create_task(sequencer.submit(order(1, "x")))
    await turns()  # the retry waits for the first attempt's answer
    impatient.cancel()
    ops.gate.set()
    await setup
    answer = await retry
    await sequencer.stop()
    assert impatient.cancelled()
    assert answer.replayed and answer.result is not None and answer.result.client_order_id == "x"
    _, recovery = replayed(path)
    assert recovery.records == 2


async def test_a_retry_of_an_attempt_that_never_got_queued_goes_in_itself(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "order", ops, queue_size=1)
    setup = asyncio.create_task(sequencer.submit(AddSymbol("ACME")))
    await until(ops.entered.is_set)
    filler = asyncio.create_task(sequencer.submit(order(0)))
    await until(lambda: sequencer.queue_depth == 1, message="the filler queued")
    assert sequencer.queue_depth == 1
    waiting = asyncio.create_task(sequencer.submit(order(1, "y")))  # no room: not queued
    await turns()  # it waits for room
    retry = asyncio.create_task(sequencer.submit(order(1, "y")))
    await turns()  # it waits for the first attempt
    waiting.cancel()
    await turns()  # the cancelled attempt lets go of its place
    ops.gate.set()
    await asyncio.gather(setup, filler)
    answer = await retry
    await sequencer.stop()
    assert not answer.replayed and answer.result is not None and answer.result.client_order_id == "y"
    _, recovery = replayed(path)
    assert recovery.records == 3


# ------------------------------------------------------------------ stopping and bad input


@pytest.mark.parametrize("mode", MODES)
async def test_stop_finishes_what_is_queued_and_in_flight(path: str, mode: str) -> None:
    sequencer = await with_symbol(path, mode)
    tasks = [asyncio.create_task(sequencer.submit(order(i))) for i in range(300 if mode != "order" else 40)]
    await turns(1)  # all queued
    await sequencer.stop()
    outcomes = await asyncio.gather(*tasks)
    assert all(o.result is not None for o in outcomes)
    with pytest.raises(SequencerStopped, match="shutting down"):
        await sequencer.submit(order(1))
    await sequencer.stop()  # twice is fine
    _, recovery = replayed(path)
    assert recovery.records == len(tasks) + 1


async def test_stop_waits_for_the_sync_in_flight(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "group", ops)
    tasks = [asyncio.create_task(sequencer.submit(AddSymbol(f"S{i}"))) for i in range(10)]
    await until(ops.entered.is_set)
    stopping = asyncio.create_task(sequencer.stop())
    # All ten written and matched while the sync is stalled: only the sync now keeps stop() waiting.
    await until(lambda: sequencer.seq == 10 and sequencer.queue_depth == 0, message="all ten matched")
    await turns()
    assert not stopping.done() and not any(t.done() for t in tasks)
    ops.gate.set()
    await stopping
    assert all(o.error is None for o in await asyncio.gather(*tasks))


async def test_stop_refuses_callers_still_waiting_for_room(path: str) -> None:
    ops = GatedOps()
    sequencer = await started(path, "order", ops, queue_size=2)
    tasks = [asyncio.create_task(sequencer.submit(AddSymbol(f"S{i}"))) for i in range(10)]
    await until(ops.entered.is_set)
    await until(lambda: sequencer.queue_depth == 2, message="the queue full (one synced, two queued)")
    stopping = asyncio.create_task(sequencer.stop())
    await until(lambda: sum(t.done() for t in tasks) == 7, message="the seven waiting for room refused")
    ops.gate.set()
    await stopping
    results = await asyncio.gather(*tasks, return_exceptions=True)
    done = [r for r in results if isinstance(r, Outcome)]
    refused = [r for r in results if isinstance(r, SequencerStopped)]
    assert len(done) == 3 and len(refused) == 7  # one being synced, two queued
    assert all("not taken" in str(e) for e in refused)
    _, recovery = replayed(path)
    assert recovery.records == 3


async def test_a_command_that_cannot_be_logged_is_refused_alone(path: str) -> None:
    sequencer = await with_symbol(path)
    bad = NewOrder("acct", "ACME", "buy", "limit", "100", 5)  # type: ignore[arg-type]
    results = await asyncio.gather(sequencer.submit(order(1)), sequencer.submit(bad), sequencer.submit(order(2)),
                                   return_exceptions=True)
    assert isinstance(results[1], BadCommand)
    assert [r.seq for r in results if isinstance(r, Outcome)] == [2, 3]
    assert not sequencer.failed
    await sequencer.stop()
    _, recovery = replayed(path)
    assert recovery.records == 3


async def test_a_command_too_big_for_one_log_record_is_refused_and_the_log_still_opens(path: str) -> None:
    sequencer = await with_symbol(path)
    huge = order(1, account="a" * (MAX_PAYLOAD + 1))  # only a hand-made tokens file could name such an account
    results = await asyncio.gather(sequencer.submit(order(1)), sequencer.submit(huge), sequencer.submit(order(2)),
                                   return_exceptions=True)
    assert isinstance(results[1], BadCommand) and "over the log's" in str(results[1])
    assert [r.seq for r in results if isinstance(r, Outcome)] == [2, 3]
    await sequencer.stop()
    _, recovery = replayed(path)  # replay would take a record over the limit for garbage and refuse the log
    assert recovery.records == 3 and recovery.cut is None


async def test_the_log_time_never_runs_backwards(path: str) -> None:
    ticks = iter([5_000, 4_000, 6_000, 1_000])
    sequencer = await started(path, "order", clock=lambda: next(ticks))
    for i in range(4):
        await sequencer.submit(AddSymbol(f"S{i}"))
    await sequencer.stop()
    wal = Wal.open(path)
    stamps = [decode_record(payload).ts for _, payload in wal.replay()]
    wal.close()
    assert stamps == [5_000, 5_000, 6_000, 6_000]
