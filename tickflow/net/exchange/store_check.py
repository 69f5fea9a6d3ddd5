"""The trade store's full integrity check, run once the server is up rather than on the start's path.

`PRAGMA quick_check` reads every page of trades.sqlite, and that file grows with the history (every trade
and finished order), so a start that ran it would grow with the history too (docs/decisions.md, "The
trade store's integrity check runs in the background"). A start checks only what costs the same for any
file (store/trades.py `TradeStore.open`); this task runs the full check on its own read-only connection,
in a thread, while the server serves.

A store found damaged is not moved while the server runs (its writer and readers hold it open): the
server says so loudly (an error in the log, /health degraded, /metrics), keeps taking orders (the log is
the truth), and leaves a marker file beside the store, so the next start runs the full check before it
uses the store and sets a damaged one aside (startup.py `_open_store`).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from pathlib import Path

from tickflow.store.trades import open_for_check, quick_check

log = logging.getLogger("tickflow")

MARKER_SUFFIX = ".check-failed"


def marker_path(store: Path) -> Path:
    """The file that says a full check of `store` failed while a server ran: the next start checks it whole."""
    return store.with_name(store.name + MARKER_SUFFIX)


class StoreCheck:
    """One background quick_check of the trade store; what it found."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None
        """What the check found wrong (None: sound, or not yet known)."""
        self.failures = 0
        self.done = False
        self._db: sqlite3.Connection | None = None
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._db = await loop.run_in_executor(None, open_for_check, str(self.path))
            if self._stopping:
                return
            found = await loop.run_in_executor(None, quick_check, self._db)
        except sqlite3.OperationalError as e:
            if "interrupted" in str(e):  # the server is stopping
                return
            found = str(e)
        except sqlite3.Error as e:
            found = str(e)
        finally:
            if self._db is not None:
                self._db.close()
                self._db = None
        self.done = True
        if found is None:
            marker_path(self.path).unlink(missing_ok=True)
            log.info("the trade store %s passed its integrity check", self.path)
            return
        self.error = (f"the trade store {self.path} is damaged ({found}): orders still flow (the log holds them), "
                      "history reads may fail. Stop the server and start it again: the start sets the store aside "
                      "and rebuilds it from the log, or says what to restore when the log can no longer rebuild it")
        self.failures += 1
        log.error("%s", self.error)
        try:
            marker_path(self.path).touch()
        except OSError as e:
            log.error("cannot leave the marker %s for the next start: %s", marker_path(self.path), e)

    async def stop(self) -> None:
        """Interrupt a check still running and wait for it to end."""
        if self._task is None:
            return
        self._stopping = True
        if self._db is not None:
            self._db.interrupt()
        await asyncio.gather(self._task, return_exceptions=True)
        self._task = None
