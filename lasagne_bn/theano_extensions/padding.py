"""Constant padding of a tensor, as ``lasagne.theano_extensions.padding``.

>>> import numpy as np, pytensor.tensor as pt
>>> pad(pt.as_tensor(np.ones((2, 3))), 1).eval().shape
(2, 5)
"""

from __future__ import annotations

import pytensor.tensor as pt

from lasagne_bn.utils import int_types

__all__ = ["pad", "pad_widths"]


def _is_int(value) -> bool:
    return isinstance(value, int_types) and not isinstance(value, bool)


def pad_widths(width) -> list[tuple[int, int]]:
    """``width`` as a list of ``(before, after)`` pairs, one per padded axis.

    An int stands for every axis (returned as a one-item list that
    :func:`pad` repeats); a sequence gives one int or pair per axis.

    Raises
    ------
    TypeError
        For a width of another kind.
    ValueError
        For a negative width.
    """
    items = [width] if _is_int(width) else width
    try:
        items = list(items)
    except TypeError:
        raise TypeError(
            f"width={width!r} must be an int, or a sequence of ints or (before, after) pairs"
        ) from None
    pairs = []
    for w in items:
        if _is_int(w):
            pair = (int(w), int(w))
        else:
            try:
                lo, hi = w
            except (TypeError, ValueError):
                raise TypeError(
                    f"width={width!r}: each item must be an int or a (before, after) pair, "
                    f"not {w!r}"
                ) from None
            if not (_is_int(lo) and _is_int(hi)):
                raise TypeError(f"width={width!r}: the pair {w!r} must hold two ints")
            pair = (int(lo), int(hi))
        if min(pair) < 0:
            raise ValueError(f"width={width!r} must be >= 0")
        pairs.append(pair)
    return pairs


def _axis_pairs(width, n_axes: int) -> list[tuple[int, int]]:
    """One ``(before, after)`` pair for each of the ``n_axes`` last axes."""
    pairs = pad_widths(width)
    if _is_int(width):
        pairs = pairs * n_axes
    if len(pairs) > n_axes:
        raise ValueError(
            f"width={width!r} gives {len(pairs)} axes to pad, but only {n_axes} axes follow "
            "the batch_ndim leading ones"
        )
    return pairs + [(0, 0)] * (n_axes - len(pairs))


def pad(x, width, val=0, batch_ndim=1, static_shape=None):
    """Pad the axes of ``x`` after the first ``batch_ndim`` ones with ``val``.

    Parameters
    ----------
    x : tensor
    width : int, sequence of int, or sequence of (int, int)
        An int pads every such axis by that much on both sides; a sequence
        gives the width per axis (from axis ``batch_ndim`` on; axes it does
        not reach are not padded), as an int (both sides) or a
        ``(before, after)`` pair.
    val : float or scalar tensor
        The padding value.
    batch_ndim : int
        Number of leading axes left alone.
    static_shape : tuple, optional
        Sizes of ``x`` known in advance (``None`` for unknown), e.g. a
        layer's ``input_shape``; sizes known here or in ``x``'s type make
        the output's static shape known, which JAX needs.

    Returns
    -------
    tensor
        ``x`` with the padding around it.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> pad(pt.as_tensor(np.ones((1, 2))), [(0, 1)], val=7).eval()
    array([[1., 1., 7.]])
    """
    x = pt.as_tensor_variable(x)
    if not _is_int(batch_ndim) or not 0 <= batch_ndim <= x.ndim:
        raise ValueError(f"batch_ndim={batch_ndim!r} must be an int in [0, {x.ndim}] (x.ndim)")
    pairs = [(0, 0)] * batch_ndim + _axis_pairs(width, x.ndim - batch_ndim)
    known = x.type.shape
    if static_shape is not None and len(static_shape) == x.ndim:
        known = tuple(k if k is not None else s for k, s in zip(known, static_shape, strict=True))
    out_shape = []
    for d, ((lo, hi), size) in enumerate(zip(pairs, known, strict=True)):
        out_shape.append((x.shape[d] if size is None else size) + lo + hi)
    fill = pt.cast(val, x.dtype)
    out = pt.alloc(fill, *out_shape)
    # Constant slice bounds (an end counted from the back instead of
    # lo + size): the gradient then slices with static bounds, which JAX
    # can trace even where the size is only known when the graph runs.
    window = tuple(slice(lo, -hi if hi else None) for lo, hi in pairs)
    return pt.set_subtensor(out[window], x)
