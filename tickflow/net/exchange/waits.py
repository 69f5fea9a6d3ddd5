"""Waiting for a sequence number: the durable book mirror and the trade writer each keep one gate."""

from __future__ import annotations

import asyncio


class SeqGate:
    """The highest sequence number reached so far, and the readers waiting for a higher one."""

    def __init__(self, seq: int = 0) -> None:
        self.seq = seq
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []

    @property
    def waiting(self) -> int:
        """Readers waiting now."""
        return len(self._waiters)

    def advance(self, seq: int) -> None:
        """Everything up to `seq` is reached: release its waiters."""
        if seq <= self.seq:
            return
        self.seq = seq
        if not self._waiters:
            return
        waiting = []
        for wanted, future in self._waiters:
            if wanted <= seq:
                if not future.done():
                    future.set_result(None)
            else:
                waiting.append((wanted, future))
        self._waiters = waiting

    async def wait(self, seq: int, timeout: float) -> None:
        """Return once `seq` is reached; TimeoutError after `timeout` seconds. A reader that gives up
        leaves nothing behind, so readers that time out while the gate is stuck cost no memory."""
        if seq <= self.seq:
            return
        entry = (seq, asyncio.get_running_loop().create_future())
        self._waiters.append(entry)
        try:
            await asyncio.wait_for(entry[1], timeout)
        finally:
            if not entry[1].done() or entry[1].cancelled():
                try:
                    self._waiters.remove(entry)
                except ValueError:
                    pass
