"""A real `tickflow serve` in a child process on a free port of 127.0.0.1, for tests."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

_LISTENING = re.compile(r"listening on (http://127\.0\.0\.1:\d+)")


class ServerProcess:
    def __init__(self, data: Path, durability: str = "group", symbols: str = "ACME,GLOBEX",
                 extra: list[str] | None = None) -> None:
        self.data = Path(data)
        self.durability = durability
        self.symbols = symbols
        self.extra = extra or []
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""
        self.port = 0
        self.starts = 0

    @property
    def ws_url(self) -> str:
        return self.url.replace("http://", "ws://") + "/ws"

    def start(self, timeout: float = 30.0) -> "ServerProcess":
        self.data.mkdir(parents=True, exist_ok=True)
        self.starts += 1
        out = self.data.parent / f"{self.data.name}-server-{self.starts}.out"
        # Reuse the port of an earlier start, so clients see "the same server came back".
        cmd = [sys.executable, "-m", "tickflow.cli", "serve", "--data", str(self.data), "--host", "127.0.0.1",
               "--port", str(self.port), "--durability", self.durability, "--symbols", self.symbols, *self.extra]
        with open(out, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = out.read_text(errors="replace")
            match = _LISTENING.search(text)
            if match:
                self.url = match.group(1)
                self.port = int(self.url.rsplit(":", 1)[1])
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{text}")
            time.sleep(0.02)
        else:
            self.kill()
            raise RuntimeError(f"server did not start in {timeout}s:\n{out.read_text(errors='replace')}")
        with urllib.request.urlopen(self.url + "/health", timeout=timeout) as r:
            assert r.status == 200
        self.output_path = out
        return self

    def output(self) -> str:
        return self.output_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no clean-up, no flush, exactly a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self, timeout: float = 20.0) -> int:
        """SIGTERM and wait for a clean exit; returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
                raise
        return self.proc.returncode

    def restart(self, *, kill: bool) -> "ServerProcess":
        self.kill() if kill else self.stop()
        return self.start()
