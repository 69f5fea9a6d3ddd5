"""The engine against its naive twin (tests/reference_book.py), on generated command sequences:
a hypothesis state machine, and long seeded runs.

Every outcome is compared field by field (the book events are checked by replaying them into a
mirror instead, since how the engine groups them is its own business), and invariants are checked
after every command: the book never crosses, FOK is all or nothing, quantity is conserved.
"""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, MultipleResults, RuleBasedStateMachine, invariant, multiple, rule
from reference_book import Driver, RefEngine, open_order_states

import msgspec

from tickflow.core.engine import QUIET, Engine
from tickflow.core.orders import finished, state_of
from tickflow.core.types import (MAX_PRICE, MAX_QTY, AddSymbol, Amend, Cancel, CancelAll, Command, NewOrder,
                                  OrderState, Outcome, Quote, Rules, Side, Tif)
from tickflow.core.snapshot import state_hash

SYMBOLS = ("ACME", "BETA")
ACCOUNTS = ("a", "b", "c")


class Twin:
    """The engine and the reference side by side, plus the bookkeeping the invariants need."""

    def __init__(self) -> None:
        self.driver = Driver(SYMBOLS)
        self.ref = RefEngine.with_symbols(SYMBOLS)
        self.symbols = list(SYMBOLS)
        self.placed: dict[int, int] = {}  # order id -> its qty after the last successful amend
        self.owner: dict[int, str] = {}
        self.traded: dict[int, int] = defaultdict(int)
        self.final: dict[int, OrderState] = {}
        """Each finished order's final state, as the outcomes told it (the engine forgets it)."""

    def step(self, command: Command, *, check_books: bool = True) -> Outcome:
        before = None
        if type(command) is NewOrder and command.tif == "fok" and command.symbol in self.symbols:
            before = self.driver.depth(command.symbol)
        got = self.driver.apply(command)
        want = self.ref.apply(self.driver.seq, 1000 + self.driver.seq, command)
        assert _comparable(got) == _comparable(want), command
        for state in finished(got):
            assert state.order_id not in self.final, f"order {state.order_id} finished twice"
            self.final[state.order_id] = state
        self._account(command, got)
        if before is not None:
            self._check_fok(command, got, before)  # type: ignore[arg-type]
        if check_books:
            self.check_books()
        return got

    def _account(self, command: Command, out: Outcome) -> None:
        if type(command) is Quote and out.error is None:
            for state in out.quoted or ():
                if state.status == "rejected":  # a level the quote's own trades moved out of the price band
                    continue
                self.placed[state.order_id] = state.qty
                self.owner[state.order_id] = state.account
            for t in out.trades:
                self.traded[t.buy_order_id] += t.qty
                self.traded[t.sell_order_id] += t.qty
            return
        if out.error is not None or out.replayed or out.result is None:
            return
        if type(command) is NewOrder and out.result.status != "rejected":
            self.placed[out.result.order_id] = out.result.qty
            self.owner[out.result.order_id] = out.result.account
        elif type(command) is Amend:
            self.placed[out.result.order_id] = out.result.qty
        for t in out.trades:
            self.traded[t.buy_order_id] += t.qty
            self.traded[t.sell_order_id] += t.qty

    def _check_fok(self, command: NewOrder, out: Outcome, before: object) -> None:
        assert out.result is not None
        if out.replayed or out.result.status == "rejected":
            return
        assert out.result.filled_qty in (0, command.qty)
        if out.result.filled_qty == 0:
            assert out.trades == [] and out.updates == [] and out.book == []
            assert self.driver.depth(command.symbol) == before

    def check_books(self) -> None:
        for symbol in self.symbols:
            depth = self.driver.depth(symbol)
            assert depth == self.ref.depth(symbol)
            assert self.driver.mirror_depth(symbol) == depth
            bids, asks = depth
            assert not (bids and asks and bids[0][0] >= asks[0][0]), "crossed book"

    def check_end(self) -> None:
        self.check_books()
        engine = self.driver.engine
        for account in ACCOUNTS:
            assert open_order_states(engine, account) == self.ref.open_orders(account)
        # The clientOrderIds still remembered, oldest first (the order they are forgotten in).
        assert list(engine.idempotency.items()) == [(key, first) for key, (_, first) in self.ref.seen.items()]
        resting = cancelled = traded = 0
        live = sum(len(open_) for open_ in engine.open_orders.values())
        assert live == sum(1 for order_id in self.placed if order_id not in self.final), "a finished order is kept"
        for order_id, qty in self.placed.items():
            state = engine.order_state(self.owner[order_id], order_id)
            if state is None:  # finished: the engine keeps no finished order, the outcomes told its end
                state = self.final[order_id]
                assert state.status in ("filled", "cancelled") and state.account == self.owner[order_id]
            else:
                assert order_id not in self.final
            assert state.qty == qty
            assert state.filled_qty == self.traded[order_id]
            traded += state.filled_qty
            if state.status in ("new", "partially_filled"):
                resting += state.remaining_qty
            elif state.status == "cancelled":
                cancelled += state.remaining_qty
            else:
                assert state.status == "filled" and state.remaining_qty == 0
        on_books = sum(lv[1] for s in self.symbols for side in self.driver.depth(s) for lv in side)
        assert resting == on_books
        assert sum(self.placed.values()) == traded + resting + cancelled


