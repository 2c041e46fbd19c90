"""No import circle among the package's modules, and no Op module importing a backend.

A circle makes what a name holds depend on which module was imported first,
and it is how the Op modules and their backends once grew into one knot.
The walk reads every ``import`` of ``lasagne_bn`` and ``lasagne_bn_compat``,
at module level and inside functions, and every
``importlib.import_module("...")`` of a literal name (imports under ``if
TYPE_CHECKING:`` never run and are not counted).  ``from pkg import sub``
where ``sub`` is a module counts as an import of ``pkg.sub`` alone: a
package is always imported before its modules, so that edge would make
every module that imports a sibling look circular.

The backends (:data:`BACKENDS`) register their implementations of the Ops
and import the graph level; no graph-level module of ``lasagne_bn.ops``
imports them.  ``lasagne_bn.ops`` itself (its ``__init__``) is the one place
that assembles both, so that importing the package registers every backend.
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


def _imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: module level and inside functions."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped.update(id(inner) for inner in ast.walk(node))
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom) and id(node) not in skipped
    ]


def _imported_by_name(tree: ast.Module) -> list[str]:
    """The literal module names passed to ``importlib.import_module``."""
    return [
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and ast.unparse(node.func).endswith("import_module")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


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


def _module_of(target: str, known: dict[str, Path]) -> str:
    while target and target not in known:  # a name inside a module: that module
        target = target.rpartition(".")[0]
    return target


def import_graph() -> dict[str, set[str]]:
    known = modules()
    graph = {}
    for name, path in known.items():
        tree = ast.parse(path.read_text())
        edges = set().union(*(_targets(name, path, n, known) for n in _imports(tree)))
        edges |= {_module_of(t, known) for t in _imported_by_name(tree)}
        graph[name] = edges - {"", name}
    return graph


#: The backend packages: each imports the graph level, none is imported by it.
BACKENDS = ("lasagne_bn.ops.numba", "lasagne_bn.ops.c", "lasagne_bn.ops.jax")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def backend_imports(graph: dict[str, set[str]]) -> dict[str, list[str]]:
    """Graph-level modules of ``lasagne_bn.ops`` and the backend modules they import."""
    found = {}
    for module, targets in graph.items():
        graph_level = _in(module, "lasagne_bn.ops") and module != "lasagne_bn.ops"
        if graph_level and not any(_in(module, b) for b in BACKENDS):
            bad = sorted(t for t in targets if any(_in(t, b) for b in BACKENDS))
            if bad:
                found[module] = bad
    return found


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


def test_no_import_circle():
    graph = import_graph()
    assert len(graph) > 100  # the walk found the packages
    assert "lasagne_bn.ops.validation" in graph["lasagne_bn.ops.bn"]
    # imports inside functions and import_module calls are edges too
    assert "lasagne_bn.ops.numba.linker" in graph["lasagne_bn.ops.numba"]
    assert "lasagne_bn.ops.jax.bn" in graph["lasagne_bn.ops.jax"]
    assert circles(graph) == []


def test_no_op_module_imports_a_backend():
    graph = import_graph()
    assert any(_in(t, "lasagne_bn.ops.c") for t in graph["lasagne_bn.ops"])  # the assembly
    assert backend_imports(graph) == {}


def test_the_walk_sees_imports_inside_functions():
    tree = ast.parse(
        "def f():\n    from a.b import c\n    importlib.import_module('d.e')\n"
        "if TYPE_CHECKING:\n    import g\n"
    )
    assert [ast.unparse(n) for n in _imports(tree)] == ["from a.b import c"]
    assert _imported_by_name(tree) == ["d.e"]


def test_a_backend_import_is_found():
    graph = {"lasagne_bn.ops.bn": {"lasagne_bn.ops.c.bn"}, "lasagne_bn.ops": {"lasagne_bn.ops.c"}}
    assert backend_imports(graph) == {"lasagne_bn.ops.bn": ["lasagne_bn.ops.c.bn"]}


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
