"""The package's import graph: no cycles, and the layers' law.

Every import statement counts, at module level or inside a function (an import
deferred into a function is still a dependency, and a cycle through one is still a
cycle: it only moves the failure to the first call). Imports under ``if
TYPE_CHECKING:`` are annotations only and do not count. ``from package import name``
is an edge to the submodule ``name`` when there is one, else to the package.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"

#: Packages and what they must never import (see docs/design.md, "Layers").
LAYERS = {
    # pure: no I/O, no randomness, no data
    "dpcurator.privacy": ("curator", "backends", "service", "cli", "planner", "mechanisms"),
    "dpcurator.queries": ("curator", "backends", "service", "cli", "planner", "mechanisms"),
    # the planner never reads data
    "dpcurator.planner": ("curator", "backends", "service", "cli"),
    # backends only count: no budget, no noise
    "dpcurator.backends": ("curator", "mechanisms", "planner", "service", "cli"),
    "dpcurator.mechanisms": ("curator", "backends", "service", "cli"),
    "dpcurator.sql": ("curator", "backends", "service", "cli"),
    "dpcurator.curator": ("service", "cli"),
    "dpcurator.service": ("cli",),
}
#: Modules the pure packages never import (randomness, storage, network, processes).
IMPURE = (
    "random", "secrets", "numpy.random", "socket", "subprocess", "sqlite3", "duckdb",
    "pyspark", "psycopg", "fastapi", "httpx", "uvicorn",
)  # fmt: skip


def modules(src: Path) -> dict[str, Path]:
    """Every module under ``src``: its dotted name and its file."""
    out = {}
    for path in sorted(src.rglob("*.py")):
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> dict[str, int]:
    """What module ``name`` imports (any module, ours or not): each with the line of
    its first import, outside ``if TYPE_CHECKING:`` blocks."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(node)
        for block in ast.walk(tree)
        if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
        for stmt in block.body
        for node in ast.walk(stmt)
    }
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    out: dict[str, int] = {}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.setdefault(alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.setdefault(sub if sub in known else base, node.lineno)
    out.pop(name, None)
    return out


def graph(src: Path) -> dict[str, dict[str, int]]:
    """Each module's imports of modules under ``src``."""
    known = modules(src)
    return {
        name: {m: line for m, line in imports(name, path, known).items() if m in known}
        for name, path in known.items()
    }


def cycles(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), iteratively."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in g:
        if root in index:
            continue
        work = [(root, iter(g[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, edges = work[-1]
            w = next(edges, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(g[w])))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return found


def describe(g: dict[str, dict[str, int]], component: list[str]) -> str:
    members = set(component)
    return "; ".join(
        f"{a} imports {b} (line {line})"
        for a in component
        for b, line in sorted(g[a].items())
        if b in members
    )


def test_no_module_imports_itself_back() -> None:
    g = graph(SRC)
    assert len(g) > 100  # the whole package was read
    assert [describe(g, c) for c in cycles(g)] == []


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_the_layers_import_only_downwards(package: str) -> None:
    banned = tuple(f"dpcurator.{b}" for b in LAYERS[package])
    g = graph(SRC)
    wrong = [
        f"{a} imports {b} (line {line})"
        for a, deps in g.items()
        if a == package or a.startswith(package + ".")
        for b, line in deps.items()
        if any(b == x or b.startswith(x + ".") for x in banned)
    ]
    assert wrong == []


@pytest.mark.parametrize("package", ["dpcurator.privacy", "dpcurator.queries"])
def test_the_pure_packages_import_no_randomness_storage_or_network(package: str) -> None:
    known = modules(SRC)
    wrong = [
        f"{name} imports {m} (line {line})"
        for name, path in known.items()
        if name == package or name.startswith(package + ".")
        for m, line in imports(name, path, known).items()
        if any(m == x or m.startswith(x + ".") for x in IMPURE)
    ]
    assert wrong == []


def test_a_cycle_through_a_deferred_import_is_found(tmp_path: Path) -> None:
    """The checks can fail: a cycle closed inside a function is one, an import only
    for annotations is not, and a relative import resolves."""
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from p.b import f\n")
    (pkg / "b.py").write_text("def f():\n    from p import a\n    return a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.d import X\n"
    )
    (pkg / "d.py").write_text("from . import c\n")
    g = graph(tmp_path)
    assert g["p.b"] == {"p.a": 2}
    assert g["p.c"] == {}
    assert g["p.d"] == {"p.c": 1}
    assert cycles(g) == [["p.a", "p.b"]]
    assert describe(g, ["p.a", "p.b"]) == "p.a imports p.b (line 1); p.b imports p.a (line 2)"