def _comparable(out: Outcome) -> tuple[object, ...]:
    return (out.seq, out.result, out.error, out.trades, out.updates, out.replayed, out.quoted)


# ---------------------------------------------------------------- hypothesis

def mostly(usual: st.SearchStrategy, rare: st.SearchStrategy, one_in: int = 12) -> st.SearchStrategy:
    """`usual`, and `rare` about once in `one_in` draws (shrinking prefers `usual`)."""
    return st.integers(0, one_in - 1).flatmap(lambda r: rare if r == one_in - 1 else usual)


prices = mostly(st.integers(95, 105), st.sampled_from([0, -1, MAX_PRICE, MAX_PRICE + 1]), one_in=25)
qtys = mostly(st.integers(1, 12), st.sampled_from([0, -2, MAX_QTY + 1]), one_in=25)
accounts = st.sampled_from(ACCOUNTS)
symbols = mostly(st.sampled_from(SYMBOLS), st.just("LATE"), one_in=25)
client_ids = mostly(st.none(), st.sampled_from(["c1", "c2", "c3", "c4", "c5"]), one_in=6)
any_order_ids = st.integers(1, 30)


@st.composite
def new_orders(draw: st.DrawFn) -> NewOrder:
    type_ = draw(mostly(st.just("limit"), st.just("market"), one_in=8))
    price = draw(prices) if type_ == "limit" else draw(mostly(st.just(0), st.just(100), one_in=25))
    tif = draw(mostly(st.just("gtc"), st.sampled_from(["ioc", "fok"]), one_in=4))
    post_only = draw(mostly(st.just(False), st.just(True), one_in=8))
    return NewOrder(draw(accounts), draw(symbols), draw(st.sampled_from(["buy", "sell"])), type_, price,
                    draw(qtys), tif, post_only, draw(client_ids))


@st.composite
def commands(draw: st.DrawFn) -> Command:
    """About 60% new orders, 15% cancels, 15% amends, 5% cancel-alls, 5% AddSymbol."""
    r = draw(st.integers(0, 19))
    if r < 12:
        return draw(new_orders())
    if r < 15:
        return Cancel(draw(accounts), draw(any_order_ids))
    if r < 17:
        return draw(cancel_alls())
    if r < 19:
        return Amend(draw(accounts), draw(any_order_ids), draw(mostly(st.none(), qtys, one_in=2)),
                     draw(mostly(st.none(), prices, one_in=2)))
    return AddSymbol(draw(symbols))


@st.composite
def cancel_alls(draw: st.DrawFn) -> CancelAll:
    """Every order of an account, or those in one symbol (maybe unknown) and/or on one side."""
    return CancelAll(draw(accounts), draw(mostly(st.none(), symbols, one_in=2)),
                     draw(mostly(st.none(), st.sampled_from(["buy", "sell"]), one_in=2)))


@st.composite
def quotes(draw: st.DrawFn) -> Quote:
    """A two-sided quote around 100 (sometimes one-sided, empty, crossed or with a repeated price), so
    levels are kept, cut, replaced and pulled, and new levels trade against resting orders."""
    levels = st.lists(st.tuples(st.integers(93, 107), qtys), max_size=5)
    bids, asks = draw(levels), draw(levels)
    if draw(mostly(st.just(True), st.just(False), one_in=10)):  # mostly well formed
        bids = sorted({p: q for p, q in bids}.items())
        asks = sorted({p: q for p, q in asks}.items())
        if bids and asks and bids[-1][0] >= asks[0][0]:
            cut = bids[-1][0]
            asks = [(p, q) for p, q in asks if p > cut]
    return Quote(draw(accounts), draw(symbols), bids, asks)


rules = st.builds(Rules, st.integers(0, 4), st.sampled_from([0, 0, 100, 300, 1000]),
                  st.sampled_from([0, 0, 3, 10, 40]))
