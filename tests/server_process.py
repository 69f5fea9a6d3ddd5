"""The tests' handle on a real `tickflow serve`: tickflow.demo.ServerProcess with a test-friendly face."""

from __future__ import annotations

from pathlib import Path
from typing import Self

from tickflow.demo import ServerProcess as _ServerProcess


class ServerProcess(_ServerProcess):
    """A server on a free port of 127.0.0.1; restarts keep the port and the data directory."""

    def __init__(self, data: Path, durability: str = "group", symbols: str = "ACME,GLOBEX",
                 extra: list[str] | None = None) -> None:
        super().__init__(data, symbols=symbols.split(","), durability=durability, extra=list(extra or []))
        self._offset = 0

    @property
    def extra(self) -> list[str]:
        return self._extra

    @extra.setter
    def extra(self, flags: list[str]) -> None:
        # An open-order limit and an idempotency window are logged as a record at the first start (and
        # again when they change), which would move every seq and record count the tests expect of a fresh
        # log: tests ask for them when they are what they test (tests/test_open_order_limit.py,
        # tests/test_idempotency_window.py).
        flags = list(flags)
        if "--max-open-orders" not in flags:
            flags += ["--max-open-orders", "0"]
        if "--idempotency-window" not in flags:
            flags += ["--idempotency-window", "0"]
        self._extra = flags

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def start(self, timeout: float = 30.0) -> Self:  # type: ignore[override]
        self._offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self.url = ""
        super().start(timeout)
        return self

    def output(self) -> str:
        """What the server printed since its last start."""
        with open(self.log_path, "rb") as f:
            f.seek(self._offset)
            return f.read().decode("utf-8", "replace")

    def restart(self, *, kill: bool) -> Self:  # type: ignore[override]
        self.kill() if kill else self.stop()
        return self.start()
