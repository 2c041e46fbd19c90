"""Every public class and function has a numpydoc docstring with an example and type hints.

Public: the names in a module's ``__all__`` (or, without one, its names not starting
with an underscore) that are classes or functions defined in ``lasagne_bn`` or
``lasagne_bn_compat``.  Each one needs

- a docstring,
- an ``Examples`` section holding at least one ``>>>`` example (tests/test_docstrings.py
  runs them),
- a type hint on every parameter and on the return value of its signature (a class's
  ``__init__``; one inherited from outside the package, ``Exception.__init__`` say, is
  not ours to annotate).

The test walks the modules without compiling anything: it is introspection only.
"""

from __future__ import annotations

import importlib
import inspect
import re

import pytest

MODULES = [
    "lasagne_bn.layers",
    "lasagne_bn.ops",
    "lasagne_bn.export",
    "lasagne_bn.nan_guard",
    "lasagne_bn.init",
    "lasagne_bn.updates",
    "lasagne_bn.objectives",
    "lasagne_bn.regularization",
    "lasagne_bn.nonlinearities",
    "lasagne_bn.utils",
    "lasagne_bn.random",
    "lasagne_bn_compat.io",
    "lasagne_bn_compat.compare",
    "lasagne_bn.lint",
]

# Public names that may go without an example, each with the reason (ten at most).
EXEMPT: dict[str, str] = {}

_PACKAGES = ("lasagne_bn.", "lasagne_bn_compat.")
_EXAMPLES = re.compile(r"^Examples\n-{8,}\n(?:.*\n)*?>>> ", re.MULTILINE)


def public_objects() -> dict[str, object]:
    """The public classes and functions, by the first ``module.name`` that exports them."""
    found: dict[str, object] = {}
    ids: set[int] = set()
    for module_name in MODULES:
        module = importlib.import_module(module_name)
        names = getattr(module, "__all__", None)
        if names is None:
            names = [n for n in vars(module) if not n.startswith("_")]
        for name in names:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not getattr(obj, "__module__", "").startswith(_PACKAGES):
                continue
            if id(obj) not in ids:
                ids.add(id(obj))
                found[f"{module_name}.{name}"] = obj
    return found


def _signature_function(obj: object):
    """The function whose signature ``obj``'s callers see (a class: its ``__init__``)."""
    if not inspect.isclass(obj):
        return obj
    for klass in obj.__mro__:
        init = vars(klass).get("__init__")
        if init is not None:
            break
    if not inspect.isfunction(init) or not init.__module__.startswith(_PACKAGES):
        return None  # object.__init__, Exception.__init__: not ours
    return init


def missing_hints(obj: object) -> list[str]:
    """The parameters (and ``return``) of ``obj``'s signature without a type hint."""
    function = _signature_function(obj)
    if function is None:
        return []
    signature = inspect.signature(function)
    missing = []
    for n, parameter in enumerate(signature.parameters.values()):
        if n == 0 and parameter.name in ("self", "cls") and inspect.isclass(obj):
            continue
        if parameter.annotation is inspect.Parameter.empty:
            missing.append(parameter.name)
    if signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


def problems(name: str, obj: object) -> list[str]:
    doc = inspect.getdoc(obj) or ""
    found = []
    if not doc.strip():
        found.append("no docstring")
    elif name not in EXEMPT and not _EXAMPLES.search(doc + "\n"):
        found.append("no Examples section with a >>> example")
    hints = missing_hints(obj)
    if hints:
        found.append("no type hint: " + ", ".join(hints))
    return found


def test_exemptions_are_few_and_explained():
    assert len(EXEMPT) <= 10
    assert all(reason.strip() for reason in EXEMPT.values())
    assert set(EXEMPT) <= set(public_objects()), "an exemption names no public object"


def test_public_names_have_docstrings_examples_and_hints():
    report = []
    for name, obj in public_objects().items():
        report.extend(f"{name}: {problem}" for problem in problems(name, obj))
    if report:
        pytest.fail(f"{len(report)} problems:\n" + "\n".join(report), pytrace=False)


def test_every_example_runs():
    """The module defining each public name is one whose examples test_docstrings runs."""
    from test_docstrings import MODULES as RUN

    unrun = {f"{obj.__module__} ({name})" for name, obj in public_objects().items()}
    unrun = {entry for entry in unrun if entry.split(" ")[0] not in RUN}
    assert not unrun, "add to tests/test_docstrings.py MODULES: " + ", ".join(sorted(unrun))


def test_the_checks_can_fail():
    def bare(x, y=1):
        """No example here."""

    def good(x: int) -> int:
        """Doubles.

        Examples
        --------
        >>> good(2)
        4
        """
        return 2 * x

    assert problems("bare", bare) == [
        "no Examples section with a >>> example",
        "no type hint: x, y, return",
    ]
    assert problems("good", good) == []
