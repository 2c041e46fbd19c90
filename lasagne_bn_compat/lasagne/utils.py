"""``lasagne.utils``: lasagne_bn's utilities (``unroll_scan`` included)."""

from __future__ import annotations

from lasagne_bn.utils import *  # noqa: F403
from lasagne_bn.utils import as_tensor_expression  # noqa: F401
