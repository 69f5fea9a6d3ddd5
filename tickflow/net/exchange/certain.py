"""Commands whose answer is certain when they are submitted: a cancel or amend certain to be refused, and a
cancel-all with nothing to cancel. The sequencer answers them without a log record."""

from __future__ import annotations

from collections.abc import Iterable

from tickflow.core.engine import Engine
from tickflow.core.types import Amend, Cancel, CancelAll, Command, NewOrder, Outcome, Reason


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


def certain_refusal(engine: Engine, command: Cancel | Amend, durable_seq: int, in_flight: int = 0) -> Outcome | None:
    """The refusal of a cancel or amend that no command still in flight could change, or None.

    Ids are handed out in order and a closed order never reopens. An id that not even the `in_flight`
    commands still to be applied could be given is certainly unknown. An id given out that is not one
    of the account's live orders is finished or another account's (Reason.NOT_LIVE, which the exchange
    service turns into not_open or unknown_order from SQLite), but only once everything applied is
    durable (`durable_seq` is the engine's last seq): a close not yet durable could be undone by a
    power cut. The sequencer answers those without a log record; seq 0 says none was written."""
    order_id = command.order_id
    next_id = engine.next_order_id
    if order_id <= 0 or order_id >= next_id + in_flight:
        return Outcome(0, None, Reason.UNKNOWN_ORDER, [], [], [])
    if order_id >= next_id or durable_seq != engine.last_seq:
        return None  # an id the orders in flight may still be given, or a close that is not yet durable
    open_ = engine.open_orders.get(command.account)
    if open_ and order_id in open_:
        return None
    return Outcome(0, None, Reason.NOT_LIVE, [], [], [])
