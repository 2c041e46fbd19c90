"""Theano's truth value of a tensor variable, while the shims are installed.

Theano 1.0 let ``if variable:`` pass (every variable was true) and raised
``TypeError`` only for the result of ``<``, ``<=``, ``>`` or ``>=``, so that
a chained comparison ``a < b < c`` (which Python runs as ``(a < b) and
(b < c)``) could not silently mean something else.  Legacy code relies on
the first half: nolearn 0.6.1 filters parameters with
``[p for p in params if p]``.  PyTensor raises for every variable.

:func:`enable` gives PyTensor's tensor variables Theano's rule, and
:func:`disable` puts PyTensor's back; :func:`lasagne_bn_compat.install` and
:func:`~lasagne_bn_compat.uninstall` call them, so code that does not install
the shims keeps PyTensor's behaviour.
"""

from __future__ import annotations

from pytensor.tensor.variable import _tensor_py_operators

_COMPARISONS = ("__lt__", "__le__", "__gt__", "__ge__")
_MARK = "_legacy_comparison"
_saved: dict[str, object] = {}


def _legacy_bool(self) -> bool:
    if getattr(self, _MARK, False):
        raise TypeError("Variables do not support boolean operations.")
    return True


def _marking(name: str, comparison):
    def compare(self, other):
        result = comparison(self, other)
        if isinstance(result, _tensor_py_operators):
            setattr(result, _MARK, True)
        return result

    compare.__name__ = name
    compare.__doc__ = comparison.__doc__
    return compare


def enable() -> None:
    """Give tensor variables Theano's truth value (idempotent)."""
    if _saved:
        return
    for name in ("__bool__", *_COMPARISONS):
        _saved[name] = _tensor_py_operators.__dict__[name]
    _tensor_py_operators.__bool__ = _legacy_bool
    for name in _COMPARISONS:
        setattr(_tensor_py_operators, name, _marking(name, _saved[name]))


def disable() -> None:
    """Put PyTensor's truth value back (idempotent)."""
    for name, method in _saved.items():
        setattr(_tensor_py_operators, name, method)
    _saved.clear()
