"""The tree keeps its architecture: which room may import which, no import cycles, modules one can read
in a sitting, and a package list that matches the tree (docs/design.md, "The tree")."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tickflow"
MAX_LINES = 520
"""About 500 lines: a module one can read in one sitting."""

# Each room (a module-name prefix, the longest that matches wins) and the rooms it may import from.
# An arrow never points up: core -> store -> net/exchange -> net/gateway; the wire is shared by server
# and clients; the client side knows the server only through the wire.
ALLOWED: dict[str, tuple[str, ...]] = {
    "tickflow.core": ("tickflow.core",),
    "tickflow.store": ("tickflow.core", "tickflow.store"),
    "tickflow.net.wire": ("tickflow.core.types", "tickflow.net.wire"),
    "tickflow.net.exchange": ("tickflow.core", "tickflow.store", "tickflow.net.wire", "tickflow.net.exchange"),
    "tickflow.net.gateway": ("tickflow.core.types", "tickflow.net.wire", "tickflow.net.exchange.service",
                             "tickflow.net.gateway", "tickflow"),
    "tickflow.net.server": ("tickflow.net.exchange", "tickflow.net.gateway", "tickflow.net.wire",
                            "tickflow.store.datadir"),
    "tickflow.net.client": ("tickflow.net.wire", "tickflow.net.client"),
    "tickflow.tui": ("tickflow.net.wire", "tickflow.net.client", "tickflow.tui"),
    "tickflow.simulate": ("tickflow.net.wire", "tickflow.net.client"),
    "tickflow.demo": ("tickflow.net.wire", "tickflow.net.client", "tickflow.tui", "tickflow.simulate"),
    "tickflow.cli": (),
    "tickflow": (),
    "tickflow.net": (),
}
EXACT = {"tickflow"}
"""Imports allowed only as the name itself, never what is under it (`import tickflow` finds the package's
folder, for the page's files)."""


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """Every tickflow module `name` imports, at any depth of its code (TYPE_CHECKING blocks included)."""
    path = MODULES[name]
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:  # `from x import y` names module x.y when y is a module
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base)
    return {m for m in found if m == "tickflow" or m.startswith("tickflow.")}


def room_of(name: str) -> str:
    rooms = [r for r in ALLOWED if name == r or name.startswith(r + ".")]
    assert rooms, f"{name} is in no room of the layer table: add it to ALLOWED"
    return max(rooms, key=len)


def allowed(target: str, prefixes: tuple[str, ...]) -> bool:
    return any(target == p or (p not in EXACT and target.startswith(p + ".")) for p in prefixes)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_imports_only_from_the_rooms_its_layer_may_see(name: str) -> None:
    room = room_of(name)
    wrong = sorted(t for t in imports_of(name) if not allowed(t, ALLOWED[room]))
    assert not wrong, f"{name} (room {room}) may not import {wrong}"


def test_there_are_no_import_cycles() -> None:
    graph = {name: imports_of(name) & MODULES.keys() for name in MODULES}
    # A package's __init__ is imported with any module under it; it imports nothing here, so it adds no edge.
    cycles = _strongly_connected(graph)
    assert not cycles, f"import cycles: {cycles}"


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm: every group of two or more modules that import each other (a self-import too)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph)))

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1 or node in graph[node]:
                groups.append(sorted(group))

    for node in graph:
        if node not in index:
            visit(node)
    return groups


def test_the_cycle_finder_finds_a_cycle() -> None:
    """The check above can fail: a planted cycle is found, an acyclic graph is not."""
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _strongly_connected({"a": {"b"}, "b": set()}) == []


def test_the_layer_check_catches_an_upward_import() -> None:
    """A core module importing the engine's server, or a client importing the core, is refused."""
    assert not allowed("tickflow.net.exchange.sequencer", ALLOWED[room_of("tickflow.core.engine")])
    assert not allowed("tickflow.core.types", ALLOWED[room_of("tickflow.net.client.state")])
    assert not allowed("tickflow.net.exchange.sequencer", ALLOWED[room_of("tickflow.net.gateway.orders")])
    assert allowed("tickflow.net.exchange.service", ALLOWED[room_of("tickflow.net.gateway.orders")])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_each_module_can_be_read_in_one_sitting(name: str) -> None:
    lines = len(MODULES[name].read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines: split it where it holds two jobs"


def test_the_package_list_matches_the_tree() -> None:
    """pyproject.toml names every package by hand (web/ ships as tickflow.web); a new folder must be added."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {module_name(p) for p in PACKAGE.rglob("__init__.py")}
    assert set(config["packages"]) == on_disk | {"tickflow.web"}
    assert config["package-dir"] == {"tickflow.web": "web"}
