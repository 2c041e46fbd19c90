"""``import theano.tensor as T``: PyTensor's tensor module, plus what Theano called differently.

Every public name of :mod:`pytensor.tensor` is here (``T.matrix``,
``T.mean``, ``T.grad``, ``T.switch`` ...).  Added or changed:

- ``T.nnet`` (:mod:`lasagne_bn_compat.theano.tensor.nnet`), ``T.signal``,
  ``T.shared_randomstreams``;
- ``addbroadcast`` / ``patternbroadcast`` (PyTensor's
  ``specify_broadcastable``) and ``unbroadcast`` (PyTensor infers
  broadcastability from static shapes and has no way to forget it; this
  returns the input unchanged);
- ``inv`` (``reciprocal``), ``abs_`` (``abs``);
- ``TensorType(dtype, broadcastable)`` built the Theano way, and
  ``TensorType`` / ``TensorVariable`` / ``TensorConstant`` (``T.sharedvar``,
  ``T.var``, ``T.type``) that also load Theano pickles
  (:mod:`lasagne_bn_compat.theano._pickled`);
- ``flatten(x, outdim=...)`` (PyTensor calls it ``ndim``);
- ``consider_constant`` (``pytensor.gradient.zero_grad``);
- ``sgn``, ``extract_diag``, ``complex_from_polar``, ``Lop``, ``Rop``,
  ``batched_dot``, ``batched_tensordot``, ``nlinalg``, ``slinalg``: without
  PyTensor's deprecated versions (which warn, or are gone in 3.3).
"""

from __future__ import annotations

import importlib as _importlib

import pytensor.gradient as _gradient
import pytensor.tensor as _pt
from pytensor.graph.replace import vectorize_graph as _vectorize_graph

# Ops and names Theano kept in theano.tensor(.basic), PyTensor elsewhere
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

from lasagne_bn_compat._names import lazy_submodules, missing_names
from lasagne_bn_compat.theano._config import config  # noqa: F401  (``T.config`` existed)
from lasagne_bn_compat.theano._pickled import TensorConstant, TensorType, TensorVariable  # noqa: F401

# Lop / Rop without PyTensor's warning; a jacobian that traces under JAX
from lasagne_bn_compat.theano.gradient import Lop, Rop, jacobian  # noqa: F401, F811

inv = _pt.reciprocal
sgn = _pt.sign  # PyTensor's ``sgn`` is a deprecated alias of ``sign``
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


def extract_diag(x):
    """The main diagonal of the matrix ``x`` (PyTensor's ``extract_diag`` is deprecated)."""
    return _pt.diagonal(x)


def complex_from_polar(abs, angle):  # noqa: A002 - Theano's argument name
    """``abs * exp(1j * angle)``, as PyTensor's deprecated ``complex_from_polar`` computes it."""
    return _pt.complex(abs * _pt.cos(angle), abs * _pt.sin(angle))


def batched_tensordot(x, y, axes=2):
    """``tensordot(x[i], y[i], axes)`` for every ``i`` of the first (batch) axis.

    ``axes`` is an int ``n`` (the last ``n`` axes of ``x`` with the ``n``
    axes of ``y`` after its batch axis) or a pair of axis lists counted on
    the whole tensors, never including the batch axis 0, as in Theano.
    PyTensor 3.0 deprecated its own and 3.3 removed it; this one vectorizes
    ``tensordot`` over the batch axis.
    """
    x, y = _pt.as_tensor_variable(x), _pt.as_tensor_variable(y)
    if x.ndim < 2 or y.ndim < 2:
        raise TypeError(
            f"batched_tensordot(): x.ndim={x.ndim}, y.ndim={y.ndim}; expected a batch axis "
            "and at least one more axis in each"
        )
    if isinstance(axes, int):
        x_axes = list(range(x.ndim - axes, x.ndim))
        y_axes = list(range(1, axes + 1))
    else:
        x_axes, y_axes = (list(a) if isinstance(a, list | tuple) else [a] for a in axes)
    x_axes = [a % x.ndim for a in x_axes]
    y_axes = [a % y.ndim for a in y_axes]
    if 0 in x_axes or 0 in y_axes:
        raise ValueError(
            f"batched_tensordot(): axes={axes!r} includes the batch axis 0; expected axes after it"
        )
    x_core = _pt.tensor(dtype=x.dtype, shape=x.type.shape[1:])
    y_core = _pt.tensor(dtype=y.dtype, shape=y.type.shape[1:])
    core = _pt.tensordot(x_core, y_core, axes=[[a - 1 for a in x_axes], [a - 1 for a in y_axes]])
    return _vectorize_graph(core, {x_core: x, y_core: y})


def stack(*tensors, axis=0, **kwargs):
    """Theano's ``stack``: ``stack([a, b], axis=0)``, ``stack(tensors=[a, b])``, or the
    older ``stack(a, b, c)`` with the tensors as separate arguments (along axis 0).

    >>> import numpy as np
    >>> stack(np.float32(1), np.float32(2)).eval()
    array([1., 2.], dtype=float32)
    """
    if "tensors" in kwargs:
        if tensors:
            raise TypeError("stack(): got tensors both by position and as tensors=")
        tensors = (kwargs.pop("tensors"),)
    if kwargs:
        raise TypeError(f"stack(): unexpected keyword arguments {sorted(kwargs)}")
    if not tensors:
        raise TypeError("stack(): expected a list of tensors, got none")
    if len(tensors) == 1 and isinstance(tensors[0], list | tuple):
        return _pt.stack(list(tensors[0]), axis=axis)
    return _pt.stack(list(tensors), axis=axis)


def batched_dot(a, b):
    """``dot(a[i], b[i])`` for every ``i`` of the first (batch) axis, as Theano's.

    A vector ``a`` or ``b`` (one number per batch entry) scales the other.
    """
    a, b = _pt.as_tensor_variable(a), _pt.as_tensor_variable(b)
    if a.ndim == 0 or b.ndim == 0:
        raise TypeError(f"batched_dot(): a.ndim={a.ndim}, b.ndim={b.ndim}; expected >= 1")
    if a.ndim == 1:
        return a.dimshuffle(0, *["x"] * (b.ndim - 1)) * b
    if b.ndim == 1:
        return a * b.dimshuffle(0, *["x"] * (a.ndim - 1))
    # (``max`` here is PyTensor's, from the star import)
    return batched_tensordot(a, b, [[a.ndim - 1], [1 if b.ndim < 3 else b.ndim - 2]])


_SUBMODULES = {
    "nnet": "lasagne_bn_compat.theano.tensor.nnet",
    "signal": "lasagne_bn_compat.theano.tensor.signal",
    "shared_randomstreams": "lasagne_bn_compat.theano.tensor.shared_randomstreams",
    "basic": "lasagne_bn_compat.theano.tensor",
    "var": "lasagne_bn_compat.theano.tensor.var",
    "type": "lasagne_bn_compat.theano.tensor.type",
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
# PyTensor's (its nlinalg / slinalg warn for every name read), and so is
# ``T.subtensor`` (PyTensor 3.3 warns for its ``*subtensor1`` helpers).
from lasagne_bn_compat.theano.tensor import (  # noqa: E402, F401, F811
    elemwise,
    nlinalg,
    nnet,
    sharedvar,
    signal,
    slinalg,
)

# PyTensor's ``subtensor`` came in with the names above, so the ``from``
# form would keep it: import ours explicitly.
subtensor = _importlib.import_module("lasagne_bn_compat.theano.tensor.subtensor")
