"""`GET /openapi.json`: an OpenAPI 3.1 description of every HTTP endpoint (kept true by tests)."""

from __future__ import annotations

import re
from typing import Any

from tickflow.core.types import MAX_PRICE, MAX_QTY, MAX_QUOTE_LEVELS
from tickflow.net.wire.limits import MAX_BARS, MAX_BATCH, MAX_ORDERS_PAGE, SYMBOL_PATTERN

INT = {"type": "integer"}
NULLABLE_INT = {"type": ["integer", "null"]}
SIDE = {"type": "string", "enum": ["buy", "sell"]}


def _ecma(pattern: re.Pattern[str]) -> str:
    """A Python `\\A...\\Z` pattern as JSON Schema writes it (ECMA-262, where `$` is the very end)."""
    assert pattern.pattern.startswith("\\A") and pattern.pattern.endswith("\\Z")
    return f"^{pattern.pattern[2:-2]}$"


SYMBOL = {"type": "string", "pattern": _ecma(SYMBOL_PATTERN),
          "description": "1-16 of A-Z 0-9 . _ -, starting with a letter or digit; one the server lists in /symbols"}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(props: dict[str, Any], required: list[str] | None = None, extra: bool = False) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


def _json(schema: dict[str, Any], about: str) -> dict[str, Any]:
    return {"description": about, "content": {"application/json": {"schema": schema}}}


def _errors(*codes: int) -> dict[str, Any]:
    about = {400: "bad input", 401: "no or unknown token", 404: "unknown order or symbol",
             408: "the body did not finish arriving in time (the connection is closed)",
             409: "not open any more, or clientOrderId reused", 413: "body too large (or once decoded)",
             415: "a Content-Encoding other than identity, gzip or deflate",
             503: "shutting down, the log failed, or a wait for durability (or for SQLite) timed out"}
    return {str(c): _json(_ref("Error"), about[c]) for c in codes}


LIQUIDITY = {"type": "string", "enum": ["maker", "taker"]}
FILL = _obj({"tradeId": INT, "price": INT, "qty": INT, "liquidity": LIQUIDITY})
ORDER = _obj({
    "orderId": INT, "clientOrderId": {"type": ["string", "null"]}, "account": {"type": "string"},
    "symbol": {"type": "string"}, "side": SIDE, "type": {"type": "string", "enum": ["limit", "market"]},
    "price": INT, "qty": INT, "tif": {"type": "string", "enum": ["gtc", "ioc", "fok"]},
    "postOnly": {"type": "boolean"},
    "status": {"type": "string", "enum": ["new", "partially_filled", "filled", "cancelled", "rejected"]},
    "filledQty": INT, "remainingQty": INT, "fills": {"type": "array", "items": _ref("Fill")},
    "reason": {"type": ["string", "null"]}, "seq": INT, "ts": INT,
})
ORDER_RULES = [
    {"anyOf": [  # a limit order (the default) has a price; a market order has none and cannot be post-only
        {"properties": {"type": {"const": "limit"}, "price": INT}, "required": ["price"]},
        {"properties": {"type": {"const": "market"}, "price": {"type": "null"}, "postOnly": {"const": False}},
         "required": ["type"]},
    ]},
    {"anyOf": [  # post-only needs tif gtc
        {"properties": {"postOnly": {"const": False}}},
        {"properties": {"tif": {"const": "gtc"}}},
    ]},
]
ORDER_REQUEST = {**_obj({
    "symbol": SYMBOL, "side": SIDE,
    "type": {"type": "string", "enum": ["limit", "market"], "default": "limit"},
    "price": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_PRICE},
    "qty": {"type": "integer", "minimum": 1, "maximum": MAX_QTY},
    "tif": {"type": "string", "enum": ["gtc", "ioc", "fok"], "default": "gtc"},
    "postOnly": {"type": "boolean", "default": False},
    "clientOrderId": {"type": "string", "minLength": 1, "maxLength": 64, "pattern": "^[A-Za-z0-9._:-]+$"},
}, required=["symbol", "side", "qty"]), "allOf": ORDER_RULES}
# null means "leave it as it is", so at least one of the two must be a number.
AMEND_RULE = [{"required": [name], "properties": {name: INT}} for name in ("qty", "price")]
AMEND_REQUEST = {**_obj({
    "qty": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_QTY},
    "price": {"type": ["integer", "null"], "minimum": 1, "maximum": MAX_PRICE},
}, required=[]), "anyOf": AMEND_RULE}
OP_KINDS = ("order", "cancel", "amend", "cancelAll")
BATCH_OP = {"type": "object", "required": ["op"], "properties": {"op": {"type": "string", "enum": list(OP_KINDS)}},
            "description": "An order operation exactly as it is sent alone over the WebSocket (docs/protocol.md), "
                           "without an id: order (the fields of OrderRequest), cancel (orderId), amend (orderId, "
                           "qty and/or price), cancelAll (symbol and side, both optional)"}
