"""A request refused before it became a command, and how an error message quotes what it was sent."""

from __future__ import annotations

from typing import Any

class BadRequest(Exception):
    """Input that cannot become a command: answered with 400 (or `status`) and never logged."""

    def __init__(self, message: str, field: str | None = None, status: int = 400, code: str | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.status = status
        self.code = code
        """A machine-readable name for the rule broken, where clients are expected to tell it apart."""
        self.retry_after = retry_after
        """Seconds after which the same request may succeed (a rate limit), sent as Retry-After too."""

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"error": self.message}
        if self.code is not None:
            body["code"] = self.code
        if self.field is not None:
            body["field"] = self.field
        if self.retry_after is not None:
            body["retryAfter"] = round(self.retry_after, 3)
        return body


def cut(text: str, limit: int = 40) -> str:
    """`text` as an error message may quote it: at most `limit` characters."""
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def brief(value: Any, limit: int = 40) -> str:
    """`value`'s repr for an error message, cut short: an answer never echoes a large input back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
