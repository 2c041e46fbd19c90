"""Pooling layers with Lasagne's constructors and shape rules.

``MaxPool1DLayer``, ``MaxPool2DLayer``, ``Pool1DLayer``, ``Pool2DLayer``
(modes ``'max'``, ``'average_inc_pad'``, ``'average_exc_pad'``),
``GlobalPoolLayer``, ``Upscale1DLayer`` and ``Upscale2DLayer``, on the Ops of
:mod:`lasagne_bn.ops.pool`.  As in Lasagne, ``stride`` defaults to
``pool_size``, ``ignore_border`` to ``True``, and padding never wins a
maximum.

>>> from lasagne_bn.layers import InputLayer, MaxPool2DLayer
>>> MaxPool2DLayer(InputLayer((None, 3, 7, 7)), 2, ignore_border=False).output_shape
(None, 3, 4, 4)
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from lasagne_bn.layers.base import Layer
from lasagne_bn.ops.pool import pool_2d, pool_output_length
from lasagne_bn.utils import as_tuple, int_types

__all__ = [
    "GlobalPoolLayer",
    "MaxPool1DLayer",
    "MaxPool2DLayer",
    "Pool1DLayer",
    "Pool2DLayer",
    "Upscale1DLayer",
    "Upscale2DLayer",
    "pool_output_length",
]

_MODES = ("max", "average_inc_pad", "average_exc_pad")


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
    """

    n = 2

    def __init__(
        self,
        incoming,
        pool_size,
        stride=None,
        pad=(0, 0),
        ignore_border=True,
        mode="max",
        **kwargs,
    ):
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
    """Max pooling over the two trailing axes of 4-d input (see :class:`Pool2DLayer`)."""

    def __init__(self, incoming, pool_size, stride=None, pad=(0, 0), ignore_border=True, **kwargs):
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


class Pool1DLayer(_PoolLayer):
    """Max or average pooling over the trailing axis of 3-d input (see :class:`Pool2DLayer`)."""

    n = 1

    def __init__(
        self, incoming, pool_size, stride=None, pad=0, ignore_border=True, mode="max", **kwargs
    ):
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
    """Max pooling over the trailing axis of 3-d input."""

    def __init__(self, incoming, pool_size, stride=None, pad=0, ignore_border=True, **kwargs):
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

    >>> from lasagne_bn.layers import InputLayer
    >>> GlobalPoolLayer(InputLayer((None, 64, 7, 7))).output_shape
    (None, 64)
    """

    def __init__(self, incoming, pool_function=_mean, **kwargs):
        super().__init__(incoming, **kwargs)
        if len(self.input_shape) < 3:
            raise ValueError(
                f"input shape {self.input_shape!r} has no axis to pool over; expected "
                f"(batch, channels, ...); layer name={self.name!r}"
            )
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

    def __init__(self, incoming, scale_factor, mode="repeat", **kwargs):
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

    >>> from lasagne_bn.layers import InputLayer
    >>> Upscale2DLayer(InputLayer((None, 3, 5, 4)), (2, 3)).output_shape
    (None, 3, 10, 12)
    """

    n = 2


class Upscale1DLayer(_UpscaleLayer):
    """Upscales the trailing axis of 3-d input (see :class:`Upscale2DLayer`)."""

    n = 1