BATCH_REQUEST = _obj({"ops": {"type": "array", "items": _ref("BatchOp"), "minItems": 1, "maxItems": MAX_BATCH}})
BATCH_RESULT = _obj({"status": INT, "body": {"description": "what the op alone would have answered: an Order, a "
                                                           "cancel-all's {orders, seq}, or an Error"}})
BATCH_ANSWER = _obj({"results": {"type": "array", "items": _ref("BatchResult")}})
QUOTE_LEVELS = {"type": "array", "maxItems": MAX_QUOTE_LEVELS,
                "items": {"type": "array", "minItems": 2, "maxItems": 2, "prefixItems": [
                    {"type": "integer", "minimum": 1, "maximum": MAX_PRICE},
                    {"type": "integer", "minimum": 1, "maximum": MAX_QTY}]}}
QUOTE_REQUEST = _obj({"bids": QUOTE_LEVELS, "asks": QUOTE_LEVELS})
QUOTE_ANSWER = _obj({"symbol": {"type": "string"}, "seq": INT, "orders": {"type": "array", "items": _ref("Order")}})
ERROR = _obj({"error": {"type": "string"}, "field": {"type": "string"}, "code": {"type": "string"},
              "order": _ref("Order"), "original": _ref("Order")}, required=["error"])
LEVEL = _obj({"price": INT, "qty": INT, "orders": INT})
BOOK = _obj({"symbol": {"type": "string"}, "seq": INT, "bids": {"type": "array", "items": _ref("Level")},
             "asks": {"type": "array", "items": _ref("Level")}})
TRADE = _obj({"tradeId": INT, "symbol": {"type": "string"}, "price": INT, "qty": INT, "buyOrderId": INT,
              "sellOrderId": INT, "aggressor": SIDE, "seq": INT, "ts": INT})
ACCOUNT_FILL = _obj({"tradeId": INT, "symbol": {"type": "string"}, "orderId": INT, "side": SIDE, "price": INT,
                     "qty": INT, "liquidity": LIQUIDITY, "seq": INT, "ts": INT})
BAR = _obj({"t": INT, "open": INT, "high": INT, "low": INT, "close": INT, "volume": INT,
            "vwap": {"type": "number"}})
SYMBOL_INFO = _obj({"symbol": {"type": "string"}, "bestBid": NULLABLE_INT, "bestAsk": NULLABLE_INT,
                    "last": NULLABLE_INT})
HEALTH = _obj({"status": {"type": "string", "enum": ["ok", "degraded", "failed"]}, "seq": INT,
               "logStarted": NULLABLE_INT,
               "durability": {"type": "string", "enum": ["none", "group", "order"]},
               "symbols": {"type": "array", "items": {"type": "string"}},
               "accounts": {"type": "string", "enum": ["open", "tokens"]}, "uptimeSeconds": {"type": "number"},
               "error": {"type": "string"}, "warning": {"type": "string"},
               "recovery": _obj({"snapshotSeq": INT, "replayedRecords": INT, "seconds": {"type": "number"}})},
              required=["status", "seq", "logStarted", "durability", "accounts"])

