"""The matching rules, one behaviour per test, through Engine's public interface."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from reference_book import Driver, open_order_states

from tickflow.core.engine import Engine
from tickflow.core.types import MAX_PRICE, MAX_QTY, AddSymbol, Cancel, NewOrder, Outcome, Record, Side
from tickflow.store.log.codec import decode_record, encode_record


@pytest.fixture
def d() -> Driver:
    return Driver(("ACME", "BETA"))


def oid(outcome: Outcome) -> int:
    assert outcome.result is not None
    return outcome.result.order_id


def fills(outcome: Outcome) -> list[tuple[int, int]]:
    assert outcome.result is not None
    return [(f.price, f.qty) for f in outcome.result.fills]


# ---------------------------------------------------------------- priority and fills


def test_better_price_trades_first(d: Driver) -> None:
    d.new("s1", "sell", 102, 5)
    best = oid(d.new("s2", "sell", 101, 5))
    out = d.new("b", "buy", 105, 5)
    assert [t.sell_order_id for t in out.trades] == [best]
    assert fills(out) == [(101, 5)]


def test_equal_prices_trade_oldest_first(d: Driver) -> None:
    first = oid(d.new("s1", "sell", 101, 5))
    second = oid(d.new("s2", "sell", 101, 5))
    out = d.new("b", "buy", 101, 7)
    assert [(t.sell_order_id, t.qty) for t in out.trades] == [(first, 5), (second, 2)]


def test_trades_happen_at_the_resting_price_both_ways(d: Driver) -> None:
    d.new("s", "sell", 100, 5)
    assert fills(d.new("b", "buy", 110, 5)) == [(100, 5)]
    d.new("b", "buy", 90, 5)
    assert fills(d.new("s", "sell", 80, 5)) == [(90, 5)]


def test_partial_fill_of_the_incoming_order_rests_the_remainder(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    out = d.new("b", "buy", 100, 10)
    assert out.result is not None
    assert (out.result.status, out.result.filled_qty, out.result.remaining_qty) == ("partially_filled", 3, 7)
    assert d.depth() == ([(100, 7, 1)], [])


def test_partial_fill_of_the_resting_order_is_reported_in_updates(d: Driver) -> None:
    maker = oid(d.new("s", "sell", 100, 10))
    out = d.new("b", "buy", 100, 4)
    assert [(u.order_id, u.status, u.filled_qty, u.remaining_qty) for u in out.updates] == [
        (maker, "partially_filled", 4, 6)
    ]
    assert [(f.price, f.qty) for f in out.updates[0].fills] == [(100, 4)]
    assert d.engine.order_state("s", maker).filled_qty == 4  # type: ignore[union-attr]


def test_sweeping_several_levels_reports_fills_in_order(d: Driver) -> None:
    d.new("s", "sell", 101, 2)
    d.new("s", "sell", 103, 2)
    d.new("s", "sell", 102, 2)
    out = d.new("b", "buy", 102, 10)
    assert fills(out) == [(101, 2), (102, 2)]
    assert [t.trade_id for t in out.trades] == [1, 2]
    assert d.depth() == ([(102, 6, 1)], [(103, 2, 1)])


def test_each_fill_says_which_side_was_resting(d: Driver) -> None:
    """One trade, two fills: taker in the answer of the order that came in, maker in the update of the one
    it hit; an amend that crosses is the taker of its own trades."""
    maker = oid(d.new("s", "sell", 100, 10))
    d.new("s", "sell", 101, 5)
    out = d.new("b", "buy", 101, 12)
    assert [(f.trade_id, f.qty, f.liquidity) for f in out.result.fills] == [  # type: ignore[union-attr]
        (1, 10, "taker"), (2, 2, "taker")]
    assert [(u.order_id, [(f.trade_id, f.liquidity) for f in u.fills]) for u in out.updates] == [
        (maker, [(1, "maker")]), (maker + 1, [(2, "maker")])]
    d.new("b", "buy", 99, 3)
    resting = oid(d.new("s", "sell", 105, 3))
    amended = d.amend("s", resting, price=99)
    assert [(f.qty, f.liquidity) for f in amended.result.fills] == [(3, "taker")]  # type: ignore[union-attr]
    assert [f.liquidity for u in amended.updates for f in u.fills] == ["maker"]


def test_a_limit_that_does_not_cross_rests(d: Driver) -> None:
    d.new("s", "sell", 101, 5)
    out = d.new("b", "buy", 100, 5)
    assert out.result is not None and out.result.status == "new" and out.trades == []
    assert d.depth() == ([(100, 5, 1)], [(101, 5, 1)])


def test_trade_records_both_sides_and_the_aggressor(d: Driver) -> None:
    sell = oid(d.new("s", "sell", 100, 5))
    out = d.new("b", "buy", 100, 5)
    (trade,) = out.trades
    assert (trade.buy_order_id, trade.sell_order_id, trade.buy_account, trade.sell_account) == (
        oid(out), sell, "b", "s")
    assert (trade.aggressor, trade.symbol, trade.seq, trade.ts) == ("buy", "ACME", 2, 1002)


# ---------------------------------------------------------------- market orders and time in force


def test_market_order_takes_what_is_there_and_cancels_the_rest(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    d.new("s", "sell", 200, 3)
    out = d.market("b", "buy", 10)
    assert out.result is not None
    assert fills(out) == [(100, 3), (200, 3)]
    assert (out.result.status, out.result.reason, out.result.filled_qty) == ("cancelled", "no_liquidity", 6)
    assert d.depth() == ([], [])


def test_market_order_on_an_empty_book_is_cancelled_and_never_rests(d: Driver) -> None:
    out = d.market("b", "sell", 10, tif="gtc")
    assert out.result is not None and (out.result.status, out.result.reason) == ("cancelled", "no_liquidity")
    assert d.depth() == ([], [])


def test_market_order_with_a_price_is_rejected(d: Driver) -> None:
    out = d.new("b", "buy", 100, 1, type="market")
    assert out.result is not None and (out.result.status, out.result.reason) == ("rejected", "bad_price")


def test_ioc_fills_what_it_can_and_never_rests(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    out = d.new("b", "buy", 100, 5, tif="ioc")
    assert out.result is not None
    assert (out.result.status, out.result.reason, out.result.filled_qty) == (
        "cancelled", "ioc_remainder_cancelled", 3)
    assert d.depth() == ([], [])


def test_ioc_that_fills_completely_is_filled(d: Driver) -> None:
    d.new("s", "sell", 100, 5)
    out = d.new("b", "buy", 100, 5, tif="ioc")
    assert out.result is not None and (out.result.status, out.result.reason) == ("filled", None)


def test_fok_fills_completely_across_levels(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    d.new("s", "sell", 101, 3)
    out = d.new("b", "buy", 101, 6, tif="fok")
    assert out.result is not None and out.result.status == "filled"
    assert fills(out) == [(100, 3), (101, 3)]


def test_fok_that_cannot_fill_changes_nothing(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    d.new("s", "sell", 102, 3)
    before = d.depth()
    out = d.new("b", "buy", 101, 4, tif="fok")
    assert out.result is not None
    assert (out.result.status, out.result.reason, out.result.filled_qty) == ("cancelled", "fok_not_filled", 0)
    assert out.trades == [] and out.updates == [] and out.book == []
    assert d.depth() == before


def test_market_fok_needs_the_whole_quantity(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    out = d.market("b", "buy", 4, tif="fok")
    assert out.result is not None and out.result.reason == "fok_not_filled"
    assert d.market("b", "buy", 3, tif="fok").result.status == "filled"  # type: ignore[union-attr]


def test_fok_does_not_count_the_accounts_own_orders(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    own = oid(d.new("b", "sell", 100, 5))
    out = d.new("b", "buy", 100, 5, tif="fok")
    assert out.result is not None and out.result.reason == "fok_not_filled"
    assert out.updates == []
    assert d.engine.order_state("b", own).status == "new"  # type: ignore[union-attr]


# ---------------------------------------------------------------- post-only


def test_post_only_that_would_take_is_rejected(d: Driver) -> None:
    d.new("s", "sell", 100, 5)
    out = d.new("b", "buy", 100, 5, post_only=True)
    assert out.result is not None
    assert (out.result.status, out.result.reason) == ("rejected", "post_only_would_take")
    assert out.trades == [] and d.depth() == ([], [(100, 5, 1)])


def test_post_only_that_crosses_only_its_own_order_is_rejected_and_cancels_nothing(d: Driver) -> None:
    d.new("b", "sell", 100, 5)
    out = d.new("b", "buy", 100, 5, post_only=True)
    assert out.result is not None and (out.result.status, out.result.reason) == ("rejected", "post_only_would_take")
    assert out.updates == [] and d.depth() == ([], [(100, 5, 1)])


def test_post_only_that_does_not_cross_rests(d: Driver) -> None:
    d.new("s", "sell", 100, 5)
    out = d.new("b", "buy", 99, 5, post_only=True)
    assert out.result is not None and out.result.status == "new"
    assert d.depth() == ([(99, 5, 1)], [(100, 5, 1)])


@pytest.mark.parametrize("type_, tif, price", [
    ("limit", "ioc", 10), ("limit", "fok", 10), ("market", "ioc", 0)])
def test_post_only_needs_a_gtc_limit(d: Driver, type_: str, tif: str, price: int) -> None:
    out = d.new("b", "buy", price, 5, type=type_, tif=tif, post_only=True)
    assert out.result is not None and (out.result.status, out.result.reason) == ("rejected", "bad_order")


# ---------------------------------------------------------------- amend


def test_reducing_quantity_keeps_time_priority(d: Driver) -> None:
    first = oid(d.new("s1", "sell", 100, 10))
    d.new("s2", "sell", 100, 10)
    out = d.amend("s1", first, qty=4)
    assert out.error is None and out.result is not None
    assert (out.result.qty, out.result.remaining_qty, out.result.seq) == (4, 4, 3)
    assert d.depth() == ([], [(100, 14, 2)])
    trade = d.new("b", "buy", 100, 1).trades[0]
    assert trade.sell_order_id == first


def test_increasing_quantity_loses_time_priority(d: Driver) -> None:
    first = oid(d.new("s1", "sell", 100, 10))
    second = oid(d.new("s2", "sell", 100, 10))
    d.amend("s1", first, qty=12)
    assert d.depth() == ([], [(100, 22, 2)])
    assert d.new("b", "buy", 100, 1).trades[0].sell_order_id == second


def test_price_change_requeues_at_the_back_of_the_new_level(d: Driver) -> None:
    first = oid(d.new("s1", "sell", 101, 10))
    second = oid(d.new("s2", "sell", 100, 10))
    out = d.amend("s1", first, price=100)
    assert out.result is not None and out.result.price == 100 and out.trades == []
    assert d.depth() == ([], [(100, 20, 2)])
    assert [t.sell_order_id for t in d.new("b", "buy", 100, 15).trades] == [second, first]


def test_amend_to_a_crossing_price_trades_at_once(d: Driver) -> None:
    d.new("s", "sell", 101, 3)
    order = oid(d.new("b", "buy", 99, 5))
    out = d.amend("b", order, price=102)
    assert out.result is not None
    assert fills(out) == [(101, 3)]
    assert (out.result.status, out.result.filled_qty, out.result.remaining_qty) == ("partially_filled", 3, 2)
    assert d.depth() == ([(102, 2, 1)], [])


def test_amend_that_fills_completely_closes_the_order(d: Driver) -> None:
    d.new("s", "sell", 101, 5)
    order = oid(d.new("b", "buy", 99, 5))
    out = d.amend("b", order, price=101)
    assert out.result is not None and out.result.status == "filled"
    assert open_order_states(d.engine, "b") == []
    assert d.cancel("b", order).error == "not_live"


def test_amend_quantity_counts_what_was_already_filled(d: Driver) -> None:
    order = oid(d.new("s", "sell", 100, 10))
    d.new("b", "buy", 100, 4)
    assert d.amend("s", order, qty=4).error == "qty_not_above_filled"
    out = d.amend("s", order, qty=5)
    assert out.result is not None and (out.result.filled_qty, out.result.remaining_qty) == (4, 1)
    assert d.depth() == ([], [(100, 1, 1)])


@pytest.mark.parametrize("qty, price, error", [
    (0, None, "bad_qty"), (MAX_QTY + 1, None, "bad_qty"), (None, 0, "bad_price"),
    (None, MAX_PRICE + 1, "bad_price"), (None, None, "nothing_to_amend"),
    (10, None, "nothing_to_amend"), (None, 100, "nothing_to_amend"), (10, 100, "nothing_to_amend"),
])
def test_bad_amends_are_errors_that_change_nothing(d: Driver, qty: int | None, price: int | None,
                                                   error: str) -> None:
    order = oid(d.new("s", "sell", 100, 10))
    before = d.engine.order_state("s", order)
    out = d.amend("s", order, qty=qty, price=price)
    assert out.error == error and out.result == before
    assert d.engine.order_state("s", order) == before
    assert d.depth() == ([], [(100, 10, 1)])


def test_post_only_amend_that_would_cross_is_refused(d: Driver) -> None:
    d.new("s", "sell", 101, 5)
    order = oid(d.new("b", "buy", 99, 5, post_only=True))
    out = d.amend("b", order, price=101)
    assert out.error == "post_only_would_take" and out.trades == []
    assert d.depth() == ([(99, 5, 1)], [(101, 5, 1)])
    assert d.amend("b", order, price=100).error is None


def test_amend_of_unknown_foreign_and_finished_orders(d: Driver) -> None:
    order = oid(d.new("s", "sell", 100, 10))
    assert d.amend("s", 999, qty=5).error == "unknown_order"
    foreign = d.amend("x", order, qty=5)
    assert (foreign.result, foreign.error, foreign.book) == (None, "not_live", [])  # the wire says unknown_order
    d.cancel("s", order)
    finished = d.amend("s", order, qty=5)
    assert (finished.result, finished.error, finished.book) == (None, "not_live", [])  # the wire: not_open


# ---------------------------------------------------------------- self-trade prevention


def test_self_trade_cancels_the_resting_order_and_goes_on(d: Driver) -> None:
    own = oid(d.new("a", "sell", 100, 5))
    other = oid(d.new("b", "sell", 100, 5))
    out = d.new("a", "buy", 100, 5)
    assert [t.sell_order_id for t in out.trades] == [other]
    assert [(u.order_id, u.status, u.reason) for u in out.updates] == [
        (own, "cancelled", "self_trade_prevented"), (other, "filled", None)]
    assert d.engine.order_state("a", own) is None  # finished: out of the engine
    assert d.depth() == ([], [])


def test_self_trade_only_book_lets_the_incoming_order_rest(d: Driver) -> None:
    own = oid(d.new("a", "sell", 100, 5))
    out = d.new("a", "buy", 101, 3)
    assert out.trades == [] and [u.order_id for u in out.updates] == [own]
    assert out.result is not None and out.result.status == "new"
    assert d.depth() == ([(101, 3, 1)], [])


def test_self_trade_prevention_applies_to_amends(d: Driver) -> None:
    own = oid(d.new("a", "sell", 101, 5))
    order = oid(d.new("a", "buy", 99, 5))
    out = d.amend("a", order, price=101)
    assert out.trades == [] and [(u.order_id, u.reason) for u in out.updates] == [
        (own, "self_trade_prevented")]
    assert d.depth() == ([(101, 5, 1)], [])


def test_fok_with_own_orders_in_the_way_cancels_them_only_when_it_fills(d: Driver) -> None:
    own = oid(d.new("a", "sell", 100, 5))
    d.new("b", "sell", 101, 5)
    out = d.new("a", "buy", 101, 5, tif="fok")
    assert out.result is not None and out.result.status == "filled"
    assert [u.order_id for u in out.updates][0] == own


# ---------------------------------------------------------------- cancel


def test_cancel_takes_the_order_off_the_book(d: Driver) -> None:
    order = oid(d.new("s", "sell", 100, 10))
    d.new("b", "buy", 100, 3)
    out = d.cancel("s", order)
    assert out.error is None and out.result is not None
    assert (out.result.status, out.result.reason, out.result.remaining_qty) == (
        "cancelled", "cancelled_by_user", 7)
    assert d.depth() == ([], [])
    assert d.new("b", "buy", 100, 3).trades == []


def test_cancel_of_another_accounts_order_is_not_live_and_changes_nothing(d: Driver) -> None:
    """The engine cannot tell another account's order from a finished one (it keeps no finished order):
    both are "not_live", which the exchange service answers as unknown_order or not_open from SQLite."""
    order = oid(d.new("s", "sell", 100, 10))
    foreign = d.cancel("mallory", order)
    unknown = d.cancel("mallory", 12345)
    assert foreign.error == "not_live" and foreign.result is None
    assert unknown.error == "unknown_order" and unknown.result is None
    assert (foreign.result, foreign.trades, foreign.book, foreign.updates) == (
        unknown.result, unknown.trades, unknown.book, unknown.updates)
    assert d.depth() == ([], [(100, 10, 1)])


@pytest.mark.parametrize("finish", ["filled", "cancelled", "ioc", "fok", "rejected"])
def test_cancel_of_a_finished_order_is_not_live(d: Driver, finish: str) -> None:
    if finish == "filled":
        order = oid(d.new("s", "sell", 100, 5))
        d.new("b", "buy", 100, 5)
    elif finish == "cancelled":
        order = oid(d.new("s", "sell", 100, 5))
        d.cancel("s", order)
    elif finish == "ioc":
        order = oid(d.new("s", "sell", 100, 5, tif="ioc"))
    elif finish == "fok":
        order = oid(d.new("s", "sell", 100, 5, tif="fok"))
    else:
        order = oid(d.new("s", "sell", 0, 5))
    assert d.engine.order_state("s", order) is None and d.engine.open_orders["s"] == {}
    out = d.cancel("s", order)
    assert (out.error, out.result, out.book, out.updates) == ("not_live", None, [], [])
    assert d.amend("s", order, qty=7).error == "not_live"
    assert d.cancel("s", d.engine.next_order_id).error == "unknown_order"


# ---------------------------------------------------------------- symbols and bad input


def test_symbols_have_separate_books(d: Driver) -> None:
    d.new("s", "sell", 100, 5, symbol="BETA")
    out = d.new("b", "buy", 100, 5)
    assert out.trades == []
    assert d.depth("ACME") == ([(100, 5, 1)], [])
    assert d.depth("BETA") == ([], [(100, 5, 1)])
    assert d.new("b", "buy", 100, 5, symbol="BETA").trades[0].symbol == "BETA"


def test_unknown_symbol_is_a_rejection(d: Driver) -> None:
    out = d.new("b", "buy", 100, 5, symbol="NOPE")
    assert out.result is not None and (out.result.status, out.result.reason) == ("rejected", "unknown_symbol")


def test_add_symbol_opens_a_book_once(d: Driver) -> None:
    assert d.apply(AddSymbol("NEW")).error is None
    assert d.apply(AddSymbol("NEW")).error == "symbol_exists"
    d.new("s", "sell", 100, 5, symbol="NEW")
    assert d.depth("NEW") == ([], [(100, 5, 1)])


@pytest.mark.parametrize("price, qty, reason", [
    (0, 5, "bad_price"), (-1, 5, "bad_price"), (MAX_PRICE + 1, 5, "bad_price"),
    (100, 0, "bad_qty"), (100, -3, "bad_qty"), (100, MAX_QTY + 1, "bad_qty"),
])
def test_out_of_range_numbers_are_rejections_not_exceptions(
        d: Driver, price: int, qty: int, reason: str) -> None:
    out = d.new("b", "buy", price, qty)
    assert out.result is not None and (out.result.status, out.result.reason) == ("rejected", reason)
    assert out.error is None and d.depth() == ([], [])


def test_extreme_but_valid_numbers_work(d: Driver) -> None:
    d.new("s", "sell", MAX_PRICE, MAX_QTY)
    out = d.new("b", "buy", MAX_PRICE, MAX_QTY)
    assert fills(out) == [(MAX_PRICE, MAX_QTY)]


def test_rejected_orders_take_an_id_and_leave_no_state(d: Driver) -> None:
    order = oid(d.new("b", "buy", 0, 5))
    assert d.engine.next_order_id == order + 1
    assert d.engine.order_state("b", order) is None and d.engine.order_state("other", order) is None


# ---------------------------------------------------------------- idempotency


def test_retry_returns_the_original_result_unchanged(d: Driver) -> None:
    d.new("s", "sell", 100, 3)
    first = d.new("b", "buy", 100, 5, client_order_id="c1")
    d.new("s", "sell", 100, 10)  # fills the rest of c1 since then
    retry = d.new("b", "buy", 100, 5, client_order_id="c1")
    assert retry.replayed and not first.replayed and retry.error is None
    assert retry.result == first.result and retry.seq == first.seq
    assert retry.trades == [] and retry.book == [] and retry.updates == []
    assert d.engine.order_state("b", oid(first)) is None  # filled: out of the engine


def test_retry_with_other_fields_is_refused_and_changes_nothing(d: Driver) -> None:
    first = d.new("b", "buy", 100, 5, client_order_id="c1")
    retry = d.new("b", "buy", 101, 5, client_order_id="c1")
    assert retry.error == "duplicate_client_order_id" and retry.replayed
    assert retry.result == first.result
    assert d.depth() == ([(100, 5, 1)], [])
    assert oid(d.new("b", "buy", 99, 1)) == oid(first) + 1  # the refused retry used no order id


@pytest.mark.parametrize("change", [
    {"symbol": "OTHER"}, {"side": "sell"}, {"type": "market", "price": 0, "tif": "ioc"}, {"price": 101},
    {"qty": 6}, {"tif": "ioc"}, {"post_only": True},
])
def test_a_retry_differing_in_any_field_is_refused(d: Driver, change: dict[str, object]) -> None:
    d.add_symbol("OTHER")
    fields: dict[str, object] = dict(account="b", symbol="ACME", side="buy", type="limit", price=100, qty=5,
                                     client_order_id="c1")
    first = d.apply(NewOrder(**fields))  # type: ignore[arg-type]
    same = d.apply(NewOrder(**fields))  # type: ignore[arg-type]
    other = d.apply(NewOrder(**{**fields, **change}))  # type: ignore[arg-type]
    assert same.replayed and same.error is None and same.result == first.result
    assert other.replayed and other.error == "duplicate_client_order_id" and other.result == first.result


def test_client_order_ids_are_per_account(d: Driver) -> None:
    a = d.new("a", "buy", 100, 5, client_order_id="c1")
    b = d.new("b", "buy", 100, 5, client_order_id="c1")
    assert not b.replayed and oid(b) != oid(a)


def test_rejected_orders_are_remembered_too(d: Driver) -> None:
    first = d.new("b", "buy", 100, 5, symbol="LATER", client_order_id="c1")
    d.add_symbol("LATER")
    retry = d.new("b", "buy", 100, 5, symbol="LATER", client_order_id="c1")
    assert retry.replayed and retry.result == first.result
    assert retry.result is not None and retry.result.status == "rejected"


def test_check_duplicate_answers_without_applying(d: Driver) -> None:
    cmd = NewOrder("b", "ACME", "buy", "limit", 100, 5, client_order_id="c1")
    assert d.engine.check_duplicate(cmd) is None
    first = d.apply(cmd)
    seen = d.engine.check_duplicate(cmd)
    assert seen is not None and seen.replayed and seen.result == first.result


# ---------------------------------------------------------------- book events and queries


def test_book_events_rebuild_the_depth(d: Driver) -> None:
    a = oid(d.new("s", "sell", 101, 5))
    d.new("s", "sell", 102, 5)
    b = oid(d.new("b", "buy", 99, 5))
    d.new("b", "buy", 98, 5)
    d.new("x", "buy", 101, 7)  # takes all of 101, rests 2 at 101
    d.amend("b", b, qty=12)  # same price, more quantity: re-queued
    d.amend("s", a, price=105)  # already filled: refused
    d.cancel("b", b)
    d.new("s", "sell", 97, 30, tif="ioc")
    for symbol in ("ACME", "BETA"):
        assert d.mirror_depth(symbol) == d.depth(symbol)


def test_results_and_updates_are_snapshots_later_commands_leave_alone(d: Driver) -> None:
    def said(out: Outcome) -> tuple[Any, ...]:
        return out.seq, out.result, out.error, out.trades, out.book, out.updates, out.replayed

    placed = d.new("s", "sell", 100, 10)
    taken = d.new("b", "buy", 100, 4)
    assert taken.updates[0].filled_qty == 4
    kept = copy.deepcopy((said(placed), said(taken)))
    d.new("b", "buy", 100, 3)
    d.amend("s", oid(placed), qty=9)  # reduced: the same resting order, a new qty
    d.amend("s", oid(placed), qty=20)
    d.cancel("s", oid(placed))
    assert (said(placed), said(taken)) == kept


def test_depth_limits_levels_best_first(d: Driver) -> None:
    for p in (99, 97, 98):
        d.new("b", "buy", p, 1)
    bids, asks = (d.engine.books["ACME"].bids.sorted_levels(2), d.engine.books["ACME"].asks.sorted_levels(2))
    assert [lv.price for lv in bids] == [99, 98] and asks == []


def test_open_orders_are_listed_oldest_first_per_account(d: Driver) -> None:
    x = oid(d.new("a", "buy", 90, 1))
    y = oid(d.new("a", "sell", 110, 1))
    d.new("b", "buy", 91, 1)
    z = oid(d.new("a", "buy", 92, 1))
    d.cancel("a", y)
    assert [s.order_id for s in open_order_states(d.engine, "a")] == [x, z]
    assert d.engine.order_state("b", x) is None


def test_seq_and_ts_come_from_the_command_that_last_changed_the_order(d: Driver) -> None:
    maker = oid(d.new("s", "sell", 100, 10))
    d.new("x", "buy", 50, 1)
    d.new("b", "buy", 100, 3)
    state = d.engine.order_state("s", maker)
    assert state is not None and (state.seq, state.ts) == (3, 1003)


def test_live_orders_share_one_string_per_account_and_symbol() -> None:
    """Every decoded record brings fresh strings; a million live orders must not keep a million copies."""
    engine = Engine(["ACME"])
    placed: list[tuple[Side, int]] = [("buy", 90), ("buy", 91), ("sell", 95), ("sell", 90)]
    for seq, (side, price) in enumerate(placed, 1):
        record = decode_record(encode_record(Record(seq, 1000 + seq, NewOrder("alice", "ACME", side, "limit", price, 5))))
        engine.apply(record.seq, record.ts, record.command)
    orders = [o for open_ in engine.open_orders.values() for o in open_.values()]
    assert len(orders) == 2
    assert len({id(o.account) for o in orders}) == 1
    assert len({id(o.symbol) for o in orders}) == 1


def test_finished_orders_leave_memory() -> None:
    """Memory is bounded by the live orders: 100k orders placed and cancelled, filled, or never resting
    leave none in the engine; only the id counter remembers them."""
    engine = Engine(["ACME"])
    seq = 0

    def apply(command: Any) -> Outcome:
        nonlocal seq
        seq += 1
        return engine.apply(seq, seq, command)

    for i in range(100_000):
        placed = apply(NewOrder("mm", "ACME", "buy", "limit", 100 - i % 7, 5))
        assert placed.result is not None
        if i % 10 == 0:
            apply(NewOrder("taker", "ACME", "sell", "market", 0, 5, "ioc"))
        else:
            assert apply(Cancel("mm", placed.result.order_id)).error is None
    apply(NewOrder("x", "ACME", "buy", "limit", 0, 5))  # rejected
    assert sum(len(open_) for open_ in engine.open_orders.values()) == 0
    assert engine.next_order_id == 100_000 + 10_000 + 2
    assert not hasattr(engine, "orders")
    sides = [level for book in engine.books.values() for side in (book.bids, book.asks)
             for level in side.levels.values()]
    assert sum(len(level.queue) for level in sides) <= 7 * 16  # dead entries are swept
