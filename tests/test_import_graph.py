"""The import graph of reliableq/: no circle, and the queue layer imports nothing above it.

Read from the source (the AST), not by importing. An edge A -> B is an import of B written in A:

- module level: the statements Python runs when A is imported (class bodies, try and if blocks
  included; an `if TYPE_CHECKING:` block left out, as it never runs). Importing `a.b.c` runs the
  packages `a` and `a.b` first, so those are edges too, but for A's own packages (already running
  when A is);
- function level: an import inside a function, run when the function is called. Such imports
  still say which module needs which, so they count for circles too; they exist where a module
  must wait for Django's app registry (the models) or is loaded in another process.

`from pkg import name` is an edge to pkg.name when that is a module, else to pkg. Migrations are
left out: Django loads them on its own. A circle that exists on purpose would be listed here with
its reason; none does.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from tests.support import ROOT

PACKAGE = "reliableq"
# The queue layer talks SQL for everything above it: it may import its own modules and these,
# which import nothing above it either (settings, errors, the models and what they need, the
# handler registry, the pure rules, what counts as an outage), never services, workflows, api,
# admin, worker or commands.
BELOW_THE_QUEUE = {
    "reliableq",
    "reliableq.conf",
    "reliableq.errors",
    "reliableq.faults",
    "reliableq.floors",
    "reliableq.fields",
    "reliableq.ids",
    "reliableq.models",
    "reliableq.options",
    "reliableq.outage",
    "reliableq.registry",
    "reliableq.rules",
}


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(importer: str, node: ast.Import | ast.ImportFrom, known: dict[str, Path]) -> Iterator[str]:
    def home(name: str) -> str | None:  # the longest known module that `name` is or is inside
        while name and name not in known:
            name = name.rpartition(".")[0]
        return name or None

    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            package = importer if known[importer].name == "__init__.py" else importer.rpartition(".")[0]
            for _ in range(node.level - 1):
                package = package.rpartition(".")[0]
            base = f"{package}.{node.module}" if node.module else package
        else:
            base = node.module or ""
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
    for name in names:
        target = home(name)
        if target is None:
            continue
        yield target
        parent = target.rpartition(".")[0]
        while parent:  # the packages Python runs first, but for the importer's own
            if not (importer == parent or importer.startswith(parent + ".")):
                yield parent
            parent = parent.rpartition(".")[0]


def _imports(importer: str, known: dict[str, Path], *, functions: bool) -> set[str]:
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) and not functions:
                continue
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(ast.Module(body=[other], type_ignores=[]))
                continue
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.update(_targets(importer, child, known))
            visit(child)

    visit(ast.parse(known[importer].read_text(encoding="utf-8")))
    found.discard(importer)
    return found


def graph(*, functions: bool) -> dict[str, set[str]]:
    known = modules()
    return {name: _imports(name, known, functions=functions) for name in known}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return sorted(found)


def test_the_check_finds_a_circle_and_the_package_runs_before_its_module():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    known = {"reliableq.models": Path("models.py"), "reliableq.queue": Path("__init__.py"),
             "reliableq.queue.db": Path("db.py"), "reliableq": Path("__init__.py")}  # fmt: skip
    node = ast.parse("from .queue import db").body[0]
    assert isinstance(node, ast.ImportFrom)
    assert set(_targets("reliableq.models", node, known)) == {"reliableq.queue.db", "reliableq.queue"}


def test_no_circle_among_module_level_imports():
    assert circles(graph(functions=False)) == []


def test_no_circle_even_with_the_imports_inside_functions():
    assert circles(graph(functions=True)) == []


def test_the_queue_layer_imports_nothing_above_it():
    above = {
        f"{importer} -> {target}"
        for importer, targets in graph(functions=True).items()
        if importer == "reliableq.queue" or importer.startswith("reliableq.queue.")
        for target in targets
        if not (target.startswith("reliableq.queue") or target in BELOW_THE_QUEUE)
    }
    assert sorted(above) == []
