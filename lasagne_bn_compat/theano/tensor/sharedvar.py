"""``theano.tensor.sharedvar``: PyTensor's, loading Theano-pickled shared variables too.

``TensorSharedVariable`` accepts Theano-pickled state (see
:mod:`lasagne_bn_compat.theano._pickled`); ``isinstance`` with it is PyTensor's.
"""

from __future__ import annotations

from pytensor.tensor.sharedvar import *  # noqa: F403

from lasagne_bn_compat._names import delegate
from lasagne_bn_compat.theano._pickled import TensorSharedVariable  # noqa: F401

__getattr__ = delegate("pytensor.tensor.sharedvar", "theano.tensor.sharedvar")
