"""Theano 1.0's ``abstract_conv.bilinear_upsampling``, on lasagne_bn's convolutions.

Upsampling by an integer ratio ``r`` is a transposed convolution with stride
``r`` of the triangle filter ``1/r, 2/r, ..., 1, ..., 1/r`` (linear
interpolation), after each map's first and last rows and columns are
repeated once so that the borders interpolate towards themselves.  A
fractional ratio ``p/q`` upsamples by ``p`` and keeps every ``q``-th value;
it is computed the way Theano did, as one convolution of the (zero-padded)
2-D filter by the maps themselves.  Keras 2's Theano backend calls this for
``resize_images(..., interpolation='bilinear')``.
"""

from __future__ import annotations

from math import gcd

import pytensor.tensor as pt
from pytensor import config

from lasagne_bn.ops.conv import conv2d, conv2d_grad_wrt_inputs

__all__ = [
    "bilinear_kernel_1D",
    "bilinear_kernel_2D",
    "bilinear_upsampling",
    "frac_bilinear_upsampling",
]


def bilinear_kernel_1D(ratio, normalize: bool = True):
    """The 1-D filter of linear interpolation by ``ratio``: ``1, 2, ..., ratio, ..., 1``.

    Divided by ``ratio`` when ``normalize`` (the default), so that its peak is 1.

    Examples
    --------
    >>> bilinear_kernel_1D(2).eval()
    array([0.5, 1. , 0.5])
    """
    rising = pt.arange(1, ratio + 1, dtype=config.floatX)
    kern = pt.concatenate([rising, rising[-2::-1]])
    return kern / pt.cast(ratio, config.floatX) if normalize else kern


def bilinear_kernel_2D(ratio, normalize: bool = True):
    """The 2-D filter: the outer product of the rows' and the columns' 1-D filters.

    ``ratio`` is one int for both, or ``(rows, columns)``.

    Examples
    --------
    >>> bilinear_kernel_2D((1, 2)).eval()
    array([[0.5, 1. , 0.5]])
    """
    rows, cols = ratio if isinstance(ratio, tuple) else (ratio, ratio)
    return (
        bilinear_kernel_1D(rows, normalize)[:, None] * bilinear_kernel_1D(cols, normalize)[None, :]
    )


def _edge_padded(maps):
    """``maps`` with their first and last rows and columns repeated once."""
    maps = pt.concatenate([maps[:, :, :1], maps, maps[:, :, -1:]], axis=2)
    return pt.concatenate([maps[:, :, :, :1], maps, maps[:, :, :, -1:]], axis=3)


def _reduced(fraction) -> tuple[int, int]:
    p, q = (int(v) for v in fraction)
    d = gcd(p, q)
    return p // d, q // d


def frac_bilinear_upsampling(input, frac_ratio):
    """Bilinear upsampling of a 4-D ``input`` by a fractional ratio (``(p, q)`` or one per axis).

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> x = pt.as_tensor(np.arange(4.0).reshape(1, 1, 2, 2))
    >>> frac_bilinear_upsampling(x, (3, 2)).eval().shape
    (1, 1, 3, 3)
    """
    if not isinstance(frac_ratio, tuple):
        raise ValueError(f"frac_ratio={frac_ratio!r}: expected a tuple (p, q) or ((p, q), (p, q))")
    if isinstance(frac_ratio[0], tuple):
        (p_rows, q_rows), (p_cols, q_cols) = (_reduced(f) for f in frac_ratio)
    else:
        (p_rows, q_rows) = (p_cols, q_cols) = _reduced(frac_ratio)
    ratio, subsample = (p_rows, p_cols), (q_rows, q_cols)
    input = pt.as_tensor_variable(input)
    rows, cols = input.shape[2], input.shape[3]
    maps = _edge_padded(input.reshape((-1, 1, rows, cols)))
    # the filter, zero-padded so that the dilated maps slide over all of it
    # per axis, as scalars: shape arithmetic that the JAX backend keeps static
    full = [(2 * n - 1) * r + 1 for n, r in ((rows, p_rows), (cols, p_cols))]
    before = [f // 2 for f in full]
    kern = bilinear_kernel_2D(ratio)
    kern = pt.concatenate(
        [pt.zeros((before[0], kern.shape[1]), kern.dtype), kern,
         pt.zeros((full[0] - before[0], kern.shape[1]), kern.dtype)], axis=0,
    )  # fmt: skip
    kern = pt.concatenate(
        [pt.zeros((kern.shape[0], before[1]), kern.dtype), kern,
         pt.zeros((kern.shape[0], full[1] - before[1]), kern.dtype)], axis=1,
    )  # fmt: skip
    # the maps are the filters here: one output channel per map
    up = conv2d(
        kern[None, None], maps, border_mode="valid", filter_dilation=ratio, subsample=subsample
    )
    return up.reshape((input.shape[0], input.shape[1], up.shape[2], up.shape[3]))


def bilinear_upsampling(
    input,
    ratio=None,
    frac_ratio=None,
    batch_size=None,
    num_input_channels=None,
    use_1D_kernel: bool = True,
):
    """Bilinear upsampling of a 4-D ``input`` (batch, channels, rows, columns), as Theano 1.0.

    Give ``ratio`` (an int) or ``frac_ratio`` (``(p, q)``, or one such pair per
    axis; needs ``use_1D_kernel=False``), not both.  ``batch_size`` and
    ``num_input_channels`` are shape hints.  With an even ratio the last row
    and column are repeated once more than the first, as in Theano.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> x = pt.as_tensor(np.array([[[[0.0, 2.0]]]]))
    >>> bilinear_upsampling(x, ratio=2).eval()[0, 0, 0]
    array([0., 1., 2., 2.])
    """
    if ratio and frac_ratio:
        raise ValueError(
            f"ratio={ratio!r} and frac_ratio={frac_ratio!r}: expected one of them, not both"
        )
    if not (ratio or frac_ratio):
        raise ValueError("ratio and frac_ratio are both None: expected one of them")
    if frac_ratio:
        if use_1D_kernel:
            raise ValueError(
                f"frac_ratio={frac_ratio!r} with use_1D_kernel=True: fractional ratios "
                "need use_1D_kernel=False"
            )
        return frac_bilinear_upsampling(input, frac_ratio)
    input = pt.as_tensor_variable(input)
    try:
        flat = batch_size * num_input_channels
    except TypeError:
        flat = None
    rows, cols = input.shape[2], input.shape[3]
    maps = _edge_padded(input.reshape((-1, 1, rows, cols)))
    pad = 2 * ratio - (ratio - 1) // 2 - 1
    if use_1D_kernel:
        kern = bilinear_kernel_1D(ratio)
        up_rows = conv2d_grad_wrt_inputs(
            maps, kern[None, None, :, None], (flat, 1, rows * ratio, cols + 2),
            filter_shape=(1, 1, None, 1), border_mode=(pad, 0), subsample=(ratio, 1),
        )  # fmt: skip
        up = conv2d_grad_wrt_inputs(
            up_rows, kern[None, None, None, :], (flat, 1, rows * ratio, cols * ratio),
            filter_shape=(1, 1, 1, None), border_mode=(0, pad), subsample=(1, ratio),
        )  # fmt: skip
    else:
        up = conv2d_grad_wrt_inputs(
            maps, bilinear_kernel_2D(ratio)[None, None], (flat, 1, rows * ratio, cols * ratio),
            filter_shape=(1, 1, None, None), border_mode=(pad, pad), subsample=(ratio, ratio),
        )  # fmt: skip
    return up.reshape((input.shape[0], input.shape[1], rows * ratio, cols * ratio))