AUTH: list[dict[str, list[str]]] = [{"bearer": []}]
ORDER_ID = {"name": "orderId", "in": "path", "required": True, "schema": {"type": "integer", "minimum": 1}}


def _query(name: str, schema: dict[str, Any], required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "schema": schema}


TRADE_PAGE = [
    _query("symbol", SYMBOL),
    _query("after", {"type": "integer", "minimum": 0, "maximum": 1 << 62, "default": 0}),
    _query("before", {"type": "integer", "minimum": 1, "maximum": 1 << 62, "default": 1 << 62}),
    _query("order", {"type": "string", "enum": ["asc", "desc"], "default": "asc"}),
    _query("limit", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100}),
]
"""The paging parameters of /trades and /fills."""


OPENAPI: dict[str, Any] = {
    "openapi": "3.1.0",
    "info": {"title": "tickflow", "version": "0.1.0",
             "description": "An order book that survives kill -9. See docs/protocol.md for the WebSocket."},
    "components": {
        "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        "schemas": {"Order": ORDER, "Fill": FILL, "OrderRequest": ORDER_REQUEST, "AmendRequest": AMEND_REQUEST,
                    "Error": ERROR, "Level": LEVEL, "Book": BOOK, "Trade": TRADE, "AccountFill": ACCOUNT_FILL,
                    "Bar": BAR, "Symbol": SYMBOL_INFO, "Health": HEALTH, "BatchOp": BATCH_OP,
                    "BatchRequest": BATCH_REQUEST, "BatchResult": BATCH_RESULT, "BatchAnswer": BATCH_ANSWER,
                    "QuoteRequest": QUOTE_REQUEST, "QuoteAnswer": QUOTE_ANSWER},
    },
    "paths": {
        "/orders": {
            "post": {
                "summary": "Place an order (idempotent with clientOrderId)", "security": AUTH,
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("OrderRequest")}}},
                "responses": {"200": _json(_ref("Order"), "the order as the command left it"),
                              **_errors(400, 401, 408, 409, 413, 415, 503)},
            },
            "get": {
                "summary": "The caller's open orders, oldest first (only those in a symbol and/or on a side): at "
                           f"most `limit` ({MAX_ORDERS_PAGE} by default) with ids above `after`; the next page "
                           "is after the last id of a full one",
                "security": AUTH,
                "parameters": [_query("status", {"type": "string", "enum": ["open"], "default": "open"}),
                               _query("symbol", SYMBOL), _query("side", {"type": "string", "enum": ["buy", "sell"]}),
                               _query("after", {"type": "integer", "minimum": 0, "maximum": 1 << 62, "default": 0}),
                               _query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_ORDERS_PAGE,
                                                "default": MAX_ORDERS_PAGE})],
                "responses": {"200": _json(_obj({"orders": {"type": "array", "items": _ref("Order")}}), "open orders"),
                              **_errors(400, 401, 503)},
            },
            "delete": {
                "summary": "Cancel all the caller's open orders, or those in a symbol and/or on a side, at once",
                "security": AUTH,
                "parameters": [_query("symbol", SYMBOL), _query("side", {"type": "string", "enum": ["buy", "sell"]})],
                "responses": {"200": _json(_obj({"orders": {"type": "array", "items": _ref("Order")},
                                                 "seq": {"type": "integer", "minimum": 1}}),
                                           "the orders it cancelled, oldest first"),
                              **_errors(400, 401, 503)},
            },
        },
        "/orders/{orderId}": {
            "parameters": [ORDER_ID],
            "get": {"summary": "An order's current state", "security": AUTH,
                    "responses": {"200": _json(_ref("Order"), "the order"), **_errors(401, 404, 503)}},
            "delete": {"summary": "Cancel an order", "security": AUTH,
                       "responses": {"200": _json(_ref("Order"), "the cancelled order"),
                                     **_errors(401, 404, 409, 503)}},
            "patch": {
                "summary": "Amend an order's quantity and/or price", "security": AUTH,
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("AmendRequest")}}},
                "responses": {"200": _json(_ref("Order"), "the amended order"),
                              **_errors(400, 401, 404, 408, 409, 413, 415, 503)},
            },
        },
        "/batch": {
            "post": {
                "summary": f"Up to {MAX_BATCH} order operations, sequenced one after another with nothing between "
                           "them; each answered in its place as it would be alone (not all-or-nothing)",
                "security": AUTH,
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("BatchRequest")}}},
                "responses": {"200": _json(_ref("BatchAnswer"), "one result per op, in order"),
                              **_errors(400, 401, 408, 413, 415, 503)},
            }
        },
        "/quotes/{symbol}": {
            "put": {
                "summary": "Replace the caller's quote in the symbol (one logged command): a level whose price "
                           "stays and whose open qty does not grow keeps its order and queue place; the rest are "
                           "cancelled and placed anew; an empty side pulls that side",
                "security": AUTH,
                "parameters": [{"name": "symbol", "in": "path", "required": True, "schema": SYMBOL}],
                "requestBody": {"required": True, "content": {"application/json": {"schema": _ref("QuoteRequest")}}},
                "responses": {"200": _json(_ref("QuoteAnswer"), "every quote order it touched or kept"),
                              **_errors(400, 401, 408, 413, 415, 503)},
            }
        },
        "/book/{symbol}": {
            "get": {
                "summary": "Price levels, best first",
                "parameters": [{"name": "symbol", "in": "path", "required": True, "schema": SYMBOL},
                               _query("depth", {"type": "integer", "minimum": 1, "maximum": 1000, "default": 20})],
                "responses": {"200": _json(_ref("Book"), "the book"), **_errors(400, 404)},
            }
        },
        "/trades": {
            "get": {
                "summary": "Trades with after < tradeId < before, oldest first (order=desc: the newest first)",
                "parameters": TRADE_PAGE,
                "responses": {"200": _json({"type": "array", "items": _ref("Trade")}, "trades"), **_errors(400, 503)},
            }
        },
        "/fills": {
            "get": {
                "summary": "The caller's side of its trades with after < tradeId < before, oldest first "
                           "(order=desc: the newest first): its order, side, and maker or taker",
                "security": AUTH,
                "parameters": TRADE_PAGE,
                "responses": {"200": _json({"type": "array", "items": _ref("AccountFill")}, "the caller's fills"),
                              **_errors(400, 401, 503)},
            }
        },
        "/bars": {
            "get": {
                "summary": "OHLC and VWAP bars computed in SQL over the trades with from <= ts < to "
                           f"(and tradeId < before); a range of more than {MAX_BARS} bars of the interval is "
                           "refused (400)",
                "parameters": [_query("symbol", SYMBOL, True),
                               _query("interval", {"type": "string", "enum": ["1m", "5m", "15m", "1h"],
                                                   "default": "1m"}),
                               _query("from", {"type": "integer", "minimum": 0, "maximum": 1 << 50}),
                               _query("to", {"type": "integer", "minimum": 0, "maximum": 1 << 50}),
                               _query("before", {"type": "integer", "minimum": 1, "maximum": 1 << 62})],
                "responses": {"200": _json({"type": "array", "items": _ref("Bar")}, "bars"), **_errors(400, 503)},
            }
        },
        "/symbols": {"get": {"summary": "Symbols with best bid, best ask and last price", "responses": {
            "200": _json(_obj({"symbols": {"type": "array", "items": _ref("Symbol")}}), "symbols")}}},
        "/health": {"get": {"summary": "Ready and healthy?", "responses": {
            "200": _json(_ref("Health"), "serving"), "503": _json(_ref("Health"), "the log device failed")}}},
        "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {
            "200": {"description": "Prometheus text format", "content": {"text/plain": {"schema": {"type": "string"}}}}}}},
        "/openapi.json": {"get": {"summary": "This document", "responses": {
            "200": _json({"type": "object"}, "OpenAPI 3.1")}}},
    },
}
