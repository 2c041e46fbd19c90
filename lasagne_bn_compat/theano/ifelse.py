"""``theano.ifelse``: PyTensor's lazy ``IfElse`` Op, ``ifelse`` and their rewrites.

PyTensor 3.3.5 moved them from ``pytensor.ifelse`` to ``pytensor.conditional``
(the old module still imports, but warns for every name read from it); this
module takes them from wherever the installed PyTensor keeps them
(:data:`lasagne_bn._compat_pytensor.IFELSE_MODULES`), so legacy code gets
the same objects, without a warning, on every supported PyTensor.

Examples
--------
>>> import pytensor.tensor as pt
>>> from lasagne_bn_compat.theano.ifelse import ifelse  # ``from theano.ifelse import ifelse``
>>> float(ifelse(pt.constant(1) > 0, pt.constant(2.0), pt.constant(3.0)).eval())
2.0
"""

from __future__ import annotations

import importlib

from lasagne_bn._compat_pytensor import IFELSE_MODULES
from lasagne_bn_compat._names import missing_names

_MODULES = tuple(importlib.import_module(name) for name in IFELSE_MODULES)

IfElse = _MODULES[0].IfElse
ifelse = _MODULES[0].ifelse

__all__ = ["IfElse", "ifelse"]


def _from_pytensor(name: str):
    # Theano's other names here (cond_make_inplace, CondMerge, ...) are rewrites.
    for module in _MODULES:
        if name in vars(module):
            return vars(module)[name]
    raise KeyError(name)


__getattr__ = missing_names("theano.ifelse", {}, _from_pytensor)
