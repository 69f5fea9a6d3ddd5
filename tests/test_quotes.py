"""Mass quotes in the engine: one command replaces an account's quote orders in a symbol, keeping the queue
place of every level whose price stays and whose open quantity does not grow (docs/protocol.md)."""

from __future__ import annotations

from reference_book import Driver, open_order_states

from tickflow.core.snapshot import capture, restore, state_hash
from tickflow.core.types import Quote


def ids(out: object) -> list[tuple[int, str, int, str]]:
    return [(s.order_id, s.side, s.price, s.status) for s in out.quoted or []]  # type: ignore[attr-defined]


def queue(d: Driver, side: str, price: int) -> list[int]:
    book = d.engine.books["ACME"]
    level = (book.bids if side == "buy" else book.asks).levels[price]
    return [o.order_id for o in level.live_orders()]


def test_a_first_quote_places_bids_then_asks_best_first_as_one_command() -> None:
    d = Driver()
    out = d.quote("mm", [(98, 5), (99, 5)], [(102, 5), (101, 5)])
    assert out.error is None and out.result is None
    assert ids(out) == [(1, "buy", 99, "new"), (2, "buy", 98, "new"), (3, "sell", 101, "new"),
                        (4, "sell", 102, "new")]
    assert {s.seq for s in out.quoted or []} == {out.seq}
    assert d.depth() == ([(99, 5, 1), (98, 5, 1)], [(101, 5, 1), (102, 5, 1)])
    assert [o.order_id for o in open_order_states(d.engine, "mm")] == [1, 2, 3, 4]


def test_an_unchanged_or_smaller_level_keeps_its_place_and_a_larger_one_goes_to_the_back() -> None:
    d = Driver()
    d.quote("mm", [(99, 5), (98, 5)], [])
    d.new("x", "buy", 99, 3)  # behind the quote at 99
    d.new("y", "buy", 98, 3)  # behind the quote at 98
    out = d.quote("mm", [(99, 5), (98, 2)], [])
    assert ids(out) == [(1, "buy", 99, "new"), (2, "buy", 98, "new")]
    assert queue(d, "buy", 99) == [1, 3] and queue(d, "buy", 98) == [2, 4]
    assert d.depth()[0] == [(99, 8, 2), (98, 5, 2)]
    out = d.quote("mm", [(99, 6), (98, 2)], [])  # more at 99: cancelled and placed again, behind x
    assert ids(out) == [(1, "buy", 99, "cancelled"), (2, "buy", 98, "new"), (5, "buy", 99, "new")]
    assert out.quoted is not None and out.quoted[0].reason == "replaced_by_quote"
    assert queue(d, "buy", 99) == [3, 5]


def test_a_partly_filled_level_counts_its_open_quantity() -> None:
    d = Driver()
    d.quote("mm", [], [(101, 10)])
    d.new("t", "buy", 101, 4)  # fills 4 of the 10
    out = d.quote("mm", [], [(101, 6)])  # what is still open: unchanged, keeps its order
    assert ids(out) == [(1, "sell", 101, "partially_filled")]
    assert out.book == []
    out = d.quote("mm", [], [(101, 5)])  # one less than open: cut, as an amend would
    state = (out.quoted or [])[0]
    assert (state.order_id, state.qty, state.filled_qty, state.remaining_qty) == (1, 9, 4, 5)
    assert d.depth()[1] == [(101, 5, 1)]


def test_an_empty_side_pulls_that_side_and_other_symbols_and_orders_stay() -> None:
    d = Driver(("ACME", "BETA"))
    d.quote("mm", [(99, 5)], [(101, 5)])
    d.quote("mm", [(50, 1)], [(60, 1)], symbol="BETA")
    d.new("mm", "buy", 90, 1)  # an ordinary order of the same account
    out = d.quote("mm", [(99, 5)], [])
    assert ids(out) == [(2, "sell", 101, "cancelled"), (1, "buy", 99, "new")]
    assert d.depth() == ([(99, 5, 1), (90, 1, 1)], [])
    assert d.depth("BETA") == ([(50, 1, 1)], [(60, 1, 1)])


def test_a_quote_trades_like_any_order_and_self_trade_prevention_applies() -> None:
    d = Driver()
    d.new("seller", "sell", 100, 3)
    d.new("mm", "sell", 101, 2)  # the maker's own ordinary order
    out = d.quote("mm", [(101, 5)], [(105, 5)])
    assert [(t.price, t.qty, t.sell_account) for t in out.trades] == [(100, 3, "seller")]
    assert [(u.order_id, u.status, u.reason) for u in out.updates] == [
        (1, "filled", None), (2, "cancelled", "self_trade_prevented")]
    bid = (out.quoted or [])[0]
    assert (bid.status, bid.filled_qty, [f.liquidity for f in bid.fills]) == ("partially_filled", 3, ["taker"])
    assert d.depth() == ([(101, 2, 1)], [(105, 5, 1)])


def test_a_bad_quote_changes_nothing() -> None:
    d = Driver()
    d.quote("mm", [(99, 5)], [(101, 5)])
    before = state_hash(d.engine)
    for bids, asks, code in [([(99, 5)], [(99, 5)], "crossed_quote"), ([(99, 5), (99, 1)], [], "repeated_price"),
                             ([(0, 5)], [], "bad_price"), ([(99, 0)], [], "bad_qty"),
                             ([(p, 1) for p in range(1, 66)], [], "too_many_levels")]:
        out = d.quote("mm", bids, asks)
        assert (out.error, out.quoted, out.book, out.trades) == (code, None, [], [])
    assert d.quote("mm", [], [], symbol="NOPE").error == "unknown_symbol"
    assert state_hash(d.engine) != before  # only the stamps moved
    assert d.depth() == ([(99, 5, 1)], [(101, 5, 1)])


def test_cancel_all_takes_quote_orders_and_an_amended_quote_order_stays_a_quote_order() -> None:
    d = Driver()
    d.quote("mm", [(99, 5), (98, 5)], [])
    assert d.amend("mm", 1, price=97).error is None  # re-queued as a new object: still the quote's
    out = d.quote("mm", [(97, 5)], [])
    assert ids(out) == [(2, "buy", 98, "cancelled"), (1, "buy", 97, "new")]
    assert [u.order_id for u in d.cancel_all("mm").updates] == [1]
    assert d.depth() == ([], [])


def test_quote_orders_survive_a_snapshot_as_quote_orders() -> None:
    d = Driver()
    d.quote("mm", [(99, 5)], [(101, 5)])
    engine = restore(capture(d.engine))
    assert state_hash(engine) == state_hash(d.engine)
    out = engine.apply(d.seq + 1, 5000, Quote("mm", "ACME", [(99, 5)], []))
    assert [(s.order_id, s.status) for s in out.quoted or []] == [(2, "cancelled"), (1, "new")]
