"""The client library against a real `tickflow serve` started by the tests (127.0.0.1, temp dir)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from tickflow.demo import ServerProcess
from tickflow.net.client import (
    ApiError,
    Backoff,
    BookChanged,
    Client,
    Event,
    GapDetected,
    Level,
    LocalBook,
    NotConnected,
    Order,
    OrderChanged,
    Session,
    StateChanged,
    TradesReceived,
    ws_url,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("client-server"), symbols=["ACME", "BETA", "GAMMA", "DELTA"],
                         durability="none")
    proc.start()
    yield proc
    proc.kill()


async def wait_for(predicate, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def book_levels(book: LocalBook) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    return ([(lv.price, lv.qty, lv.orders) for lv in book.bids()],
            [(lv.price, lv.qty, lv.orders) for lv in book.asks()])


# ---------------------------------------------------------------- pure parts


def test_local_book_applies_snapshot_and_updates() -> None:
    book = LocalBook("X")
    assert not book.live and book.best_bid is None and book.mid is None
    book.load(10, [Level(100, 5, 1), Level(99, 7, 2)], [Level(102, 3, 1)])
    assert book.live and book.seq == 10
    assert book.spread == 2 and book.mid == 101.0
    book.apply(11, [Level(100, 0, 0), Level(101, 4, 1)], [Level(103, 9, 2)])
    assert book.seq == 11
    assert [lv.price for lv in book.bids()] == [101, 99]
    assert [lv.price for lv in book.asks()] == [102, 103]
    assert book.bids(1) == [Level(101, 4, 1)]
    assert len(book) == 4


def test_backoff_grows_is_capped_and_jittered() -> None:
    backoff = Backoff(initial=0.1, maximum=2.0, factor=2.0, jitter=0.5, rng=random.Random(1))
    delays = [backoff.delay(n) for n in range(12)]
    for n, d in enumerate(delays):
        base = min(2.0, 0.1 * 2**n)
        assert base * 0.5 <= d <= base
    assert max(delays) <= 2.0
    assert len({round(d, 6) for d in delays[6:]}) > 1  # capped, but not in lock step


def test_ws_url() -> None:
    assert ws_url("http://127.0.0.1:8080") == "ws://127.0.0.1:8080/ws"
    assert ws_url("https://example.test/") == "wss://example.test/ws"


async def test_calls_before_connecting_raise_not_connected() -> None:
    session = Session("http://127.0.0.1:9", "alice")
    with pytest.raises(NotConnected):
        await session.place_order("ACME", "buy", 1, 100)


# ---------------------------------------------------------------- HTTP


async def test_http_order_round_trip(server: ServerProcess) -> None:
    async with Client(server.url, "alice") as http:
        health = await http.health()
        assert (health.status, health.accounts) == ("ok", "open")
        assert {s.symbol for s in await http.symbols()} >= {"ACME", "BETA"}
        placed = await http.place_order("BETA", "buy", 30, 5000, client_order_id="rt-1")
        assert placed.status == "new" and placed.is_open and placed.remaining_qty == 30
        assert (await http.get_order(placed.order_id)).order_id == placed.order_id
        assert placed.order_id in {o.order_id for o in await http.open_orders()}
        book = await http.book("BETA", depth=5)
        assert book.bids[0].price == 5000 and book.bids[0].qty >= 30
        again = await http.place_order("BETA", "buy", 30, 5000, client_order_id="rt-1")
        assert again.order_id == placed.order_id  # idempotent retry
        amended = await http.amend_order(placed.order_id, qty=20)
        assert amended.qty == 20 and amended.remaining_qty == 20
        cancelled = await http.cancel_order(placed.order_id)
        assert cancelled.status == "cancelled" and not cancelled.is_open
        with pytest.raises(ApiError) as err:
            await http.cancel_order(placed.order_id)
        assert err.value.status == 409
        assert err.value.order is not None and err.value.order.status == "cancelled"


async def test_http_errors_are_typed(server: ServerProcess) -> None:
    async with Client(server.url, "alice") as alice, Client(server.url, "bob") as bob, \
            Client(server.url) as anonymous:
        with pytest.raises(ApiError) as bad:
            await alice.place_order("BETA", "buy", 0, 100)
        assert bad.value.status == 400 and bad.value.field == "qty" and "qty" in bad.value.message
        with pytest.raises(ApiError) as unknown:
            await alice.place_order("NOPE", "buy", 1, 100)
        assert unknown.value.status == 400
        mine = await alice.place_order("BETA", "sell", 1, 900_000)
        with pytest.raises(ApiError) as other:
            await bob.cancel_order(mine.order_id)  # another account's order looks unknown
        assert other.value.status == 404
        with pytest.raises(ApiError) as anon:
            await anonymous.open_orders()
        assert anon.value.status == 401
        with pytest.raises(ApiError) as reused:
            await alice.place_order("BETA", "sell", 2, 900_000, client_order_id="dup-1")
            await alice.place_order("BETA", "sell", 3, 900_000, client_order_id="dup-1")
        assert reused.value.status == 409 and reused.value.order is not None
        await alice.cancel_order(mine.order_id)


async def test_trades_and_bars(server: ServerProcess) -> None:
    async with Client(server.url, "alice") as alice, Client(server.url, "bob") as bob:
        before = await alice.trades("GAMMA", limit=1000)
        await alice.place_order("GAMMA", "sell", 5, 700)
        taken = await bob.place_order("GAMMA", "buy", 5, 700, tif="ioc")
        assert taken.status == "filled" and taken.fills[0].price == 700
        after: list = []

        async def fetch() -> None:  # the trade store is written just after the ack: poll briefly
            after[:] = await alice.trades("GAMMA", after=before[-1].trade_id if before else 0)

        for _ in range(100):
            await fetch()
            if after:
                break
            await asyncio.sleep(0.02)
        assert after[-1].price == 700 and after[-1].aggressor == "buy"
        assert after[-1].trade_id == taken.fills[0].trade_id
        bars = await alice.bars("GAMMA")
        assert bars and bars[-1].close == 700 and bars[-1].volume >= 5


# ---------------------------------------------------------------- WebSocket


async def test_ws_order_entry_many_in_flight(server: ServerProcess) -> None:
    async with Session(server.url, "carol") as ws:
        assert ws.account == "carol"
        orders = await asyncio.gather(*(ws.place_order("BETA", "buy", 1 + i, 100 + i) for i in range(40)))
        assert [o.qty for o in orders] == [1 + i for i in range(40)]  # each answer matched to its call
        assert len({o.order_id for o in orders}) == 40
        cancels = await asyncio.gather(*(ws.cancel_order(o.order_id) for o in orders))
        assert all(c.status == "cancelled" for c in cancels)
        with pytest.raises(ApiError) as err:
            await ws.cancel_order(orders[0].order_id)
        assert err.value.status == 409
        assert await ws.ping() < 5


async def test_ws_book_follows_the_server_and_private_updates(server: ServerProcess) -> None:
    events: list[Event] = []
    async with Session(server.url, "dave", symbols=["DELTA"]) as ws, Client(server.url, "erin") as erin:
        ws.add_listener(events.append)
        await wait_for(lambda: "DELTA" in ws.books and ws.books["DELTA"].live)
        resting = await ws.place_order("DELTA", "buy", 10, 400)
        for price in (401, 402, 402, 405):
            await erin.place_order("DELTA", "sell", 3, price)
        await erin.place_order("DELTA", "sell", 4, 400)  # fills part of dave's bid
        http_book = await erin.book("DELTA", depth=100)
        await wait_for(lambda: ws.books["DELTA"].seq >= http_book.seq)
        assert book_levels(ws.books["DELTA"]) == (
            [(lv.price, lv.qty, lv.orders) for lv in http_book.bids],
            [(lv.price, lv.qty, lv.orders) for lv in http_book.asks])
        await wait_for(lambda: any(isinstance(e, OrderChanged) and e.order.order_id == resting.order_id
                                   and e.order.filled_qty == 4 for e in events))
        fill = next(e for e in events if isinstance(e, OrderChanged) and e.order.filled_qty == 4)
        assert fill.order.status == "partially_filled" and fill.order.fills[0].qty == 4
        trades = [t for e in events if isinstance(e, TradesReceived) for t in e.trades]
        assert trades[-1].price == 400 and trades[-1].aggressor == "sell"


async def test_gap_in_the_feed_resubscribes_for_a_fresh_snapshot(server: ServerProcess) -> None:
    events: list[Event] = []
    async with Session(server.url, "frank", symbols=["ACME"]) as ws, Client(server.url, "grace") as grace:
        ws.add_listener(events.append)
        await wait_for(lambda: "ACME" in ws.books and ws.books["ACME"].live)
        held = ws.books["ACME"].seq
        bogus = {"type": "update", "symbol": "ACME", "seq": held + 1000, "prevSeq": held + 999,
                 "bids": [[1, 1, 1]], "asks": [], "trades": []}
        await ws.feed(msgspec.json.encode(bogus))
        gap = next(e for e in events if isinstance(e, GapDetected))
        assert (gap.held_seq, gap.prev_seq) == (held, held + 999)
        assert not ws.books["ACME"].live and ws.gaps == 1
        await wait_for(lambda: ws.books["ACME"].live)  # the session re-subscribed; a snapshot came back
        snapshot = [e for e in events if isinstance(e, BookChanged) and e.snapshot]
        assert len(snapshot) == 2
        await grace.place_order("ACME", "buy", 2, 3)
        http_book = await grace.book("ACME", depth=1000)
        await wait_for(lambda: ws.books["ACME"].seq >= http_book.seq)
        assert [lv.price for lv in ws.books["ACME"].bids()] == [lv.price for lv in http_book.bids]


async def all_trades(client: Client, symbol: str, after: int) -> list[int]:
    ids: list[int] = []
    while page := await client.trades(symbol, after=after, limit=1000):
        ids += [t.trade_id for t in page]
        after = ids[-1]
    return ids


async def test_reconnect_backfills_missed_trades_and_orders_that_changed(server: ServerProcess) -> None:
    """More trades than one page of /trades print while the session is away, and one of them fills
    the session's own resting order: after reconnecting it has every trade once and the fill."""
    trades: list[int] = []
    states: list[str] = []
    changed: list[Order] = []

    def listen(e: Event) -> None:
        if isinstance(e, TradesReceived) and e.symbol == "GAMMA":
            trades.extend(t.trade_id for t in e.trades)
        if isinstance(e, StateChanged):
            states.append(e.state)
        if isinstance(e, OrderChanged):
            changed.append(e.order)

    backoff = Backoff(initial=1.0, maximum=1.0, jitter=0.0)
    async with Session(server.url, "hank", symbols=["GAMMA"], backoff=backoff) as ws, \
            Client(server.url, "ivan") as ivan, Client(server.url, "judy") as judy:
        ws.add_listener(listen)
        await wait_for(lambda: "GAMMA" in ws.books and ws.books["GAMMA"].live)
        await ivan.place_order("GAMMA", "sell", 1, 650)
        await judy.place_order("GAMMA", "buy", 1, 650)
        await wait_for(lambda: len(trades) >= 1)
        mine = await ws.place_order("GAMMA", "sell", 1, 650)
        for start in range(0, 1100, 100):
            await asyncio.gather(*(ivan.place_order("GAMMA", "sell", 1, 651) for _ in range(100)))
        assert ws._ws is not None
        await ws._ws.close()  # the network drops; the server carries on
        await wait_for(lambda: "reconnecting" in states)
        swept = await judy.place_order("GAMMA", "buy", 1101, 651)  # 1101 trades while away
        assert swept.filled_qty == 1101
        await wait_for(lambda: states[-1] == "connected" and ws.books["GAMMA"].live)
        gamma_ids = await all_trades(ivan, "GAMMA", trades[0] - 1)
        await wait_for(lambda: trades[-1] == gamma_ids[-1], 10)
        assert trades == gamma_ids  # nothing missed, nothing twice
        assert ws.reconnects == 1
        await wait_for(lambda: any(o.order_id == mine.order_id and o.status == "filled" for o in changed))