"""Open-order limits small enough to be reached, price bands of 1-10% (0: none), and idempotency windows
of a few commands (each command is a millisecond later than the one before; 0: for ever)."""

command_lists = st.lists(st.one_of(commands(), quotes(), rules), min_size=1, max_size=80)


class EngineAgainstReference(RuleBasedStateMachine):
    """Random sessions: orders of every kind, cancels and amends of real (and unknown) ids, from
    three accounts so self-trade prevention and foreign cancels happen, clientOrderIds reused."""

    placed = Bundle("placed")

    def __init__(self) -> None:
        super().__init__()
        self.twin = Twin()
        self.owner: dict[int, str] = {}

    @rule(target=placed, orders=st.lists(new_orders(), min_size=1, max_size=3),
          new_symbol=mostly(st.none(), symbols, one_in=15))
    def place(self, orders: list[NewOrder], new_symbol: str | None) -> MultipleResults[int]:
        if new_symbol is not None:
            if new_symbol not in self.twin.symbols:
                self.twin.symbols.append(new_symbol)
            self.twin.step(AddSymbol(new_symbol))
        ids = []
        for order in orders:
            out = self.twin.step(order)
            assert out.result is not None
            self.owner[out.result.order_id] = out.result.account
            ids.append(out.result.order_id)
        return multiple(*ids)

    @rule(order_id=mostly(placed, st.integers(1, 200), one_in=15),
          own=st.integers(0, 3), other=accounts)
    def cancel(self, order_id: int, own: int, other: str) -> None:
        self.twin.step(Cancel(self._account(order_id, own, other), order_id))

    @rule(order_id=mostly(placed, st.integers(1, 200), one_in=15),
          own=st.integers(0, 3), other=accounts,
          qty=mostly(st.none(), qtys, one_in=2), price=mostly(st.none(), prices, one_in=2))
    def amend(self, order_id: int, own: int, other: str, qty: int | None, price: int | None) -> None:
        self.twin.step(Amend(self._account(order_id, own, other), order_id, qty, price))

    @rule(target=placed, command=quotes())
    def quote(self, command: Quote) -> MultipleResults[int]:
        out = self.twin.step(command)
        if out.error is not None:
            assert out.quoted is None and not out.trades and not out.book
            return multiple()
        assert out.result is None and out.quoted is not None
        for state in out.quoted:
            self.owner[state.order_id] = state.account
        return multiple(*(s.order_id for s in out.quoted if s.status != "cancelled"))

    @rule(command=rules)
    def set_rules(self, command: Rules) -> None:
        out = self.twin.step(command)
        assert out.error is None and self.twin.driver.engine.max_open_orders == command.max_open_orders
        assert self.twin.driver.engine.price_band == command.price_band
        assert self.twin.driver.engine.idempotency.window == command.idempotency_window

    @rule(command=cancel_alls())
    def cancel_all(self, command: CancelAll) -> None:
        out = self.twin.step(command)
        assert out.result is None and out.error is None and not out.trades
        assert all(u.status == "cancelled" and u.account == command.account for u in out.updates)
        assert not [o for o in open_order_states(self.twin.driver.engine, command.account)
                    if command.symbol in (None, o.symbol) and command.side in (None, o.side)]

    def _account(self, order_id: int, own: int, other: str) -> str:
        """Usually the owner's account; one time in four, any account (often someone else's)."""
        return self.owner.get(order_id, other) if own else other

    @invariant()
    def books_agree_and_never_cross(self) -> None:
        self.twin.check_books()

    def teardown(self) -> None:
        self.twin.check_end()


