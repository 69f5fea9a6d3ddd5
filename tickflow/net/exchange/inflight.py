"""Commands between `submit` and their answer, and the retries of a clientOrderId whose first attempt is
one of them: a retry waits for the first attempt's answer instead of being sequenced again."""

from __future__ import annotations

import asyncio

from tickflow.core.types import Command, NewOrder, Outcome, Reason


class Resubmit(Exception):
    """The attempt a retry was waiting for never reached the queue: the retry goes in itself."""


class Item:
    """One submitted command, its caller's future, and retries of the same clientOrderId waiting on it."""

    __slots__ = ("command", "future", "key", "retries")

    def __init__(self, command: Command, future: asyncio.Future[Outcome], key: tuple[str, str] | None) -> None:
        self.command = command
        self.future = future
        self.key = key
        self.retries: list[asyncio.Future[Outcome]] | None = None


class InFlight:
    """The first attempt of each (account, clientOrderId) that is queued or written but not yet answered."""

    def __init__(self) -> None:
        self._first: dict[tuple[str, str], Item] = {}

    def get(self, key: tuple[str, str]) -> Item | None:
        return self._first.get(key)

    def add(self, item: Item) -> None:
        self._first[item.key] = item  # type: ignore[index]

    def wait_on(self, first: Item) -> asyncio.Future[Outcome]:
        """A future for a retry of `first`: its answer, or Resubmit if it never reached the queue."""
        waiter: asyncio.Future[Outcome] = first.future.get_loop().create_future()
        if first.retries is None:
            first.retries = []
        first.retries.append(waiter)
        return waiter

    @staticmethod
    def same_answer(command: NewOrder, first: Item, outcome: Outcome) -> Outcome:
        """What a retry is answered with the first attempt's outcome: the original result, or a mismatch."""
        error = None if first.command == command else Reason.DUPLICATE_MISMATCH
        return Outcome(outcome.seq, outcome.result, error, [], [], [], replayed=True)

    def finish(self, item: Item, outcome: Outcome | None, error: BaseException | None) -> None:
        """`item` is answered (or refused): its retries get the same, and a new attempt is sequenced afresh."""
        if self._first.get(item.key) is item:  # type: ignore[arg-type]
            del self._first[item.key]  # type: ignore[arg-type]
        for retry in item.retries or ():
            if retry.done():
                continue
            if error is not None:
                retry.set_exception(error)
            else:
                retry.set_result(outcome)  # type: ignore[arg-type]

    def never_queued(self, item: Item, error: BaseException) -> None:
        """`item`'s caller gave up before it was queued: a retry waiting on it goes in itself."""
        if item.key is not None and self._first.get(item.key) is item:
            del self._first[item.key]
        for retry in item.retries or ():
            if not retry.done():
                retry.set_exception(Resubmit() if isinstance(error, asyncio.CancelledError) else error)
