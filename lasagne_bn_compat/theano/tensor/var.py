"""``theano.tensor.var``: PyTensor's ``pytensor.tensor.variable``, loading Theano pickles too.

``TensorVariable`` and ``TensorConstant`` accept Theano-pickled state (see
:mod:`lasagne_bn_compat.theano._pickled`); ``isinstance`` with them is PyTensor's.
"""

from __future__ import annotations

from pytensor.tensor.variable import *  # noqa: F403

from lasagne_bn_compat._names import delegate
from lasagne_bn_compat.theano._pickled import TensorConstant, TensorVariable  # noqa: F401

__getattr__ = delegate("pytensor.tensor.variable", "theano.tensor.var")
