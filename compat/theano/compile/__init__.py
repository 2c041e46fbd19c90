"""``theano.compile``: PyTensor's ``pytensor.compile`` (``theano.compile.ops`` adds ``Shape``)."""

from __future__ import annotations

from pytensor.compile import *  # noqa: F403

from compat._names import delegate

__getattr__ = delegate("pytensor.compile", "theano.compile")
