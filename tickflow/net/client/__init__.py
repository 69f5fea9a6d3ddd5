"""An asyncio client for the tickflow wire protocol (docs/protocol.md), over aiohttp.

Two halves, sharing one `aiohttp.ClientSession`:

- `Client` (http.py): the HTTP calls (place, cancel, amend and get orders, cancel all, batches, mass
  quotes, open orders, book, trades, fills, bars, symbols, health), each returning a typed result or
  raising `ApiError` with the status and body.
- `Session` (session.py): one WebSocket that keeps itself up. Order entry correlated by request id (up
  to MAX_IN_FLIGHT on the wire at once; more wait their turn), market data applied into a `LocalBook`
  per symbol, private order updates, and reconnection with exponential backoff plus jitter that
  re-authenticates and re-subscribes. What happens is reported as `Event`s, to listeners
  (`add_listener`) and to async iterators (`events()`).

The protocol's rules live apart from the I/O, in `ClientState` (state.py), which takes decoded messages
and returns events and what to send: books (snapshot, then updates checked against `prevSeq`; a gap
re-subscribes; a big book's snapshot comes in parts, reported once whole), the account's orders (an
older state never over a newer one, a closed order never reopened) and trades (each once, in order).
The schemas it decodes are the wire's (tickflow.net.wire.messages).

Both halves take batches and mass quotes (batch.py). The ops of a batch are built by `ops` with the
single calls' arguments, and answered one `OpResult` each, in order: an op's failure is in its result,
only a batch refused as a whole raises. A quote replaces the account's whole quote in a symbol in one
command and answers a `Quote` with the orders it left.

```python
async with Client("http://127.0.0.1:8080", token="alice") as http:
    order = await http.place_order("ACME", "buy", 10, price=10000)

async with Session("http://127.0.0.1:8080", token="alice", symbols=["ACME"]) as ws:
    order = await ws.place_order("ACME", "sell", 5, price=10002)
    results = await ws.batch([ops.order("ACME", "buy", 5, 9990), ops.cancel(order.order_id)])
    quote = await ws.quote("ACME", bids=[(9990, 10), (9980, 20)], asks=[(10010, 10), (10020, 20)])
    async for event in ws.events():
        ...
```

Only the wire protocol is used: nothing here imports the engine, so the terminal client, the simulator
and scripted users see the server exactly as any other client does.
"""

from tickflow.net.client import ops
from tickflow.net.client.batch import OpResult, QuoteLevel
from tickflow.net.client.calls import MAX_IN_FLIGHT
from tickflow.net.client.errors import (
    ApiError,
    AuthFailed,
    ConnectionLost,
    InvalidURL,
    NotConnected,
    ProtocolError,
    RequestTimeout,
    TickflowError,
)
from tickflow.net.client.http import Client, new_http_session, ws_url
from tickflow.net.client.ops import Op
from tickflow.net.client.session import MAX_MESSAGE, Backoff, Session
from tickflow.net.client.state import (
    CLOSED_MEMORY,
    BookChanged,
    ClientState,
    Event,
    GapDetected,
    LocalBook,
    OrderChanged,
    OrderTracker,
    Resynced,
    ServerChanged,
    ServerError,
    StateChanged,
    TradesReceived,
)
from tickflow.net.wire.messages import (
    OPEN_STATUSES,
    AccountFill,
    Bar,
    Book,
    BookLevel,
    ConnState,
    Fill,
    Health,
    Level,
    Liquidity,
    Order,
    OrderType,
    Quote,
    Side,
    Status,
    SymbolInfo,
    Tif,
    Trade,
    Updates,
)

__all__ = [
    # calls
    "Client", "Session", "Backoff", "LocalBook", "ws_url", "new_http_session", "MAX_IN_FLIGHT", "MAX_MESSAGE",
    # batches and mass quotes
    "ops", "Op", "OpResult", "Quote", "QuoteLevel",
    # the sans-I/O state
    "ClientState", "OrderTracker", "CLOSED_MEMORY",
    # wire types
    "Order", "Fill", "Trade", "AccountFill", "Level", "Book", "BookLevel", "Bar", "SymbolInfo", "Health",
    "Side", "OrderType", "Tif", "Status", "Liquidity", "ConnState", "Updates", "OPEN_STATUSES",
    # events
    "Event", "StateChanged", "BookChanged", "TradesReceived", "OrderChanged", "GapDetected", "Resynced",
    "ServerError", "ServerChanged",
    # errors
    "TickflowError", "ApiError", "ProtocolError", "InvalidURL", "NotConnected", "ConnectionLost", "RequestTimeout",
    "AuthFailed",
]
