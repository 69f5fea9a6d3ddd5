"""The clientOrderIds the engine remembers: (account, clientOrderId) -> the order's first answer, kept for the
idempotency window and then forgotten.

The window is measured in the log's time (each record's stamp), never the clock of the process that
replays, so a replay forgets exactly what the first run forgot. An entry made by a record stamped T is
answered from up to, and forgotten by, the first record stamped T + window or later (a Rules record that
changes the window forgets under the new one: it applies to what is kept). Entries go in log
order and stamps never run backwards, so the oldest entry is always the next to go: a queue of keys in
the order they went in finds it without scanning.
"""

from __future__ import annotations

from collections import deque
from typing import Iterable

from tickflow.core.orders import same_order
from tickflow.core.types import NewOrder, OrderState, Outcome, Reason

Key = tuple[str, str]
"""(account, clientOrderId)."""

NEVER = 1 << 63
"""Above every stamp: nothing falls due."""


class ClientOrderIds(dict[Key, OrderState]):
    """The table the engine looks retries up in (a dict, so `key in table` and `table[key]` stay plain
    dict operations on the order path). Entries go in through `remember` only, which also queues the key;
    `forget_until` drops those whose window has passed."""

    def __init__(self, window: int = 0) -> None:
        super().__init__()
        self.window = window
        """Milliseconds a clientOrderId is remembered (0: for ever), as the last Rules record set it."""
        self.due = NEVER
        """The stamp from which the oldest entry is forgotten (NEVER when none is due)."""
        self._order: deque[Key] = deque()

    @classmethod
    def load(cls, entries: Iterable[tuple[str, str, OrderState]], window: int) -> ClientOrderIds:
        """The table holding `entries`, oldest first (as `items()` lists them)."""
        table = cls(window)
        for account, coid, answer in entries:
            table.remember((account, coid), answer)
        return table

    def remember(self, key: Key, answer: OrderState) -> None:
        """Keep `answer` as the one a retry of `key` gets (the key is new: a retry never gets here)."""
        self[key] = answer
        self._order.append(key)
        if self.due == NEVER and self.window:
            self.due = answer.ts + self.window

    def set_window(self, window: int, now: int) -> None:
        """A new window, in force from the record stamped `now`: it applies to the entries already kept."""
        self.window = window
        self.due = 0 if window else NEVER  # forget_until finds the oldest entry's due stamp itself
        self.forget_until(now)

    def forget_until(self, now: int) -> None:
        """Forget every entry whose window has passed at stamp `now`."""
        if now < self.due:
            return
        window, order = self.window, self._order
        while order:
            due = self[order[0]].ts + window
            if due > now:
                self.due = due
                return
            del self[order.popleft()]
        self.due = NEVER

    def answer(self, key: Key, now: int) -> OrderState | None:
        """The first answer kept for `key` if its window has not passed at stamp `now`, else None."""
        answer = self.get(key)
        if answer is None or (self.window and answer.ts + self.window <= now):
            return None
        return answer

    def retry(self, command: NewOrder, now: int) -> Outcome | None:
        """The answer to `command` if it retries a clientOrderId still remembered at stamp `now`: the first
        answer, with DUPLICATE_MISMATCH if the retry is not the same order; None for a new one."""
        if command.client_order_id is None:
            return None
        first = self.answer((command.account, command.client_order_id), now)
        if first is None:
            return None
        error = None if same_order(first, command) else Reason.DUPLICATE_MISMATCH
        return Outcome(first.seq, first, error, [], [], [], replayed=True)
