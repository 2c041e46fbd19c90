"""``theano.scalar.basic``: PyTensor's, with Theano's names (``Scalar``, ``Inv`` ...)."""

from __future__ import annotations

from pytensor.scalar.basic import *  # noqa: F403
from pytensor.scalar.basic import Reciprocal, ScalarType, reciprocal

from lasagne_bn_compat._names import delegate

Scalar = ScalarType
Inv = Reciprocal
inv = reciprocal

__getattr__ = delegate("pytensor.scalar.basic", "theano.scalar.basic")
