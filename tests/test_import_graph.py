"""Quire's modules import one another without a cycle, lazy imports inside
functions included: a cycle means two modules that are really one concern,
or one that holds what both need."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for top in ("libs", "services"):
        for path in (ROOT / top).rglob("*.py"):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")) or {"versions", "build"} & set(
                path.parts
            ):
                continue
            if "quire" not in path.parts:
                continue
            parts = path.parts[path.parts.index("quire") :]
            name = ".".join(parts).removesuffix(".py").removesuffix(".__init__")
            found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                names.add(submodule if submodule in modules else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names & modules.keys()


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def test_the_finder_sees_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_itself_through_others() -> None:
    modules = _modules()
    assert len(modules) > 200, "the sources were found"
    graph = {name: _imports(path, modules) - {name} for name, path in modules.items()}
    assert _cycles(graph) == []