EngineAgainstReference.TestCase.settings = settings(
    max_examples=200, stateful_step_count=50, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
test_engine_matches_the_reference = EngineAgainstReference.TestCase


@settings(max_examples=100, deadline=None)
@given(command_lists)
def test_replaying_the_same_commands_gives_the_same_state(cmds: list[Command]) -> None:
    one, two = Engine(SYMBOLS), Engine(SYMBOLS)
    for seq, command in enumerate(cmds, 1):
        assert one.apply(seq, seq * 10, command) == two.apply(seq, seq * 10, command)
    assert state_hash(one) == state_hash(two)


def check_quiet_replay(cmds: list[Command], keep_after: int, symbols: tuple[str, ...] = SYMBOLS,
                       hash_every: int = 1) -> list[Outcome]:
    """Replaying without answers must change the books, orders, open-order tables, counters, stamps
    and idempotency table exactly as applying with them (compared every `hash_every` commands), keep
    the trades asked for, and know after every command each book's last change (the command that
    listed it, traded in it or changed one of its levels)."""
    answering, quiet = Engine(symbols), Engine(symbols)
    outcomes = []
    changed: dict[str, int] = {}
    with quiet.replaying(keep_trades_after=keep_after, keep_closed_after_seq=keep_after) as kept:
        for seq, command in enumerate(cmds, 1):
            outcome = answering.apply(seq, seq * 10, command)
            outcomes.append(outcome)
            if type(command) is AddSymbol and outcome.error is None:
                changed[command.symbol] = seq
            for symbol in {t.symbol for t in outcome.trades} | {c.symbol for c in outcome.book}:
                changed[symbol] = seq
            assert quiet.apply(seq, seq * 10, command) is QUIET
            assert {s: b.seq for s, b in quiet.books.items()} == {s: changed.get(s, 0) for s in quiet.books}
            if seq % hash_every == 0:
                assert state_hash(quiet) == state_hash(answering), f"after command {seq}: {command}"
    assert state_hash(quiet) == state_hash(answering)
    in_books = {id(o) for b in quiet.books.values() for side in (b.bids, b.asks)
                for level in side.levels.values() for o in level.live_orders()}
    for account, open_ in quiet.open_orders.items():  # the orders themselves, which later fills change
        assert all(id(order) in in_books and order.order_id == i for i, order in open_.items()), account
    assert kept == [t for o in outcomes for t in o.trades if t.trade_id > keep_after]
    # The orders closed by records after keep_after (as seq), in their final states, as the answers told.
    told = {s.order_id: msgspec.structs.replace(s, fills=[]) for o in outcomes if o.seq > keep_after
            for s in finished(o)}
    collected = [state_of(order) for order in kept.closed]
    assert len(collected) == len(told) and {s.order_id: s for s in collected} == told
    assert {s: b.seq for s, b in answering.books.items()} == {s: b.seq for s, b in quiet.books.items()}
    # Afterwards it answers again.
    assert not quiet.quiet and quiet.apply(len(cmds) + 1, 0, Cancel("nobody", 1)).seq == len(cmds) + 1
    return outcomes


@settings(max_examples=100, deadline=None)
@given(command_lists, st.integers(0, 12))
def test_a_quiet_replay_builds_the_same_state(cmds: list[Command], keep_after: int) -> None:
    check_quiet_replay(cmds, keep_after)


def test_a_long_quiet_replay_builds_the_same_state() -> None:
    cmds = random_commands(seed=11, n=6000)
    outcomes = check_quiet_replay(cmds, keep_after=500, hash_every=250)
    kinds = {type(c).__name__ for o, c in zip(outcomes, cmds) if o.trades}
    assert kinds == {"NewOrder", "Amend"}, "amends and new orders should both trade in this run"
    assert any(c.client_order_id for o, c in zip(outcomes, cmds) if o.trades and type(c) is NewOrder)
    # Trades a quiet engine must build anyway (an amend's, or for an order's first answer), at the
    # edge of what is kept: the first id kept and the last one not.
    built = [o.trades[0].trade_id for o, c in zip(outcomes, cmds)
             if o.trades and (type(c) is Amend or type(c) is NewOrder and c.client_order_id)]
    for keep_after in (built[len(built) // 2], built[len(built) // 3] - 1):
        check_quiet_replay(cmds, keep_after, hash_every=len(cmds))


def test_a_replay_that_fails_part_way_leaves_an_engine_that_answers() -> None:
    engine = Engine(SYMBOLS)
    order = NewOrder("alice", SYMBOLS[0], "buy", "limit", 100, 5)
    with pytest.raises(OSError, match="failed mid-replay"), engine.replaying():  # it lets the error through
        engine.apply(1, 10, order)
        raise OSError("the log's device failed mid-replay")
    assert not engine.quiet
    outcome = engine.apply(2, 20, NewOrder("bob", SYMBOLS[0], "sell", "limit", 100, 2))
    assert [(t.price, t.qty) for t in outcome.trades] == [(100, 2)] and outcome.result is not None
    with engine.replaying(keep_trades_after=0) as kept:  # and can replay quietly again
        assert engine.apply(3, 30, NewOrder("carol", SYMBOLS[0], "sell", "limit", 100, 1)) is QUIET
    assert [t.qty for t in kept] == [1]


# ---------------------------------------------------------------- a long seeded run


def random_commands(seed: int, n: int, spread: int = 8, window: int = 60) -> list[Command]:
    """A busy two-symbol market: prices within `spread` of the middle, cancels and amends of the
    last `window` orders, and now and then a market order big enough to sweep a side, so the books
    stay thin enough for the reference to scan."""
    rng = random.Random(seed)
    out: list[Command] = []
    issued = 0
    for _ in range(n):
        r = rng.random()
        account = rng.choice(ACCOUNTS)
        if r < 0.2 and issued:
            out.append(Cancel(account, rng.randint(max(1, issued - window), issued)))
            continue
        if r < 0.205:
            out.append(CancelAll(account, rng.choice([None, *SYMBOLS]), rng.choice([None, "buy", "sell"])))
            continue
        if r < 0.3 and issued:
            qty = rng.choice([None, rng.randint(1, 20)])
            price = rng.choice([None, None, 1000 + rng.randint(-spread, spread)])
            out.append(Amend(account, rng.randint(max(1, issued - window), issued), qty, price))
            continue
        issued += 1
        side: Side = rng.choice(["buy", "sell"])
        tifs: list[Tif] = ["gtc", "ioc", "fok"]
        tif = rng.choices(tifs, [8, 1, 1])[0]
        client_id = f"k{rng.randrange(500)}" if rng.random() < 0.05 else None
        symbol = rng.choice(SYMBOLS)
        if rng.random() < 0.05:
            qty = rng.randint(1, 30) if rng.random() < 0.8 else rng.randint(200, 1000)
            out.append(NewOrder(account, symbol, side, "market", 0, qty, tif, False, client_id))
            continue
        price = 1000 + rng.randint(-spread, spread) + (-2 if side == "buy" else 2)
        post_only = tif == "gtc" and rng.random() < 0.1
        qty = rng.randint(1, 20)
        out.append(NewOrder(account, symbol, side, "limit", price, qty, tif, post_only, client_id))
    return out


def test_100k_seeded_commands_match_the_reference() -> None:
    twin = Twin()
    for i, command in enumerate(random_commands(7, 100_000)):
        twin.step(command, check_books=i % 500 == 0)
    twin.check_end()
    replayed = Engine(SYMBOLS)
    for seq, command in enumerate(random_commands(7, 100_000), 1):
        replayed.apply(seq, 1000 + seq, command)
    assert state_hash(replayed) == state_hash(twin.driver.engine)


def churn_commands(seed: int, n: int) -> list[Command]:
    """Deep books that churn: most orders at one busy price per side, the rest spread wide, and
    most orders cancelled again soon by their owner, so levels collect cancelled entries and the
    price heaps collect levels that have gone (both of which the engine cleans up lazily)."""
    rng = random.Random(seed)
    out: list[Command] = []
    owners: list[str] = []  # every order here is valid, so order id i belongs to owners[i - 1]
    for _ in range(n):
        r = rng.random()
        if r < 0.45 and owners:
            order_id = rng.randint(max(1, len(owners) - 12), len(owners))
            out.append(Cancel(owners[order_id - 1], order_id))
            continue
        account = rng.choice(ACCOUNTS)
        owners.append(account)
        side: Side = rng.choice(["buy", "sell"])
        if r < 0.453:
            out.append(NewOrder(account, "ACME", side, "market", 0, rng.randint(100, 300), "ioc"))
            continue
        sign = -1 if side == "buy" else 1
        offset = 20 if rng.random() < 0.6 else rng.randint(1, 400)
        out.append(NewOrder(account, "ACME", side, "limit", 1000 + sign * offset, rng.randint(1, 9)))
    return out


def test_churning_deep_books_match_the_reference() -> None:
    twin = Twin()
    for i, command in enumerate(churn_commands(11, 20_000)):
        twin.step(command, check_books=i % 100 == 0)
    twin.check_end()


def test_many_levels_that_come_and_go_match_the_reference() -> None:
    # Hundreds of levels emptied behind a live best price leave the heap mostly stale; the next new
    # level makes the engine rebuild it. Matching must not notice.
    twin = Twin()
    sides: list[tuple[Side, Side, int]] = [("sell", "buy", 1), ("buy", "sell", -1)]
    for side, other, sign in sides:
        for round_ in range(3):
            far = [twin.step(NewOrder("a", "ACME", side, "limit", 1000 + sign * (i + 2 + round_), 1))
                   for i in range(300)]
            twin.step(NewOrder("b", "ACME", side, "limit", 1000 + sign, 1))
            for out in far:
                twin.step(Cancel("a", out.result.order_id))  # type: ignore[union-attr]
            for i in range(5):
                twin.step(NewOrder("c", "ACME", side, "limit", 1000 + sign * (400 + i), 2))
            twin.step(NewOrder("x", "ACME", other, "market", 0, 7))
    twin.check_end()
