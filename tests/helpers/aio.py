"""Small asyncio helpers for sequencer tests."""

from __future__ import annotations

import asyncio
import time
from typing import Callable

from helpers.logs import open_log

from tickflow.net.exchange.sequencer import Durability, Sequencer
from tickflow.store.log.wal import FileOps


async def until(condition: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    """Poll `condition` on the loop until it holds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.001)


async def started(path: str, mode: Durability | str = "group", ops: FileOps | None = None,
                  **kwargs: object) -> Sequencer:
    """A running sequencer over the (replayed) log at `path`."""
    wal, engine, _ = open_log(path, ops)
    sequencer = Sequencer(engine, wal, mode, **kwargs)  # type: ignore[arg-type]
    await sequencer.start()
    return sequencer
