"""Simulated power loss and failing devices: acknowledged means durable, in every mode's own terms.

PowerLossOps keeps track of what a sync has made durable; "cutting the power" leaves the file with
the synced bytes plus none, all or a torn prefix of the rest (sometimes with a zeroed tail), and
makes every later file operation fail. Cut points and cut shapes come from seeded random.
"""

from __future__ import annotations

import asyncio
import errno
import json
import random
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest
from helpers.aio import started
from helpers.fileops import FaultyOps, PowerLossOps
from helpers.logs import open_log, payloads

from tickflow.core.engine import Engine
from tickflow.core.types import AddSymbol, Command, NewOrder, Outcome, Side
from tickflow.net.exchange.sequencer import Sequencer, SequencerStopped
from tickflow.store.recovery import recover
from tickflow.store.log.wal import FILE_HEADER, HEADER, HEADER_SIZE, LogError, OsFileOps, Wal, frame

SUBMITTERS = 32
TRIALS = {"none": 12, "group": 12, "order": 8}


SIDES: tuple[Side, ...] = ("buy", "sell")


def order(rng: random.Random, n: int) -> NewOrder:
    side: Side = rng.choice(SIDES)
    return NewOrder(f"acct{n % 6}", "ACME", side, "limit", 100 + rng.randint(-3, 3) + (-1 if side == "buy" else 1),
                    rng.randint(1, 10), client_order_id=f"o{n}")


class Load:
    """SUBMITTERS closed-loop clients sending unique orders until the sequencer refuses them."""

    def __init__(self, sequencer: Sequencer, rng: random.Random, limit: int) -> None:
        self.sequencer = sequencer
        self.rng = rng
        self.limit = limit
        self.sent = 0
        self.acks: dict[str, Outcome] = {}
        self.refusals: list[SequencerStopped] = []
        self.commands: dict[str, NewOrder] = {}

    async def client(self) -> None:
        while self.sent < self.limit:
            self.sent += 1
            command = order(self.rng, self.sent)
            self.commands[command.client_order_id] = command  # type: ignore[index]
            try:
                outcome = await self.sequencer.submit(command)
            except SequencerStopped as e:
                self.refusals.append(e)
                return
            self.acks[command.client_order_id] = outcome  # type: ignore[index]

    async def run(self) -> None:
        await asyncio.wait_for(asyncio.gather(*(self.client() for _ in range(SUBMITTERS))), 60)


def log_answers(path: str) -> tuple[Engine, dict[int, Outcome], int]:
    """Recover the log as a restarted server would: (engine, outcome by seq, records)."""
    wal = Wal.open(path)
    engine = Engine()
    outcomes: dict[int, Outcome] = {}
    recovery = recover(wal, engine, lambda o: outcomes.__setitem__(o.seq, o))
    wal.close()
    return engine, outcomes, recovery.records


def as_json(value: object) -> Any:
    return json.loads(msgspec.json.encode(value))


def assert_acks_survived(path: str, acks: dict[str, Outcome], commands: dict[str, NewOrder]) -> int:
    engine, outcomes, records = log_answers(path)
    for cid, ack in acks.items():
        assert ack.seq in outcomes, f"acknowledged {cid} (seq {ack.seq}) lost: the log ends at {records}"
        assert as_json(outcomes[ack.seq].result) == as_json(ack.result)
        command = commands[cid]
        assert engine.idempotency[(command.account, cid)].seq == ack.seq
    return records


async def retry_everything(path: str, acks: dict[str, Outcome], commands: dict[str, NewOrder]) -> None:
    """After recovery every order is re-sent: surviving acknowledged ones answer as before, none doubles."""
    sequencer = await started(path, "group")
    survived = sequencer.seq
    if "ACME" not in sequencer.engine.books:  # none mode can lose even the first record
        await sequencer.submit(AddSymbol("ACME"))
    answers = await asyncio.gather(*(sequencer.submit(c) for c in commands.values()))
    await sequencer.stop()
    for command, answer in zip(commands.values(), answers):
        before = acks.get(command.client_order_id)  # type: ignore[arg-type]
        if before is not None and before.seq <= survived:
            assert answer.replayed and answer.seq == before.seq
            assert as_json(answer.result) == as_json(before.result)
    engine, outcomes, records = log_answers(path)
    assert len(engine.idempotency) == len(commands)
    assert records == 1 + len(commands)


