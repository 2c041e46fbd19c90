"""``njit`` for our kernels: one compiled version per argument type, never per constant.

When jitted code calls another jitted function with a constant (``f(x, 1,
0)``), Numba types the constants as literals (``Literal[int](1)``) and
compiles ``f`` once more for them, although the general version would do.
For our parallel convolution kernels one compilation takes 15 s, and the
literal copies doubled the Numba time of a fresh test run.  The dispatchers
made here type every call from jitted code with the constants' plain types
(``int64``), so the version a Python call compiles serves jitted callers too.

>>> from lasagne_bn.ops.numba.jit import njit
>>> @njit(cache=False)
... def add(a, b):
...     return a + b
>>> @njit(cache=False)
... def twice(x):
...     return add(x, 1) + add(x, 2)
>>> twice(3), [str(s) for s in add.signatures]
(9, ['(int64, int64)'])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numba
from numba.core import types


def _unliteral_calls(dispatcher: Any) -> Any:
    """Make ``dispatcher`` compile calls from jitted code for non-literal argument types."""
    template = dispatcher.get_call_template

    def get_call_template(args, kws):
        args = tuple(types.unliteral(a) for a in args)
        kws = {k: types.unliteral(v) for k, v in kws.items()}
        return template(args, kws)

    dispatcher.get_call_template = get_call_template
    return dispatcher


def njit(**options: Any) -> Callable[[Callable], Any]:
    """``numba.njit(**options)`` whose dispatchers never specialize on constants.

    A decorator, used as ``kernel = njit(parallel=True, cache=True)`` then
    ``@kernel``.
    """
    jit = numba.njit(**options)

    def decorate(func: Callable) -> Any:
        return _unliteral_calls(jit(func))

    return decorate