async def test_session_survives_kill_9(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], durability="group")
    proc.start()
    states: list[StateChanged] = []
    try:
        backoff = Backoff(initial=0.05, maximum=0.3)
        async with Session(proc.url, "kate", symbols=["ACME"], backoff=backoff) as ws:
            ws.add_listener(lambda e: states.append(e) if isinstance(e, StateChanged) else None)
            placed = await ws.place_order("ACME", "buy", 7, 1234)
            await wait_for(lambda: ws.books.get("ACME") is not None and ws.books["ACME"].live
                           and ws.books["ACME"].best_bid is not None)
            await asyncio.to_thread(proc.kill)
            await wait_for(lambda: ws.state == "reconnecting")
            with pytest.raises(NotConnected):
                await ws.place_order("ACME", "buy", 1, 1)
            await asyncio.to_thread(proc.restart)
            await ws.wait_connected(10)
            await wait_for(lambda: ws.books["ACME"].live)
            assert ws.books["ACME"].best_bid == Level(1234, 7, 1)  # the acked order survived
            again = await ws.cancel_order(placed.order_id)
            assert again.status == "cancelled"
        attempts = [s for s in states if s.state == "reconnecting" and s.delay > 0]
        assert attempts and all(s.delay <= 0.3 for s in attempts)
        # One event per attempt, each with its reason (no second, reasonless one as it starts).
        assert all(s.error for s in states if s.state == "reconnecting")
    finally:
        proc.kill()


