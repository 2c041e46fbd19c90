"""``import theano.tensor as T``: PyTensor's tensor module, plus what Theano called differently.

Every public name of :mod:`pytensor.tensor` is here (``T.matrix``,
``T.mean``, ``T.grad``, ``T.switch`` ...).  Added or changed:

- ``T.nnet`` (:mod:`compat.theano.tensor.nnet`), ``T.signal``,
  ``T.shared_randomstreams``;
- ``addbroadcast`` / ``patternbroadcast`` (PyTensor's
  ``specify_broadcastable``) and ``unbroadcast`` (PyTensor infers
  broadcastability from static shapes and has no way to forget it; this
  returns the input unchanged);
- ``inv`` (``reciprocal``), ``abs_`` (``abs``);
- ``TensorType(dtype, broadcastable)`` built the Theano way, and
  ``TensorType`` / ``TensorVariable`` / ``TensorConstant`` (``T.sharedvar``,
  ``T.var``, ``T.type``) that also load Theano pickles
  (:mod:`compat.theano._pickled`);
- ``flatten(x, outdim=...)`` (PyTensor calls it ``ndim``);
- ``consider_constant`` (``pytensor.gradient.zero_grad``).
"""

from __future__ import annotations

import pytensor.gradient as _gradient
import pytensor.tensor as _pt

# Ops and names Theano kept in theano.tensor(.basic), PyTensor elsewhere
from pytensor.gradient import Lop, Rop  # noqa: E402, F401
from pytensor.tensor import *  # noqa: F403
from pytensor.tensor import extra_ops  # noqa: F401
from pytensor.tensor.basic import (  # noqa: E402, F401
    Alloc,
    ARange,
    Join,
    MakeVector,
    ScalarFromTensor,
    TensorFromScalar,
)
from pytensor.tensor.exceptions import NotScalarConstantError  # noqa: E402, F401
from pytensor.tensor.math import Argmax, Dot, Max  # noqa: E402, F401
from pytensor.tensor.shape import Reshape  # noqa: E402, F401
from pytensor.tensor.sharedvar import TensorSharedVariable  # noqa: E402, F401

from compat._names import lazy_submodules, missing_names
from compat.theano._config import config  # noqa: F401  (``T.config`` existed)
from compat.theano._pickled import TensorConstant, TensorType, TensorVariable  # noqa: F401

inv = _pt.reciprocal
abs_ = _pt.abs
consider_constant = _gradient.zero_grad
verify_grad = _gradient.verify_grad
grad_undefined = _gradient.grad_undefined
grad_not_implemented = _gradient.grad_not_implemented


def addbroadcast(x, *axes):
    """Mark ``axes`` of ``x`` as broadcastable (size 1): PyTensor's ``specify_broadcastable``."""
    return _pt.specify_broadcastable(x, *axes)


def unbroadcast(x, *axes):
    """Theano's ``unbroadcast``: returns ``x`` unchanged.

    PyTensor derives broadcastability from static shapes and has no way to
    forget a known size 1; the places Theano needed this (updates, scan)
    accept the more specific type in PyTensor.
    """
    return _pt.as_tensor_variable(x)


def patternbroadcast(x, broadcastable):
    """Theano's ``patternbroadcast``: mark the axes that are True as broadcastable."""
    x = _pt.as_tensor_variable(x)
    broadcastable = tuple(broadcastable)
    if len(broadcastable) != x.ndim:
        raise ValueError(
            f"broadcastable={broadcastable!r} has {len(broadcastable)} entries for a "
            f"{x.ndim}-dimensional x"
        )
    axes = [i for i, b in enumerate(broadcastable) if b]
    return _pt.specify_broadcastable(x, *axes) if axes else x


def flatten(x, outdim=1, ndim=None):
    """Theano's ``flatten(x, outdim=1)``: keep ``outdim - 1`` leading axes, merge the rest."""
    return _pt.flatten(x, ndim=outdim if ndim is None else ndim)


_SUBMODULES = {
    "nnet": "compat.theano.tensor.nnet",
    "signal": "compat.theano.tensor.signal",
    "shared_randomstreams": "compat.theano.tensor.shared_randomstreams",
    "basic": "compat.theano.tensor",
    "var": "compat.theano.tensor.var",
    "type": "compat.theano.tensor.type",
    "opt": "pytensor.tensor.rewriting.basic",
}

_MISSING = {
    "Rebroadcast": "use specify_broadcastable (T.addbroadcast)",
    "MPISend": "the MPI ops are gone",
    "MPIRecv": "the MPI ops are gone",
    "raw_random": "use pytensor.tensor.random (or theano.tensor.shared_randomstreams)",
    "topk": "use T.sort / T.argsort and slice",
    "argtopk": "use T.argsort and slice",
}


__getattr__ = missing_names(
    "theano.tensor", _MISSING, fallback=lazy_submodules(globals(), _SUBMODULES)
)

# ``T.nnet`` is always there; ``T.signal``, ``T.nlinalg``, ``T.slinalg`` are ours, not
# PyTensor's (its nlinalg / slinalg warn for every name read).
from compat.theano.tensor import (  # noqa: E402, F401, F811
    elemwise,
    nlinalg,
    nnet,
    sharedvar,
    signal,
    slinalg,
)
