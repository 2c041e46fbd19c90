"""``theano.tensor.slinalg``: Theano's SciPy-backed linear algebra on PyTensor.

PyTensor moved these to :mod:`pytensor.tensor.linalg`; its own
``pytensor.tensor.slinalg`` only re-exports them, with a
``DeprecationWarning`` for every name read.  This module reads them from
``pytensor.tensor.linalg`` and adds Theano's ``solve_lower_triangular``,
``solve_upper_triangular`` and ``solve_symmetric``.

Examples
--------
>>> import numpy as np, pytensor.tensor as pt
>>> from lasagne_bn_compat.theano.tensor import slinalg
>>> a, b = pt.matrix("a"), pt.vector("b")
>>> x = slinalg.solve_lower_triangular(a, b)
>>> x.eval({a: np.array([[2.0, 0.0], [1.0, 1.0]], a.dtype), b: np.array([2.0, 3.0], b.dtype)})
array([1., 2.]...)
"""

from __future__ import annotations

from pytensor.tensor import linalg as _linalg

from lasagne_bn_compat._names import delegate

_MISSING = {
    "CholeskyGrad": "PyTensor's Cholesky Op has its own gradient: use theano.gradient.grad",
    "EigvalshGrad": "PyTensor's Eigvalsh Op has its own gradient: use theano.gradient.grad",
    "ExpmGrad": "PyTensor's Expm Op has its own gradient: use theano.gradient.grad",
}


def solve_lower_triangular(a, b):
    """``a x = b`` for a lower-triangular ``a``."""
    return _linalg.solve_triangular(a, b, lower=True)


def solve_upper_triangular(a, b):
    """``a x = b`` for an upper-triangular ``a``."""
    return _linalg.solve_triangular(a, b, lower=False)


def solve_symmetric(a, b):
    """``a x = b`` for a symmetric ``a``."""
    return _linalg.solve(a, b, assume_a="sym")


__getattr__ = delegate("pytensor.tensor.linalg", "theano.tensor.slinalg", _MISSING)
