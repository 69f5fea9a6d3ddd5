"""Place and cancel orders and follow the trades, with tickflow's client library.

    tickflow serve --data /tmp/tf --symbols ACME      # in one terminal
    python docs/client_example.py                     # in another

In open demo mode (no --tokens) the bearer token is the account name.
"""

from __future__ import annotations

import asyncio
import sys
import time

from tickflow.net.client import (
    ApiError,
    BookChanged,
    Client,
    OrderChanged,
    Session,
    StateChanged,
    TradesReceived,
)

URL = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080"


async def main() -> None:
    # HTTP: one call, one typed answer; a 4xx/5xx raises ApiError with the status and the body.
    async with Client(URL, token="alice") as alice:
        # A clientOrderId makes a retry safe: the same id again answers with this order, unchanged.
        run = time.strftime("%Y%m%d-%H%M%S")
        bid = await alice.place_order("ACME", "buy", 10, price=9_990, client_order_id=f"example-bid-{run}")
        print(f"alice: #{bid.order_id} {bid.status}, {bid.remaining_qty} resting at {bid.price}")
        try:
            await alice.place_order("ACME", "buy", 0, price=9_990)
        except ApiError as e:
            print(f"refused before it reached the log: {e.status} {e.message} (field {e.field})")

    # WebSocket: order entry correlated by id, the live book, trades and private updates.
    async with Session(URL, token="bob", symbols=["ACME"]) as bob:

        def show(event: object) -> None:
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

        bob.add_listener(show)
        orders = await asyncio.gather(  # many in flight at once; each answer finds its caller
            bob.place_order("ACME", "sell", 4, price=9_990),  # crosses alice's bid
            bob.place_order("ACME", "sell", 5, price=10_020),  # rests
        )
        await asyncio.sleep(0.2)  # let the trades and private updates arrive
        book = bob.books["ACME"]
        print(f"local book: bid {book.best_bid}, ask {book.best_ask}, spread {book.spread}")
        cancelled = await bob.cancel_order(orders[1].order_id)
        print(f"cancelled #{cancelled.order_id}: {cancelled.remaining_qty} taken off the book")

    async with Client(URL, token="alice") as alice:
        await alice.cancel_order(bid.order_id)
        first = orders[0].fills[0].trade_id if orders[0].fills else 1
        for t in await alice.trades("ACME", after=first - 1, limit=5):
            print(f"from the trade store: #{t.trade_id} {t.qty} @ {t.price}")


if __name__ == "__main__":
    asyncio.run(main())
