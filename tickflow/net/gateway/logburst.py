"""A bound on how often one kind of line is logged: what any client can cause must not flood the log."""

from __future__ import annotations

import time
from typing import Callable


class LogBurst:
    """At most `burst` lines every `window` seconds. `allow()` says whether this one may be logged and what
    it should add: how many were left out since the last one, or that the next ones will be."""

    def __init__(self, what: str, burst: int = 10, window: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.what = what
        """What the lines are about, plural ("failed sign-ins"), for the notes."""
        self.burst = burst
        self.window = window
        self.clock = clock
        self.started = -window
        self.said = 0
        self.left_out = 0

    def allow(self) -> str | None:
        """None when this line is left out; else the note to add to it ("" for none)."""
        now = self.clock()
        if now - self.started >= self.window:
            self.started, self.said = now, 0
        if self.said >= self.burst:
            self.left_out += 1
            return None
        self.said += 1
        if self.left_out:
            note, self.left_out = f" ({self.left_out} more {self.what} were not logged)", 0
            return note
        if self.said == self.burst:
            return f" (the next {self.what} within {self.window:g} s are not logged)"
        return ""
