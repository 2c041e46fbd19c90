"""``lasagne.utils``: lasagne_bn's utilities, and what became of ``unroll_scan``."""

from __future__ import annotations

from compat._names import missing_names
from lasagne_bn.utils import *  # noqa: F403
from lasagne_bn.utils import as_tensor_expression  # noqa: F401

_MISSING = {
    "unroll_scan": "lasagne_bn has no recurrent layers; write the loop with theano.scan",
}

__getattr__ = missing_names("lasagne.utils", _MISSING)
