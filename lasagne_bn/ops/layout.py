"""Axes and parameter layouts shared by the ops and every backend's kernels.

Batch normalization reduces an input over some axes (``axes``) and keeps
one statistic per position of the others (the *kept* axes).  The kernels
view any input as a 3-D array ``(outer, channels, inner)``: the kept axes,
when they are adjacent, collapse into ``channels`` and the reduced axes
before and after them into ``outer`` and ``inner``.  NCHW with
``axes=(0, 2, 3)`` is ``(N, C, H*W)``; a dense ``(N, F)`` input with
``axes=(0,)`` is ``(N, F, 1)``; NHWC with ``axes=(0, 1, 2)`` is
``(N*H*W, C, 1)``.  Kept axes that are not adjacent need a transpose first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def normalize_axes(axes: str | Sequence[int] | np.ndarray, ndim: int) -> tuple[int, ...]:
    """Turn Theano's ``axes`` argument into a sorted tuple of reduced axes.

    Parameters
    ----------
    axes : 'per-activation', 'spatial', or a sequence of ints
        ``'per-activation'`` reduces over the batch axis only, ``'spatial'``
        over the batch axis and every axis after the second.
    ndim : int
        Number of dimensions of the input.

    Raises
    ------
    ValueError
        For an unknown string, an empty, repeated or out-of-range axis list.
    TypeError
        For an ``axes`` that is neither a string nor a sequence of ints.

    Examples
    --------
    >>> normalize_axes('spatial', 4)
    (0, 2, 3)
    >>> normalize_axes([2, 0], 3)
    (0, 2)
    """
    if isinstance(axes, str):
        if axes == "per-activation":
            return (0,)
        if axes == "spatial":
            if ndim < 2:
                raise ValueError(
                    f"axes='spatial' needs inputs with at least 2 dimensions, got ndim={ndim}"
                )
            return (0, *range(2, ndim))
        raise ValueError(
            f"axes={axes!r} is not a known mode: expected 'per-activation', 'spatial' "
            "or a tuple of ints"
        )
    if not isinstance(axes, Sequence | np.ndarray):
        raise TypeError(
            f"axes={axes!r} ({type(axes).__name__}) must be 'per-activation', 'spatial' "
            "or a tuple of ints"
        )
    items = list(np.asarray(axes).ravel()) if isinstance(axes, np.ndarray) else list(axes)
    if not all(isinstance(a, int | np.integer) and not isinstance(a, bool) for a in items):
        raise TypeError(f"axes={axes!r} must contain only ints")
    result = tuple(sorted(int(a) for a in items))
    if not result:
        raise ValueError("axes=() is empty: batch normalization needs at least one axis")
    if len(set(result)) != len(result):
        raise ValueError(f"axes={tuple(axes)!r} repeats an axis: each axis may appear once")
    if result[0] < 0 or result[-1] >= ndim:
        raise ValueError(
            f"axes={tuple(axes)!r} is out of range for inputs with ndim={ndim}: "
            f"expected axes in [0, {ndim - 1}]"
        )
    return result


def kept_axes(axes: Sequence[int], ndim: int) -> tuple[int, ...]:
    """The axes that are not reduced over, in order."""
    return tuple(i for i in range(ndim) if i not in axes)


def broadcast_pattern(axes: Sequence[int], ndim: int) -> list[int | str]:
    """Dimshuffle pattern that turns reduced-layout parameters into full layout."""
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
