"""Small asyncio helpers for sequencer tests."""

from __future__ import annotations

from helpers.logs import open_log
from helpers.wait import until

from tickflow.net.exchange.sequencer import Durability, Sequencer
from tickflow.store.log.wal import FileOps

__all__ = ["started", "until"]  # until lives in helpers.wait; kept here for tests that import it from here


async def started(path: str, mode: Durability | str = "group", ops: FileOps | None = None,
                  **kwargs: object) -> Sequencer:
    """A running sequencer over the (replayed) log at `path`."""
    wal, engine, _ = open_log(path, ops)
    sequencer = Sequencer(engine, wal, mode, **kwargs)  # type: ignore[arg-type]
    await sequencer.start()
    return sequencer
