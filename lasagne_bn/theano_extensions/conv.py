"""Lasagne's alternative 1-D convolutions, on :mod:`lasagne_bn.ops.conv`.

Every function takes ``(batch, channels, length)`` input and ``(filters,
channels, filter_length)`` filters, Lasagne's arguments (``image_shape`` and
``filter_shape`` are shape hints, ``subsample`` a 1-tuple) and gives what
Lasagne's gave:

- :func:`conv1d_mc0` / :func:`conv1d_mc1`: a 2-D convolution with the
  sequence on the columns / rows (any ``border_mode``, ``num_groups``);
- :func:`conv1d_sc`: a 2-D convolution over ``(channels, length)`` with a
  single input channel ('valid' only).  As in Lasagne, with
  ``filter_flip=False`` it pairs input channel ``c`` with filter channel
  ``channels - 1 - c`` (the channel axis stays reversed);
- :func:`conv1d_unstrided`: a strided convolution computed as an unstrided
  one by folding the stride into the channels (filter length a multiple of
  the stride, input truncated to a multiple of it), through
  ``implementation``;
- :func:`conv1d_sd` / :func:`conv1d_md`: the strided 'valid' convolution
  Lasagne computed with one / several dot products (filter length a
  multiple of the stride); here both are the convolution Op.

Unsupported border modes and strides raise ``RuntimeError``, as in Lasagne.

>>> import numpy as np, pytensor.tensor as pt
>>> x, w = pt.tensor3(), pt.tensor3()
>>> out = conv1d_mc0(x, w, (1, 1, 5), (1, 1, 2))
>>> out.eval({x: np.arange(5.0).reshape(1, 1, 5), w: np.ones((1, 1, 2))}).tolist()
[[[1.0, 3.0, 5.0, 7.0]]]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytensor.tensor as pt
from pytensor.tensor.variable import TensorVariable

from lasagne_bn.ops.conv import conv2d
from lasagne_bn.utils import int_types

__all__ = [
    "conv1d_mc0",
    "conv1d_mc1",
    "conv1d_md",
    "conv1d_sc",
    "conv1d_sd",
    "conv1d_unstrided",
]

_VALID = ("valid", 0, (0,))


def _stride(subsample) -> int:
    """Lasagne passes ``(stride,)``; a plain int is accepted too."""
    if isinstance(subsample, int_types) and not isinstance(subsample, bool):
        return int(subsample)
    if isinstance(subsample, Sequence) and len(subsample) == 1:
        return subsample[0]
    raise TypeError(f"subsample={subsample!r}: expected a 1-tuple (stride,) or an int")


def _is_valid(border_mode) -> bool:
    return isinstance(border_mode, (str, tuple, *int_types)) and border_mode in _VALID


def _require_valid(border_mode, name: str) -> None:
    if not _is_valid(border_mode):
        raise RuntimeError(f"Unsupported border_mode for {name}: {border_mode}")


def _hint(shape, make: Callable[[tuple], tuple]):
    return None if shape is None else make(tuple(shape))


def _conv_1d_as_2d(
    input, filters, image_shape, filter_shape, border_mode, stride, flip, groups, axis
):
    """The 1-D convolution as a 2-D one with the sequence on ``axis`` (2: rows, 3: cols)."""
    if isinstance(border_mode, tuple):
        if len(border_mode) != 1:
            raise ValueError(
                f"border_mode={border_mode!r}: expected a string, an int or a 1-tuple"
            )
        (border_mode,) = border_mode
    input = pt.as_tensor_variable(input)
    filters = pt.as_tensor_variable(filters)
    if axis == 3:
        pattern = (0, 1, "x", 2)
        if isinstance(border_mode, int_types) and not isinstance(border_mode, bool):
            border_mode = (0, border_mode)
        subsample = (1, stride)
        image_hint = _hint(image_shape, lambda s: (s[0], s[1], 1, s[2]))
        filter_hint = _hint(filter_shape, lambda s: (s[0], s[1], 1, s[2]))
    else:
        pattern = (0, 1, 2, "x")
        if isinstance(border_mode, int_types) and not isinstance(border_mode, bool):
            border_mode = (border_mode, 0)
        subsample = (stride, 1)
        image_hint = _hint(image_shape, lambda s: (s[0], s[1], s[2], 1))
        filter_hint = _hint(filter_shape, lambda s: (s[0], s[1], s[2], 1))
    conved = conv2d(
        input.dimshuffle(*pattern),
        filters.dimshuffle(*pattern),
        image_hint,
        filter_hint,
        border_mode=border_mode,
        subsample=subsample,
        filter_flip=bool(flip),
        num_groups=groups,
    )
    return conved[:, :, 0, :] if axis == 3 else conved[:, :, :, 0]


def conv1d_sc(
    input,
    filters,
    image_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1,),
    filter_flip=True,
) -> TensorVariable:
    """1-D convolution as a 2-D one over ``(channels, length)`` with one input channel.

    Only ``border_mode='valid'`` (or 0) is supported.
    """
    _require_valid(border_mode, "conv1d_sc")
    stride = _stride(subsample)
    input = pt.as_tensor_variable(input)
    filters = pt.as_tensor_variable(filters)
    image_hint = _hint(image_shape, lambda s: (s[0], 1, s[1], s[2]))
    filter_hint = _hint(filter_shape, lambda s: (s[0], 1, s[1], s[2]))
    # The channel axis is slid over too: reversing it makes a flipping
    # convolution pair channel c with filter channel c (Lasagne's trick).
    conved = conv2d(
        input.dimshuffle(0, "x", 1, 2),
        filters.dimshuffle(0, "x", 1, 2)[:, :, ::-1, :],
        image_hint,
        filter_hint,
        subsample=(1, stride),
        filter_flip=bool(filter_flip),
    )
    return conved[:, :, 0, :]


def conv1d_mc0(
    input,
    filters,
    image_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1,),
    filter_flip=True,
    num_groups=1,
) -> TensorVariable:
    """1-D convolution as a 2-D one on ``(batch, channels, 1, length)``.

    ``border_mode`` is anything 2-D convolution takes, or an int (or
    1-tuple) padding the sequence on both sides.
    """
    return _conv_1d_as_2d(
        input, filters, image_shape, filter_shape, border_mode, _stride(subsample),
        filter_flip, num_groups, axis=3,
    )  # fmt: skip


def conv1d_mc1(
    input,
    filters,
    image_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1,),
    filter_flip=True,
    num_groups=1,
) -> TensorVariable:
    """1-D convolution as a 2-D one on ``(batch, channels, length, 1)`` (as conv1d_mc0)."""
    return _conv_1d_as_2d(
        input, filters, image_shape, filter_shape, border_mode, _stride(subsample),
        filter_flip, num_groups, axis=2,
    )  # fmt: skip


def _strided_shapes(image_shape, filter_shape, subsample, name):
    batch, channels, length = image_shape
    num_filters, _, filter_length = filter_shape
    stride = _stride(subsample)
    if filter_length % stride > 0:
        raise RuntimeError(
            f"Filter length ({filter_length}) is not a multiple of the stride ({stride}) in {name}"
        )
    return batch, channels, length, num_filters, filter_length, stride


def conv1d_unstrided(
    input,
    filters,
    image_shape,
    filter_shape,
    border_mode="valid",
    subsample=(1,),
    filter_flip=True,
    implementation=conv1d_sc,
) -> TensorVariable:
    """A strided 'valid' 1-D convolution computed as an unstrided one.

    The input is truncated to a multiple of the stride ``s`` and folded to
    ``(batch, channels * s, length // s)`` (channel ``c * s + r`` holds
    positions ``r, r + s, ...`` of channel ``c``); the filters are folded to
    match (their length must be a multiple of ``s``) and ``implementation``
    does the unstrided convolution.  The filters are folded as Lasagne folded
    them, so every ``implementation`` gives Lasagne's values.
    """
    batch, channels, length, num_filters, filter_length, stride = _strided_shapes(
        image_shape, filter_shape, subsample, "conv1d_unstrided"
    )
    _require_valid(border_mode, "conv1d_unstrided")
    input = pt.as_tensor_variable(input)
    filters = pt.as_tensor_variable(filters)
    steps = filter_length // stride
    folded_length = length // stride
    # input[b, c, t * s + r] -> folded[b, c * s + r, t]
    folded = (
        input[:, :, : folded_length * stride]
        .reshape((-1, channels, folded_length, stride))
        .dimshuffle(0, 1, 3, 2)
        .reshape((-1, channels * stride, folded_length))
    )
    # Lasagne's fold: folded_filters[f, c * s + r, m] = filters[f, c, m * s + s - 1 - r],
    # so that flipping the folded filters over m flips the original ones.
    folded_filters = (
        filters[:, :, ::-1]
        .reshape((num_filters, channels, steps, stride))
        .dimshuffle(0, 1, 3, 2)
        .reshape((num_filters, channels * stride, steps))[:, :, ::-1]
    )
    return implementation(
        folded,
        folded_filters,
        (batch, channels * stride, folded_length),
        (num_filters, channels * stride, steps),
        border_mode,
        subsample=(1,),
        filter_flip=filter_flip,
    )


def _strided_valid(input, filters, image_shape, filter_shape, subsample, filter_flip, name):
    batch, channels, length, num_filters, filter_length, stride = _strided_shapes(
        image_shape, filter_shape, subsample, name
    )
    return _conv_1d_as_2d(
        input, filters, (batch, channels, length), (num_filters, channels, filter_length),
        "valid", stride, filter_flip, 1, axis=3,
    )  # fmt: skip


def conv1d_sd(
    input,
    filters,
    image_shape,
    filter_shape,
    border_mode="valid",
    subsample=(1,),
    filter_flip=True,
) -> TensorVariable:
    """Strided 'valid' 1-D convolution (Lasagne's single-dot-product version).

    The filter length must be a multiple of the stride.
    """
    _require_valid(border_mode, "conv1d_sd")
    return _strided_valid(
        input, filters, image_shape, filter_shape, subsample, filter_flip, "conv1d_sd"
    )


def conv1d_md(
    input,
    filters,
    image_shape,
    filter_shape,
    border_mode="valid",
    subsample=(1,),
    filter_flip=True,
) -> TensorVariable:
    """Strided 'valid' 1-D convolution (Lasagne's multiple-dot-product version).

    The filter length must be a multiple of the stride.
    """
    _require_valid(border_mode, "conv1d_md")
    return _strided_valid(
        input, filters, image_shape, filter_shape, subsample, filter_flip, "conv1d_md"
    )
