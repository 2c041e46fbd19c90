"""No import circle among the package's modules (their module-level imports).

A circle makes what a name holds depend on which module was imported first,
and it is how the Op modules and their backends once grew into one knot.
The walk reads every module-level ``import`` of ``lasagne_bn`` and
``lasagne_bn_compat`` (imports under ``if TYPE_CHECKING:`` never run, and
imports inside functions run late: neither is counted here).  ``from pkg
import sub`` where ``sub`` is a module counts as an import of ``pkg.sub``
alone: a package is always imported before its modules, so that edge would
make every module that imports a sibling look circular.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("lasagne_bn", "lasagne_bn_compat")


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _top_level_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    found = []
    for node in tree.body:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        for inner in ast.walk(node) if isinstance(node, ast.Try | ast.If) else [node]:
            if isinstance(inner, ast.Import | ast.ImportFrom):
                found.append(inner)
    return found


def _targets(name: str, path: Path, node, known: dict[str, Path]) -> set[str]:
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = name.split(".")
            if path.name != "__init__.py":
                parts = parts[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        names = subs + ([base] if len(subs) < len(node.names) else [])
    targets = set()
    for target in names:
        while target and target not in known:  # a name inside a module: that module
            target = target.rpartition(".")[0]
        if target and target != name:
            targets.add(target)
    return targets


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: set().union(
            *(
                _targets(name, path, n, known)
                for n in _top_level_imports(ast.parse(path.read_text()))
            )
        )
        for name, path in known.items()
    }


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_level_import_circle():
    graph = import_graph()
    assert len(graph) > 100  # the walk found the packages
    assert "lasagne_bn.ops.validation" in graph["lasagne_bn.ops.bn"]
    assert circles(graph) == []


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
        ({"a": {"b"}, "b": set()}, []),
    ],
)
def test_the_walk_finds_a_circle(graph, expected):
    assert circles(graph) == expected


def test_a_sibling_module_import_is_no_edge_to_the_package(tmp_path):
    known = {
        "pkg": tmp_path / "__init__.py",
        "pkg.a": tmp_path / "a.py",
        "pkg.b": tmp_path / "b.py",
    }
    node = ast.parse("from pkg import b").body[0]
    assert _targets("pkg.a", known["pkg.a"], node, known) == {"pkg.b"}
    node = ast.parse("from . import b, helper").body[0]
    assert _targets("pkg.a", known["pkg.a"], node, known) == {"pkg.b", "pkg"}
