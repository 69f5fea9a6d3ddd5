"""HTTP order entry and the caller's own orders: place, cancel, cancel all, amend, read, list open."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from tickflow.core.types import Command, Reason
from tickflow.net.exchange.service import BadCommand, ExchangeService, SequencerStopped
from tickflow.net.gateway import inputs
from tickflow.net.gateway.context import GATEWAY
from tickflow.net.gateway.responses import json_response
from tickflow.net.wire import answers, batches, requests
from tickflow.net.wire.answers import encode
from tickflow.net.wire.errors import BadRequest, brief, cut
from tickflow.net.wire.limits import MAX_ORDERS_PAGE


async def execute(service: ExchangeService, command: Command) -> tuple[int, bytes]:
    """Sequence a command: the status and JSON body that HTTP and WebSocket order entry both answer."""
    try:
        return answers.answer_of(command, await service.submit(command))
    except (SequencerStopped, BadCommand) as e:
        return _not_taken(e)


def _not_taken(e: SequencerStopped | BadCommand) -> tuple[int, bytes]:
    """The answer to a command the sequencer did not take."""
    if isinstance(e, SequencerStopped):
        return 503, encode({"error": f"not accepting orders: {e}"})
    return 400, encode({"error": str(e)})  # BadCommand: validation should have caught it; never logged


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
    done = iter(await execute_commands(service, commands))
    return [next(done) if answer is None else answer for answer in answered]


async def execute_commands(service: ExchangeService, commands: list[Command]) -> list[tuple[int, bytes]]:
    """Sequence `commands` one after another (ServiceExchange.submit_many): each one's status and body."""
    if not commands:
        return []
    try:
        outcomes = await service.submit_many(commands)
    except SequencerStopped as e:
        return [_not_taken(e)] * len(commands)
    return [_not_taken(outcome) if isinstance(outcome, (SequencerStopped, BadCommand))
            else answers.answer_of(command, outcome)  # type: ignore[arg-type]
            for command, outcome in zip(commands, outcomes)]


async def post_batch(request: web.Request) -> web.Response:
    """POST /batch {"ops": [...]}: up to 256 order operations, sequenced one after another."""
    gateway = request.app[GATEWAY]
    account = inputs.account(request)
    data = await inputs.body(request)
    if not isinstance(data, dict):
        raise BadRequest("expected a JSON object with ops")
    extra = [k for k in data if k != "ops"]
    if extra:
        raise BadRequest(f"unknown field {brief(extra[0])}: POST /batch takes ops", cut(extra[0]))
    ops = batches.batch_ops(data.get("ops"))
    gateway.order_rate.take(account, batches.rated(ops))
    results = await execute_batch(gateway.service, account, ops)
    return json_response(b'{"results":' + answers.results(results) + b"}")


async def put_quote(request: web.Request) -> web.Response:
    """PUT /quotes/{symbol} {"bids": [[price, qty], ...], "asks": [...]}: replace the caller's quote there."""
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    command = batches.quote(account, request.match_info["symbol"], await inputs.body(request), service.order_symbols)
    request.app[GATEWAY].order_rate.take(account)
    status, body = await execute(service, command)
    return json_response(body, status)


async def post_order(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    command = requests.new_order(account, await inputs.body(request), service.order_symbols)
    request.app[GATEWAY].order_rate.take(account)
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
    status, body = await execute(service, command)
    return json_response(body, status)


async def patch_order(request: web.Request) -> web.Response:
    service = request.app[GATEWAY].service
    account = inputs.account(request)
    order_id = requests.order_id(request.match_info["order_id"])
    command = requests.amend(account, order_id, await inputs.body(request))
    request.app[GATEWAY].order_rate.take(account)
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