async def test_a_refused_token_stops_the_session(tmp_path: Path) -> None:
    tokens = tmp_path / "tokens.json"
    tokens.write_text('{"tok-alice": "alice"}')
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"], extra=["--tokens", str(tokens)])
    proc.start()
    try:
        from tickflow.net.client import AuthFailed

        bad = Session(proc.url, "not-a-token")
        with pytest.raises(AuthFailed):
            await bad.start(timeout=5)
        assert bad.state == "closed"  # no endless reconnecting with a token that will never work
        await bad.close()
        async with Session(proc.url, "tok-alice") as good:
            assert good.account == "alice"
        async with Client(proc.url, "not-a-token") as http:
            with pytest.raises(ApiError) as err:
                await http.open_orders()
            assert err.value.status == 401
    finally:
        proc.kill()


async def test_events_end_when_the_session_stops_by_itself_and_start_at_the_call(tmp_path: Path) -> None:
    proc = ServerProcess(tmp_path / "data", symbols=["ACME"])
    proc.start()
    try:
        session = Session(proc.url, "mona", reconnect=False)
        events = session.events()  # registered here: nothing before the first iteration is missed
        await session.start()
        await asyncio.to_thread(proc.kill)
        async def collect() -> list[Event]:
            return [e async for e in events]

        seen = await asyncio.wait_for(collect(), 10)  # ends: the session will not reconnect
        states = [e.state for e in seen if isinstance(e, StateChanged)]
        assert states[:2] == ["connecting", "connected"] and states[-1] == "closed"
        events = session.events()
        assert await asyncio.wait_for(collect(), 5) == []  # already stopped: nothing to wait for
        await session.close()
    finally:
        proc.kill()


async def test_events_iterator_sees_the_session_from_connect_to_close(server: ServerProcess) -> None:
    session = Session(server.url, "lena", symbols=["BETA"])
    seen: list[str] = []

    async def consume() -> None:
        async for event in session.events():
            seen.append(type(event).__name__ if not isinstance(event, StateChanged) else event.state)
            if isinstance(event, BookChanged) and event.snapshot:
                await session.close()

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)  # the iterator is listening before the session starts
    await session.start()
    await asyncio.wait_for(consumer, 10)
    assert seen[:2] == ["connecting", "connected"]
    assert "BookChanged" in seen and seen[-1] == "closed"
