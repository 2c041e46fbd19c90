"""``theano.gof.utils``: PyTensor's ``pytensor.graph.utils``, with Theano's lower-case names."""

from __future__ import annotations

from pytensor.graph.utils import *  # noqa: F403
from pytensor.graph.utils import Scratchpad
from pytensor.utils import hash_from_code  # noqa: F401

from lasagne_bn_compat._names import delegate

scratchpad = Scratchpad

__getattr__ = delegate("pytensor.graph.utils", "theano.gof.utils")
