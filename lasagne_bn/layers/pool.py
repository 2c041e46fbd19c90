"""Pooling layers with Lasagne's constructors and shape rules.

``Pool{1,2,3}DLayer`` and ``MaxPool{1,2,3}DLayer`` (modes ``'max'``,
``'average_inc_pad'``, ``'average_exc_pad'``, ``'sum'``),
``Upscale{1,2,3}DLayer``, ``FeaturePoolLayer`` (maxout),
``FeatureWTALayer``, ``GlobalPoolLayer`` and
``SpatialPyramidPoolingLayer``, on the Ops of :mod:`lasagne_bn.ops.pool`.
As in Lasagne, ``stride`` defaults to ``pool_size``, ``ignore_border`` to
``True``, and padding never wins a maximum.

>>> from lasagne_bn.layers import InputLayer, MaxPool2DLayer
>>> MaxPool2DLayer(InputLayer((None, 3, 7, 7)), 2, ignore_border=False).output_shape
(None, 3, 4, 4)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt

from lasagne_bn.layers.base import Layer
from lasagne_bn.ops.pool import POOL_MODES, pool_2d, pool_3d, pool_output_length
from lasagne_bn.utils import as_tuple, int_types

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pytensor.graph.basic import Variable

    from lasagne_bn._typing import Incoming

__all__ = [
    "FeaturePoolLayer",
    "FeatureWTALayer",
    "GlobalPoolLayer",
    "MaxPool1DLayer",
    "MaxPool2DLayer",
    "MaxPool3DLayer",
    "Pool1DLayer",
    "Pool2DLayer",
    "Pool3DLayer",
    "SpatialPyramidPoolingLayer",
    "Upscale1DLayer",
    "Upscale2DLayer",
    "Upscale3DLayer",
    "pool_output_length",
]

# Theano's pooling modes (its pool_2d refused the alias 'average')
_MODES = POOL_MODES


def _int_tuple(value, n, what, name, minimum):
    try:
        items = as_tuple(value, n, int_types)
    except (TypeError, ValueError):
        raise TypeError(
            f"{what}={value!r} must be an int or a tuple of {n} ints; layer name={name!r}"
        ) from None
    if any(isinstance(v, bool) or v < minimum for v in items):
        raise ValueError(f"{what}={value!r} must be >= {minimum}; layer name={name!r}")
    return tuple(int(v) for v in items)


class _PoolLayer(Layer):
    n = 2

    def __init__(
        self, incoming, pool_size, stride=None, pad=0, ignore_border=True, mode="max", **kwargs
    ):
        super().__init__(incoming, **kwargs)
        n, name = self.n, self.name
        if len(self.input_shape) != n + 2:
            raise ValueError(
                f"Tried to create a {n}D pooling layer with input shape {self.input_shape!r}. "
                f"Expected {n + 2} input dimensions (batchsize, channels, {n} spatial "
                "dimensions)."
            )
        self.pool_size = _int_tuple(pool_size, n, "pool_size", name, 1)
        self.stride = (
            self.pool_size if stride is None else _int_tuple(stride, n, "stride", name, 1)
        )
        self.pad = _int_tuple(pad, n, "pad", name, 0)
        self.ignore_border = ignore_border
        if mode not in _MODES:
            raise ValueError(
                f"mode={mode!r}: expected one of {', '.join(map(repr, _MODES))}; "
                f"layer name={name!r}"
            )
        self.mode = mode
        if any(self.pad) and not ignore_border:
            raise ValueError(f"pad={pad!r} requires ignore_border=True; layer name={name!r}")
        if any(p >= s for p, s in zip(self.pad, self.pool_size, strict=True)):
            raise ValueError(
                f"pad={pad!r} must be smaller than pool_size={self.pool_size}; layer name={name!r}"
            )

    def get_output_shape_for(self, input_shape):
        shape = list(input_shape)
        for i in range(self.n):
            shape[2 + i] = pool_output_length(
                input_shape[2 + i],
                self.pool_size[i],
                self.stride[i],
                self.pad[i],
                self.ignore_border,
            )
        return tuple(shape)


class Pool2DLayer(_PoolLayer):
    """Max or average pooling over the two trailing axes of 4-d input.

    Parameters
    ----------
    incoming : Layer or tuple
    pool_size : int or (int, int)
    stride : int, (int, int) or None
        ``None``: ``pool_size`` (non-overlapping windows).
    pad : int or (int, int)
        Zero padding on both sides; needs ``ignore_border=True``; never
        wins a maximum.
    ignore_border : bool
        ``False`` keeps a partial last window.
    mode : 'max', 'average_inc_pad' or 'average_exc_pad'

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = Pool2DLayer(InputLayer((None, 3, 8, 8)), 3, stride=2, pad=1, mode='average_inc_pad')
    >>> l.output_shape
    (None, 3, 4, 4)
    """

    n = 2

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        pad: int | Sequence[int] = (0, 0),
        ignore_border: bool = True,
        mode: str = "max",
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode, **kwargs)

    def get_output_for(self, input, **kwargs):
        return pool_2d(
            input,
            ws=self.pool_size,
            stride=self.stride,
            ignore_border=self.ignore_border,
            pad=self.pad,
            mode=self.mode,
        )


class MaxPool2DLayer(Pool2DLayer):
    """Max pooling over the two trailing axes of 4-d input (see :class:`Pool2DLayer`).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l_in = InputLayer((None, 3, 7, 7))
    >>> MaxPool2DLayer(l_in, 2).output_shape, MaxPool2DLayer(l_in, 2, stride=1).output_shape
    ((None, 3, 3, 3), (None, 3, 6, 6))
    """

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        pad: int | Sequence[int] = (0, 0),
        ignore_border: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


class Pool1DLayer(_PoolLayer):
    """Max or average pooling over the trailing axis of 3-d input (see :class:`Pool2DLayer`).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = Pool1DLayer(InputLayer((None, 3, 10)), 2, mode='average_exc_pad')
    >>> l.output_shape, l.mode
    ((None, 3, 5), 'average_exc_pad')
    """

    n = 1

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        pad: int | Sequence[int] = 0,
        ignore_border: bool = True,
        mode: str = "max",
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode, **kwargs)

    def get_output_for(self, input, **kwargs):
        out = pool_2d(
            input.dimshuffle(0, 1, 2, "x"),
            ws=(self.pool_size[0], 1),
            stride=(self.stride[0], 1),
            ignore_border=self.ignore_border,
            pad=(self.pad[0], 0),
            mode=self.mode,
        )
        return out.dimshuffle(0, 1, 2)  # drop the size-1 axis (its gradient stays a dimshuffle)


class MaxPool1DLayer(Pool1DLayer):
    """Max pooling over the trailing axis of 3-d input.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l_in = InputLayer((None, 3, 10))
    >>> MaxPool1DLayer(l_in, 3).output_shape
    (None, 3, 3)
    >>> MaxPool1DLayer(l_in, 3, ignore_border=False).output_shape  # a partial last window
    (None, 3, 4)
    """

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        pad: int | Sequence[int] = 0,
        ignore_border: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


class Pool3DLayer(_PoolLayer):
    """Max or average pooling over the three trailing axes of 5-d input.

    The arguments are those of :class:`Pool2DLayer`, with three entries per
    tuple (Theano's ``pool_3d``).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> Pool3DLayer(InputLayer((None, 3, 8, 7, 6)), 2).output_shape
    (None, 3, 4, 3, 3)
    """

    n = 3

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        pad: int | Sequence[int] = (0, 0, 0),
        ignore_border: bool = True,
        mode: str = "max",
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode, **kwargs)

    def get_output_for(self, input, **kwargs):
        return pool_3d(
            input,
            ws=self.pool_size,
            stride=self.stride,
            ignore_border=self.ignore_border,
            pad=self.pad,
            mode=self.mode,
        )


class MaxPool3DLayer(Pool3DLayer):
    """Max pooling over the three trailing axes of 5-d input (see :class:`Pool3DLayer`).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> MaxPool3DLayer(InputLayer((None, 2, 4, 6, 8)), 2).output_shape
    (None, 2, 2, 3, 4)
    """

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int | Sequence[int],
        stride: int | Sequence[int] | None = None,
        pad: int | Sequence[int] = (0, 0, 0),
        ignore_border: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


def _flatten3(x):
    """``x.flatten(3)`` with static sizes where known (JAX traces shape arithmetic)."""
    static = x.type.shape
    lead = [s if s is not None else x.shape[i] for i, s in enumerate(static[:2])]
    if all(s is not None for s in static[2:]):
        rest = int(np.prod(static[2:]))
    else:
        rest = pt.prod(x.shape[2:])
    return x.reshape((*lead, rest))


def _mean(x, axis):
    """Mean as a sum over a size (PyTensor 3.0.7's ``mean`` breaks the C linker)."""
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    count = x.shape[axes[0]]
    for a in axes[1:]:
        count = count * x.shape[a]
    return x.sum(axis=axes) / pt.cast(count, x.dtype)


_TUPLE_AXIS_REDUCTIONS = (_mean, pt.max, pt.min, pt.sum, pt.mean, pt.prod)


class GlobalPoolLayer(Layer):
    """Pools every feature map to one value: ``pool_function`` over all trailing axes.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape ``(batch, channels, ...)``.
    pool_function : callable
        Called as ``pool_function(x, axis=2)`` on the input flattened to
        3 dimensions; the mean by default (``pt.max`` for global max
        pooling).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> GlobalPoolLayer(InputLayer((None, 64, 7, 7))).output_shape
    (None, 64)
    """

    def __init__(
        self, incoming: Incoming, pool_function: Callable[..., Variable] = _mean, **kwargs: Any
    ) -> None:
        super().__init__(incoming, **kwargs)
        # no check of the input's ndim: Lasagne accepted any (and mocks) until get_output
        if not callable(pool_function):
            raise TypeError(f"pool_function={pool_function!r} must be callable")
        self.pool_function = pool_function

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[:2])

    def get_output_for(self, input, **kwargs):
        if self.pool_function in _TUPLE_AXIS_REDUCTIONS:
            # the same result without a flatten, whose shape arithmetic JAX cannot trace
            return self.pool_function(input, axis=tuple(range(2, input.ndim)))
        return self.pool_function(_flatten3(input), axis=2)


class _UpscaleLayer(Layer):
    n = 2

    def __init__(
        self,
        incoming: Incoming,
        scale_factor: int | Sequence[int],
        mode: str = "repeat",
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        if len(self.input_shape) != self.n + 2:
            raise ValueError(
                f"{type(self).__name__} expects {self.n + 2}-d input (batchsize, channels, "
                f"{self.n} spatial dimensions); got input shape {self.input_shape!r}"
            )
        try:
            self.scale_factor = as_tuple(scale_factor, self.n, int_types)
        except (TypeError, ValueError):
            raise TypeError(
                f"scale_factor={scale_factor!r} must be an int or a tuple of {self.n} ints"
            ) from None
        if any(s < 1 for s in self.scale_factor):
            raise ValueError(f"Scale factor must be >= 1, not {self.scale_factor}")
        if mode not in ("repeat", "dilate"):
            raise ValueError(f"Mode must be either 'repeat' or 'dilate', not {mode!r}")
        self.mode = mode

    def get_output_shape_for(self, input_shape):
        shape = list(input_shape)
        for i, s in enumerate(self.scale_factor):
            if shape[2 + i] is not None:
                shape[2 + i] *= s
        return tuple(shape)

    def get_output_for(self, input, **kwargs):
        factors = self.scale_factor
        if all(s == 1 for s in factors):
            return input
        # sizes as ints where static: JAX needs reshape / alloc shapes it can read at
        # trace time (arithmetic on symbolic shapes is traced)
        size = [s if s is not None else input.shape[i] for i, s in enumerate(input.type.shape)]
        out_shape = size[:2] + [size[2 + i] * s for i, s in enumerate(factors)]
        if self.mode == "repeat":
            # each value broadcast over a new axis after its own, then merged with it
            order = [0, 1]
            expanded = size[:2]
            for i, s in enumerate(factors):
                order += [2 + i, "x"]
                expanded += [size[2 + i], s]
            spread = pt.broadcast_to(input.dimshuffle(*order), expanded)
            return spread.reshape(out_shape)
        out = pt.zeros(out_shape, dtype=input.dtype)
        index = (slice(None), slice(None)) + tuple(slice(None, None, s) for s in factors)
        return pt.set_subtensor(out[index], input)


class Upscale2DLayer(_UpscaleLayer):
    """Upscales the two trailing axes by ``scale_factor``.

    ``mode='repeat'`` repeats each value; ``mode='dilate'`` puts it at the
    top-left of its block and zeros elsewhere (a transposed convolution
    does ``'dilate'`` plus a convolution more cheaply).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> Upscale2DLayer(InputLayer((None, 3, 5, 4)), (2, 3)).output_shape
    (None, 3, 10, 12)
    """

    n = 2


class Upscale1DLayer(_UpscaleLayer):
    """Upscales the trailing axis of 3-d input (see :class:`Upscale2DLayer`).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> Upscale1DLayer(InputLayer((None, 2, 5)), 3).output_shape
    (None, 2, 15)
    """

    n = 1


class Upscale3DLayer(_UpscaleLayer):
    """Upscales the three trailing axes of 5-d input (see :class:`Upscale2DLayer`).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> Upscale3DLayer(InputLayer((None, 3, 2, 3, 4)), (2, 1, 3)).output_shape
    (None, 3, 4, 3, 12)
    """

    n = 3


# --------------------------------------------------------------------------
# pooling across features


def _feature_axis(axis, ndim, name):
    if isinstance(axis, bool) or not isinstance(axis, int_types):
        raise TypeError(f"axis={axis!r} must be an int; layer name={name!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(
            f"axis={axis} is out of range for an input with {ndim} dimensions; layer name={name!r}"
        )
    return int(axis) % ndim


def _check_pool_size(pool_size, name):
    if isinstance(pool_size, bool) or not isinstance(pool_size, int_types) or pool_size < 1:
        raise ValueError(f"pool_size={pool_size!r} must be a positive int; layer name={name!r}")
    return int(pool_size)


def _grouped(input, axis, pool_size, known=()):
    """``input`` with ``axis`` split into ``(groups, pool_size)``.

    Sizes are ints where the input's type or ``known`` (the layer's input
    shape) gives them: JAX cannot compile a reshape to traced sizes.
    """
    known = tuple(known) if len(tuple(known)) == input.ndim else (None,) * input.ndim
    static = [a if a is not None else b for a, b in zip(input.type.shape, known, strict=True)]
    size = [s if s is not None else input.shape[i] for i, s in enumerate(static)]
    groups = size[axis] // pool_size
    return input.reshape((*size[:axis], groups, pool_size, *size[axis + 1 :])), size


class FeaturePoolLayer(Layer):
    """Pools groups of ``pool_size`` consecutive features along ``axis`` (maxout).

    Parameters
    ----------
    incoming : Layer or tuple
    pool_size : int
        Features per group; must divide the size of ``axis``.
    axis : int
        The feature axis (1 for dense and convolution layers).
    pool_function : callable
        Called as ``pool_function(x, axis=axis + 1)`` on the input reshaped
        to ``(..., groups, pool_size, ...)``; ``max`` by default (maxout).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> FeaturePoolLayer(InputLayer((None, 12, 5)), 3).output_shape
    (None, 4, 5)
    """

    def __init__(
        self,
        incoming: Incoming,
        pool_size: int,
        axis: int = 1,
        pool_function: Callable[..., Variable] = pt.max,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        self.pool_size = _check_pool_size(pool_size, self.name)
        self.axis = _feature_axis(axis, len(self.input_shape), self.name)
        self.pool_function = pool_function
        features = self.input_shape[self.axis]
        if features is not None and features % self.pool_size != 0:
            raise ValueError(
                f"Number of input feature maps ({features}) is not a multiple of the pool "
                f"size (pool_size={self.pool_size}); layer name={self.name!r}"
            )

    def get_output_shape_for(self, input_shape):
        shape = list(input_shape)
        if shape[self.axis] is not None:
            shape[self.axis] = shape[self.axis] // self.pool_size
        return tuple(shape)

    def get_output_for(self, input, **kwargs):
        grouped, _ = _grouped(input, self.axis, self.pool_size, self.input_shape)
        return self.pool_function(grouped, axis=self.axis + 1)


class FeatureWTALayer(Layer):
    """'Winner take all' across groups of ``pool_size`` features along ``axis``.

    Keeps the largest value of each group (the first one where several tie)
    and sets the others to zero; the output has the input's shape.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> FeatureWTALayer(InputLayer((None, 12, 5)), 3).output_shape
    (None, 12, 5)
    """

    def __init__(self, incoming: Incoming, pool_size: int, axis: int = 1, **kwargs: Any) -> None:
        super().__init__(incoming, **kwargs)
        self.pool_size = _check_pool_size(pool_size, self.name)
        self.axis = _feature_axis(axis, len(self.input_shape), self.name)
        features = self.input_shape[self.axis]
        if features is not None and features % self.pool_size != 0:
            raise ValueError(
                f"Number of input feature maps ({features}) is not a multiple of the region "
                f"size (pool_size={self.pool_size}); layer name={self.name!r}"
            )

    def get_output_for(self, input, **kwargs):
        grouped, size = _grouped(input, self.axis, self.pool_size, self.input_shape)
        winner = pt.argmax(grouped, axis=self.axis + 1, keepdims=True)
        position = pt.arange(self.pool_size).reshape(
            (1,) * (self.axis + 1) + (self.pool_size,) + (1,) * (input.ndim - self.axis - 1)
        )
        mask = pt.eq(winner, position).reshape(size)
        return input * pt.cast(mask, input.dtype)


# --------------------------------------------------------------------------
# spatial pyramid pooling

_SPP_KAIMING_MODES = ("max", "average_inc_pad", "average_exc_pad")


def _spp_mode_error(mode):
    return ValueError(
        f"Mode must be either 'max', 'average_inc_pad' or 'average_exc_pad'. Got '{mode}'"
    )


def pool_2d_nxn_regions(inputs, output_size, mode="max"):
    """Pools the last two axes of 4-d ``inputs`` into ``output_size`` x ``output_size`` bins.

    Bin ``(r, c)`` covers rows ``floor(r / n * h)`` to ``ceil((r + 1) / n * h)``
    (and likewise columns), so bins overlap where ``n`` does not divide the
    size (He et al., 2015, appendix A).  Returns the ``n * n`` bins, row by
    row, each of shape ``(batch, channels, 1)``.
    """
    if mode == "max":
        reduce = pt.max
    elif mode in ("average_inc_pad", "average_exc_pad"):
        reduce = _mean
    else:
        raise _spp_mode_error(mode)
    static = getattr(getattr(inputs, "type", None), "shape", (None,) * 4)[2:]
    symbolic = inputs.shape[2:]
    size = [s if s is not None else symbolic[i] for i, s in enumerate(static)]
    n = float(output_size)

    def bounds(k, length):
        if isinstance(length, int_types):
            return int(np.floor(k / n * length)), int(np.ceil((k + 1) / n * length))
        lo = pt.cast(pt.floor(k / n * length), "int32")
        return lo, pt.cast(pt.ceil((k + 1) / n * length), "int32")

    bins = []
    for row in range(output_size):
        r0, r1 = bounds(row, size[0])
        for col in range(output_size):
            c0, c1 = bounds(col, size[1])
            region = inputs[:, :, r0:r1, c0:c1]
            bins.append(reduce(region, axis=(2, 3)).dimshuffle(0, 1, "x"))
    return bins


def _bin_masks(length, n):
    """``(length, n)`` bool: which positions each of the ``n`` bins covers, and the counts.

    The bounds are Lasagne's float64 ``floor(k / n * length)`` and
    ``ceil((k + 1) / n * length)``, computed in the graph when ``length``
    is symbolic.
    """
    k = np.arange(n) / float(n)
    if isinstance(length, int_types):
        lo = np.floor(k * length).astype("int64")
        hi = np.ceil((np.arange(n) + 1) / float(n) * length).astype("int64")
        pos = np.arange(length)[:, None]
        return pt.constant((pos >= lo) & (pos < hi)), pt.constant(hi - lo)
    lo = pt.cast(pt.floor(pt.constant(k) * length), "int64")
    hi = pt.cast(pt.ceil(pt.constant((np.arange(n) + 1) / float(n)) * length), "int64")
    pos = pt.arange(length).dimshuffle(0, "x")
    return pt.and_(pt.ge(pos, lo), pt.lt(pos, hi)), hi - lo


def _kaiming_level(input, n, mode):
    """``pool_2d_nxn_regions`` as one ``(batch, channels, n * n)`` tensor.

    Reduces rows then columns through bin masks: a few broadcast ops
    instead of ``n * n`` slices (each a compiled kernel, and its gradient
    another); same values and gradients (ties included).
    """
    static = input.type.shape[2:]
    size = [s if s is not None else input.shape[2 + i] for i, s in enumerate(static)]
    (rows, n_rows), (cols, n_cols) = _bin_masks(size[0], n), _bin_masks(size[1], n)
    x = input.dimshuffle(0, 1, 2, 3, "x")  # (b, c, h, w, bin_row)
    if mode == "max":
        fill = np.array(-np.inf, dtype=input.dtype)
        y = pt.max(pt.where(rows.dimshuffle("x", "x", 0, "x", 1), x, fill), axis=2)
        y = y.dimshuffle(0, 1, 2, 3, "x")  # (b, c, w, bin_row, bin_col)
        y = pt.max(pt.where(cols.dimshuffle("x", "x", 0, "x", 1), y, fill), axis=2)
    else:
        zero = np.array(0, dtype=input.dtype)
        y = pt.sum(pt.where(rows.dimshuffle("x", "x", 0, "x", 1), x, zero), axis=2)
        y = y.dimshuffle(0, 1, 2, 3, "x")
        y = pt.sum(pt.where(cols.dimshuffle("x", "x", 0, "x", 1), y, zero), axis=2)
        count = n_rows.dimshuffle(0, "x") * n_cols.dimshuffle("x", 0)
        y = y / pt.cast(count, input.dtype)
    lead = [s if s is not None else input.shape[i] for i, s in enumerate(input.type.shape[:2])]
    return y.reshape((*lead, n * n))


class SpatialPyramidPoolingLayer(Layer):
    """Pools 4-d input of any spatial size into a fixed number of bins per channel.

    Each level ``n`` of ``pool_dims`` pools the two spatial axes into an
    ``n`` x ``n`` grid; the output is ``(batch, channels, sum(n * n))``
    (He et al., 2015).

    Parameters
    ----------
    incoming : Layer or tuple
    pool_dims : list of int
        The grid size of each level.
    mode : 'max', 'average_inc_pad' or 'average_exc_pad'
    implementation : 'fast' or 'kaiming'
        ``'fast'`` pools with windows of ``ceil(size / n)`` and strides of
        ``size // n`` (a pooling Op; symbolic windows when the spatial size
        is unknown: the output has ``n * n`` bins only where the size
        allows, as in Lasagne); ``'kaiming'`` cuts each bin out separately
        (the definition of He et al.'s SPP-net paper, any size).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> SpatialPyramidPoolingLayer(InputLayer((None, 8, 13, 17)), [4, 2, 1]).output_shape
    (None, 8, 21)
    """

    def __init__(
        self,
        incoming: Incoming,
        pool_dims: Sequence[int] = [4, 2, 1],
        mode: str = "max",
        implementation: str = "fast",
        **kwargs: Any,
    ) -> None:  # noqa: B006
        super().__init__(incoming, **kwargs)
        if len(self.input_shape) != 4:
            raise ValueError(
                f"Tried to create a SPP layer with input shape {self.input_shape!r}. "
                "Expected 4 input dimensions (batchsize, channels, 2 spatial dimensions)."
            )
        if implementation not in ("fast", "kaiming"):
            raise ValueError(
                f"implementation={implementation!r}: expected 'fast' or 'kaiming'; "
                f"layer name={self.name!r}"
            )
        if implementation == "kaiming" and mode not in _SPP_KAIMING_MODES:
            raise _spp_mode_error(mode)
        if implementation == "fast" and mode not in _MODES:
            raise ValueError(
                f"mode={mode!r}: expected one of {', '.join(map(repr, _MODES))}; "
                f"layer name={self.name!r}"
            )
        self.mode = mode
        self.implementation = implementation
        self.pool_dims = pool_dims

    def get_output_for(self, input, **kwargs):
        if self.implementation == "kaiming":
            levels = [_kaiming_level(input, n, self.mode) for n in self.pool_dims]
            return pt.concatenate(levels, axis=2)
        static = tuple(
            a if a is not None else b
            for a, b in zip(self.input_shape[2:], input.type.shape[2:], strict=True)
        )
        size = [s if s is not None else input.shape[2 + i] for i, s in enumerate(static)]
        levels = []
        for n in self.pool_dims:
            ws = tuple((s + n - 1) // n for s in size)
            stride = tuple(s // n for s in size)
            pooled = pool_2d(
                input, ws=ws, stride=stride, mode=self.mode, pad=None, ignore_border=True
            )
            if all(s is not None for s in static):
                # static sizes: a reshape to a static size, which JAX can trace
                bins = 1
                for i in range(2):
                    bins *= pool_output_length(static[i], ws[i], stride[i], 0, True)
                lead = [
                    s if s is not None else input.shape[i]
                    for i, s in enumerate(input.type.shape[:2])
                ]
                levels.append(pooled.reshape((*lead, bins)))
            else:
                levels.append(pooled.flatten(3))
        return pt.concatenate(levels, axis=2)

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], input_shape[1], sum(p * p for p in self.pool_dims))
