"""The client's protocol rules with no socket: `ClientState` takes decoded messages and answers with
events and actions (tickflow/net/client/state.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tickflow.net.client.state import (
    BookChanged,
    ClientState,
    FetchTrades,
    GapDetected,
    OrderChanged,
    OrderTracker,
    ReadOrders,
    Resubscribe,
    Resynced,
    ServerChanged,
    TradesReceived,
)
from tickflow.net.wire.messages import (
    Health,
    Level,
    Order,
    OrderMsg,
    Resync,
    Snapshot,
    Status,
    Trade,
    Update,
    server_message,
)

Message = Snapshot | Update | OrderMsg | Resync


def order(order_id: int, status: Status, seq: int, filled: int = 0) -> Order:
    return Order(order_id, "alice", "ACME", "buy", "limit", 10, status, price=100, filled_qty=filled, seq=seq)


def trade(trade_id: int, symbol: str = "ACME") -> Trade:
    return Trade(trade_id, symbol, 100, 1, "buy", trade_id, 1_000 + trade_id)


def msg(**fields: Any) -> Message:
    """A server message, decoded as a session decodes it off the socket."""
    decoded = server_message(json.dumps(fields))
    assert isinstance(decoded, (Snapshot, Update, OrderMsg, Resync))
    return decoded


def snapshot(seq: int, trades: Sequence[int] = (), more: int = 0, symbol: str = "ACME",
             bids: Sequence[list[int]] = ()) -> Message:
    return msg(type="snapshot", symbol=symbol, seq=seq, bids=list(bids), asks=[], more=more,
               trades=[{"tradeId": i, "symbol": symbol, "price": 100, "qty": 1, "aggressor": "buy", "seq": i,
                        "ts": 1_000 + i} for i in trades])


def update(seq: int, prev: int, trades: Sequence[int] = (), more: int = 0, bids: Sequence[list[int]] = ()) -> Message:
    return msg(type="update", symbol="ACME", seq=seq, prevSeq=prev, bids=list(bids), asks=[], more=more,
               trades=[{"tradeId": i, "symbol": "ACME", "price": 100, "qty": 1, "aggressor": "buy", "seq": i,
                        "ts": 1_000 + i} for i in trades])


def delivered(outs: list[Any]) -> list[int]:
    """The trade ids reported in `outs`, in order."""
    return [t.trade_id for o in outs if isinstance(o, TradesReceived) for t in o.trades]


# ---------------------------------------------------------------- orders


def test_a_late_older_state_never_reopens_a_closed_order() -> None:
    """An order call's answer is read after the updates behind it: the fill's update closed the order,
    then the answer ("new", an older seq) comes in. The order stays closed."""
    tracker = OrderTracker()
    assert tracker.track(order(7, "new", 10))
    assert tracker.track(order(7, "filled", 12, filled=10))
    assert not tracker.track(order(7, "new", 11))  # the answer, read late
    assert 7 not in tracker.open and tracker.is_closed(7)
    assert not tracker.track(order(7, "partially_filled", 13, filled=3))  # closed is final, whatever its seq
    assert 7 not in tracker.open


def test_an_older_state_never_replaces_a_newer_one() -> None:
    tracker = OrderTracker()
    tracker.track(order(8, "partially_filled", 15, filled=4))
    assert not tracker.track(order(8, "new", 14))
    assert tracker.open[8].seq == 15 and tracker.open[8].filled_qty == 4
    assert tracker.track(order(8, "partially_filled", 15, filled=4))  # the same state again is taken
    assert tracker.track(order(8, "partially_filled", 16, filled=6))
    assert tracker.open[8].filled_qty == 6


def test_closed_orders_are_remembered_up_to_a_bound() -> None:
    tracker = OrderTracker(memory=2)
    for order_id in (1, 2, 3):
        tracker.track(order(order_id, "cancelled", order_id))
    assert not tracker.is_closed(1) and tracker.is_closed(2) and tracker.is_closed(3)
    assert tracker.track(order(1, "new", 0)) and 1 in tracker.open  # forgotten: nothing tells it is stale


def test_an_order_set_aside_is_not_open_and_its_closing_state_is_still_taken() -> None:
    tracker = OrderTracker()
    tracker.track(order(5, "new", 3))
    assert tracker.set_aside(5) == order(5, "new", 3) and 5 not in tracker.open
    assert tracker.track(order(5, "cancelled", 9)) and tracker.is_closed(5)


def test_private_updates_are_tracked_and_each_reported() -> None:
    state = ClientState()
    filled = order(7, "filled", 12, filled=10)
    assert state.receive(OrderMsg(filled)) == [OrderChanged(filled)]
    late = order(7, "new", 11)
    assert state.receive(OrderMsg(late)) == [OrderChanged(late)]  # reported as it came, but not held
    assert 7 not in state.orders.open and state.last_seq == 12


def test_orders_read_again_report_only_what_is_news() -> None:
    """After a reconnection the orders are read over HTTP while updates keep arriving: a state read is
    reported only when it is newer than the one held, never for an order closed meanwhile."""
    state = ClientState()
    for o in (order(1, "new", 10), order(2, "new", 11), order(3, "new", 12)):
        state.orders.track(o)
    before = dict(state.orders.open)
    state.receive(OrderMsg(order(2, "cancelled", 20)))  # closed by an update during the read
    read = [order(1, "partially_filled", 15, filled=2), order(2, "new", 11), order(3, "new", 12),
            order(4, "new", 16)]
    events = state.orders_read(before, read)
    assert [(e.order.order_id, e.order.seq) for e in events if isinstance(e, OrderChanged)] == [(1, 15), (4, 16)]
    assert sorted(state.orders.open) == [1, 3, 4] and state.orders.open[1].filled_qty == 2


# ---------------------------------------------------------------- trades


def test_trades_are_reported_once_across_snapshots_and_updates() -> None:
    state = ClientState()
    assert delivered(state.receive(snapshot(5, trades=[1, 2, 3]))) == [1, 2, 3]
    assert delivered(state.receive(update(6, 5, trades=[4]))) == [4]
    assert delivered(state.receive(snapshot(6, trades=[2, 3, 4]))) == []  # a re-subscription repeats them
    assert delivered(state.receive(snapshot(7, trades=[3, 4, 5]))) == [5]
    assert state.last_trade("ACME") == 5 and state.newest_trade == trade(5)


def test_trades_missed_between_snapshots_are_fetched_then_delivered_in_order_once() -> None:
    """A snapshot whose oldest trade is past the last one delivered: the ones between are fetched (an
    action), and what arrives meanwhile waits, so the trades still come each once and in order."""
    state = ClientState()
    state.receive(snapshot(5, trades=[1, 2]))
    outs = state.receive(snapshot(20, trades=[8, 9]))
    assert FetchTrades("ACME", 2) in outs and delivered(outs) == []
    assert isinstance(outs[0], BookChanged)  # the book is reported at once; only the trades wait
    assert state.backfill_upto("ACME") == 7
    assert delivered(state.receive(update(21, 20, trades=[10]))) == []  # held behind the missed ones
    assert state.receive(snapshot(22, trades=[9, 10, 12])) == [BookChanged("ACME", state.books["ACME"], 22, True)]
    assert state.backfill_upto("ACME") == 8  # a later snapshot reaches further
    events = state.backfilled("ACME", [trade(3), trade(4), trade(5), trade(6), trade(7), trade(8)])
    assert delivered(events) == [3, 4, 5, 6, 7, 8, 9, 10, 12]
    assert state.backfill_upto("ACME") is None
    assert delivered(state.receive(update(23, 22, trades=[12, 13]))) == [13]


def test_a_backfill_let_go_delivers_nothing() -> None:
    state = ClientState()
    state.receive(snapshot(5, trades=[1]))
    state.receive(snapshot(9, trades=[5]))
    assert state.backfilled("ACME", [trade(2)], deliver=False) == []
    assert state.last_trade("ACME") == 1 and state.backfill_upto("ACME") is None


def test_the_first_snapshot_fetches_nothing() -> None:
    state = ClientState()
    assert state.last_trade("ACME") is None
    assert [type(o) for o in state.receive(snapshot(5, trades=[40, 41]))] == [BookChanged, TradesReceived]
    empty = ClientState()
    empty.receive(snapshot(5))
    assert empty.last_trade("ACME") == 0  # followed from the start: trade 1 on is delivered without a fetch
    assert delivered(empty.receive(snapshot(6, trades=[1]))) == [1]


# ---------------------------------------------------------------- books


def test_a_gap_marks_the_book_stale_and_asks_for_a_fresh_snapshot() -> None:
    state = ClientState()
    state.receive(snapshot(10, bids=[[100, 5, 1]]))
    outs = state.receive(update(13, 12, bids=[[101, 1, 1]]))
    assert outs == [GapDetected("ACME", 10, 12, 13), Resubscribe("ACME")]
    book = state.books["ACME"]
    assert not book.live and book.bids() == [Level(100, 5, 1)] and state.gaps == 1
    assert state.receive(update(14, 13, bids=[[99, 1, 1]])) == []  # waiting for the snapshot
    assert state.receive(snapshot(14, bids=[[99, 1, 1]])) == [BookChanged("ACME", book, 14, True)]
    assert book.live and book.bids() == [Level(99, 1, 1)]


def test_a_message_in_parts_is_reported_once_whole_with_all_its_trades() -> None:
    state = ClientState()
    state.receive(snapshot(5, trades=[1]))
    assert state.receive(update(6, 5, trades=[2], more=2, bids=[[100, 1, 1]])) == []
    assert state.parts_left("ACME") == 2 and not state.books["ACME"].live
    assert state.receive(update(6, 6, trades=[3], bids=[[99, 1, 1]])) == []
    outs = state.receive(update(6, 6, trades=[4], bids=[[98, 1, 1]]))
    assert outs[0] == BookChanged("ACME", state.books["ACME"], 6, False) and delivered(outs) == [2, 3, 4]
    assert state.books["ACME"].live and state.parts_left("ACME") == 0 and len(state.books["ACME"]) == 3


def test_a_part_missing_is_a_gap() -> None:
    state = ClientState()
    state.receive(snapshot(5, more=2, bids=[[100, 1, 1]]))
    state.receive(update(5, 5, bids=[[99, 1, 1]]))
    outs = state.receive(update(6, 5, bids=[[98, 1, 1]]))  # not the part that was due
    assert outs == [GapDetected("ACME", 5, 5, 6), Resubscribe("ACME")] and state.parts_left("ACME") == 0
    assert state.books["ACME"].bids() == [Level(100, 1, 1), Level(99, 1, 1)]


def test_a_resync_makes_every_book_wait_and_reads_the_orders_again() -> None:
    state = ClientState()
    state.receive(snapshot(5, symbol="ACME"))
    state.receive(snapshot(6, symbol="BETA", more=1))
    assert state.receive(Resync("slow consumer")) == [Resynced("slow consumer"), ReadOrders()]
    assert not state.books["ACME"].live and not state.books["BETA"].live and state.parts_left("BETA") == 0


def test_a_symbol_let_go_keeps_its_book_as_it_was() -> None:
    state = ClientState()
    state.receive(snapshot(5, bids=[[100, 1, 1]], more=1))
    state.unsubscribed(["ACME"])
    assert not state.books["ACME"].live and state.parts_left("ACME") == 0
    assert state.receive(update(5, 5, bids=[[99, 1, 1]])) == []  # a part already on its way is let go


# ---------------------------------------------------------------- which exchange


def test_another_exchange_is_told_by_its_log_start_or_else_by_its_seq_and_trades() -> None:
    state = ClientState()
    state.receive(snapshot(50, trades=[7]))
    assert state.witness(Health("ok", seq=60)) == trade(7)  # neither start known: its trades tell
    assert state.judge(Health("ok", seq=60), [trade(7)]) is None
    assert state.judge(Health("ok", seq=60), []) == "it does not hold the ACME trade #7 seen"
    assert state.witness(Health("ok", seq=40)) is None
    assert state.judge(Health("ok", seq=40)) == "its log is at seq 40, behind the 50 seen"
    state.log_started = 1_000
    assert state.witness(Health("ok", seq=10, log_started=1_000)) is None
    assert state.judge(Health("ok", seq=10, log_started=1_000)) is None  # its own word, whatever the seq
    assert state.judge(Health("ok", seq=90, log_started=2_000)) is not None and state.log_started == 2_000


def test_forgetting_a_server_lets_go_of_its_seqs_trades_and_orders() -> None:
    state = ClientState()
    state.receive(snapshot(50, trades=[7]))
    state.receive(OrderMsg(order(3, "filled", 51, filled=10)))
    state.receive(OrderMsg(order(4, "new", 52)))
    assert state.forget_server("why") == [ServerChanged("why")]
    assert state.last_seq == 0 and state.newest_trade is None and state.last_trade("ACME") is None
    assert not state.orders.open and not state.orders.is_closed(3)
    assert state.orders.track(order(3, "new", 1))  # order 3 of the new exchange is another order
