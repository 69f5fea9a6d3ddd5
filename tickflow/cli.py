"""`tickflow`: the exchange server and its tools, one subcommand each."""

from __future__ import annotations

import importlib
import sys

COMMANDS = {
    "serve": ("tickflow.net.server", "run the exchange server"),
    "simulate": ("tickflow.net.simulate", "run a simulated market against a server"),
    "demo": ("tickflow.demo", "start a local server, a simulated market and the terminal screen"),
    "log": ("tickflow.store.inspect", "check a write-ahead log: replay it and print what it holds"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in COMMANDS:
        print("usage: tickflow <command> [options]\n\ncommands:")
        for name, (_, about) in COMMANDS.items():
            print(f"  {name:<10} {about}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
