"""Issue 27, item 4: an account's order rate (`serve --max-order-rate`). Over it, a request is answered 429
with Retry-After before anything is queued; cancels are never limited; other accounts are not slowed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from server_process import ServerProcess
from tickflow.net.gateway.ratelimit import OrderRate
from tickflow.net.wire.errors import BadRequest


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_bucket_refills_at_the_rate_and_a_refusal_spends_nothing() -> None:
    clock = Clock()
    rate = OrderRate(10, clock)
    for _ in range(10):
        rate.take("a")
    with pytest.raises(BadRequest) as refused:
        rate.take("a")
    assert refused.value.status == 429 and refused.value.retry_after == pytest.approx(0.1)
    rate.take("b", 10)  # another account has its own
    clock.now += 0.5
    rate.take("a", 5)  # half a second: five more
    with pytest.raises(BadRequest):
        rate.take("a")
    with pytest.raises(BadRequest) as too_many:
        rate.take("a", 11)  # more than a second's worth can never be sent at once
    assert too_many.value.retry_after is None
    OrderRate(0, clock).take("a", 10**6)  # 0: no limit
    assert rate.refused == 3


async def call(s: aiohttp.ClientSession, method: str, url: str, account: str, body: Any = None
               ) -> tuple[int, Any, Any]:
    async with s.request(method, url, json=body, headers={"Authorization": f"Bearer {account}"}) as r:
        return r.status, await r.json(content_type=None), r.headers


@pytest.fixture
def limited(tmp_path: Path) -> Any:
    server = ServerProcess(tmp_path / "data", extra=["--max-order-rate", "20"]).start()
    yield server
    server.stop()


async def test_over_the_rate_is_429_with_retry_after_and_nothing_is_logged(limited: ServerProcess) -> None:
    u = limited.url
    order = {"symbol": "ACME", "side": "buy", "price": 90, "qty": 1}
    async with aiohttp.ClientSession() as s:
        statuses = []
        ids = []
        for _ in range(40):  # far faster than 20 a second
            status, body, headers = await call(s, "POST", f"{u}/orders", "alice", order)
            statuses.append(status)
            if status == 200:
                ids.append(body["orderId"])
            else:
                assert status == 429 and body["code"] == "rate_limited" and body["retryAfter"] > 0
                assert int(headers["Retry-After"]) >= 1
        assert 20 <= statuses.count(200) < 40 and statuses.count(429) > 0
        async with s.get(f"{u}/health") as r:
            seq = (await r.json())["seq"]
        assert seq == 2 + len(ids)  # the two symbols, and only the orders taken
        # Cancels are never limited: alice takes every order out while over her rate.
        for order_id in ids:
            status, _, _ = await call(s, "DELETE", f"{u}/orders/{order_id}", "alice")
            assert status == 200
        status, _, _ = await call(s, "POST", f"{u}/orders", "bob", order)  # bob has his own rate
        assert status == 200
        status, body, _ = await call(s, "PUT", f"{u}/quotes/ACME", "alice", {"bids": [[80, 1]], "asks": []})
        assert status == 429
        status, body, _ = await call(s, "POST", f"{u}/batch", "carol", {"ops": [{"op": "order", **order}] * 25})
        assert status == 429 and "at once" in body["error"]
        async with s.get(f"{u}/metrics") as r:
            assert "tickflow_rate_limited_total" in await r.text()


async def test_a_websocket_over_the_rate_gets_429_results(limited: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(limited.ws_url + "?token=dave")
        await ws.receive()
        for i in range(30):
            await ws.send_json({"op": "order", "id": i, "symbol": "ACME", "side": "sell", "price": 200, "qty": 1})
        statuses: dict[int, int] = {}
        while len(statuses) < 30:
            msg = json.loads((await ws.receive(timeout=30)).data)
            if msg.get("type") == "result":
                statuses[msg["id"]] = msg["status"]
                if msg["status"] == 429:
                    assert msg["body"]["code"] == "rate_limited"
        assert sorted(set(statuses.values())) == [200, 429]
        await ws.send_json({"op": "batch", "id": "b", "ops": [{"op": "cancelAll"}]})  # not rated
        while (msg := json.loads((await ws.receive(timeout=30)).data)).get("id") != "b":
            pass
        assert msg["type"] == "results" and msg["results"][0]["status"] == 200
        await ws.close()
