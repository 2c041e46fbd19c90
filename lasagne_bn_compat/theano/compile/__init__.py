"""``theano.compile``: PyTensor's ``pytensor.compile``.

``function_module`` is ``pytensor.compile.maker``; ``debugmode``,
``nanguardmode``, ``profiling`` and ``monitormode`` live in
``pytensor.compile.debug``; ``theano.compile.ops`` adds ``Shape``.
"""

from __future__ import annotations

from pytensor.compile import *  # noqa: F403
from pytensor.compile.ops import wrap_py as as_op  # noqa: F401  (PyTensor's as_op is a deprecated alias)

from lasagne_bn.nan_guard import NanGuardMode  # noqa: F401  (names the layer of a NaN)
from lasagne_bn_compat._names import delegate

_SUBMODULES = {
    "function_module": "pytensor.compile.maker",
    "debugmode": "pytensor.compile.debug.debugmode",
    "nanguardmode": "pytensor.compile.debug.nanguardmode",
    "profiling": "pytensor.compile.debug.profiling",
    "monitormode": "pytensor.compile.debug.monitormode",
    "ops": "lasagne_bn_compat.theano.compile.ops",
}

__getattr__ = delegate("pytensor.compile", "theano.compile", submodules=_SUBMODULES)
