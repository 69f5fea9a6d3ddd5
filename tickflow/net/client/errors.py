"""What the client library raises: every failure is a `TickflowError`.

`ApiError` is the server's refusal (4xx/5xx, with its body); `ProtocolError` an answer that is not the
protocol's; `NotConnected` means nothing was sent, while `ConnectionLost` and `RequestTimeout` mean the
outcome is unknown (a retry with the same `clientOrderId` is safe); `AuthFailed` stops a session.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tickflow.net.wire.messages import Order

__all__ = ["TickflowError", "ApiError", "ProtocolError", "InvalidURL", "NotConnected", "ConnectionLost",
           "RequestTimeout", "AuthFailed"]


class TickflowError(Exception):
    """Base class of everything the client library raises."""


class ApiError(TickflowError):
    """The server answered 4xx/5xx. `body` is the parsed JSON error body (or the raw text)."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        message = body.get("error") if isinstance(body, dict) else None
        self.message: str = str(message if message is not None else body)
        super().__init__(f"{status}: {self.message}")

    @property
    def field(self) -> str | None:
        """The request field the server blames, when it names one."""
        return self.body.get("field") if isinstance(self.body, dict) else None

    @property
    def code(self) -> str | None:
        """The reason a program can test, when the server gives one: the matching engine's (`not_open`,
        `unknown_order`, `nothing_to_amend`, `post_only_would_take`, `duplicate_client_order_id`, ...)
        and a few found before it (`rate_limited`, a quote's `crossed_quote`, `repeated_price`,
        `too_many_levels`)."""
        code = self.body.get("code") if isinstance(self.body, dict) else None
        return code if isinstance(code, str) else None

    @property
    def retry_after(self) -> float | None:
        """Seconds to wait before sending again, when the server says (429 `rate_limited`: over the
        account's order rate; nothing was queued)."""
        wait = self.body.get("retryAfter") if isinstance(self.body, dict) else None
        return float(wait) if isinstance(wait, (int, float)) and not isinstance(wait, bool) else None

    @property
    def order(self) -> Order | None:
        """The order the error is about (`order` on 409 not-open, `original` on a reused clientOrderId)."""
        if not isinstance(self.body, dict):
            return None
        data = self.body.get("order") or self.body.get("original")
        try:
            return msgspec.convert(data, Order) if isinstance(data, dict) else None
        except msgspec.ValidationError:
            return None


class ProtocolError(TickflowError, msgspec.DecodeError):
    """A 2xx answer that is not what the protocol describes (not JSON, or not the expected shape): the
    address is probably not a tickflow server. `status` and `body` (the text) are what came back."""

    def __init__(self, what: str, status: int, raw: bytes, error: Exception) -> None:
        self.status = status
        self.body = raw.decode("utf-8", "replace")
        super().__init__(f"{what}: unexpected answer ({status}): {error}; body {self.body[:80]!r}")


class NotConnected(TickflowError):
    """The request was not sent: the session is not connected (it may be reconnecting), or the
    server could not be reached at all."""


class InvalidURL(TickflowError, ValueError):
    """The address is not http(s)://host[:port][/path]."""


class ConnectionLost(TickflowError):
    """The WebSocket dropped while a call was in flight: its outcome is unknown.

    Retrying with the same `clientOrderId` is safe: the server answers a retry with the original result.
    """


class RequestTimeout(ConnectionLost, TimeoutError):
    """No answer within the timeout: the request may still have been carried out (outcome unknown)."""


class AuthFailed(TickflowError):
    """The server refused the session's token (or did not arm the cancel on disconnect asked for); the
    session stops rather than retry forever."""
