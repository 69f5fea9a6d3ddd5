"""The HTTP API against a real server process: happy paths, bad input, accounts, restarts."""

from __future__ import annotations

import asyncio
import gzip
import json
import logging
import zlib
from typing import Any

import aiohttp
import pytest
from aiohttp.http_exceptions import HttpProcessingError

from server_process import ServerProcess
from tickflow.net.server import MalformedHttpFilter


def auth(account: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {account}"}


async def call(session: aiohttp.ClientSession, method: str, url: str, account: str | None = None,
               **kw: Any) -> tuple[int, Any]:
    headers = auth(account) if account else {}
    async with session.request(method, url, headers=headers, **kw) as r:
        body = await r.json(content_type=None) if r.content_type == "application/json" else await r.text()
        return r.status, body


def order(symbol: str = "ACME", side: str = "buy", price: int | None = 100, qty: int = 10, **kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"symbol": symbol, "side": side, "qty": qty, **kw}
    if price is not None:
        body["price"] = price
    return body


async def test_orders_trade_and_show_up_everywhere(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        st, rest = await call(s, "POST", f"{u}/orders", "alice", json=order(side="sell", price=101, qty=5))
        assert st == 200 and rest["status"] == "new" and rest["remainingQty"] == 5 and rest["account"] == "alice"
        st, take = await call(s, "POST", f"{u}/orders", "bob", json=order(side="buy", price=105, qty=8))
        assert st == 200
        assert take["status"] == "partially_filled" and take["filledQty"] == 5
        assert take["fills"] == [{"tradeId": 1, "price": 101, "qty": 5, "liquidity": "taker"}]

        st, book = await call(s, "GET", f"{u}/book/ACME")
        assert st == 200 and book["bids"] == [{"price": 105, "qty": 3, "orders": 1}] and book["asks"] == []
        assert book["seq"] == take["seq"]

        st, mine = await call(s, "GET", f"{u}/orders/{rest['orderId']}", "alice")
        assert st == 200 and mine["status"] == "filled" and mine["fills"] == []
        st, opened = await call(s, "GET", f"{u}/orders?status=open", "bob")
        assert [o["orderId"] for o in opened["orders"]] == [take["orderId"]]

        trades: list[Any] = []
        for _ in range(100):  # trades reach SQLite a moment after their batch is durable
            st, trades = await call(s, "GET", f"{u}/trades?symbol=ACME")
            if trades:
                break
        assert trades == [{"tradeId": 1, "symbol": "ACME", "price": 101, "qty": 5, "buyOrderId": take["orderId"],
                           "sellOrderId": rest["orderId"], "aggressor": "buy", "seq": take["seq"],
                           "ts": take["ts"]}]
        assert (await call(s, "GET", f"{u}/trades?symbol=ACME&order=desc&limit=1"))[1] == trades  # the newest
        assert (await call(s, "GET", f"{u}/trades?order=desc&before=1"))[1] == []  # nothing before the first
        st, bars = await call(s, "GET", f"{u}/bars?symbol=ACME&interval=1m")
        assert st == 200 and len(bars) == 1
        assert bars[0]["open"] == bars[0]["close"] == 101 and bars[0]["volume"] == 5 and bars[0]["vwap"] == 101

        st, symbols = await call(s, "GET", f"{u}/symbols")
        acme = next(x for x in symbols["symbols"] if x["symbol"] == "ACME")
        assert acme == {"symbol": "ACME", "bestBid": 105, "bestAsk": None, "last": 101}

        st, cancelled = await call(s, "DELETE", f"{u}/orders/{take['orderId']}", "bob")
        assert st == 200 and cancelled["status"] == "cancelled" and cancelled["remainingQty"] == 3
        st, again = await call(s, "DELETE", f"{u}/orders/{take['orderId']}", "bob")
        assert st == 409 and again["order"]["status"] == "cancelled"
        st, book = await call(s, "GET", f"{u}/book/ACME")
        assert book["bids"] == [] and book["asks"] == []


def bars_of(trades: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Minute bars over `trades` (oldest first), as the server computes them."""
    buckets: dict[int, list[dict[str, Any]]] = {}
    for t in trades:
        buckets.setdefault(t["ts"] - t["ts"] % 60_000, []).append(t)
    return [{"t": b, "open": ts[0]["price"], "high": max(t["price"] for t in ts), "low": min(t["price"] for t in ts),
             "close": ts[-1]["price"], "volume": sum(t["qty"] for t in ts),
             "vwap": pytest.approx(sum(t["price"] * t["qty"] for t in ts) / sum(t["qty"] for t in ts))}
            for b, ts in sorted(buckets.items())]


async def test_bars_cut_by_trade_id_hold_exactly_the_trades_below_it(server: ServerProcess) -> None:
    """One market order sweeping 100 levels makes 100 trades in one millisecond; `before` cuts between
    them (a client holding only the newest of them asks for the bars up to the one it holds)."""
    u = server.url
    async with aiohttp.ClientSession() as s:
        rests = [order(side="sell", price=1000 + i, qty=i % 4 + 1) for i in range(100)]
        rested = await asyncio.gather(*(call(s, "POST", f"{u}/orders", "mm", json=r) for r in rests))
        assert {st for st, _ in rested} == {200}
        total = sum(r["qty"] for r in rests)
        st, sweep = await call(s, "POST", f"{u}/orders", "bob", json=order(price=None, qty=total, type="market"))
        assert st == 200 and sweep["status"] == "filled" and len(sweep["fills"]) == 100
        st, trades = await call(s, "GET", f"{u}/trades?symbol=ACME&limit=1000")
        assert st == 200 and [t["tradeId"] for t in trades] == [f["tradeId"] for f in sweep["fills"]]
        assert {t["ts"] for t in trades} == {sweep["ts"]}
        first = trades[0]["tradeId"]
        window = f"{u}/bars?symbol=ACME&from={sweep['ts'] - 60_000}&to={sweep['ts'] + 1}"
        for cut in (first, first + 1, first + 37, first + 99, first + 100, 1 << 62):
            st, bars = await call(s, "GET", f"{window}&before={cut}")
            want = bars_of([t for t in trades if t["tradeId"] < cut])
            assert st == 200 and bars == want, cut
        assert (await call(s, "GET", window))[1] == bars_of(trades)  # no cut: every trade in the window
        # A cut by time alone cannot split the millisecond: all of it or none.
        assert (await call(s, "GET", f"{u}/bars?symbol=ACME&to={sweep['ts']}&before={first + 50}"))[1] == []

        for text in ("", "0", "-1", "x", "1.5", "+5", "%205", str((1 << 62) + 1), "9" * 20):
            st, err = await call(s, "GET", f"{window}&before={text}")
            assert st == 400 and err["field"] == "before", text


async def test_amend_keeps_or_loses_priority(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        _, first = await call(s, "POST", f"{u}/orders", "alice", json=order(side="sell", price=110, qty=10))
        _, second = await call(s, "POST", f"{u}/orders", "carol", json=order(side="sell", price=110, qty=10))
        st, reduced = await call(s, "PATCH", f"{u}/orders/{first['orderId']}", "alice", json={"qty": 4})
        assert st == 200 and reduced["qty"] == 4 and reduced["remainingQty"] == 4
        _, hit = await call(s, "POST", f"{u}/orders", "bob", json=order(side="buy", price=110, qty=4))
        assert [f["qty"] for f in hit["fills"]] == [4]
        _, first_now = await call(s, "GET", f"{u}/orders/{first['orderId']}", "alice")
        assert first_now["status"] == "filled"  # still first in the queue after reducing
        st, moved = await call(s, "PATCH", f"{u}/orders/{second['orderId']}", "carol", json={"price": 99})
        assert st == 200 and moved["price"] == 99
        st, bad = await call(s, "PATCH", f"{u}/orders/{second['orderId']}", "carol", json={})
        assert st == 400
        st, bad = await call(s, "PATCH", f"{u}/orders/{second['orderId']}", "carol", json={"qty": -1})
        assert st == 400 and bad["field"] == "qty"


async def test_accounts_cannot_see_or_touch_each_others_orders(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        _, mine = await call(s, "POST", f"{u}/orders", "alice", json=order(side="buy", price=90))
        oid = mine["orderId"]
        unknown = await call(s, "GET", f"{u}/orders/999999", "mallory")
        for method, kw in (("GET", {}), ("DELETE", {}), ("PATCH", {"json": {"qty": 1}})):
            st, body = await call(s, method, f"{u}/orders/{oid}", "mallory", **kw)
            assert (st, body) == unknown, method  # exactly like an unknown order
        st, opened = await call(s, "GET", f"{u}/orders", "mallory")
        assert opened == {"orders": []}
        for method, path in (("POST", "/orders"), ("GET", "/orders"), ("DELETE", f"/orders/{oid}")):
            st, body = await call(s, method, u + path, None, json=order())
            assert st == 401 and "token" in body["error"]
        _, still = await call(s, "GET", f"{u}/orders/{oid}", "alice")
        assert still["status"] == "new"


async def test_cancels_and_amends_sure_to_be_refused_never_reach_the_log(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        _, mine = await call(s, "POST", f"{u}/orders", "alice", json=order(side="buy", price=90))
        oid = mine["orderId"]
        st, cancelled = await call(s, "DELETE", f"{u}/orders/{oid}", "alice")
        assert st == 200 and cancelled["status"] == "cancelled"
        _, before = await call(s, "GET", f"{u}/health")
        for _ in range(3):
            st, body = await call(s, "DELETE", f"{u}/orders/{oid}", "alice")
            assert st == 409 and body["code"] == "not_open" and body["order"] == cancelled
            st, body = await call(s, "PATCH", f"{u}/orders/{oid}", "alice", json={"qty": 1})
            assert st == 409 and body["order"] == cancelled
            st, body = await call(s, "DELETE", f"{u}/orders/{oid}", "mallory")
            assert st == 404 and body["code"] == "unknown_order"
            # Ids never given out answer as another account's do, and as fast: no record either.
            for never in (oid + 1000, (1 << 62) - 1):
                st, body = await call(s, "DELETE", f"{u}/orders/{never}", "mallory")
                assert st == 404 and body["code"] == "unknown_order"
                st, body = await call(s, "PATCH", f"{u}/orders/{never}", "mallory", json={"qty": 1})
                assert st == 404 and body["code"] == "unknown_order"
        _, after = await call(s, "GET", f"{u}/health")
        assert after["seq"] == before["seq"]  # a flood of them does not grow the log


async def test_client_order_id_is_idempotent_and_refuses_different_fields(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        body = order(side="buy", price=95, qty=7, clientOrderId="alice-1")
        st, first = await call(s, "POST", f"{u}/orders", "alice", json=body)
        st2, again = await call(s, "POST", f"{u}/orders", "alice", json=body)
        assert st == st2 == 200 and again == first
        st, conflict = await call(s, "POST", f"{u}/orders", "alice", json={**body, "qty": 8})
        assert st == 409 and conflict["field"] == "clientOrderId" and conflict["original"] == first
        # Another account may use the same clientOrderId: it is unique per account.
        st, other = await call(s, "POST", f"{u}/orders", "bob", json=body)
        assert st == 200 and other["orderId"] != first["orderId"]
        _, book = await call(s, "GET", f"{u}/book/ACME")
        assert book["bids"] == [{"price": 95, "qty": 14, "orders": 2}]


BAD_BODIES: list[tuple[Any, str | None]] = [
    ({"symbol": "ACME", "side": "buy", "price": 100}, "qty"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 0}, "qty"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": -5}, "qty"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 10**12}, "qty"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1.5}, "qty"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": "10"}, "qty"),
    ({"symbol": "ACME", "side": "buy", "price": 0, "qty": 1}, "price"),
    ({"symbol": "ACME", "side": "buy", "price": 10**30, "qty": 1}, "price"),
    ({"symbol": "ACME", "side": "buy", "qty": 1}, "price"),
    ({"symbol": "ACME", "side": "buy", "type": "market", "price": 5, "qty": 1}, "price"),
    ({"symbol": "ACME", "side": "hold", "price": 100, "qty": 1}, "side"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "tif": "day"}, "tif"),
    ({"symbol": "NOPE", "side": "buy", "price": 100, "qty": 1}, "symbol"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "clientOrderId": "x" * 65}, "clientOrderId"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "clientOrderId": "a b"}, "clientOrderId"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "clientOrderId": "abc\n"}, "clientOrderId"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "postOnly": True, "tif": "ioc"}, "postOnly"),
    ({"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "surprise": 1}, "surprise"),
    ([1, 2, 3], None),
    ("just a string", None),
]


@pytest.mark.parametrize("body,field", BAD_BODIES)
async def test_bad_orders_get_a_clear_400_and_never_reach_the_log(server: ServerProcess, body: Any,
                                                                   field: str | None) -> None:
    async with aiohttp.ClientSession() as s:
        _, before = await call(s, "GET", f"{server.url}/health")
        st, err = await call(s, "POST", f"{server.url}/orders", "alice", json=body)
        assert st == 400, err
        assert isinstance(err["error"], str) and err["error"]
        assert err.get("field") == field
        _, after = await call(s, "GET", f"{server.url}/health")
        assert after["seq"] == before["seq"]  # nothing was logged


@pytest.mark.parametrize("body", [
    {"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "k" * 5000: 1},  # an unknown field's name
    {"symbol": "ACME", "side": "k" * 5000, "price": 100, "qty": 1},  # a value outside an enum
    {"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "tif": "k" * 5000},
    {"symbol": "k" * 5000, "side": "buy", "price": 100, "qty": 1},
])
async def test_an_error_never_echoes_more_than_40_characters_of_the_input(server: ServerProcess, body: Any) -> None:
    async with aiohttp.ClientSession() as s:
        st, err = await call(s, "POST", f"{server.url}/orders", "alice", json=body)
    assert st == 400
    assert "k" * 41 not in err["error"] and "k" * 41 not in (err.get("field") or ""), err
    assert "kkk" in err["error"] + (err.get("field") or "")  # but enough to recognise it


async def test_malformed_and_oversized_bodies(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        st, err = await call(s, "POST", f"{u}/orders", "alice", data=b"{not json")
        assert st == 400 and err["error"].startswith("malformed JSON")
        async with s.post(f"{u}/orders", data=b'{"symbol": "ACME",', headers=auth("alice")) as r:
            assert r.status == 400 and "malformed JSON" in (await r.json())["error"]
        async with s.post(f"{u}/orders", data=b"x" * (200 * 1024), headers=auth("alice")) as r:
            assert r.status == 413 and "error" in await r.json()
        # msgspec's own words would be "Number out of range - at `$[...]`" and "Input data was truncated".
        st, err = await call(s, "POST", f"{u}/orders", "alice",
                             data=b'{"symbol": "ACME", "side": "buy", "price": 100, "qty": 1e400}')
        assert st == 400 and err == {"error": "malformed JSON: `qty`: number out of range (1e400)", "field": "qty"}
        st, err = await call(s, "POST", f"{u}/orders", "alice",
                             data=b'{"symbol": "ACME", "side": "buy", "price": 100, "qty": 1, "clientOrderId": "a\\ud800"}')
        assert st == 400 and err["field"] == "clientOrderId", err
        assert err["error"] == "malformed JSON: `clientOrderId`: a lone UTF-16 surrogate escape (\\ud800) is not a character"
        for path in ("/orders/abc", "/orders/-1", "/orders/0"):
            st, err = await call(s, "GET", u + path, "alice")
            assert st == 404 and "error" in err
        for query in ("depth=0", "depth=x", "depth=100000"):
            st, err = await call(s, "GET", f"{u}/book/ACME?{query}")
            assert st == 400 and err["field"] == "depth"
        st, err = await call(s, "GET", f"{u}/book/NOPE")
        assert st == 404
        st, err = await call(s, "GET", f"{u}/bars?symbol=ACME&interval=7m")
        assert st == 400 and err["field"] == "interval"
        st, err = await call(s, "GET", f"{u}/trades?limit=5000")
        assert st == 400 and err["field"] == "limit"
        st, err = await call(s, "GET", f"{u}/no/such/route")
        assert st == 404 and "error" in err
        st, health = await call(s, "GET", f"{u}/health")
        assert st == 200 and health["status"] == "ok" and health["accounts"] == "open"


async def test_input_that_only_looks_valid_is_refused(server: ServerProcess) -> None:
    """Deep nesting, numbers int() would take but a client never writes, a newline before the end."""
    u = server.url
    async with aiohttp.ClientSession() as s:
        st, placed = await call(s, "POST", f"{u}/orders", "alice", json=order())
        assert st == 200
        oid = placed["orderId"]
        _, before = await call(s, "GET", f"{u}/health")
        for body in (b"[" * 5000 + b"]" * 5000, b'{"symbol":' * 3000):
            for method, path in (("POST", "/orders"), ("PATCH", f"/orders/{oid}")):
                st, err = await call(s, method, u + path, "alice", data=body)
                assert st == 400 and err["error"].startswith("malformed JSON"), (method, err)
        assert (await call(s, "GET", f"{u}/orders/{oid}", "alice"))[0] == 200
        for text in (f"+{oid}", f"%20{oid}", f"{oid}%20", "%D9%A1", f"0{oid}_0", f"{oid}.0"):
            st, err = await call(s, "GET", f"{u}/orders/{text}", "alice")
            assert st == 404 and err["field"] == "orderId", text
        for query in ("depth=%D9%A1", "depth=1_0", "depth=+5", "depth=%205", "depth=5.0", "depth="):
            st, err = await call(s, "GET", f"{u}/book/ACME?{query}")
            assert st == 400 and err["field"] == "depth", query
        for path, name in (("/trades?after=", "after"), ("/trades?limit=", "limit"),
                           ("/bars?symbol=ACME&from=", "from"), ("/bars?symbol=ACME&to=", "to")):
            st, err = await call(s, "GET", u + path)  # an empty number is no number, not the default
            assert st == 400 and err["field"] == name, path
        st, err = await call(s, "GET", f"{u}/trades?after=-1")
        assert st == 400 and err["field"] == "after"
        for query, name in (("order=newest", "order"), ("order=", "order"), ("before=0", "before"),
                            ("before=", "before"), ("before=x", "before")):
            st, err = await call(s, "GET", f"{u}/trades?{query}")
            assert st == 400 and err["field"] == name, query
        st, err = await call(s, "GET", f"{u}/bars")
        assert st == 400 and err == {"error": "symbol is required", "field": "symbol"}
        _, after = await call(s, "GET", f"{u}/health")
        assert after["seq"] == before["seq"]


async def test_what_the_description_allows_is_taken(server: ServerProcess) -> None:
    """5.0 is the integer 5 in JSON (and in /openapi.json); `from` at or after `to` is an empty range."""
    u = server.url
    async with aiohttp.ClientSession() as s:
        body = {"symbol": "ACME", "side": "buy", "price": 100.0, "qty": 5e0}
        st, placed = await call(s, "POST", f"{u}/orders", "alice", json=body)
        assert st == 200 and (placed["price"], placed["qty"]) == (100, 5)
        st, amended = await call(s, "PATCH", f"{u}/orders/{placed['orderId']}", "alice", json={"qty": 4.0})
        assert st == 200 and amended["qty"] == 4
        assert await call(s, "GET", f"{u}/bars?symbol=ACME&from=5000&to=5000") == (200, [])


async def test_bodies_and_paths_the_server_cannot_read_are_refused_without_a_traceback(server: ServerProcess) -> None:
    u = server.url
    body = b'{"symbol":"ACME","side":"buy","price":7,"qty":1}'
    head = b"POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice\r\n"
    async with aiohttp.ClientSession() as s:
        _, before = await call(s, "GET", f"{u}/health")
        for encoding in (b"gzip", b"deflate"):  # says compressed, is not
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head + b"Connection: close\r\nContent-Encoding: %s\r\nContent-Length: %d\r\n\r\n%s"
                         % (encoding, len(body), body))
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer.startswith(b"HTTP/1.1 400 ") and b"application/json" in answer, answer
            assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["error"].startswith("cannot read the body")
        for cut_short in (b"Content-Length: %d\r\n\r\n%s" % (len(body) + 5, body),  # then the client leaves
                          b"Transfer-Encoding: chunked\r\n\r\n5\r\n{\"sym\r\n"):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(head + cut_short)
            await writer.drain()
            await asyncio.sleep(0.1)
            writer.close()
        for path in ("/a%00b", "/" + "a" * 300, "/%2e%2e/%2e%2e/etc/passwd"):
            async with s.get(u + path) as r:
                assert r.status == 404 and "error" in await r.json(), path
        st, err = await call(s, "DELETE", f"{u}/orders/{'9' * 5000}", "alice")
        assert st == 404 and len(err["error"]) < 100, "the answer does not echo a large input back"
        _, after = await call(s, "GET", f"{u}/health")
        assert after["seq"] == before["seq"]
    assert "Traceback" not in server.output() and "ERROR" not in server.output()


async def _post_raw(port: int, body: bytes, *headers: bytes) -> tuple[int, dict[str, str], Any]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice\r\nConnection: close\r\n"
                 + b"".join(h + b"\r\n" for h in headers) + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    head, _, payload = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    fields = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), fields, json.loads(payload)


async def test_a_body_is_taken_only_in_a_content_encoding_it_is_really_in(server: ServerProcess) -> None:
    """gzip and deflate bodies are decoded; a coding the server does not apply (or several) is refused
    with 415, never run as if the body were plain; a bomb is refused once past the size limit."""
    plain = b'{"symbol":"ACME","side":"buy","price":7,"qty":1}'
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    for coding, body in ((b"gzip", gzip.compress(plain)), (b"x-gzip", gzip.compress(plain)),
                         (b"deflate", zlib.compress(plain)), (b"Deflate", raw_deflate.compress(plain) + raw_deflate.flush()),
                         (b"identity", plain)):
        status, _, answer = await _post_raw(server.port, body, b"Content-Encoding: " + coding)
        assert (status, answer["price"], answer["status"]) == (200, 7, "new"), coding
    async with aiohttp.ClientSession() as s:
        _, before = await call(s, "GET", f"{server.url}/health")
    for coding in (b"gzip, gzip", b"x-bogus", b"br", b"zstd", b"compress"):
        status, headers, answer = await _post_raw(server.port, plain, b"Content-Encoding: " + coding)
        assert status == 415 and answer["error"].startswith("Content-Encoding") and "gzip" in headers["Accept-Encoding"]
    status, _, answer = await _post_raw(server.port, gzip.compress(gzip.compress(plain)), b"Content-Encoding: gzip, gzip")
    assert status == 415
    status, _, answer = await _post_raw(server.port, gzip.compress(plain)[:-6], b"Content-Encoding: gzip")  # cut short
    assert status == 400 and answer["error"] == "cannot read the body: it is not the gzip its Content-Encoding says"
    status, _, answer = await _post_raw(server.port, gzip.compress(plain) + b"junk", b"Content-Encoding: gzip")
    assert status == 400
    bomb = gzip.compress(b'{"symbol":"ACME","side":"buy","price":7,"qty":1,"clientOrderId":"' + b"a" * 50_000_000 + b'"}')
    assert len(bomb) < 65_536
    status, _, answer = await _post_raw(server.port, bomb, b"Content-Encoding: gzip")
    assert status == 413 and "once decoded" in answer["error"]
    async with aiohttp.ClientSession() as s:
        _, after = await call(s, "GET", f"{server.url}/health")
        assert after["seq"] == before["seq"], "a refused body reached the log"
        async with s.get(f"{server.url}/health", headers={"Content-Encoding": "br"}) as r:
            assert r.status == 200  # a body-less request is not refused for the header
    assert "Traceback" not in server.output() and "WARNING" not in server.output()


async def test_requests_that_are_not_http_are_logged_a_few_at_a_time(tmp_path: Any) -> None:
    """Any client can send garbage; the log names it, but a flood of it cannot flood the log."""
    server = ServerProcess(tmp_path / "data").start()
    try:
        for i in range(40):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -%d\r\n\r\n" % i)
            answer = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            assert answer.startswith(b"HTTP/1.") and b" 400 " in answer.split(b"\r\n", 1)[0]
        async with aiohttp.ClientSession() as s:
            assert (await call(s, "GET", f"{server.url}/health"))[0] == 200
        warnings = [line for line in server.output().splitlines() if "WARNING" in line]
        assert len(warnings) == 10 and all("Content-Length" in line for line in warnings), warnings
        assert warnings[-1].endswith("(the next such requests within 60 s are not logged)")
    finally:
        server.kill()


def test_the_first_line_after_a_quiet_spell_says_how_many_were_left_out() -> None:
    now = [0.0]
    quiet = MalformedHttpFilter(burst=2, window=10, clock=lambda: now[0])

    def record() -> logging.LogRecord:
        error = HttpProcessingError(message="bad")
        return logging.LogRecord("aiohttp.server", logging.ERROR, "", 0, "Error handling request", (), (type(error), error, None))

    kept = [r.getMessage() for r in (record() for _ in range(5)) if quiet.filter(r)]
    assert kept == ["Error handling request: bad", "Error handling request: bad (the next such requests within 10 s are not logged)"]
    now[0] = 10.0
    (again,) = [r for r in (record(),) if quiet.filter(r)]
    assert again.getMessage() == "Error handling request: bad (3 more such requests were not logged)"
    assert again.levelname == "WARNING" and again.exc_info is None


async def test_error_messages_quote_at_most_40_characters_whatever_the_quotes(server: ServerProcess) -> None:
    long = "x" * 30_000
    async with aiohttp.ClientSession() as s:
        for body in (order(side="'" + long), order(side="`" + long), order(side='"' + long),
                     {**order(), "'" + long: 1}, {**order(), "`" + long: 1}, {**order(), "a`b" + long: 1}):
            status, answer = await call(s, "POST", f"{server.url}/orders", "alice", json=body)
            assert status == 400 and len(answer["error"]) < 120 and len(answer.get("field") or "") <= 40, answer
            assert answer["field"] in ("side", "'" + long[:36] + "...", "`" + long[:36] + "...", "a`b" + long[:34] + "...")
        status, answer = await call(s, "POST", f"{server.url}/orders", "alice", json={**order(), "a`b": 1})
        assert (status, answer["field"]) == (400, "a`b")


async def test_a_body_that_never_finishes_arriving_gets_a_408_and_the_connection_closes(tmp_path: Any) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--body-timeout", "0.5"]).start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(b"POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer alice\r\n"
                     b"Content-Length: 60\r\n\r\n{\"symbol\": \"ACME\"")  # and then nothing
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 10)  # read() returns: the server closed it
        writer.close()
        assert answer.startswith(b"HTTP/1.1 408 "), answer
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1]) == {"error": "the body did not arrive within 0.5 s"}
        async with aiohttp.ClientSession() as s:
            st, placed = await call(s, "POST", f"{server.url}/orders", "alice", json=order())
            assert st == 200 and placed["status"] == "new"
        assert "Traceback" not in server.output()
    finally:
        server.kill()


async def test_an_idle_connection_is_closed_after_the_idle_timeout_but_a_websocket_is_not(tmp_path: Any) -> None:
    server = ServerProcess(tmp_path / "data", extra=["--idle-timeout", "0.5"]).start()
    try:
        async with aiohttp.ClientSession() as s, s.ws_connect(f"{server.ws_url}?token=alice") as ws:
            silent_reader, silent = await asyncio.open_connection("127.0.0.1", server.port)  # never sends a byte
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")  # one request, then silence
            assert await asyncio.wait_for(silent_reader.read(), 10) == b""  # read() returns: closed
            answer = await asyncio.wait_for(reader.read(), 10)
            assert answer.startswith(b"HTTP/1.1 200 "), answer
            silent.close()
            writer.close()
            # Slow headers (slowloris): a line every 0.2 s keeps the socket busy but never finishes a
            # request, and the idle timeout still closes it, counted from the connection's start.
            slow_reader, slow = await asyncio.open_connection("127.0.0.1", server.port)
            slow.write(b"POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            started = asyncio.get_running_loop().time()
            closed = False
            while not closed and asyncio.get_running_loop().time() - started < 10:
                await asyncio.sleep(0.2)
                try:
                    slow.write(b"X-Slow: 1\r\n")
                    await slow.drain()
                    closed = await asyncio.wait_for(slow_reader.read(1), 0.01) == b""
                except asyncio.TimeoutError:
                    pass
                except ConnectionError:
                    closed = True
            assert closed, "a request whose headers never end was not cut off"
            slow.close()
            # The WebSocket idles three timeouts long (and more): two more silent connections, opened one
            # after the other, are each closed by the idle timeout while it is left alone.
            for _ in range(2):
                quiet_reader, quiet = await asyncio.open_connection("127.0.0.1", server.port)
                assert await asyncio.wait_for(quiet_reader.read(), 10) == b""
                quiet.close()
            await ws.send_json({"op": "subscribe", "symbols": ["ACME"]})
            assert (await ws.receive_json(timeout=10))["type"] in ("auth", "snapshot")
            assert not ws.closed
    finally:
        server.kill()


async def test_a_wrong_method_says_which_are_allowed_and_an_unknown_route_is_404(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        async with s.put(f"{server.url}/orders/1", headers=auth("alice")) as r:
            assert r.status == 405 and r.content_type == "application/json" and "error" in await r.json()
            assert set(r.headers["Allow"].split(",")) >= {"GET", "DELETE", "PATCH"}
        for method, path in (("POST", "/health"), ("DELETE", "/book/ACME"), ("POST", "/index.html")):
            async with s.request(method, server.url + path, headers=auth("alice")) as r:
                assert r.status == 405 and r.headers["Allow"] == "GET,HEAD", (method, path)
        for method, path in (("POST", "/no/such/route"), ("DELETE", "/orders/"), ("PATCH", "/orders/1/x")):
            async with s.request(method, server.url + path, headers=auth("alice")) as r:
                assert r.status == 404 and "error" in await r.json(), (method, path)
        async with s.get(f"{server.url}/ws") as r:  # not a WebSocket upgrade: say what is missing
            error = (await r.json())["error"]
            assert r.status == 400 and error.startswith("No WebSocket UPGRADE hdr") and "\n" not in error


async def test_requests_that_are_not_http_get_a_400_and_no_traceback(server: ServerProcess) -> None:
    requests = [b"FOO /orders HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                b"GET /" + b"a" * 9000 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
                b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"b" * 9000 + b"\r\n\r\n",
                b"POST /orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: abc\r\n\r\n"]
    for raw in requests:
        reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
        writer.write(raw)
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), 10)
        assert status_line.split()[1] == b"400", (raw[:40], status_line)
        writer.close()
    async with aiohttp.ClientSession() as s:
        assert (await call(s, "GET", f"{server.url}/health"))[0] == 200
    assert "Traceback" not in server.output()


async def test_market_ioc_fok_and_post_only_through_http(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        await call(s, "POST", f"{u}/orders", "maker", json=order(side="sell", price=100, qty=5))
        st, fok = await call(s, "POST", f"{u}/orders", "taker", json=order(side="buy", price=100, qty=6, tif="fok"))
        assert st == 200 and fok["status"] == "cancelled" and fok["reason"] == "fok_not_filled" and fok["fills"] == []
        st, post = await call(s, "POST", f"{u}/orders", "taker", json=order(side="buy", price=100, qty=1, postOnly=True))
        assert post["status"] == "rejected" and post["reason"] == "post_only_would_take"
        st, mkt = await call(s, "POST", f"{u}/orders", "taker", json=order(side="buy", price=None, qty=8, type="market"))
        assert mkt["status"] == "cancelled" and mkt["filledQty"] == 5 and mkt["reason"] == "no_liquidity"
        assert mkt["tif"] == "ioc"


async def test_metrics_and_health(server: ServerProcess) -> None:
    async with aiohttp.ClientSession() as s:
        await call(s, "POST", f"{server.url}/orders", "alice", json=order())
        st, text = await call(s, "GET", f"{server.url}/metrics")
        assert st == 200
        for name in ("tickflow_queue_depth", "tickflow_batch_size_bucket", "tickflow_fsync_seconds_bucket",
                     "tickflow_orders_total 1", "tickflow_trades_total 0", "tickflow_websocket_clients"):
            assert name in text
        st, health = await call(s, "GET", f"{server.url}/health")
        assert health["durability"] == "group" and health["symbols"] == ["ACME", "GLOBEX"]


@pytest.mark.parametrize("kill", [False, True], ids=["sigterm", "sigkill"])
async def test_everything_survives_a_restart(server: ServerProcess, kill: bool) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        sent = []
        for i in range(20):
            body = order(side="buy" if i % 2 else "sell", price=100 + (i % 5) - 2, qty=3 + i, clientOrderId=f"c{i}")
            _, result = await call(s, "POST", f"{u}/orders", f"acct{i % 3}", json=body)
            sent.append((f"acct{i % 3}", body, result))
        _, book = await call(s, "GET", f"{u}/book/ACME")
        # (Reads of trades, bars and fills wait until the trade store holds every durable trade.)
        _, trades = await call(s, "GET", f"{u}/trades?limit=1000")
        _, bars = await call(s, "GET", f"{u}/bars?symbol=ACME")
        _, open0 = await call(s, "GET", f"{u}/orders", "acct0")
        fills = {a: (await call(s, "GET", f"{u}/fills?limit=1000", a))[1] for a in ("acct0", "acct1", "acct2")}
        # The last command touches another book: each book's seq is its own last update's, after a restart too.
        _, last = await call(s, "POST", f"{u}/orders", "acct9", json=order(symbol="GLOBEX", price=70))
        _, globex = await call(s, "GET", f"{u}/book/GLOBEX")
        _, book = await call(s, "GET", f"{u}/book/ACME")
        assert book["seq"] < globex["seq"]
    assert trades, "the workload should trade"
    server.restart(kill=kill)
    assert "replayed" in server.output()
    async with aiohttp.ClientSession() as s:
        assert (await call(s, "GET", f"{u}/book/ACME"))[1] == book
        assert (await call(s, "GET", f"{u}/book/GLOBEX"))[1] == globex
        assert (await call(s, "GET", f"{u}/trades?limit=1000"))[1] == trades
        assert (await call(s, "GET", f"{u}/bars?symbol=ACME"))[1] == bars
        assert (await call(s, "GET", f"{u}/orders", "acct0"))[1] == open0
        for account, theirs in fills.items():
            assert (await call(s, "GET", f"{u}/fills?limit=1000", account))[1] == theirs
        for account, body, result in sent:
            st, again = await call(s, "POST", f"{u}/orders", account, json=body)
            assert st == 200 and again == result
        _, new = await call(s, "POST", f"{u}/orders", "acct9", json=order(price=50))
        assert new["orderId"] == last["orderId"] + 1


async def test_fills_are_each_accounts_side_of_its_trades(server: ServerProcess) -> None:
    u = server.url
    async with aiohttp.ClientSession() as s:
        _, maker = await call(s, "POST", f"{u}/orders", "mia", json=order(side="sell", price=101, qty=10))
        _, other = await call(s, "POST", f"{u}/orders", "mia", json=order(symbol="GLOBEX", side="sell", price=7, qty=1))
        _, taker = await call(s, "POST", f"{u}/orders", "tom", json=order(side="buy", price=101, qty=4))
        _, again = await call(s, "POST", f"{u}/orders", "tom", json=order(symbol="GLOBEX", side="buy", price=7, qty=1))
        status, mias = await call(s, "GET", f"{u}/fills", "mia")
        assert status == 200
        assert [(f["orderId"], f["symbol"], f["side"], f["qty"], f["liquidity"]) for f in mias] == [
            (maker["orderId"], "ACME", "sell", 4, "maker"), (other["orderId"], "GLOBEX", "sell", 1, "maker")]
        status, toms = await call(s, "GET", f"{u}/fills?symbol=ACME", "tom")
        assert status == 200 and len(toms) == 1
        assert toms[0] == {"tradeId": taker["fills"][0]["tradeId"], "symbol": "ACME", "orderId": taker["orderId"],
                           "side": "buy", "price": 101, "qty": 4, "liquidity": "taker", "seq": taker["seq"],
                           "ts": taker["ts"]}
        _, newest = await call(s, "GET", f"{u}/fills?order=desc&limit=1", "tom")
        assert [f["orderId"] for f in newest] == [again["orderId"]]
        assert (await call(s, "GET", f"{u}/fills", "nobody"))[1] == []
        for query, field in (("symbol=NOPE", "symbol"), ("limit=0", "limit"), ("order=up", "order"), ("after=-1", "after")):
            status, body = await call(s, "GET", f"{u}/fills?{query}", "tom")
            assert status == 400 and body["field"] == field, query
        assert (await call(s, "GET", f"{u}/fills"))[0] == 401


async def test_a_second_server_on_the_same_data_refuses(server: ServerProcess, tmp_path: Any) -> None:
    other = ServerProcess(server.data)
    with pytest.raises(RuntimeError, match="another tickflow server"):
        other.start(timeout=15)
