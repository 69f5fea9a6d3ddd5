"""Hypothesis fuzzes the WebSocket of a real server (issue 27): random ops, fields, types and sizes, in random
sequences, plus frames that are not JSON text. Whatever comes, the server answers every request it can
correlate (or closes the connection with a code and a reason), never with an internal error; nothing it
refuses reaches the log; and a bystander's connection keeps being served."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import os

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from server_process import ServerProcess
from tickflow.net.wire.limits import MAX_BODY

OVERSIZED = "<a message over the limit>"
"""Stands for a message of MAX_BODY + 10 bytes (made when sent): the server closes the connection (1009)."""
ANSWERED_OPS = ("order", "cancel", "amend", "cancelAll", "batch", "quote")
"""Ops that, with a usable id on a signed-in connection, are always answered by a result carrying that id."""
OPS = (*ANSWERED_OPS, "auth", "subscribe", "unsubscribe", "ping")
FIELDS = ("symbol", "side", "price", "qty", "type", "tif", "postOnly", "clientOrderId", "orderId", "ops", "bids",
          "asks", "symbols", "token", "updates", "cancelOnDisconnect", "id")

scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.integers(0, 200),
                    st.floats(allow_nan=True), st.text(max_size=12),
                    st.sampled_from(["ACME", "GLOBEX", "buy", "sell", "limit", "market", "gtc", "ioc", "fok", "fuzzer"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                      max_leaves=12)
plausible_order = st.fixed_dictionaries({
    "symbol": st.sampled_from(["ACME", "GLOBEX", "NOPE"]), "side": st.sampled_from(["buy", "sell"]),
    "price": st.integers(90, 110), "qty": st.integers(1, 5)})


@st.composite
def messages(draw: st.DrawFn) -> Any:
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return draw(st.one_of(st.text(max_size=40), st.binary(max_size=40)))  # not JSON, or binary
    if kind == 1:
        return OVERSIZED
    message: dict[str, Any] = {"op": draw(st.one_of(st.sampled_from(OPS), st.text(max_size=6)))}
    if draw(st.booleans()):
        message.update(draw(plausible_order))
    for name in draw(st.lists(st.sampled_from(FIELDS), max_size=5, unique=True)):
        message[name] = draw(values)
    if message["op"] == "batch" and draw(st.booleans()):
        message["ops"] = draw(st.lists(st.one_of(plausible_order.map(lambda o: {"op": "order", **o}),
                                                 st.dictionaries(st.sampled_from(FIELDS + ("op",)), values)),
                                       max_size=6))
    if message["op"] == "quote" and draw(st.booleans()):
        message["bids"] = draw(st.lists(st.lists(st.integers(-5, 120), min_size=2, max_size=2), max_size=4))
        message["asks"] = draw(st.lists(st.lists(st.integers(-5, 120), min_size=2, max_size=2), max_size=4))
    return message


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    server = ServerProcess(Path(tmp_path_factory.mktemp("fuzzws")) / "data").start()
    yield server
    server.kill()


async def _seq(s: aiohttp.ClientSession, url: str) -> int:
    async with s.get(f"{url}/health") as r:
        return int((await r.json())["seq"])


async def _read(ws: aiohttp.ClientWebSocketResponse, expected: set[int], ops: dict[int, int]
                ) -> tuple[set[int], bool]:
    """Read until every id in `expected` is answered (a batch of `ops[id]` ops with as many results) and the
    final pong has come, or the server closes the connection: the seqs of the records the answers say were
    written, and whether it closed."""
    logged: set[int] = set()
    pong = False
    while expected or not pong:
        msg = await ws.receive()
        if msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING):
            assert ws.close_code in (1008, 1009), (ws.close_code, msg.extra)
            return logged, True
        data = json.loads(msg.data)
        assert data.get("error") != "internal error", data
        if data["type"] == "pong":
            pong = True
        if data["type"] in ("result", "results"):
            expected.discard(data.get("id"))
            if data["type"] == "results":
                assert len(data["results"]) == ops[data["id"]], data
            answers = data["results"] if data["type"] == "results" else [data]
            for answer in answers:
                assert answer["status"] < 500 or answer["status"] == 503, answer
                body = answer["body"]
                if answer["status"] == 200 and isinstance(body.get("seq"), int):
                    logged.add(body["seq"])
    return logged, False


def _is_json(message: dict[str, Any]) -> bool:
    try:
        json.dumps(message, allow_nan=False)
    except ValueError:
        return False
    return True


def _brief(sequence: list[Any]) -> str:
    return repr([m if not isinstance(m, (str, bytes)) or len(m) < 200 else f"<{len(m)} long>" for m in sequence])[:3000]


async def _session(server: ServerProcess, sequence: list[Any]) -> None:
    async with aiohttp.ClientSession() as s:
        before = await _seq(s, server.url)
        bystander = await s.ws_connect(server.ws_url + "?token=bystander")
        await bystander.receive(timeout=10)
        ws = await s.ws_connect(server.ws_url + "?token=fuzzer", max_msg_size=0)
        await ws.receive(timeout=10)
        expected: set[int] = set()
        ops: dict[int, int] = {}
        """Batches sent: how many ops each, so many results it is answered with."""
        try:
            for n, message in enumerate(sequence):
                if isinstance(message, bytes):
                    await ws.send_bytes(message)
                    continue
                if message == OVERSIZED:
                    await ws.send_str("x" * (MAX_BODY + 10))
                    break  # the connection is closed for it
                if isinstance(message, dict):
                    if message.get("op") in ANSWERED_OPS and "id" not in message:
                        message["id"] = 1_000_000 + n  # a usable id: this one must be answered
                    if message.get("id") == 1_000_000 + n and _is_json(message):
                        expected.add(1_000_000 + n)  # (NaN and Infinity are not JSON: no id can be read)
                        if message["op"] == "batch" and isinstance(message.get("ops"), list):
                            ops[1_000_000 + n] = len(message["ops"])
                    message = json.dumps(message, allow_nan=True)
                await ws.send_str(message)
            else:
                await ws.send_json({"op": "ping"})
        except aiohttp.ClientConnectionResetError:
            pass  # closed by the server: the reading below sees why
        try:
            async with asyncio.timeout(30):
                logged, closed = await _read(ws, expected, ops)
        except TimeoutError:
            raise AssertionError(f"no answer within 30 s to ids {sorted(expected)} of {_brief(sequence)}") from None
        if not closed:  # after a close, what was sent before it may have run unanswered
            async with asyncio.timeout(30):  # every answered record is durable, so the count is final
                after = await _seq(s, server.url)
            assert after - before == len({q for q in logged if q > before}), "a refused message reached the log"
        await ws.close()
        await bystander.send_json({"op": "ping"})
        async with asyncio.timeout(10):
            while json.loads((await bystander.receive()).data)["type"] != "pong":
                pass
        await bystander.close()
    assert server.proc is not None and server.proc.poll() is None


PHASES = (Phase.explicit, Phase.reuse, Phase.generate) if os.environ.get("FUZZ_NO_SHRINK") else tuple(Phase)


@settings(max_examples=60, deadline=None, derandomize=True, database=None, phases=PHASES,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large])
@given(sequence=st.lists(messages(), min_size=1, max_size=8))
def test_whatever_a_websocket_sends_the_server_answers_and_logs_nothing_refused(
        fuzzed: ServerProcess, sequence: list[Any]) -> None:
    asyncio.run(_session(fuzzed, sequence))
