"""What a session reads over HTTP beside its socket to catch up after (re)connecting: whether the server
at the address is still the exchange it followed, the trades printed while it was away, and the
account's orders as they are now. The reads are here; what they mean is `ClientState`'s to decide."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from tickflow.net.client.errors import ApiError, ProtocolError, TickflowError
from tickflow.net.client.http import Client
from tickflow.net.client.state import ClientState
from tickflow.net.wire.messages import Order, Trade

log = logging.getLogger("tickflow.client")

TRADES_PAGE = 1000
"""The most trades `GET /trades` gives at once."""


async def other_server(http: Client, state: ClientState, connect_timeout: float,
                       request_timeout: float) -> str | None:
    """Why the server now at the address is not the exchange `state` followed so far, or None when it is
    (or it cannot tell: it answers with an error, or not as tickflow would); `ClientState.judge`
    decides. A server that cannot be reached raises, failing this attempt to connect: were the check
    skipped (a keep-alive connection to the server that died, say) another server would pass."""
    try:
        health = await asyncio.wait_for(http.health(), connect_timeout)
    except (ApiError, ProtocolError):
        return None  # it answered, but not what tells (a failed log's 503): taken as the same server
    seen = state.witness(health)
    page = None
    if seen is not None:
        with contextlib.suppress(ApiError, ProtocolError):
            page = await asyncio.wait_for(http.trades(seen.symbol, after=seen.trade_id - 1, limit=1),
                                          request_timeout)
    return state.judge(health, page)


async def read_log_started(http: Client, timeout: float) -> int | None:
    """When the log of the server at the address began, if it says (and has a record); None when that
    is not known (yet): the seq and trades check stands in, and the next connection asks again."""
    try:
        return (await asyncio.wait_for(http.health(), timeout)).log_started
    except (TickflowError, asyncio.TimeoutError):
        return None


async def missed_trades(http: Client, state: ClientState, symbol: str, after: int, timeout: float) -> list[Trade]:
    """Pages of `GET /trades` of `symbol` from trade id `after` up to where `state`'s backfill reaches.

    The trade store is written just after the feed, so a fetch can briefly lag the snapshot: it is
    retried a few times until the ids reach the snapshot's trades."""
    def short() -> bool:
        upto = state.backfill_upto(symbol)
        return upto is not None and after < upto

    missed: list[Trade] = []
    retries = 0
    while short() and retries < 5:
        try:
            page = await asyncio.wait_for(http.trades(symbol, after=after, limit=TRADES_PAGE), timeout)
        except (TickflowError, asyncio.TimeoutError) as e:
            log.warning("could not fetch missed %s trades: %s", symbol, e)
            break
        missed.extend(page)
        if page:
            after = page[-1].trade_id
        if short() and len(page) < TRADES_PAGE:  # SQLite may not hold them all yet: try again shortly
            retries += 1
            await asyncio.sleep(0.05 * retries)
    return missed


async def orders_now(http: Client, held: Iterable[int]) -> list[Order]:
    """The account's open orders, and the state now of each order in `held` that is not among them."""
    current = {o.order_id: o for o in await http.open_orders()}
    for order_id in [i for i in held if i not in current]:
        current[order_id] = await http.get_order(order_id)
    return list(current.values())
