"""The import graph of the project's packages, read from the source (no module is run):
no two modules import each other, directly or through others, and no layer imports one
above it (protocol <- coordinator <- broker). Imports inside functions count (they run
when called); those under ``if TYPE_CHECKING:`` do not (they never run)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "coordinator", "broker", "spark_client")
LAYER = {"protocol": 0, "coordinator": 1, "broker": 2}


def _modules() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _imported(tree: ast.Module) -> list[str]:
    """The dotted names a module imports at run time, in the form ``a.b`` or ``a.b.name``."""
    skipped = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    names = []
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def import_graph() -> dict[str, set[str]]:
    modules = _modules()

    def module_of(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in modules.items():
        targets = {module_of(n) for n in _imported(ast.parse(path.read_text(), str(path)))}
        # importing a.b.c runs a and a.b first: a package's __init__ is a dependency too
        for t in list(targets):
            while t and "." in t:
                t = t.rpartition(".")[0]
                targets.add(t if t in modules else None)
        graph[name] = {t for t in targets if t and t != name and not name.startswith(t + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    assert cycles(import_graph()) == []


def test_no_layer_imports_one_above_it():
    upward = [(m, t) for m, targets in import_graph().items() for t in targets
              if m.split(".")[0] in LAYER and t.split(".")[0] in LAYER
              and LAYER[t.split(".")[0]] > LAYER[m.split(".")[0]]]
    assert upward == []


def test_the_walk_sees_a_cycle_and_a_function_level_import():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import x\n"
                     "def f():\n    from broker import clock\n")
    assert _imported(tree) == ["typing.TYPE_CHECKING", "broker.clock"]
