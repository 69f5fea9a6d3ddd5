"""`tickflow demo`: a local exchange, a simulated market and the terminal screen, in one command.

Starts `tickflow serve` (data in ./tickflow-data by default, SQLite embedded), waits for `/health`, starts
`tickflow simulate` in the background, prints the browser page's address, and runs `tickflow-tui` in
the foreground. Quitting the screen (or Ctrl-C) stops everything it started. A server that stops by
itself (`kill -9` it to see) is started again, as a supervisor would: its log brings every order back.

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
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path

from tickflow.net.wire.args import port_number, positive_number

_LISTENING = re.compile(r"listening on (http://[^\s]+)(?:.*?(\d+) records replayed)?")
RESTARTS = 3
"""Restarts of a server that stopped by itself the demo makes within RESTART_WINDOW seconds, before it gives up."""
RESTART_WINDOW = 60.0
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
        self.replayed = 0
        """Log records the last start replayed."""

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
                    self.replayed = int(found.group(2) or 0)
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
    supervisor: Supervisor | None = None
    keeper: threading.Thread | None = None
    said: list[str] = []
    try:
        print(f"starting tickflow serve (data {args.data}) …", flush=True)
        url = server.start()

        def market() -> subprocess.Popen[bytes]:
            with open(Path(args.data) / "simulate.log", "ab") as sim_log:
                return subprocess.Popen(
                    [sys.executable, "-m", "tickflow.cli", "simulate", "--url", url, "--rate", str(args.rate),
                     "--symbols", ",".join(symbols)],
                    stdout=sim_log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=_die_with_parent)

        print(f"tickflow demo: server {url}  ·  browser page {url}/  ·  logs in {args.data}/", flush=True)
        if args.no_tui:
            supervisor = Supervisor(server, market, _say)
            print("Ctrl-C stops the demo; a server that stops by itself is started again.", flush=True)
            with contextlib.suppress(KeyboardInterrupt):
                supervisor.run()
        else:
            # The screen owns the terminal: what the supervisor did is told once the screen is closed.
            supervisor = Supervisor(server, market, lambda line: said.append(f"{time.strftime('%H:%M:%S')} {line}"))
            keeper = threading.Thread(target=supervisor.run, name="demo-supervisor", daemon=True)
            keeper.start()
            time.sleep(0.5)
            from tickflow.tui.app import TickflowApp
            from tickflow.tui.backend import LiveBackend

            TickflowApp(LiveBackend(url, args.account), symbols[0]).run()
            for line in said:
                _say(line)
            print(f"tickflow demo: stopped. The browser page was {url}/", flush=True)
    except ServerStartError as e:
        _say(f"{e.headline}: {e.output or 'no output'}")
        return 1
    except KeyboardInterrupt:
        pass
    finally:
        if supervisor is not None:
            supervisor.stopping.set()
            if keeper is not None:
                keeper.join(30)  # a restart under way finishes first, so nothing is left running
            supervisor.stop_market()
        server.stop()
    return 1 if supervisor is not None and supervisor.failed else 0


def _say(line: str) -> None:
    print(f"tickflow demo: {line}", file=sys.stderr, flush=True)


class Supervisor:
    """Keeps the demo's server and market running, as an operator's supervisor would: a server that stops
    by itself is started again on its port and data directory (its log brings every acknowledged order
    back), at most RESTARTS times within RESTART_WINDOW seconds; then the demo gives up and says why."""

    def __init__(self, server: ServerProcess, start_market: Callable[[], subprocess.Popen[bytes]],
                 say: Callable[[str], None]) -> None:
        self.server = server
        self.start_market = start_market
        self.say = say
        self.market = start_market()
        self.market_reported = False
        self.stopping = threading.Event()
        self.failed: str | None = None
        self.restarts: list[float] = []

    def run(self) -> None:
        """Watch until `stopping` is set or the server cannot be kept running."""
        while not self.stopping.wait(0.25):
            proc = self.server.proc
            if proc is not None and proc.poll() is not None and not self._restart(_exit_status(proc.returncode)):
                return
            if not self.market_reported and self.market.poll() is not None:
                self.market_reported = True
                self.say(f"the simulated market stopped ({_exit_status(self.market.returncode)}); "
                         f"see {self.server.data / 'simulate.log'}")

    def _restart(self, how: str) -> bool:
        now = time.monotonic()
        self.restarts = [t for t in self.restarts if now - t < RESTART_WINDOW]
        if len(self.restarts) >= RESTARTS:
            self.failed = (f"the server stopped unexpectedly ({how}), {RESTARTS + 1} times within "
                           f"{RESTART_WINDOW:g} s: not starting it again; see {self.server.log_path}")
            self.say(self.failed)
            return False
        self.restarts.append(now)
        self.say(f"the server stopped unexpectedly ({how}); starting it again")
        try:
            self.server.restart()
        except ServerStartError as e:
            self.failed = f"the server stopped unexpectedly ({how}) and did not start again: {e.headline}: {e.output}"
            self.say(self.failed)
            return False
        self.say(f"the server is back after {time.monotonic() - now:.1f} s ({self.server.replayed} log records "
                 f"replayed), on {self.server.url}")
        if self.market.poll() is not None:  # it gave up while the server was away
            self.market = self.start_market()
            self.market_reported = False
        return True

    def stop_market(self) -> None:
        if self.market.poll() is None:
            self.market.send_signal(signal.SIGINT)
            try:
                self.market.wait(5)
            except subprocess.TimeoutExpired:
                self.market.kill()


