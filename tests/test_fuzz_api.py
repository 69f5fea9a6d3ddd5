"""Schemathesis fuzzes a real server against its own `GET /openapi.json`: no 5xx, and every answer as described.

Run alone with `.venv/bin/python -m pytest -q tests/test_fuzz_api.py`. Every built-in check runs, among them
not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance, and
positive_data_acceptance / negative_data_rejection (input the description allows is taken, input it forbids is
refused with a 4xx).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from hypothesis import settings
from schemathesis.config import SchemathesisConfig
from schemathesis.schemas import BaseSchema

from server_process import ServerProcess
from tickflow.net.wire.limits import INTERVALS, MAX_BARS, SYMBOL_PATTERN

TOKEN = "fuzz-token-0123456789"
ACCOUNT = "alice"
MAX_EXAMPLES = 25
SEED = 20240601


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """A server whose accounts need a real token.

    In demo mode every well-formed token names an account, so schemathesis's probe with a made-up token
    (the ignored_auth check) would be let in; with --tokens it must get 401, and that is fuzzed too."""
    root = tmp_path_factory.mktemp("fuzz")
    tokens = root / "tokens.json"
    tokens.write_text(json.dumps({TOKEN: ACCOUNT}))
    proc = ServerProcess(root / "data", extra=["--tokens", str(tokens)]).start()
    yield proc
    proc.kill()


def _config(mode: str) -> SchemathesisConfig:
    """Everything stated here, so a schemathesis.toml lying around changes nothing."""
    return SchemathesisConfig.from_dict({
        "seed": SEED,
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "generation": {"mode": mode, "max-examples": MAX_EXAMPLES, "deterministic": True},
    })


def _schema(server: ServerProcess, mode: str) -> BaseSchema:
    assert server.url.startswith("http://127.0.0.1:")
    return schemathesis.openapi.from_url(f"{server.url}/openapi.json", config=_config(mode))


@pytest.fixture
def valid_input_schema(fuzzed_server: ServerProcess) -> BaseSchema:
    return _schema(fuzzed_server, "positive")


@pytest.fixture
def invalid_input_schema(fuzzed_server: ServerProcess) -> BaseSchema:
    return _schema(fuzzed_server, "negative")


@pytest.fixture(scope="module")
def listed_symbols(fuzzed_server: ServerProcess) -> list[str]:
    answer = requests.get(f"{fuzzed_server.url}/symbols", timeout=10).json()
    return [s["symbol"] for s in answer["symbols"]]


def _name_listed_symbols(case: schemathesis.Case, listed: list[str]) -> None:
    """Swap each well-formed symbol for one this server lists.

    The description can say what a symbol looks like, not which ones a server lists: a well-formed unlisted
    symbol is refused (400 in a body or query, 404 in a path) as docs/protocol.md says. A malformed one is
    left alone, so a description that lets one through still fails here."""
    for where in (case.body, case.query, case.path_parameters):
        if not isinstance(where, dict):
            continue
        symbol = where.get("symbol")
        if isinstance(symbol, str) and SYMBOL_PATTERN.match(symbol):
            where["symbol"] = listed[len(symbol) % len(listed)]


def _within_bar_limit(case: schemathesis.Case) -> None:
    """Bring a /bars range within MAX_BARS buckets, keeping `to`.

    The description can bound `from` and `to`, not the number of bars between them: a wider range is refused
    (400, docs/protocol.md), which schemathesis would take for valid input refused."""
    query = case.query
    if case.operation.path != "/bars" or not isinstance(query, dict) or not str(query.get("from")).isdigit():
        return
    interval = INTERVALS.get(query.get("interval", "1m"))
    if interval is None:
        return
    if not str(query.get("to")).isdigit():
        query["to"] = str(int(time.time() * 1000) + 1)  # what the server would take, fixed now
    start, to = int(query["from"]), int(query["to"])
    if start < to and (to - 1) // interval - start // interval + 1 > MAX_BARS:
        query["from"] = str(((to - 1) // interval - MAX_BARS + 1) * interval)


def _quote_that_can_stand(case: schemathesis.Case) -> None:
    """Make a PUT /quotes body's levels a quote that can stand: one level per price on each side, and the
    bids below the asks. The description can bound each level, not relate them: a repeated price or a crossed
    quote is refused (400 with a `code`, docs/protocol.md), which schemathesis would take for valid input
    refused. Levels that are not pairs of numbers are left alone."""
    if case.operation.path != "/quotes/{symbol}" or not isinstance(case.body, dict):
        return
    body: dict[str, Any] = case.body
    sides: dict[str, Any] = {name: body.get(name) for name in ("bids", "asks")}
    if not all(isinstance(levels, list) and all(isinstance(lv, list) and len(lv) == 2
                                                  and all(type(v) in (int, float) for v in lv) for lv in levels)
               for levels in sides.values()):
        return
    for name, levels in sides.items():  # 5 and 5.0 are one price (JSON has one kind of number)
        body[name] = list({price: [price, qty] for price, qty in levels}.values())
    if body["bids"] and body["asks"]:
        lowest_ask = min(price for price, _ in body["asks"])
        body["bids"] = [level for level in body["bids"] if level[0] < lowest_ask]


def _logged_seq(server: ServerProcess) -> int:
    """The last command the server's log holds."""
    return requests.get(f"{server.url}/health", timeout=10).json()["seq"]


def _takes_input(ctx: Any) -> bool:
    operation = ctx.operation
    raw = operation.definition.raw or {}
    return "{" in operation.path or bool(raw.get("parameters") or raw.get("requestBody"))


# Explicitly every operation: schemathesis would otherwise leave out the one serving the schema document.
valid_input = schemathesis.pytest.from_fixture("valid_input_schema").include(lambda ctx: True)
# An operation that takes no input (GET /health, /symbols, ...) has no invalid input to send: schemathesis
# would stop its test with "Impossible to generate negative test cases".
invalid_input = schemathesis.pytest.from_fixture("invalid_input_schema").include(_takes_input)

FUZZ_SETTINGS = settings(max_examples=MAX_EXAMPLES, deadline=None, derandomize=True, database=None)


@valid_input.parametrize()
@FUZZ_SETTINGS
def test_valid_input_is_answered_as_described(case: schemathesis.Case, listed_symbols: list[str]) -> None:
    _name_listed_symbols(case, listed_symbols)
    _within_bar_limit(case)
    _quote_that_can_stand(case)
    case.call_and_validate()


@invalid_input.parametrize()
@FUZZ_SETTINGS
def test_invalid_input_is_refused_as_described(case: schemathesis.Case, fuzzed_server: ServerProcess) -> None:
    before = _logged_seq(fuzzed_server)
    case.call_and_validate()
    assert _logged_seq(fuzzed_server) == before, "input the description forbids reached the log"
