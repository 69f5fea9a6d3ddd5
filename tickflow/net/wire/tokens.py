"""The tokens file (`--tokens FILE`): a JSON object of token -> account, read by the server and by simulate."""

from __future__ import annotations

import json
from pathlib import Path

from tickflow.net.wire.limits import ACCOUNT_PATTERN, MIN_TOKEN_LENGTH


class TokensError(ValueError):
    """The file cannot be read, or holds an entry nobody could use."""


def read_tokens(path: str) -> dict[str, str]:
    """Every token with its account, in the file's order; each entry usable as sent."""

    def no_repeats(pairs: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for key, value in pairs:
            if key in seen:
                raise ValueError(f"the token {key[:4]}... appears twice")
            seen[key] = value
        return seen

    try:
        tokens = json.loads(Path(path).read_text(), object_pairs_hook=no_repeats)
    except (OSError, ValueError) as e:
        raise TokensError(f"cannot read tokens from {path}: {e}") from None
    if not isinstance(tokens, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in tokens.items()):
        raise TokensError(f"{path} must be a JSON object of token -> account name")
    if not tokens:
        raise TokensError(f"{path} holds no tokens: nobody could trade")
    for token, account in tokens.items():
        if not ACCOUNT_PATTERN.match(account):
            raise TokensError(f"{path}: bad account name {account[:64]!r}: use 1-64 of A-Z a-z 0-9 . _ : @ -")
        if (len(token) < MIN_TOKEN_LENGTH or token != token.strip() or not token.isprintable()
                or len(token) > 4096):
            # The Authorization header is read stripped: such a token could never be presented. And a
            # token is a password: a short one is guessed (`openssl rand -hex 16` makes a good one).
            raise TokensError(f"{path}: a token must be {MIN_TOKEN_LENGTH}-4096 printable characters with no "
                              f"space at either end (the one for account {account!r} is not)")
    return tokens
