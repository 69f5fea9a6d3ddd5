"""Who a request speaks for: a token names an account, from the tokens file or, in open mode, itself."""

from __future__ import annotations

from tickflow.net.wire.limits import ACCOUNT_PATTERN


class Accounts:
    """Token -> account. Without a tokens file (open mode, for one person on loopback) a token that is a
    valid account name is that account."""

    def __init__(self, tokens: dict[str, str] | None) -> None:
        self.tokens = tokens

    @property
    def open(self) -> bool:
        return self.tokens is None

    def account(self, token: str | None) -> str | None:
        """The account `token` names, or None for none (missing, unknown, or not an account name)."""
        if not token:
            return None
        if self.tokens is not None:
            return self.tokens.get(token)
        return token if ACCOUNT_PATTERN.match(token) else None
