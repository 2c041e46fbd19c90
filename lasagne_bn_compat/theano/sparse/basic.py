"""``theano.sparse.basic``: Theano 1.0 kept the sparse Ops and their arithmetic
(``structured_dot``, ``add`` ...) in one module; PyTensor splits them into
``pytensor.sparse.basic`` and ``pytensor.sparse.math``.  Both are here, with
Theano's ``SparseType`` (PyTensor's ``SparseTensorType``).
"""

from __future__ import annotations

from pytensor.sparse.basic import *  # noqa: F403
from pytensor.sparse.math import *  # noqa: F403
from pytensor.sparse.type import SparseTensorType as SparseType  # noqa: F401

from lasagne_bn_compat._names import delegate

__getattr__ = delegate("pytensor.sparse.basic", "theano.sparse.basic")
