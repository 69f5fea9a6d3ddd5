"""HTTP order entry and the caller's own orders: place, cancel, cancel all, amend, read, list open."""

from __future__ import annotations

from typing import Callable

from aiohttp import web

from typing import Any

from tickflow.core.types import Command, Outcome, Reason
from tickflow.net.exchange.service import BadCommand, ExchangeService, SequencerStopped
from tickflow.net.gateway import inputs
from tickflow.net.gateway.context import GATEWAY
from tickflow.net.gateway.responses import json_response
from tickflow.net.wire import answers, batches, requests
from tickflow.net.wire.answers import encode
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import MAX_ORDERS_PAGE


async def execute(service: ExchangeService, command: Command,
                  answer: Callable[[Outcome], tuple[int, bytes]] = answers.answer) -> tuple[int, bytes]:
    """Sequence a command: the status and JSON body that HTTP and WebSocket order entry both answer."""
    try:
        return answer(await service.submit(command))
    except SequencerStopped as e:
        return 503, encode({"error": f"not accepting orders: {e}"})
    except BadCommand as e:  # validation should have caught it; still the caller's input, never logged
        return 400, encode({"error": str(e)})


async def execute_batch(service: ExchangeService, account: str, ops: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    """A batch's ops (checked by batches.batch_ops), each validated on its own and the valid ones sequenced
    one after another: each op's status and body, in order, as it would have been answered alone."""
    answered: list[tuple[int, bytes] | None] = []
    commands: list[Command] = []
    for op in ops:
        try:
            commands.append(batches.batch_command(account, op, service.order_symbols))
            answered.append(None)
        except BadRequest as e:
            answered.append((e.status, encode(e.body())))
    try:
        outcomes = await service.submit_many(commands) if commands else []
    except SequencerStopped as e:
        outcomes = [e] * len(commands)
    done = iter(zip(commands, outcomes))
    results = []
    for answer in answered:
        if answer is None:
            command, outcome = next(done)
            if isinstance(outcome, SequencerStopped):
                answer = 503, encode({"error": f"not accepting orders: {outcome}"})
            elif isinstance(outcome, Exception):  # BadCommand: validation should have caught it; never logged
                answer = 400, encode({"error": str(outcome)})
            else:
                answer = answers.answer_of(command, outcome)
        results.append(answer)
    return results


async def post_batch(request: web.Request) -> web.Response:
    """POST /batch {"ops": [...]}: up to 256 order operations, sequenced one after another."""
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    data = await inputs.body(request)
    if not isinstance(data, dict):
        raise BadRequest("expected a JSON object with ops")
    extra = [k for k in data if k != "ops"]
    if extra:
        raise BadRequest(f"unknown field {brief(extra[0])}: POST /batch takes ops", cut(extra[0]))
    results = await execute_batch(service, account, batches.batch_ops(data.get("ops")))
    return json_response(b'{"results":' + answers.results(results) + b"}")


async def put_quote(request: web.Request) -> web.Response:
    """PUT /quotes/{symbol} {"bids": [[price, qty], ...], "asks": [...]}: replace the caller's quote there."""
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    symbol = request.match_info["symbol"]
    command = batches.quote(account, symbol, await inputs.body(request), service.order_symbols)
    status, body = await execute(service, command, lambda outcome: answers.answer_quote(symbol, outcome))
    return json_response(body, status)


async def post_order(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    command = requests.new_order(account, await inputs.body(request), service.order_symbols)
    status, body = await execute(service, command)
    return json_response(body, status)


async def delete_order(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    command = requests.cancel(account, requests.order_id(request.match_info["order_id"]))
    status, body = await execute(service, command)
    return json_response(body, status)


async def cancel_orders(request: web.Request) -> web.Response:
    """DELETE /orders?symbol=S&side=buy: every open order of the caller's (in S, on that side) at once."""
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    inputs.only_params(request, "DELETE /orders", ("symbol", "side"))
    query = request.query
    if len(query) != len(set(query)):
        name = next(k for k in query if len(query.getall(k)) > 1)
        raise BadRequest(f"{brief(name)} is given more than once", cut(name))
    command = requests.cancel_all(account, dict(query), service.order_symbols, "query parameters")
    status, body = await execute(service, command, answers.answer_cancel_all)
    return json_response(body, status)


async def patch_order(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    order_id = requests.order_id(request.match_info["order_id"])
    command = requests.amend(account, order_id, await inputs.body(request))
    status, body = await execute(service, command)
    return json_response(body, status)


async def get_order(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    order_id = requests.order_id(request.match_info["order_id"])
    state = await service.order_state(account, order_id)
    if state is None:
        status, body = answers.refusal(Reason.UNKNOWN_ORDER)
        return json_response(body, status)
    return json_response(state)


async def list_orders(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    inputs.only_params(request, "GET /orders", ("status", "symbol", "side", "after", "limit"))
    query = dict(request.query)
    if query.pop("status", "open") != "open":
        raise BadRequest("status must be 'open'", "status")
    # Paged like /trades: the oldest `limit` with ids above `after`; the next page starts after the last.
    after = inputs.int_param(request, "after", 0, 0, 1 << 62)
    limit = inputs.int_param(request, "limit", MAX_ORDERS_PAGE, 1, MAX_ORDERS_PAGE)
    query.pop("after", None)
    query.pop("limit", None)
    wanted = requests.order_filter(query, service.order_symbols, "query parameters",
                                   "GET /orders takes status=open, symbol, side, after and limit, all optional")
    return json_response({"orders": await service.open_orders(account, wanted.symbol, wanted.side, after, limit)})
