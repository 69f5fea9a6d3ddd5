"""GET /openapi.json stays true: real answers from a real server validate against it."""

from __future__ import annotations

from typing import Any

import aiohttp
import jsonschema  # type: ignore[import-untyped]  # (no types-jsonschema in the test extras)
import pytest

from server_process import ServerProcess
from tickflow.net.gateway.app import make_app


def _validator(spec: dict[str, Any], schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    # Resolve "#/components/..." references against the whole document.
    return jsonschema.Draft202012Validator({**schema, "components": spec["components"]})


async def _check(s: aiohttp.ClientSession, spec: dict[str, Any], base: str, method: str, path: str,
                 template: str, account: str | None = None, **kw: Any) -> Any:
    headers = {"Authorization": f"Bearer {account}"} if account else {}
    async with s.request(method, base + path, headers=headers, **kw) as r:
        operation = spec["paths"][template][method.lower()]
        documented = operation["responses"]
        assert str(r.status) in documented, f"{method} {path} answered {r.status}, not documented"
        content = documented[str(r.status)]["content"]
        if "application/json" in content:
            body = await r.json()
            _validator(spec, content["application/json"]["schema"]).validate(body)
            return body
        return await r.text()


async def test_real_answers_match_the_published_description(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{u}/openapi.json") as r:
            spec = await r.json()
        jsonschema.Draft202012Validator.check_schema({"components": spec["components"]})
        rest = await _check(s, spec, u, "POST", "/orders", "/orders", "alice",
                            json={"symbol": "ACME", "side": "sell", "price": 100, "qty": 5, "clientOrderId": "a1"})
        await _check(s, spec, u, "POST", "/orders", "/orders", "bob",
                     json={"symbol": "ACME", "side": "buy", "type": "market", "qty": 2})
        await _check(s, spec, u, "POST", "/orders", "/orders", "alice",
                     json={"symbol": "ACME", "side": "sell", "price": 100, "qty": 6, "clientOrderId": "a1"})
        await _check(s, spec, u, "POST", "/orders", "/orders", "alice", json={"symbol": "ACME"})
        await _check(s, spec, u, "POST", "/orders", "/orders", None, json={})
        await _check(s, spec, u, "POST", "/orders", "/orders", "alice", data=b"x" * 100_000)
        oid = rest["orderId"]
        await _check(s, spec, u, "GET", f"/orders/{oid}", "/orders/{orderId}", "alice")
        await _check(s, spec, u, "GET", f"/orders/{oid}", "/orders/{orderId}", "eve")
        await _check(s, spec, u, "GET", "/orders?status=open", "/orders", "alice")
        await _check(s, spec, u, "GET", "/orders?status=done", "/orders", "alice")
        await _check(s, spec, u, "PATCH", f"/orders/{oid}", "/orders/{orderId}", "alice", json={"qty": 4})
        await _check(s, spec, u, "PATCH", f"/orders/{oid}", "/orders/{orderId}", "alice", json={"qty": "x"})
        await _check(s, spec, u, "DELETE", f"/orders/{oid}", "/orders/{orderId}", "alice")
        await _check(s, spec, u, "DELETE", f"/orders/{oid}", "/orders/{orderId}", "alice")
        await _check(s, spec, u, "POST", "/orders", "/orders", "alice",
                     json={"symbol": "GLOBEX", "side": "buy", "price": 10, "qty": 5})
        await _check(s, spec, u, "GET", "/orders?symbol=GLOBEX&side=buy", "/orders", "alice")
        await _check(s, spec, u, "GET", "/orders?symbol=NOPE", "/orders", "alice")
        await _check(s, spec, u, "DELETE", "/orders?symbol=GLOBEX&side=buy", "/orders", "alice")
        await _check(s, spec, u, "DELETE", "/orders", "/orders", "alice")
        await _check(s, spec, u, "DELETE", "/orders?side=up", "/orders", "alice")
        await _check(s, spec, u, "DELETE", "/orders", "/orders", None)
        ops = [{"op": "order", "symbol": "ACME", "side": "buy", "price": 90, "qty": 1},
               {"op": "cancel", "orderId": 10**6}, {"op": "cancelAll", "symbol": "ACME"}]
        await _check(s, spec, u, "POST", "/batch", "/batch", "alice", json={"ops": ops})
        await _check(s, spec, u, "POST", "/batch", "/batch", "alice", json={"ops": []})
        await _check(s, spec, u, "POST", "/batch", "/batch", None, json={"ops": ops})
        await _check(s, spec, u, "PUT", "/quotes/ACME", "/quotes/{symbol}", "mm",
                     json={"bids": [[90, 2], [89, 1]], "asks": [[110, 2]]})
        await _check(s, spec, u, "PUT", "/quotes/ACME", "/quotes/{symbol}", "mm", json={"bids": [], "asks": [[110, 1]]})
        await _check(s, spec, u, "PUT", "/quotes/ACME", "/quotes/{symbol}", "mm", json={"bids": [[110, 1]], "asks": [[90, 1]]})
        await _check(s, spec, u, "GET", "/book/ACME?depth=5", "/book/{symbol}")
        await _check(s, spec, u, "GET", "/book/NOPE", "/book/{symbol}")
        await _check(s, spec, u, "GET", "/trades?symbol=ACME", "/trades")
        await _check(s, spec, u, "GET", "/trades?after=x", "/trades")
        await _check(s, spec, u, "GET", "/fills", "/fills", "alice")
        await _check(s, spec, u, "GET", "/fills?symbol=ACME&order=desc", "/fills", "bob")
        await _check(s, spec, u, "GET", "/fills?limit=0", "/fills", "bob")
        await _check(s, spec, u, "GET", "/fills", "/fills", None)
        await _check(s, spec, u, "GET", "/bars?symbol=ACME&interval=1m", "/bars")
        await _check(s, spec, u, "GET", "/bars?symbol=ACME&interval=2m", "/bars")
        await _check(s, spec, u, "GET", "/symbols", "/symbols")
        await _check(s, spec, u, "GET", "/health", "/health")
        await _check(s, spec, u, "GET", "/metrics", "/metrics")
        await _check(s, spec, u, "GET", "/openapi.json", "/openapi.json")


def test_every_route_is_described() -> None:
    """A new route without a description fails here (the WebSocket and the page are in protocol.md)."""
    from unittest.mock import MagicMock

    from tickflow.net.gateway.context import Gateway
    from tickflow.net.wire.openapi import OPENAPI

    app = make_app(MagicMock(spec=Gateway))
    routes = set()
    for route in app.router.routes():
        info = route.resource.get_info() if route.resource else {}
        path = info.get("path") or info.get("formatter") or ""
        if route.method == "HEAD" or path in ("/ws", "/{path}"):
            continue
        routes.add((route.method, path.replace("{order_id}", "{orderId}")))
    documented = {(m.upper(), p) for p, ops in OPENAPI["paths"].items() for m in ops if m != "parameters"}
    assert routes == documented


@pytest.mark.parametrize("path", ["/orders", "/orders/{orderId}", "/book/{symbol}", "/trades", "/bars", "/batch",
                                  "/quotes/{symbol}"])
def test_described_paths_have_error_answers(path: str) -> None:
    from tickflow.net.wire.openapi import OPENAPI

    for method, op in OPENAPI["paths"][path].items():
        if method == "parameters":
            continue
        assert any(code.startswith("4") for code in op["responses"]), (method, path)
