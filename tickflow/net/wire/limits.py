"""The protocol's bounds and name rules, shared by the server, its clients and /openapi.json."""

from __future__ import annotations

import re
from typing import Final

from tickflow.core.types import MAX_CLIENT_ORDER_ID, MAX_PRICE, MAX_QTY, MAX_QUOTE_LEVELS

__all__ = ["MAX_PRICE", "MAX_QTY", "MAX_CLIENT_ORDER_ID", "MAX_BODY", "SYMBOL_PATTERN", "ACCOUNT_PATTERN", "DIGITS",
           "MAX_WS_IN_FLIGHT", "MAX_WS_ID", "INTERVALS", "MIN_TOKEN_LENGTH", "MAX_BARS", "MAX_ORDERS_PAGE",
           "MAX_WS_REPLY", "MAX_BATCH", "MAX_QUOTE_LEVELS", "MAX_OPEN_ORDERS",
           "IDEMPOTENCY_WINDOW", "MAX_IDEMPOTENCY_WINDOW"]

MAX_BODY: Final = 64 * 1024
"""The largest request body, and the largest WebSocket message, the server reads."""
SYMBOL_PATTERN = re.compile(r"\A[A-Z0-9][A-Z0-9._-]{0,15}\Z")
"""1-16 of A-Z 0-9 . _ -, starting with a letter or digit (so never `.` or `..`, which URLs normalise away)."""
DIGITS = re.compile(r"\A[0-9]{1,19}\Z")
"""A decimal number as clients write it: ASCII digits only (int() would also take " 1", "+1", "1_0", "١")."""
ACCOUNT_PATTERN = re.compile(r"\A[A-Za-z0-9._:@-]{1,64}\Z")
"""An account name: 1-64 of A-Z a-z 0-9 . _ : @ -."""
MAX_WS_IN_FLIGHT: Final = 1024
"""Order-entry requests one WebSocket may have in flight; more are answered 429."""
MAX_WS_ID: Final = 128
"""The longest request id echoed back in answers."""
INTERVALS: Final = {"1m": 60_000, "5m": 300_000, "15m": 900_000, "1h": 3_600_000}
"""Bar intervals by name, in milliseconds."""
MIN_TOKEN_LENGTH: Final = 16
"""The shortest token a `--tokens` file may hold: a token is a password, and a short one is guessed."""
MAX_BARS: Final = 10_000
"""The most bars one `GET /bars` may span (from..to over the interval); a wider range is refused (400)."""
MAX_ORDERS_PAGE: Final = 1000
"""The most open orders one `GET /orders` answers (and its default `limit`); `after` pages on."""
MAX_WS_REPLY: Final = 4 * 1024 * 1024
"""The largest answer queued on a WebSocket (aiohttp's default message limit, what the project's clients
read); a larger one is replaced by an error result before it is queued."""
MAX_BATCH: Final = 256
"""The most operations one batch may carry."""
MAX_OPEN_ORDERS: Final = 10_000
"""The open orders one account may have by default (`serve --max-open-orders`)."""
IDEMPOTENCY_WINDOW: Final = 24 * 3_600_000
"""Milliseconds a clientOrderId is remembered by default (`serve --idempotency-window`): a trading day."""
MAX_IDEMPOTENCY_WINDOW: Final = 366 * 86_400_000
"""The longest window `--idempotency-window` takes (0, for ever, aside)."""
