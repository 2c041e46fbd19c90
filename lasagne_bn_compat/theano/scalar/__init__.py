"""``theano.scalar``: PyTensor's ``pytensor.scalar`` with Theano's names for renamed pieces."""

from __future__ import annotations

from pytensor.scalar import *  # noqa: F403

from lasagne_bn_compat._names import delegate
from lasagne_bn_compat.theano.scalar.basic import Inv, Scalar, inv  # noqa: F401

__getattr__ = delegate("pytensor.scalar", "theano.scalar")
