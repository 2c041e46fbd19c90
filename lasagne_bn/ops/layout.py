"""Axes and parameter layouts shared by the ops and every backend's kernels.

Batch normalization reduces an input over some axes (``axes``) and keeps
one statistic per position of the others (the *kept* axes).  The kernels
view any input as a 3-D array ``(outer, channels, inner)``: the kept axes,
when they are adjacent, collapse into ``channels`` and the reduced axes
before and after them into ``outer`` and ``inner``.  NCHW with
``axes=(0, 2, 3)`` is ``(N, C, H*W)``; a dense ``(N, F)`` input with
``axes=(0,)`` is ``(N, F, 1)``; NHWC with ``axes=(0, 1, 2)`` is
``(N*H*W, C, 1)``.  Kept axes that are not adjacent need a transpose first.

The ``axes`` argument itself is checked and normalized by
:func:`lasagne_bn.ops.validation.normalize_axes`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def kept_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """The axes that are not reduced over, in order."""
    return tuple(i for i in range(ndim) if i not in axes)


def broadcast_pattern(axes: Sequence[int], ndim: int) -> list[int | str]:
    """Dimshuffle pattern that turns reduced-layout parameters into full layout.

    A parameter without the ``axes`` (Theano's reduced layout, a layer's
    ``param_shape``) gets broadcastable dimensions there.

    >>> broadcast_pattern((0, 2, 3), 4)
    ['x', 0, 'x', 'x']
    """
    kept = iter(range(ndim - len(axes)))
    return ["x" if i in axes else next(kept) for i in range(ndim)]


def channel_block(axes: Sequence[int], ndim: int) -> tuple[int, int] | None:
    """``(k0, k1)`` such that the kept axes are exactly ``range(k0, k1)``.

    Returns ``None`` when the kept axes are not adjacent (a transpose is
    needed before the 3-D view applies).  With no kept axes, ``(0, 0)``.
    """
    kept = kept_axes(axes, ndim)
    if not kept:
        return (0, 0)
    if kept[-1] - kept[0] + 1 != len(kept):
        return None
    return (kept[0], kept[-1] + 1)


def stat_shape(shape: Sequence[int | None], axes: Sequence[int]) -> tuple[int | None, ...]:
    """Shape of a full-layout statistic: 1 on reduced axes, the input's elsewhere."""
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def reduced_size(shape: Sequence[int], axes: Sequence[int]) -> int:
    """Number of values behind each statistic (``m`` in the running variance)."""
    # math.prod: np.prod costs microseconds per call, and the python-linker
    # performs call this on every step.
    return math.prod(int(shape[a]) for a in axes)
