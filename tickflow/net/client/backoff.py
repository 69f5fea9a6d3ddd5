"""How long a session waits before it tries to connect again."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["Backoff"]


@dataclass
class Backoff:
    """Exponential backoff with jitter: attempt n waits `min(maximum, initial * factor**n)`, less up to
    `jitter` of it at random, so clients that lost the same server do not all return at once."""

    initial: float = 0.2
    maximum: float = 5.0
    factor: float = 2.0
    jitter: float = 0.5
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, attempt: int) -> float:
        base = min(self.maximum, self.initial * self.factor ** min(attempt, 32))
        return base * (1.0 - self.jitter * self.rng.random())
