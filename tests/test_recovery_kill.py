"""kill -9 while clients submit, in every durability mode: nothing acknowledged is lost or changed.

A child process (tests/helpers/seq_child.py) runs the sequencer over a real log; the test keeps 64
commands in flight, SIGKILLs the child at a random point, restarts it on the same file, re-sends
every order it ever sent (acknowledged or not, same clientOrderId) and kills it again. At the end
the log is replayed and checked against every answer any round gave.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest

from tickflow.core.engine import Engine
from tickflow.core.types import Cancel, Command, NewOrder, Outcome, Reason, Side
from tickflow.store.log.codec import decode_record
from tickflow.store.recovery import recover
from tickflow.store.log.wal import Wal

CHILD = str(Path(__file__).parent / "helpers" / "seq_child.py")
WINDOW = 64
KILL_AFTER = {"none": (50, 1500), "group": (50, 1500), "order": (10, 120)}


def make_commands(rng: random.Random, start: int, n: int) -> list[tuple[int, Command]]:
    out: list[tuple[int, Command]] = []
    for ident in range(start, start + n):
        if ident > 10 and rng.random() < 0.1:
            victim = rng.randrange(start or 1, ident)
            out.append((ident, Cancel(f"acct{victim % 8}", rng.randint(1, max(1, ident - start)))))
            continue
        side: Side = rng.choice(["buy", "sell"])
        price = 100 + rng.randint(-3, 3) + (-1 if side == "buy" else 1)
        out.append((ident, NewOrder(f"acct{ident % 8}", "ACME", side, "limit", price, rng.randint(1, 10),
                                    client_order_id=f"k{ident}")))
    return out


async def session(path: str, mode: str, commands: list[tuple[int, Command]], kill_after: int | None
                  ) -> tuple[dict[str, Any], dict[int, list[Any]]]:
    """Run one child; send `commands` with WINDOW in flight; SIGKILL it after `kill_after` answers."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, CHILD, path, mode, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert proc.stdin is not None and proc.stdout is not None
    ready = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
    assert ready["ready"]
    acks: dict[int, list[Any]] = {}
    room = asyncio.Semaphore(WINDOW)
    killed = asyncio.Event()

    async def send() -> None:
        assert proc.stdin is not None
        try:
            for ident, command in commands:
                await room.acquire()
                if killed.is_set():
                    return
                proc.stdin.write(msgspec.json.encode([ident, command]) + b"\n")
                await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass

    async def receive() -> None:
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            ack = json.loads(line)
            acks[ack[0]] = ack
            room.release()
            if kill_after is not None and len(acks) >= kill_after and not killed.is_set():
                killed.set()
                proc.kill()
        killed.set()
        room.release()

    await asyncio.wait_for(asyncio.gather(send(), receive()), 120)
    await proc.wait()
    return ready, acks


def replay(path: str) -> tuple[list[Command], dict[int, Outcome], Engine]:
    wal = Wal.open(path)
    commands = [decode_record(payload).command for _, payload in Wal.open(path).replay()]
    outcomes: dict[int, Outcome] = {}
    engine = Engine()
    recover(wal, engine, lambda o: outcomes.__setitem__(o.seq, o))
    wal.close()
    return commands, outcomes, engine


def as_json(value: object) -> Any:
    return json.loads(msgspec.json.encode(value))


@pytest.mark.parametrize("mode", ["none", "group", "order"])
async def test_kill_9_loses_nothing_acknowledged(tmp_path: Path, mode: str) -> None:
    rng = random.Random(f"kill-{mode}")
    path = str(tmp_path / f"{mode}.wal")
    sent: dict[int, Command] = {}
    answers: list[tuple[Command, list[Any]]] = []
    low, high = KILL_AFTER[mode]
    total = high * 2
    plan = [
        make_commands(rng, 0, total),
        None,  # re-send every order sent so far, then new ones
        None,
    ]
    kills = 0
    for round_no, commands in enumerate(plan):
        if commands is None:
            resend = [(i, c) for i, c in sent.items() if isinstance(c, NewOrder)]
            rng.shuffle(resend)
            commands = resend + make_commands(rng, len(sent) + 1000 * round_no, total)
        kill_after = rng.randint(low, high) if round_no < len(plan) - 1 else None
        ready, acks = await session(path, mode, commands, kill_after)
        kills += kill_after is not None
        by_id = dict(commands)
        sent.update(commands)
        for ident, ack in acks.items():
            answers.append((by_id[ident], ack))
        assert len(acks) >= (kill_after or len(commands)), "the child answered too little before the kill"

    log, outcomes, engine = replay(path)
    placed = Counter((c.account, c.client_order_id) for c in log if isinstance(c, NewOrder))
    assert placed and max(placed.values()) == 1, "an order reached the log twice"
    first_answer: dict[tuple[str, str], Any] = {}
    for seq, outcome in outcomes.items():
        command = log[seq - 1]
        if isinstance(command, NewOrder):
            first_answer[(command.account, command.client_order_id)] = (seq, as_json(outcome.result))  # type: ignore[index]
    checked = 0
    for command, (ident, seq, error, replayed, result, *issued) in answers:
        assert seq is not None, f"unexpected refusal {error}"
        if isinstance(command, NewOrder):
            original_seq, original = first_answer[(command.account, command.client_order_id)]  # type: ignore[index]
            # Same order id, status, fills and stamps as the log says, whether first try or retry.
            assert (seq, result) == (original_seq, original), f"{command} answered {result}, log has {original}"
        elif seq == 0:
            # Refused without a record (another account's order, or one no longer open): the log
            # must agree, and a closed order never changes again, so its last state is the one told.
            # Or an id no order had been given when it was answered (later ones may have it since).
            assert error in (Reason.UNKNOWN_ORDER, Reason.NOT_LIVE), error
            refused = engine.apply(engine.last_seq + 1, engine.last_ts, command)
            if (refused.error, as_json(refused.result)) != (error, result):
                assert error == Reason.UNKNOWN_ORDER and command.order_id >= issued[0], command  # type: ignore[union-attr]
        else:
            assert as_json(outcomes[seq].result) == result and outcomes[seq].error == error
        checked += 1
    assert kills == 2 and checked > 100
