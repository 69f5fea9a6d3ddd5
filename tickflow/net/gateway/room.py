"""Who holds the WebSocket slots: connections not signed in, and each account's.

Anonymous connections (market-data viewers, and anyone before a sign-in) share a cap of their own below
the server's total, so however many of them are held open, the rest stays for signed-in traders; each
account has a cap too, so one leaked token cannot take that rest either.
"""

from __future__ import annotations

MAX_PER_ACCOUNT = 32
"""WebSockets one account may have signed in at once by default (`serve --max-websockets-per-account`):
a desk's bots, terminals and pages, each a connection or a few."""
AUTH_TIMEOUT = 10.0
"""Seconds a WebSocket has to sign in or subscribe by default (`serve --auth-timeout`)."""


def default_max_anonymous(max_websockets: int) -> int:
    """Four fifths of the connections, at least one: the rest is kept for signed-in traders."""
    return max(1, max_websockets * 4 // 5)


class Room:
    """Counts of the WebSockets that are not signed in and of each account's; says why one has no room."""

    def __init__(self, max_anonymous: int, max_per_account: int) -> None:
        self.max_anonymous = max_anonymous
        self.max_per_account = max_per_account
        self.anonymous = 0
        self.accounts: dict[str, int] = {}

    def refusal(self, account: str | None) -> str | None:
        """Why a connection as `account` (None: not signed in) cannot be let in now; None when it can."""
        if account is None:
            if self.anonymous >= self.max_anonymous:
                return (f"too many WebSocket connections that are not signed in ({self.anonymous} open, the "
                        "server's limit for them): sign in at the upgrade (/ws?token=...), or try again later")
            return None
        held = self.accounts.get(account, 0)
        if held >= self.max_per_account:
            return (f"too many WebSocket connections signed in as {account} ({held} open, the limit for one "
                    "account): close one first")
        return None

    def take(self, account: str | None) -> None:
        if account is None:
            self.anonymous += 1
        else:
            self.accounts[account] = self.accounts.get(account, 0) + 1

    def release(self, account: str | None) -> None:
        if account is None:
            self.anonymous -= 1
            return
        left = self.accounts[account] - 1
        if left:
            self.accounts[account] = left
        else:
            del self.accounts[account]
