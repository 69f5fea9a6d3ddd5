"""A session's events handed out: to listeners, called at once, and to async iterators, each with its
own bounded queue (a consumer that falls behind loses the oldest)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable

from tickflow.net.client.state import Event, StateChanged

log = logging.getLogger("tickflow.client")


class Fanout:
    """Listeners and iterators of one session's events. `stopped()` says whether the session has
    stopped for good: an iterator ends at the `closed` state that follows it."""

    def __init__(self, stopped: Callable[[], bool]) -> None:
        self._stopped = stopped
        self._listeners: list[Callable[[Event], None]] = []
        self._queues: list[asyncio.Queue[Event]] = []
        self._closed = True
        """The last state handed out was `closed` (or none was yet)."""

    def add_listener(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call `listener(event)` for every event; returns a remover."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def events(self, maxsize: int) -> AsyncIterator[Event]:
        """Every event from now on, until the session has stopped for good."""
        queue: asyncio.Queue[Event] = asyncio.Queue(maxsize)
        self._queues.append(queue)
        return self._drain(queue)

    async def _drain(self, queue: asyncio.Queue[Event]) -> AsyncIterator[Event]:
        try:
            while True:
                if queue.empty() and self._closed and self._stopped():
                    return
                event = await queue.get()
                yield event
                if isinstance(event, StateChanged) and event.state == "closed" and self._stopped():
                    return
        finally:
            self._queues.remove(queue)

    def emit(self, event: Event) -> None:
        if isinstance(event, StateChanged):
            self._closed = event.state == "closed"
        for listener in list(self._listeners):
            try:
                listener(event)
            except Exception:
                log.exception("session listener failed on %r", event)
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(event)
