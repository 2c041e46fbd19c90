"""``theano.gradient``: PyTensor's gradient module, plus Theano's ``consider_constant``."""

from __future__ import annotations

from pytensor.gradient import *  # noqa: F403
from pytensor.gradient import zero_grad

#: Theano's deprecated name for a gradient stop that gives zeros.
consider_constant = zero_grad
