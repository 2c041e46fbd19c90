"""Clear errors for legacy names that have no counterpart.

A shim module lists the Theano / Lasagne names it does not provide, with
what to use instead, and gets a module ``__getattr__`` from
:func:`missing_names`.  Asking for such a name raises

- ``ImportError`` (with the advice) from ``from lasagne.layers import X``:
  the import statement would otherwise replace the message with its own
  "cannot import name";
- :class:`LegacyNameError`, an ``AttributeError``, everywhere else, so that
  ``hasattr`` and ``getattr(module, name, default)`` keep working.
"""

from __future__ import annotations

import dis
import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["LegacyNameError", "delegate", "lazy_submodules", "missing_names", "no_counterpart"]

_IMPORT_FROM = dis.opmap.get("IMPORT_FROM")

#: Where the guide lists every name and its replacement.
GUIDE = "see migration_guide.md"


class LegacyNameError(AttributeError):
    """A Theano / Lasagne name that this compatibility layer does not provide."""


def no_counterpart(qualname: str, advice: str) -> str:
    """The message for a legacy name with no counterpart."""
    return f"{qualname} has no counterpart on PyTensor 3 / lasagne_bn: {advice} ({GUIDE})"


def _called_by_import_from(depth: int) -> bool:
    """Whether the Python frame ``depth`` levels up is executing ``from m import name``."""
    if _IMPORT_FROM is None:  # pragma: no cover - every CPython has it
        return False
    try:
        frame = sys._getframe(depth + 1)
        return frame.f_code.co_code[frame.f_lasti] == _IMPORT_FROM
    except (AttributeError, IndexError, ValueError):  # pragma: no cover - other Pythons
        return False


def lazy_submodules(namespace: dict, modules: Mapping[str, str]) -> Callable[[str], object]:
    """A ``fallback`` for :func:`missing_names` that imports ``modules[name]`` on first use.

    The module is stored in ``namespace`` (the shim's ``globals()``), so the
    next access finds it without ``__getattr__``; a name not in ``modules``
    raises ``KeyError``.
    """

    def submodule(name: str):
        module = importlib.import_module(modules[name])
        namespace[name] = module
        return module

    return submodule


def missing_names(
    module_name: str, table: Mapping[str, str], fallback: Callable[[str], object] | None = None
) -> Callable[[str], object]:
    """A module ``__getattr__`` that explains the names in ``table``.

    Parameters
    ----------
    module_name : str
        The legacy module's name, for messages (``'lasagne.layers'``).
    table : mapping
        Legacy name -> what to use instead.
    fallback : callable, optional
        Called first with the name: returns the attribute (a lazily imported
        submodule, say), or raises ``LookupError`` when it has none (or
        cannot provide it here); then ``table`` explains the name, or an
        ``AttributeError`` points to the guide.
    """

    def __getattr__(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        if fallback is not None:
            try:
                return fallback(name)
            except LookupError:
                pass
        advice = table.get(name)
        if advice is None:
            message = (
                f"module {module_name!r} has no attribute {name!r} in lasagne_bn's "
                f"compatibility layer ({GUIDE} for the names it maps)"
            )
        else:
            message = no_counterpart(f"{module_name}.{name}", advice)
        if _called_by_import_from(1):
            raise ImportError(message, name=module_name)
        raise LegacyNameError(message)

    return __getattr__


def delegate(
    module_name: str,
    legacy_name: str,
    table: Mapping[str, str] | None = None,
    submodules: Mapping[str, str] | None = None,
) -> Callable[[str], object]:
    """A module ``__getattr__`` for a shim that is PyTensor's ``module_name`` plus a few names.

    Names the shim does not define come from ``submodules`` (legacy
    submodule name -> module, imported on first use) or ``module_name``;
    the rest are explained by ``table`` as in :func:`missing_names`, under
    the shim's ``legacy_name``.
    """

    def from_target(name: str):
        if submodules and name in submodules:
            return importlib.import_module(submodules[name])
        target = importlib.import_module(module_name)
        try:
            return getattr(target, name)
        except AttributeError:
            raise KeyError(name) from None

    return missing_names(legacy_name, table or {}, from_target)
