"""`tickflow demo`: a local exchange, a simulated market and the terminal screen, in one command.

Starts `tickflow serve` (data in ./tickflow-data by default, SQLite embedded), waits for `/health`, starts
`tickflow simulate` in the background, prints the browser page's address, and runs `tickflow-tui` in
the foreground. Quitting the screen (or Ctrl-C) stops everything it started.

`ServerProcess` is the same start/wait/kill/restart logic as a class, for tests and scripts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path

from tickflow.cli import port_number, positive_number

_LISTENING = re.compile(r"listening on (http://[^\s]+)")
_direct = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # 127.0.0.1 never via a proxy


class ServerStartError(RuntimeError):
    """`tickflow serve` did not come up; `output` is what it printed (or why it could not be started)."""

    def __init__(self, message: str, output: str) -> None:
        super().__init__(f"{message}:\n{output}")
        self.output = output.strip()
        self.headline = message


class ServerProcess:
    """A `tickflow serve` child process on 127.0.0.1.

    `start()` returns once `/health` answers 200. `kill()` is kill -9; `restart()` starts it again on the
    same port and data directory, as after a crash. Output goes to `DATA/server.log`.
    """

    def __init__(self, data: str | Path, *, port: int = 0, symbols: Sequence[str] = ("ACME",),
                 durability: str = "group", host: str = "127.0.0.1", extra: Sequence[str] = (),
                 die_with_parent: bool = False) -> None:
        self.data = Path(data)
        self.die_with_parent = die_with_parent
        self.host = host
        self.port = port
        self.symbols = list(symbols)
        self.durability = durability
        self.extra = list(extra)
        self.proc: subprocess.Popen[bytes] | None = None
        self.url = ""

    @property
    def log_path(self) -> Path:
        return self.data / "server.log"

    def start(self, timeout: float = 20.0) -> str:
        try:
            if self.data.exists() and not self.data.is_dir():
                raise NotADirectoryError(0, "it is not a directory")
            self.data.mkdir(parents=True, exist_ok=True)
            log = open(self.log_path, "ab")
        except OSError as e:
            raise ServerStartError("tickflow serve not started",
                                   f"cannot use {self.data} as the data directory: {e.strerror or e}") from e
        offset = log.tell()
        cmd = [sys.executable, "-m", "tickflow.cli", "serve", "--data", str(self.data), "--host", self.host,
               "--port", str(self.port), "--durability", self.durability, "--symbols", ",".join(self.symbols),
               "--quiet", *self.extra]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, start_new_session=True,
                                     preexec_fn=_die_with_parent if self.die_with_parent else None)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.url or not self._healthy():
            if self.proc.poll() is not None:
                raise ServerStartError(f"tickflow serve exited with {self.proc.returncode}", self._log_tail(offset))
            if time.monotonic() > deadline:
                self.kill()
                raise ServerStartError(f"tickflow serve not ready after {timeout} s", self._log_tail(offset))
            if not self.url:
                found = _LISTENING.search(self._log_tail(offset))
                if found:
                    self.url = found.group(1)
                    self.port = int(self.url.rsplit(":", 1)[1])
            time.sleep(0.05)
        return self.url

    def _log_tail(self, offset: int) -> str:
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def _healthy(self) -> bool:
        try:
            with _direct.open(self.url + "/health", timeout=1) as resp:
                return resp.status == 200
        except (urllib.error.URLError, OSError):
            return False

    def kill(self) -> None:
        """SIGKILL, as in a crash: nothing is flushed or closed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (a clean shutdown), then SIGKILL if it does not stop in time."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self, timeout: float = 20.0) -> str:
        """Start again on the same port and data directory (after `kill()` or `stop()`)."""
        self.kill()
        self.url = ""
        return self.start(timeout)

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _die_with_parent() -> None:
    """In the child before exec (Linux): SIGTERM it when the demo dies, even by kill -9 or a closed terminal."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _exit_status(code: int) -> str:
    """A child's return code in words: 'exit 1' or 'killed by SIGKILL'."""
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-code).name}"
    return f"exit {code}"


