"""``theano.tensor.type``: PyTensor's, with Theano's ``TensorType(dtype, broadcastable)``.

``TensorType`` also loads Theano-pickled types (see :mod:`lasagne_bn_compat.theano._pickled`).
"""

from __future__ import annotations

from pytensor.tensor.type import *  # noqa: F403

from lasagne_bn_compat._names import delegate
from lasagne_bn_compat.theano._pickled import TensorType  # noqa: F401

__getattr__ = delegate("pytensor.tensor.type", "theano.tensor.type")
