"""`tickflow`: the exchange server and its tools, one subcommand each."""

from __future__ import annotations

import argparse
import importlib
import math
import sys
from typing import TextIO
from urllib.parse import urlsplit

COMMANDS = {
    "serve": ("tickflow.net.server", "run the exchange server"),
    "simulate": ("tickflow.net.simulate", "run a simulated market against a server"),
    "demo": ("tickflow.demo", "start a local server, a simulated market and the terminal screen"),
    "log": ("tickflow.store.inspect", "check a write-ahead log: replay it and print what it holds"),
}


def server_url(text: str) -> str:
    """An argparse type: a server's address, http(s)://host[:port] (a trailing / is dropped)."""
    parts = urlsplit(text)
    try:
        port_ok = parts.port != 0
    except ValueError:  # not a number, or above 65535
        port_ok = False
    host = parts.hostname or ""
    if (parts.scheme not in ("http", "https") or not host or any(c.isspace() for c in host) or not port_ok
            or parts.path not in ("", "/") or parts.query or parts.fragment or parts.username is not None):
        raise argparse.ArgumentTypeError(f"{text!r} is not a server address of the form http(s)://host[:port]")
    return text.rstrip("/")


def port_number(text: str) -> int:
    """An argparse type: a TCP port, 0 for any free one."""
    if not text.strip().isdigit() or int(text) > 65_535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number from 0 to 65535 (0 picks a free one)")
    return int(text)


def positive_number(text: str) -> float:
    """An argparse type: a finite number above 0."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number above 0")
    return value


def usage(out: TextIO) -> None:
    """Print the command list."""
    print("usage: tickflow <command> [options]\n\ncommands:", file=out)
    for name, (_, about) in COMMANDS.items():
        print(f"  {name:<10} {about}", file=out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        usage(sys.stdout)
        return 0
    if not argv or argv[0] not in COMMANDS:
        if argv:
            print(f"tickflow: unknown command {argv[0]!r}", file=sys.stderr)
        usage(sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
