"""``theano.compile.ops``: PyTensor's, plus the shape ops Theano kept here (``Shape`` ...)."""

from __future__ import annotations

from pytensor.compile.ops import *  # noqa: F403
from pytensor.compile.ops import wrap_py as as_op  # noqa: F401  (PyTensor's as_op is a deprecated alias)
from pytensor.tensor.shape import Shape, Shape_i, shape, shape_i  # noqa: F401

from lasagne_bn_compat._names import delegate

__getattr__ = delegate("pytensor.compile.ops", "theano.compile.ops")
