"""``theano.tensor.elemwise``: PyTensor's, plus the reductions Theano kept here (``Sum`` ...)."""

from __future__ import annotations

from pytensor.tensor.elemwise import *  # noqa: F403
from pytensor.tensor.math import All, Any, Prod, Sum  # noqa: F401

from lasagne_bn_compat._names import delegate

__getattr__ = delegate("pytensor.tensor.elemwise", "theano.tensor.elemwise")