async def trial(tmp: Path, mode: str, rng: random.Random, shape: str) -> str:
    path = str(tmp / f"{mode}-{rng.random()}.wal")
    ops = PowerLossOps()
    sequencer = await started(path, mode, ops)
    await sequencer.submit(AddSymbol("ACME"))
    cut_after = rng.randint(0, 40 if mode == "order" else 400)
    pause = rng.random() * 0.003
    # The load draws from its own generator: how much it draws depends on timing.
    load = Load(sequencer, random.Random(rng.random()), limit=10_000)
    written: list[bytes] = []

    async def cut() -> None:
        while len(load.acks) < cut_after:
            await asyncio.sleep(0.0005)
        await asyncio.sleep(pause)
        written.append(Path(path).read_bytes())
        ops.cut_power(path, rng, shape)

    await asyncio.gather(load.run(), cut())
    await sequencer.stop()
    before = written[0]
    assert load.refusals, "after the power cut the sequencer must refuse"
    if mode == "none":
        _, outcomes, records = log_answers(path)
        for ack in load.acks.values():
            if ack.seq in outcomes:
                assert as_json(outcomes[ack.seq].result) == as_json(ack.result)
    else:
        records = assert_acks_survived(path, load.acks, load.commands)
    # What survived (after the torn tail is cut) is a prefix of what was written: loss is a
    # suffix of the log, never a hole.
    after = Path(path).read_bytes()
    assert before.startswith(after)
    assert len(after) == boundaries(before)[records]
    await retry_everything(path, load.acks, load.commands)
    return f"{shape}:{records}"


def boundaries(data: bytes) -> list[int]:
    """Where each whole record of `data` ends, walking the length fields."""
    ends = [len(FILE_HEADER)]
    while ends[-1] + HEADER_SIZE <= len(data):
        length, _ = HEADER.unpack_from(data, ends[-1])
        if ends[-1] + HEADER_SIZE + length > len(data):
            break
        ends.append(ends[-1] + HEADER_SIZE + length)
    return ends


@pytest.mark.parametrize("mode", ["none", "group", "order"])
async def test_power_cuts_never_lose_an_acknowledged_command(tmp_path: Path, mode: str) -> None:
    rng = random.Random(f"power-{mode}")
    shapes = ["drop", "keep", "torn", "torn", "zero"]
    for i in range(TRIALS[mode]):
        await trial(tmp_path, mode, rng, shapes[i % len(shapes)])


def test_power_loss_ops_keeps_a_prefix_of_the_unsynced_bytes(tmp_path: Path) -> None:
    path = str(tmp_path / "x.wal")
    ops = PowerLossOps()
    wal = Wal.open(path, ops)
    list(wal.replay())
    wal.append([b"a" * 10])
    wal.sync()
    wal.append([b"b" * 10, b"c" * 10])
    synced, kept = ops.cut_power(path, random.Random(3), "torn")
    data = Path(path).read_bytes()
    assert synced == len(FILE_HEADER + frame(b"a" * 10)) and len(data) == synced + kept
    assert (FILE_HEADER + frame(b"a" * 10) + frame(b"b" * 10) + frame(b"c" * 10)).startswith(data)
    with pytest.raises(LogError, match="the power is off"):
        wal.append([b"d"])


# ------------------------------------------------------------------ failing devices

FAULTS = [
    ("write", errno.ENOSPC, False),
    ("write", errno.ENOSPC, True),
    ("write", errno.EIO, False),
    ("sync", errno.EIO, False),
    ("sync", errno.ENOSPC, False),
]
DEVICE_FAULTS = [(what, code, partial, mode) for what, code, partial in FAULTS for mode in ("none", "group", "order")
                 if not (mode == "none" and what == "sync")]
"""Each fault in each durability mode, but none mode with a failing sync: it never syncs while serving."""


