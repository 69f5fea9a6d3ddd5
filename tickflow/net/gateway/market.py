"""Public reads and the server's own state: books, trades, bars, symbols, the caller's fills, health,
metrics and the OpenAPI description."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from tickflow.net.gateway import inputs
from tickflow.net.gateway.context import GATEWAY
from tickflow.net.gateway.metrics import render_metrics
from tickflow.net.gateway.responses import json_response
from tickflow.net.wire.errors import BadRequest, brief
from tickflow.net.wire.limits import INTERVALS, MAX_BARS
from tickflow.net.wire.openapi import OPENAPI


def _symbol(request: web.Request, name: str | None) -> str:
    if not name:
        raise BadRequest("symbol is required", "symbol")
    if name not in request.app[GATEWAY].service.book_symbols:
        raise BadRequest(f"unknown symbol {brief(name)}", "symbol", 404 if "symbol" in request.match_info else 400)
    return name


async def get_book(request: web.Request) -> web.Response:
    symbol = _symbol(request, request.match_info["symbol"])
    inputs.only_params(request, "GET /book/{symbol}", ("depth",))
    depth = inputs.int_param(request, "depth", 20, 1, 1000)
    return json_response(request.app[GATEWAY].service.book(symbol, depth))


@dataclass
class TradePage:
    """The paging parameters /trades and /fills share."""

    symbol: str | None
    after: int
    before: int
    limit: int
    newest_first: bool


TRADE_PAGE = ("symbol", "after", "before", "order", "limit")


def trade_page(request: web.Request) -> TradePage:
    inputs.only_params(request, f"GET {request.path}", TRADE_PAGE)
    symbol = request.query.get("symbol")
    if symbol is not None:
        _symbol(request, symbol)
    after = inputs.int_param(request, "after", 0, 0, 1 << 62)
    before = inputs.int_param(request, "before", 1 << 62, 1, 1 << 62)
    limit = inputs.int_param(request, "limit", 100, 1, 1000)
    order = request.query.get("order", "asc")
    if order not in ("asc", "desc"):
        raise BadRequest(f"order must be asc or desc, not {brief(order)}", "order")
    return TradePage(symbol, after, before, limit, order == "desc")


async def get_trades(request: web.Request) -> web.Response:
    page = trade_page(request)
    service = request.app[GATEWAY].service
    return json_response(await service.trades(page.symbol, page.after, page.limit, page.before, page.newest_first))


async def get_fills(request: web.Request) -> web.Response:
    """The caller's side of its trades: the paging of /trades, plus its order, side and maker or taker."""
    account = inputs.account(request)
    page = trade_page(request)
    service = request.app[GATEWAY].service
    return json_response(await service.fills(account, page.symbol, page.after, page.limit, page.before,
                                             page.newest_first))


async def get_bars(request: web.Request) -> web.Response:
    inputs.only_params(request, "GET /bars", ("symbol", "interval", "from", "to", "before"))
    symbol = _symbol(request, request.query.get("symbol"))
    interval = request.query.get("interval", "1m")
    if interval not in INTERVALS:
        raise BadRequest(f"interval must be one of {', '.join(INTERVALS)}", "interval")
    now = int(time.time() * 1000)
    to = inputs.int_param(request, "to", now + 1, 0, 1 << 50)
    start = inputs.int_param(request, "from", to - 3_600_000, 0, 1 << 50)
    # A trade id, as in /trades: many trades can share the millisecond `to` would cut at.
    before = inputs.int_param(request, "before", 1 << 62, 1, 1 << 62) if "before" in request.query else None
    if start >= to:  # an empty range has no bars (OpenAPI cannot say from < to, so this is no error)
        return json_response([])
    iv = INTERVALS[interval]
    spans = (to - 1) // iv - start // iv + 1
    if spans > MAX_BARS:  # each bar is a row of the answer and a group in SQLite's pass: bounded
        raise BadRequest(f"from..to spans {spans} bars of {interval}: at most {MAX_BARS} a request; ask for a "
                         "shorter range, or a longer interval", "from")
    return json_response(await request.app[GATEWAY].service.bars(symbol, INTERVALS[interval], start, to, before))


async def get_symbols(request: web.Request) -> web.Response:
    return json_response({"symbols": request.app[GATEWAY].service.summaries()})


async def get_health(request: web.Request) -> web.Response:
    gateway = request.app[GATEWAY]
    service = gateway.service
    body: dict[str, Any] = {
        "status": "ok" if not service.failed else "failed",
        "seq": service.durable_seq,
        # Names the exchange: the same across restarts, another for a fresh data directory. Only
        # once durable: a first record lost in a crash is written again with another time.
        "logStarted": service.log_started,
        "durability": service.durability.value,
        "symbols": sorted(service.book_symbols),
        "accounts": "open" if gateway.accounts.open else "tokens",
        "uptimeSeconds": round(time.time() - gateway.started, 3),
        **({"warning": gateway.warning} if gateway.warning else {}),
        "recovery": service.recovery,
    }
    if service.failed:
        body["error"] = service.failed
        return json_response(body, 503)
    if service.trade_store_error:  # orders still flow; /trades and /bars wait for SQLite to take trades again
        body["status"] = "degraded"
        body["error"] = service.trade_store_error
    return json_response(body)


async def get_metrics(request: web.Request) -> web.Response:
    return web.Response(text=render_metrics(request.app[GATEWAY]), content_type="text/plain",
                        charset="utf-8", headers={"X-Content-Type-Options": "nosniff"})


async def get_openapi(request: web.Request) -> web.Response:
    return json_response(OPENAPI)
