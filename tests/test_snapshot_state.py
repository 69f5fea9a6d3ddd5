"""An engine restored from a snapshot is the engine a full replay gives: same state hash, and every later
command answered the same (tickflow/core/snapshot.py, and store/snapshots.py's file format)."""

from __future__ import annotations

from collections.abc import Callable

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_engine_reference import SYMBOLS, _comparable, cancel_alls, commands, quotes, rules

from tickflow.core.engine import Engine
from tickflow.core.snapshot import BadState, EngineState, capture, restore, state_hash
from tickflow.core.book import Order
from tickflow.core.types import AddSymbol, Amend, Cancel, Command, NewOrder

# With rules: an idempotency window of a few commands forgets clientOrderIds on both sides of the snapshot.
histories = st.lists(st.one_of(commands(), cancel_alls(), quotes(), rules), min_size=1, max_size=120)


def _engine_after(history: list[Command]) -> Engine:
    engine = Engine()
    for seq, command in enumerate(history, 1):
        engine.apply(seq, 1_000 + seq, command)
    return engine


def _through_bytes(engine: Engine) -> Engine:
    """What a snapshot file gives back: the state encoded and decoded, then restored."""
    encoded = msgspec.msgpack.encode(capture(engine))
    return restore(msgspec.msgpack.decode(encoded, type=EngineState))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=histories, after=histories, quiet=st.booleans())
def test_a_snapshot_and_the_records_after_it_give_the_engine_a_full_replay_gives(
        before: list[Command], after: list[Command], quiet: bool) -> None:
    listed: list[Command] = [AddSymbol(s) for s in SYMBOLS]
    full = _engine_after(listed + before)
    if quiet:  # a snapshot of an engine that was itself replayed quietly, as at a start
        full = Engine()
        with full.replaying():
            for seq, command in enumerate(listed + before, 1):
                full.apply(seq, 1_000 + seq, command)
    restored = _through_bytes(full)
    assert state_hash(restored) == state_hash(full)
    assert restored.next_order_id == full.next_order_id
    assert len(capture(full).orders) == sum(len(o) for o in full.open_orders.values())  # live orders only
    seq = full.last_seq
    for command in after:
        seq += 1
        expected, got = full.apply(seq, 1_000 + seq, command), restored.apply(seq, 1_000 + seq, command)
        assert _comparable(got) == _comparable(expected), command
    assert state_hash(restored) == state_hash(full)


def test_time_priority_survives_a_snapshot() -> None:
    """Three orders at one price, the middle one amended down (keeps its place) and the first re-priced
    back (loses it): after a restore, a taker fills them in the same order."""
    history: list[Command] = [AddSymbol("X")]
    history += [NewOrder(a, "X", "sell", "limit", 100, 5) for a in ("a", "b", "c")]
    engine = _engine_after(history)
    engine.apply(5, 5, Amend("b", 2, qty=3))
    engine.apply(6, 6, Amend("a", 1, price=101))
    engine.apply(7, 7, Amend("a", 1, price=100))
    restored = _through_bytes(engine)
    take = NewOrder("t", "X", "buy", "market", 0, 13, "ioc")
    makers = [t.sell_order_id for t in restored.apply(8, 8, take).trades]
    assert makers == [t.sell_order_id for t in engine.apply(8, 8, take).trades] == [2, 3, 1]
    assert state_hash(restored) == state_hash(engine)


@pytest.mark.parametrize("damage, why", [
    (lambda s: s.orders.append(s.orders[0]), "listed twice"),
    (lambda s: setattr(s, "next_order_id", 1), "not a live order"),
    (lambda s: setattr(s.orders[0], "live", False), "not a live order"),
    (lambda s: s.books.append(s.books[0]), "appears twice"),
    (lambda s: s.books[0].asks[0].append(s.books[0].asks[0][1]), "rests twice"),
    (lambda s: s.books[0].asks[0].__setitem__(0, 99), "cannot rest"),
    (lambda s: s.books[0].asks.clear(), "rests in no level"),
])
def test_a_state_that_contradicts_itself_is_refused(damage: Callable[[EngineState], object], why: str) -> None:
    engine = _engine_after([AddSymbol("X"), NewOrder("a", "X", "sell", "limit", 100, 5)])
    state = msgspec.msgpack.decode(msgspec.msgpack.encode(capture(engine)), type=EngineState)
    damage(state)
    with pytest.raises(BadState, match=why):
        restore(state)


def test_a_snapshot_written_before_next_order_id_still_restores() -> None:
    """An older file: every order by id (finished ones too, index 0 unused) and no next_order_id field.
    It restores to the live orders only, with the next id after the table."""
    engine = _engine_after([AddSymbol("X"), NewOrder("a", "X", "sell", "limit", 100, 5),
                            NewOrder("b", "X", "sell", "limit", 101, 5), NewOrder("a", "X", "buy", "limit", 0, 1),
                            Cancel("b", 2)])
    new = capture(engine)
    live = new.orders[0]
    assert isinstance(live, Order) and len(new.orders) == 1
    gone = Order(2, None, "b", "X", "sell", "limit", 101, 5, "gtc", False, 0, "cancelled", "cancelled_by_user", 5, 1005)
    rejected = Order(3, None, "a", "X", "buy", "limit", 0, 1, "gtc", False, 0, "rejected", "bad_price", 4, 1004)
    old = [new.last_seq, new.last_ts, new.next_trade_id, [None, live, gone, rejected], new.books, new.idempotency]
    restored = restore(msgspec.msgpack.decode(msgspec.msgpack.encode(old), type=EngineState))
    assert restored.next_order_id == 4 == engine.next_order_id
    assert state_hash(restored) == state_hash(engine)
    assert [o.order_id for o in restored.open_orders["a"].values()] == [1] and not restored.open_orders.get("b")
