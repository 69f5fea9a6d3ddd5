"""A cancel-all whose answer is certain when it is submitted: nothing to cancel. The sequencer answers it
without a log record, as it does a cancel or amend certain to be refused (Engine.certain_refusal)."""

from __future__ import annotations

from collections.abc import Iterable

from tickflow.core.engine import Engine
from tickflow.core.types import CancelAll, Command, NewOrder, Outcome


def nothing_to_cancel(engine: Engine, command: CancelAll, queued: Iterable[Command]) -> Outcome | None:
    """The answer of a cancel-all certain to cancel nothing (its seq: the state it was read from), or None
    when it must be sequenced.

    The caller has made sure that everything applied is durable (a power cut cannot reopen an order seen
    closed) and that no command waits for room in a full queue (it may be one of the account's orders).
    Then it is certain when the account has no matching open order and none of its new orders is among
    the `queued` commands still to be applied. So an empty cancel-all, and the cancel on disconnect of a
    bot with nothing open, do not grow the log by a record each."""
    if engine.last_seq == 0:
        return None
    account, symbol, side = command.account, command.symbol, command.side
    open_ = engine.open_orders.get(account)
    if open_ and any((symbol is None or o.symbol == symbol) and (side is None or o.side == side)
                     for o in open_.values()):
        return None
    if any(type(c) is NewOrder and c.account == account for c in queued):
        return None
    return Outcome(engine.last_seq, None, None, [], [], [])
