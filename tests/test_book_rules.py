"""The feed's book rules, one set of cases (tests/cases/book_rules.json) for both clients: the Python
client's sans-I/O `ClientState` and the page's `BookState` (web/js/bookstate.js, run in node)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tickflow.net.client.state import BookChanged, ClientState, GapDetected, Resubscribe, Resynced
from tickflow.net.wire.messages import Resync, Snapshot, Update, server_message

ROOT = Path(__file__).resolve().parent.parent
CASES_FILE = ROOT / "tests" / "cases" / "book_rules.json"
RUNNER = ROOT / "tests" / "cases" / "run_book_rules.mjs"
BOOKSTATE = ROOT / "web" / "js" / "bookstate.js"
CASES: list[dict[str, Any]] = json.loads(CASES_FILE.read_text())["cases"]
FIELDS = {"seq", "live", "more", "bids", "asks"}
NODE = shutil.which("node") or "/usr/bin/node"

Result = dict[str, Any]
"""What came of a case: {"steps": [{"out": ..., "books": {symbol: view}}], "resubscribe": [symbols]}."""


def python_view(state: ClientState, symbol: str) -> dict[str, Any]:
    book = state.books.get(symbol)
    if book is None:
        return {"seq": None, "live": False, "more": 0, "bids": [], "asks": []}
    more = state.parts_left(symbol)
    return {"seq": book.seq if book.live or more or state.deeper_left(symbol) else None, "live": book.live, "more": more,
            "bids": [[lv.price, lv.qty, lv.orders] for lv in book.bids()],
            "asks": [[lv.price, lv.qty, lv.orders] for lv in book.asks()]}


def run_python(case: dict[str, Any]) -> Result:
    state = ClientState()
    steps: list[dict[str, Any]] = []
    resubscribe: list[str] = []
    for step in case["steps"]:
        msg = server_message(json.dumps(step["in"]))
        assert isinstance(msg, (Snapshot, Update, Resync))
        outs = state.receive(msg)
        kinds = {type(o) for o in outs}
        resubscribe += [o.symbol for o in outs if isinstance(o, Resubscribe)]
        symbol = step["in"].get("symbol", "")
        if GapDetected in kinds:
            assert Resubscribe(symbol) in outs
            out = "gap"
        elif Resynced in kinds:
            out = "resync"
        elif BookChanged in kinds:
            out = "book"
        else:
            out = "part" if state.parts_left(symbol) or state.deeper_left(symbol) else "ignored"
        steps.append({"out": out, "books": {s: python_view(state, s) for s in state.books}})
    return {"steps": steps, "resubscribe": resubscribe}


@pytest.fixture(scope="module")
def javascript() -> list[Result]:
    """Every case's result from the page's BookState, in one run of node."""
    done = subprocess.run([NODE, str(RUNNER), str(CASES_FILE), str(BOOKSTATE)], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    results: list[Result] = json.loads(done.stdout)
    return results


def view_of(books: dict[str, dict[str, Any]], symbol: str) -> dict[str, Any]:
    """A symbol's book as a result gives it; one never seen is an empty book waiting for its snapshot."""
    return books.get(symbol, {"seq": None, "live": False, "more": 0, "bids": [], "asks": []})


def check(case: dict[str, Any], result: Result) -> None:
    assert len(result["steps"]) == len(case["steps"])
    for i, (step, got) in enumerate(zip(case["steps"], result["steps"])):
        assert got["out"] == step["out"], f"step {i} ({step['in']})"
        for symbol, want in step.get("then", {}).items():
            seen = view_of(got["books"], symbol)
            assert {k: seen[k] for k in want} == want, f"step {i}, {symbol}"
    last = result["steps"][-1]["books"]
    for symbol, want in case["expect"].items():
        assert set(want) == FIELDS, f"expect gives every field of {symbol}"
        assert view_of(last, symbol) == want, symbol
    assert result["resubscribe"] == case["resubscribe"]


def test_the_cases_cover_the_rules() -> None:
    """Snapshots and updates, gaps, parts (whole and lost), resyncs: at least a dozen cases in all."""
    outs = {step["out"] for case in CASES for step in case["steps"]}
    assert len(CASES) >= 12 and outs == {"book", "part", "gap", "ignored", "resync"}
    assert len({case["name"] for case in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_python_client_state(case: dict[str, Any]) -> None:
    check(case, run_python(case))


@pytest.mark.parametrize("index", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_javascript_book_state(index: int, javascript: list[Result]) -> None:
    check(CASES[index], javascript[index])
