"""Issue 27, item 4: the open-order limit per account (`serve --max-open-orders`), a rule the engine enforces
from a logged Rules record, so a replay applies the limit that was in force whatever the flags it runs with."""

from __future__ import annotations

from pathlib import Path

import aiohttp
from reference_book import Driver

from server_process import ServerProcess
from tickflow.core.snapshot import capture, restore, state_hash
from tickflow.core.types import Quote, Rules


def test_a_limit_order_that_could_rest_past_the_limit_is_rejected_and_nothing_else_is() -> None:
    d = Driver()
    d.apply(Rules(2))
    assert [d.new("a", "buy", 90 + i, 1).result.status for i in range(2)] == ["new", "new"]  # type: ignore[union-attr]
    third = d.new("a", "buy", 80, 1).result
    assert third is not None and (third.status, third.reason) == ("rejected", "too_many_open_orders")
    assert d.new("a", "buy", 0, 1).result.reason == "bad_price"  # type: ignore[union-attr]  # its terms come first
    assert d.new("b", "buy", 80, 1).result.status == "new"  # type: ignore[union-attr]  # another account
    d.new("c", "sell", 200, 1)
    assert d.market("a", "buy", 1).result.status == "filled"  # type: ignore[union-attr]  # never rests: allowed
    assert d.new("a", "sell", 200, 1, tif="ioc").result.reason == "ioc_remainder_cancelled"  # type: ignore[union-attr]
    assert d.cancel("a", 1).error is None
    assert d.new("a", "buy", 80, 1).result.status == "new"  # type: ignore[union-attr]  # room again
    d.apply(Rules(0))
    assert d.new("a", "buy", 70, 1).result.status == "new"  # type: ignore[union-attr]


def test_a_quote_past_the_limit_is_refused_whole_and_one_within_it_is_taken() -> None:
    d = Driver()
    d.apply(Rules(3))
    d.new("mm", "buy", 50, 1)  # an ordinary order counts too
    assert d.quote("mm", [(99, 1)], [(101, 1)]).error is None
    out = d.quote("mm", [(99, 1), (98, 1)], [(101, 1)])  # one more level: four open
    assert (out.error, out.quoted) == ("too_many_open_orders", None)
    assert d.depth() == ([(99, 1, 1), (50, 1, 1)], [(101, 1, 1)])
    out = d.quote("mm", [(98, 1)], [(101, 1)])  # 99 replaced by 98: still three
    assert out.error is None and d.depth() == ([(98, 1, 1), (50, 1, 1)], [(101, 1, 1)])


def test_the_limit_is_part_of_the_state_a_snapshot_keeps() -> None:
    d = Driver()
    d.apply(Rules(1))
    d.new("a", "buy", 90, 1)
    engine = restore(capture(d.engine))
    assert engine.max_open_orders == 1 and state_hash(engine) == state_hash(d.engine)
    out = engine.apply(d.seq + 1, 9_000, Quote("a", "ACME", [(80, 1)], []))
    assert out.error == "too_many_open_orders"


async def test_the_server_logs_the_limit_and_a_replay_keeps_what_was_in_force(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--max-open-orders", "2"]).start()
    try:
        async with aiohttp.ClientSession() as s:
            async def post(price: int) -> dict[str, object]:
                async with s.post(f"{server.url}/orders", headers={"Authorization": "Bearer alice"},
                                  json={"symbol": "ACME", "side": "buy", "price": price, "qty": 1}) as r:
                    assert r.status == 200
                    return await r.json()

            async def health() -> int:
                async with s.get(f"{server.url}/health") as r:
                    return int((await r.json())["seq"])

            assert [(await post(p))["status"] for p in (90, 91, 92)] == ["new", "new", "rejected"]
            rejected = await post(93)
            assert rejected["reason"] == "too_many_open_orders"
            seq = await health()
            server.extra = ["--max-open-orders", "2"]
            server.restart(kill=True)  # the same limit: nothing new is logged
            assert await health() == seq
            server.extra = ["--max-open-orders", "5"]
            server.restart(kill=False)  # a new limit is one more record, and applies from there
            assert await health() == seq + 1
            async with s.get(f"{server.url}/orders/{rejected['orderId']}",
                             headers={"Authorization": "Bearer alice"}) as r:
                assert (await r.json())["reason"] == "too_many_open_orders"  # replayed under the old limit
            assert (await post(94))["status"] == "new"
    finally:
        server.stop()


def test_a_limit_price_outside_the_band_around_the_last_trade_is_refused() -> None:
    d = Driver()
    d.apply(Rules(0, 500))  # 5%
    assert d.new("a", "buy", 50, 1).result.status == "new"  # type: ignore[union-attr]  # no trade yet: no band
    d.new("s", "sell", 100, 2)
    d.new("b", "buy", 100, 1)  # the last trade: 100
    outside = d.new("a", "buy", 94, 1).result
    assert outside is not None and (outside.status, outside.reason) == ("rejected", "outside_price_band")
    assert d.new("a", "buy", 95, 1).result.status == "new"  # type: ignore[union-attr]  # at the edge
    assert d.market("a", "buy", 1).result.status == "filled"  # type: ignore[union-attr]  # market orders: no limit
    assert d.amend("a", 1, price=94).error == "outside_price_band"  # the order at 50 may not move to 94 ...
    assert d.amend("a", 1, qty=3).error is None  # ... but keeps its place and may shrink or grow where it is
    assert d.quote("q", [(99, 1)], [(106, 1)]).error == "outside_price_band"
    engine = restore(capture(d.engine))
    assert state_hash(engine) == state_hash(d.engine) and engine.books["ACME"].last == 100