def free_port(preferred: int) -> int:
    """`preferred` when nothing listens there, else a port the OS picks."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds: TIME_WAIT is no obstacle
        try:
            s.bind(("127.0.0.1", preferred))
        except OSError:
            s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tickflow demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="./tickflow-data", help="data directory (default %(default)s)")
    parser.add_argument("--port", type=port_number, default=8080, help="port, or a free one if taken (default %(default)s)")
    parser.add_argument("--symbols", default="ACME,BETA", help="symbols to open (default %(default)s)")
    parser.add_argument("--rate", type=positive_number, default=20.0,
                        help="simulated orders per second (default %(default)s)")
    parser.add_argument("--account", default="alice", help="your account on the screen (default %(default)s)")
    parser.add_argument("--durability", default="group", choices=["none", "group", "order"])
    parser.add_argument("--no-tui", action="store_true", help="run server and market only, until Ctrl-C")
    args = parser.parse_args(argv)
    symbols = [s.strip() for s in args.symbols.split(",") if s.strip()]

    server = ServerProcess(args.data, port=free_port(args.port), symbols=symbols, durability=args.durability,
                           die_with_parent=True)
    # A closed terminal (SIGHUP) or a plain kill stops the demo the way Ctrl-C does: children stopped cleanly.
    signal.signal(signal.SIGHUP, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    sim: subprocess.Popen[bytes] | None = None
    status = 0
    try:
        print(f"starting tickflow serve (data {args.data}) …", flush=True)
        url = server.start()
        sim_log = open(Path(args.data) / "simulate.log", "ab")
        sim = subprocess.Popen(
            [sys.executable, "-m", "tickflow.cli", "simulate", "--url", url, "--rate", str(args.rate),
             "--symbols", ",".join(symbols)],
            stdout=sim_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=_die_with_parent)
        sim_log.close()
        print(f"tickflow demo: server {url}  ·  browser page {url}/  ·  logs in {args.data}/", flush=True)
        if args.no_tui:
            print("Ctrl-C stops the demo.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                _watch(server, sim, Path(args.data))
        else:
            time.sleep(0.5)
            from tickflow.tui.app import TickflowApp
            from tickflow.tui.backend import LiveBackend

            TickflowApp(LiveBackend(url, args.account), symbols[0]).run()
            print(f"tickflow demo: stopped. The browser page was {url}/", flush=True)
        status = _server_died(server)
    except ServerStartError as e:
        print(f"tickflow demo: {e.headline}: {e.output or 'no output'}", file=sys.stderr)
        status = 1
    except KeyboardInterrupt:
        pass
    finally:
        if sim is not None and sim.poll() is None:
            sim.send_signal(signal.SIGINT)
            try:
                sim.wait(5)
            except subprocess.TimeoutExpired:
                sim.kill()
        server.stop()
    return status


def _watch(server: ServerProcess, sim: subprocess.Popen[bytes], data: Path) -> None:
    """Wait while the server runs; say once if the simulated market stops by itself."""
    sim_reported = False
    while server.proc is not None and server.proc.poll() is None:
        if not sim_reported and sim.poll() is not None:
            sim_reported = True
            print(f"tickflow demo: the simulated market stopped ({_exit_status(sim.returncode)}); "
                  f"see {data / 'simulate.log'}", file=sys.stderr, flush=True)
        time.sleep(0.5)


def _server_died(server: ServerProcess) -> int:
    """1 (after saying so) when the server stopped while the demo ran, else 0."""
    if server.proc is None or server.proc.poll() is None:
        return 0
    print(f"tickflow demo: the server stopped unexpectedly ({_exit_status(server.proc.returncode)}); "
          f"see {server.log_path}", file=sys.stderr, flush=True)
    return 1