@pytest.mark.parametrize("what,code,partial,mode", DEVICE_FAULTS)
async def test_a_failing_device_stops_the_sequencer_without_false_acks(
    tmp_path: Path, mode: str, what: str, code: int, partial: bool,
) -> None:
    rng = random.Random(f"{mode}{what}{code}{partial}")
    for _ in range(3):
        path = str(tmp_path / f"fault-{rng.random()}.wal")
        power = PowerLossOps()
        at = 1 + rng.randint(2, 12 if mode == "order" else 30)  # the first write and sync: the log's header
        ops = FaultyOps(power, write_at=at if what == "write" else None, sync_at=at if what == "sync" else None,
                        code=code, partial=partial)
        wal, engine, _ = open_log(path, ops)
        sequencer = Sequencer(engine, wal, mode)
        await sequencer.start()
        await sequencer.submit(AddSymbol("ACME"))
        load = Load(sequencer, random.Random(rng.random()), limit=5_000)
        await load.run()
        assert load.refusals and sequencer.failed
        message = str(load.refusals[0])
        verb = "write to" if what == "write" else "fdatasync of"
        assert message.startswith(f"{verb} {path} failed: [Errno {code}]"), message
        assert all(str(e) == message for e in load.refusals)
        with pytest.raises(SequencerStopped, match=r"failed: \[Errno"):
            await sequencer.submit(AddSymbol("LATE"))
        await asyncio.wait_for(sequencer.stop(), 10)
        # A device that failed may have lost anything unsynced; in none mode acks promise only the
        # page cache, so there the file is kept as written (a process crash, not a power cut).
        power.dead = False
        power.cut_power(path, rng, "keep" if mode == "none" else "drop")
        assert_acks_survived(path, load.acks, load.commands)
        assert len(load.acks) < len(load.commands)
        await retry_everything(path, load.acks, load.commands)


class SlowSyncOps(OsFileOps):
    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def sync(self, fd: int) -> None:
        time.sleep(self.seconds)
        super().sync(fd)


@pytest.mark.parametrize("what,code,partial,mode", DEVICE_FAULTS)
async def test_after_a_device_fault_the_log_holds_exactly_the_acknowledged_orders(
    tmp_path: Path, mode: str, what: str, code: int, partial: bool,
) -> None:
    """A full disk keeps what was written: every caller told "refused" must stay refused after a restart,
    and every caller told "taken" must find the order; batches written before the failing write are
    answered once a sync covers them, and a failed sync takes the unanswered ones back out of the log."""
    rng = random.Random(f"exact{mode}{what}{code}{partial}")
    for _ in range(3):
        path = str(tmp_path / f"fault-{rng.random()}.wal")
        at = 1 + rng.randint(2, 12 if mode == "order" else 30)  # the first write and sync: the log's header
        # Slow syncs and small batches: batches are written while a sync is in flight, as under real load.
        ops = FaultyOps(SlowSyncOps(0.003), write_at=at if what == "write" else None,
                        sync_at=at if what == "sync" else None, code=code, partial=partial)
        wal, engine, _ = open_log(path, ops)
        sequencer = Sequencer(engine, wal, mode, max_batch=4)
        await sequencer.start()
        await sequencer.submit(AddSymbol("ACME"))
        load = Load(sequencer, random.Random(rng.random()), limit=5_000)
        await load.run()
        await asyncio.wait_for(sequencer.stop(), 10)
        assert load.refusals
        engine, _, records = log_answers(path)
        assert {cid for _, cid in engine.idempotency} == set(load.acks)
        assert records == 1 + len(load.acks)


@pytest.mark.parametrize("synced_first", [False, True])
async def test_what_a_restart_replays_is_durable_before_anything_is_answered_from_it(
    tmp_path: Path, synced_first: bool,
) -> None:
    """A crash (not a power cut) leaves unsynced records in the page cache: all of them after a
    `none` run, the batch whose sync was in flight after a `group` one. The restarted server answers
    retries from what it replayed, so a later power cut must not take those answers back."""
    path = str(tmp_path / "log.wal")
    machine = PowerLossOps()  # one page cache across the crash: a process dies, the machine does not
    rng = random.Random(synced_first)
    commands: list[Command] = [order(rng, n) for n in range(40)]
    wal, _, _ = open_log(path, machine)
    wal.append(payloads([AddSymbol("ACME")]))
    if synced_first:
        wal.sync()
    wal.append(payloads(commands, first_seq=2))
    wal.close()  # killed before any (further) sync returned
    header = len(FILE_HEADER)  # synced when the log was created
    assert machine.synced[path] == header + (len(frame(payloads([AddSymbol("ACME")])[0])) if synced_first else 0)

    restarted = await started(path, "group", machine)
    answers = [await restarted.submit(c) for c in commands]
    await restarted.stop()
    assert all(a.replayed and a.seq == n for n, a in enumerate(answers, 2))
    machine.cut_power(path, rng, "drop")

    _, outcomes, records = log_answers(path)
    assert records == 1 + len(commands)
    for answer in answers:
        assert as_json(outcomes[answer.seq].result) == as_json(answer.result)
