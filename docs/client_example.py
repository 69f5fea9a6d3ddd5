"""Place and cancel orders and follow the trades, with tickflow's client library.

    tickflow serve --data /tmp/tf --symbols ACME      # in one terminal
    python docs/client_example.py                     # in another (or: python docs/client_example.py URL)

In open demo mode (no --tokens) the bearer token is the account name.
"""

from __future__ import annotations

import asyncio
import secrets
import sys

from tickflow.net.client import (
    ApiError,
    BookChanged,
    Client,
    Event,
    OrderChanged,
    Session,
    StateChanged,
    TickflowError,
    TradesReceived,
)

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"


def show(event: Event) -> None:
    """Print what the session reports: trades, bob's order updates, the first book, the connection."""
    if isinstance(event, TradesReceived):
        for t in event.trades:
            arrow = "▲" if t.aggressor == "buy" else "▼"
            print(f"trade #{t.trade_id}: {t.qty} {t.symbol} @ {t.price} {arrow}")
    elif isinstance(event, OrderChanged):
        o = event.order
        print(f"bob's order #{o.order_id}: {o.status} {o.filled_qty}/{o.qty}")
    elif isinstance(event, BookChanged) and event.snapshot:
        print(f"{event.symbol} book at seq {event.seq}: best bid {event.book.best_bid}")
    elif isinstance(event, StateChanged):
        print(f"connection: {event.state}")


async def main() -> None:
    # HTTP: one call, one typed answer; a 4xx/5xx raises ApiError with the status and the body.
    async with Client(URL, token="alice") as alice:
        # A clientOrderId makes a retry safe: the same id again answers with this order, unchanged. It
        # must be unique to this order (not, say, the time in seconds: two runs would share it).
        client_order_id = f"example-bid-{secrets.token_hex(6)}"
        bid = await alice.place_order("ACME", "buy", 10, price=9_990, client_order_id=client_order_id)
        print(f"alice: #{bid.order_id} {bid.status}, {bid.remaining_qty} resting at {bid.price}")
        retry = await alice.place_order("ACME", "buy", 10, price=9_990, client_order_id=client_order_id)
        print(f"the retry answers with the same order: #{retry.order_id}")
        try:
            await alice.place_order("ACME", "buy", 0, price=9_990)
        except ApiError as e:
            print(f"refused before it reached the log: {e.status} {e.message} (field {e.field})")

    # WebSocket: order entry correlated by id, the live book, trades and private updates. The listener
    # is added before connecting, so it sees everything from the first snapshot on.
    bob = Session(URL, token="bob", symbols=["ACME"])
    bob.add_listener(show)
    async with bob:
        orders = await asyncio.gather(  # many in flight at once; each answer finds its caller
            bob.place_order("ACME", "sell", 4, price=9_990),  # crosses alice's bid
            bob.place_order("ACME", "sell", 5, price=10_020),  # rests
        )
        await asyncio.sleep(0.2)  # let the trades and private updates arrive
        book = bob.books["ACME"]
        print(f"local book: bid {book.best_bid}, ask {book.best_ask}, spread {book.spread}")
        top = await bob.http.book("ACME", depth=5)  # GET /book's BookLevels equal the feed's Levels
        if top.seq == book.seq:  # (the same moment of the book: on a busy market it may have moved on)
            print(f"GET /book agrees with the local book: {(top.bids, top.asks) == (book.bids(5), book.asks(5))}")
        cancelled = await bob.cancel_order(orders[1].order_id)
        print(f"cancelled #{cancelled.order_id}: {cancelled.remaining_qty} taken off the book")

    async with Client(URL, token="alice") as alice:
        try:
            await alice.cancel_order(bid.order_id)
        except ApiError as e:  # on a busy market someone may have filled it meanwhile
            print(f"alice's bid was not open any more: {e.status} {e.code}")
        first = orders[0].fills[0].trade_id if orders[0].fills else 1
        for t in await alice.trades("ACME", after=first - 1, limit=5):
            print(f"from the trade store: #{t.trade_id} {t.qty} @ {t.price}")


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except TickflowError as e:  # every failure of the library is one: no server, timeout, ...
        sys.exit(f"client_example: {type(e).__name__}: {e}")
