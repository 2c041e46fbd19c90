"""``theano.tensor.nlinalg``: Theano's NumPy-backed linear algebra on PyTensor.

PyTensor moved these to :mod:`pytensor.tensor.linalg`; its own
``pytensor.tensor.nlinalg`` only re-exports them, with a
``DeprecationWarning`` for every name read (PyTensor 3.0.7 and 3.3.x alike).
This module reads them from ``pytensor.tensor.linalg`` instead, and keeps
Theano's forms where PyTensor's differ or are deprecated:

- ``qr(a, mode='reduced')``: Theano's (NumPy's) default mode; PyTensor's
  is ``'full'``;
- ``eigh(a, UPLO='L')``: as ``lower=(UPLO == 'L')`` (PyTensor deprecates
  ``UPLO``);
- ``matrix_dot(*matrices)``, ``trace``, ``extract_diag``, ``diag``,
  ``alloc_diag`` / ``AllocDiag``: without PyTensor's deprecated helpers.

Examples
--------
>>> import numpy as np, pytensor.tensor as pt
>>> from lasagne_bn_compat.theano.tensor import nlinalg
>>> a = pt.matrix("a")
>>> f = nlinalg.matrix_dot(a, nlinalg.matrix_inverse(a))
>>> np.allclose(f.eval({a: np.array([[2.0, 1.0], [0.0, 1.0]], a.dtype)}), np.eye(2))
True
"""

from __future__ import annotations

import functools

import pytensor.tensor as _pt
from pytensor.tensor import linalg as _linalg
from pytensor.tensor.basic import AllocDiag, alloc_diag  # noqa: F401

from lasagne_bn_compat._names import delegate

diag = _pt.diag
trace = _pt.trace

_MISSING = {
    "QRFull": "use theano.tensor.nlinalg.qr(a, mode='complete') (PyTensor's QR Op)",
    "QRIncomplete": "use theano.tensor.nlinalg.qr(a, mode='r') (PyTensor's QR Op)",
}


def extract_diag(x):
    """The main diagonal of the matrix ``x`` (:func:`pytensor.tensor.diagonal`)."""
    return _pt.diagonal(x)


def matrix_dot(*matrices):
    """``matrices[0] . matrices[1] . ...``: the product of several matrices, left to right."""
    if not matrices:
        raise TypeError("matrix_dot() needs at least one matrix, got none")
    return functools.reduce(_pt.dot, matrices)


def qr(a, mode="reduced"):
    """Theano's ``qr``: NumPy's modes, ``'reduced'`` by default (PyTensor's is ``'full'``)."""
    return _linalg.qr(a, mode=mode)


def eigh(a, UPLO="L"):  # noqa: N803 - Theano's argument name
    """Eigenvalues and eigenvectors of a symmetric matrix, read from its ``UPLO`` triangle."""
    if UPLO not in ("L", "U"):
        raise ValueError(f"eigh(): UPLO={UPLO!r}; expected 'L' or 'U'")
    return _linalg.eigh(a, lower=UPLO == "L")


__getattr__ = delegate("pytensor.tensor.linalg", "theano.tensor.nlinalg", _MISSING)
