"""`tickflow`: the exchange server and its tools, one subcommand each."""

from __future__ import annotations

import importlib
import sys
from typing import TextIO

COMMANDS = {
    "serve": ("tickflow.net.server", "run the exchange server"),
    "simulate": ("tickflow.simulate", "run a simulated market against a server"),
    "demo": ("tickflow.demo", "start a local server, a simulated market and the terminal screen"),
    "log": ("tickflow.store.check", "check a write-ahead log: replay it and print what it holds"),
}


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
