"""Issue 27, item 4: an account's order rate (`serve --max-order-rate`). Over it, a request is answered 429
with Retry-After before anything is queued; cancels are never limited; other accounts are not slowed."""

from __future__ import annotations

import json
import re
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
    """One order a second per account: a second order sent right after the first is over the rate, however
    slow the machine (a refusal costs nothing, and each request takes milliseconds, not a second)."""
    server = ServerProcess(tmp_path / "data", extra=["--max-order-rate", "1"]).start()
    yield server
    server.stop()


async def test_over_the_rate_is_429_with_retry_after_and_nothing_is_logged(limited: ServerProcess) -> None:
    u = limited.url
    order = {"symbol": "ACME", "side": "buy", "price": 90, "qty": 1}
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{u}/health") as r:
            before = (await r.json())["seq"]
        status, placed, _ = await call(s, "POST", f"{u}/orders", "alice", order)
        assert status == 200
        status, body, headers = await call(s, "POST", f"{u}/orders", "alice", order)
        assert status == 429 and body["code"] == "rate_limited" and 0 < body["retryAfter"] <= 1
        assert headers["Retry-After"] == "1"
        status, body, _ = await call(s, "PATCH", f"{u}/orders/{placed['orderId']}", "alice", {"qty": 2})
        assert status == 429
        status, body, _ = await call(s, "PUT", f"{u}/quotes/ACME", "alice", {"bids": [[80, 1]], "asks": []})
        assert status == 429
        # Cancels are never limited: alice takes her order out while over her rate.
        status, _, _ = await call(s, "DELETE", f"{u}/orders/{placed['orderId']}", "alice")
        assert status == 200
        status, _, _ = await call(s, "DELETE", f"{u}/orders", "alice")
        assert status == 200
        status, _, _ = await call(s, "POST", f"{u}/orders", "bob", order)  # bob has his own rate
        assert status == 200
        status, body, _ = await call(s, "POST", f"{u}/batch", "carol", {"ops": [{"op": "order", **order}] * 2})
        assert status == 429 and "at once" in body["error"]
        async with s.get(f"{u}/health") as r:
            after = (await r.json())["seq"]
        assert after == before + 3  # alice's order and its cancel, bob's order: nothing refused was logged
        async with s.get(f"{u}/metrics") as r:
            assert re.search(r"^tickflow_rate_limited_total [4-9]", await r.text(), re.M)


async def test_a_websocket_over_the_rate_gets_429_results(limited: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        ws = await s.ws_connect(limited.ws_url + "?token=dave")
        await ws.receive()
        for i in range(2):
            await ws.send_json({"op": "order", "id": i, "symbol": "ACME", "side": "sell", "price": 200, "qty": 1})
        statuses: dict[int, int] = {}
        while len(statuses) < 2:
            msg = json.loads((await ws.receive(timeout=30)).data)
            if msg.get("type") == "result":
                statuses[msg["id"]] = msg["status"]
                if msg["status"] == 429:
                    assert msg["body"]["code"] == "rate_limited"
        assert statuses == {0: 200, 1: 429}
        await ws.send_json({"op": "batch", "id": "b", "ops": [{"op": "cancelAll"}]})  # not rated
        while (msg := json.loads((await ws.receive(timeout=30)).data)).get("id") != "b":
            pass
        assert msg["type"] == "results" and msg["results"][0]["status"] == 200
        await ws.close()
