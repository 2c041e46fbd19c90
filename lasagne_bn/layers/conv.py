"""Convolution layers with Lasagne's constructors, parameters and shape rules.

``Conv1DLayer``, ``Conv2DLayer``, ``Conv3DLayer``, ``TransposedConv2DLayer``
and ``TransposedConv3DLayer`` (aliases ``Deconv2DLayer``, ``Deconv3DLayer``),
``DilatedConv2DLayer`` and ``PadLayer``, on the Ops of
:mod:`lasagne_bn.ops.conv`.  As in Lasagne:

- ``W`` has shape ``(num_filters, channels // num_groups) + filter_size``
  (input and output channels swapped for the transposed and dilated
  layers), initialised with ``GlorotUniform``; ``b`` is ``(num_filters,)``
  (``(num_filters,) + output spatial shape`` with ``untie_biases``), zeros,
  not regularizable, and ``b=None`` drops it;
- ``pad`` is ``'valid'`` (= 0), ``'full'``, ``'same'`` (odd filter sizes
  only), an int or a tuple; ``flip_filters=True`` is a true convolution;
- the default nonlinearity is ``rectify``.

>>> from lasagne_bn.layers import InputLayer, Conv2DLayer
>>> l = Conv2DLayer(InputLayer((None, 3, 32, 32)), num_filters=16, filter_size=3, pad='same')
>>> l.output_shape, l.W.get_value().shape
((None, 16, 32, 32), (16, 3, 3, 3))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.base import Layer
from lasagne_bn.ops.conv import (
    conv1d,
    conv2d,
    conv2d_grad_wrt_inputs,
    conv3d,
    conv3d_grad_wrt_inputs,
)
from lasagne_bn.utils import as_tuple, int_types

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from lasagne_bn._typing import Incoming, Nonlinearity, ParamSpec

__all__ = [
    "Conv1DLayer",
    "Conv2DLayer",
    "Conv3DLayer",
    "Deconv2DLayer",
    "Deconv3DLayer",
    "DilatedConv2DLayer",
    "TransposedConv2DLayer",
    "TransposedConv3DLayer",
    "conv_input_length",
    "conv_output_length",
]


def conv_output_length(
    input_length: int | None, filter_size: int, stride: int, pad: int | str = 0
) -> int | None:
    """Output length of a convolution on one axis (``None`` if the input's is unknown).

    ``pad`` is ``'valid'``, ``'full'``, ``'same'`` or an int; the result is
    ``ceil(unstrided_length / stride)``.

    Examples
    --------
    >>> conv_output_length(32, 3, 2, 'same'), conv_output_length(32, 5, 1, 'valid')
    (16, 28)
    """
    if input_length is None:
        return None
    if pad == "valid":
        length = input_length - filter_size + 1
    elif pad == "full":
        length = input_length + filter_size - 1
    elif pad == "same":
        length = input_length
    elif isinstance(pad, int_types) and not isinstance(pad, bool):
        length = input_length + 2 * pad - filter_size + 1
    else:
        raise ValueError(f"Invalid pad: {pad!r}; expected 'valid', 'full', 'same' or an int")
    return (length + stride - 1) // stride


def conv_input_length(
    output_length: int | None, filter_size: int, stride: int, pad: int | str = 0
) -> int | None:
    """Smallest input length that a convolution maps to ``output_length``.

    Strided convolutions map up to ``stride - 1`` larger inputs to the same
    output length too.  This is the output length of the transposed
    convolution.

    Examples
    --------
    >>> conv_input_length(16, 3, 2, 'same')
    31
    """
    if output_length is None:
        return None
    if pad == "valid":
        pad = 0
    elif pad == "full":
        pad = filter_size - 1
    elif pad == "same":
        pad = filter_size // 2
    if not isinstance(pad, int_types) or isinstance(pad, bool):
        raise ValueError(f"Invalid pad: {pad!r}; expected 'valid', 'full', 'same' or an int")
    return (output_length - 1) * stride - 2 * pad + filter_size


def _positive_tuple(value, n, what, name):
    try:
        items = as_tuple(value, n, int_types)
    except (TypeError, ValueError):
        raise TypeError(
            f"{what}={value!r} must be an int or a tuple of {n} ints; layer name={name!r}"
        ) from None
    if any(isinstance(v, bool) or v < 1 for v in items):
        raise ValueError(f"{what}={value!r} must be positive; layer name={name!r}")
    return tuple(int(v) for v in items)


class BaseConvLayer(Layer):
    """Convolution over the ``n`` trailing axes of ``(batch, channels, *spatial)`` input.

    Parameters
    ----------
    incoming : Layer or tuple
        The input layer or its shape ``(batch, channels) + spatial``.
    num_filters : int
        Number of output channels.
    filter_size : int or tuple of int
    stride : int or tuple of int
    pad : int, tuple of int, 'valid', 'full' or 'same'
        ``'same'`` pads ``filter_size // 2`` (odd filter sizes only).
    untie_biases : bool
        One bias per output position and channel instead of per channel.
    W, b : initializer, array or expression
        Filters ``(num_filters, channels // num_groups) + filter_size`` and
        biases; ``b=None`` for none.
    nonlinearity : callable or None
        ``None`` means the identity.
    flip_filters : bool
        ``True`` flips the filters (a convolution), ``False`` does not
        (a correlation).
    num_groups : int
        Channels are split into this many groups convolved separately; it
        must divide the input channels and ``num_filters``.
    n : int, optional
        Number of spatial dimensions (inferred from the input shape).
    """

    def __init__(
        self,
        incoming,
        num_filters,
        filter_size,
        stride=1,
        pad=0,
        untie_biases=False,
        W=init.GlorotUniform(),
        b=init.Constant(0.0),
        nonlinearity=nonlinearities.rectify,
        flip_filters=True,
        num_groups=1,
        n=None,
        **kwargs,
    ):
        super().__init__(incoming, **kwargs)
        name = self.name
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        if not callable(self.nonlinearity):
            raise TypeError(
                f"nonlinearity={nonlinearity!r} must be callable (or None); layer name={name!r}"
            )
        if n is None:
            n = len(self.input_shape) - 2
        elif n != len(self.input_shape) - 2:
            raise ValueError(
                f"Tried to create a {n}D convolution layer with input shape "
                f"{self.input_shape!r}. Expected {n + 2} input dimensions "
                f"(batchsize, channels, {n} spatial dimensions)."
            )
        if n < 1:
            raise ValueError(
                f"input shape {self.input_shape!r} has no spatial dimension; a convolution "
                f"needs (batchsize, channels, spatial...); layer name={name!r}"
            )
        self.n = n
        if isinstance(num_filters, bool) or not isinstance(num_filters, int_types):
            raise TypeError(f"num_filters={num_filters!r} must be an int; layer name={name!r}")
        if num_filters < 1:
            raise ValueError(f"num_filters={num_filters!r} must be positive; layer name={name!r}")
        self.num_filters = int(num_filters)
        self.filter_size = _positive_tuple(filter_size, n, "filter_size", name)
        self.flip_filters = flip_filters
        self.stride = _positive_tuple(stride, n, "stride", name)
        self.untie_biases = untie_biases
        if pad == "same" and any(s % 2 == 0 for s in self.filter_size):
            raise NotImplementedError("`same` padding requires odd filter size.")
        if pad == "valid":
            self.pad = (0,) * n
        elif pad in ("full", "same"):
            self.pad = pad
        elif isinstance(pad, str):
            # TypeError, as Lasagne's (a string is an iterable of non-ints there)
            raise TypeError(
                f"pad={pad!r}: expected 'valid', 'full', 'same', a single int or an iterable "
                f"of int ({n} values); layer name={name!r}"
            )
        else:
            try:
                self.pad = as_tuple(pad, n, int_types)
            except (TypeError, ValueError) as err:
                raise type(err)(
                    f"pad={pad!r}: expected 'valid', 'full', 'same', a single int or an "
                    f"iterable of int ({n} values); layer name={name!r}"
                ) from None
            if any(p < 0 for p in self.pad):
                raise ValueError(f"pad={pad!r} must be >= 0; layer name={name!r}")
        channels = self.input_shape[1]
        if (
            isinstance(num_groups, bool)
            or not isinstance(num_groups, int_types)
            or num_groups <= 0
            or self.num_filters % num_groups != 0
            or (channels is not None and channels % num_groups != 0)
        ):
            raise ValueError(
                f"num_groups (here: {num_groups!r}) must be positive and evenly divide the "
                f"number of input and output channels (here: {channels} and "
                f"{self.num_filters})"
            )
        self.num_groups = int(num_groups)
        self.W = self.add_param(W, self.get_W_shape(), name="W")
        if b is None:
            self.b = None
        else:
            if self.untie_biases:
                biases_shape = (self.num_filters,) + tuple(self.output_shape[2:])
            else:
                biases_shape = (self.num_filters,)
            self.b = self.add_param(b, biases_shape, name="b", regularizable=False)

    def get_W_shape(self):
        """Shape of the filters ``W``."""
        if self.input_shape[1] is None:
            raise ValueError(
                f"the number of input channels must be known to create the filters; input "
                f"shape {self.input_shape!r}; layer name={self.name!r}"
            )
        return (self.num_filters, self.input_shape[1] // self.num_groups) + self.filter_size

    def get_output_shape_for(self, input_shape):
        pad = self.pad if isinstance(self.pad, tuple) else (self.pad,) * self.n
        return (input_shape[0], self.num_filters) + tuple(
            conv_output_length(i, f, s, p)
            for i, f, s, p in zip(input_shape[2:], self.filter_size, self.stride, pad, strict=True)
        )

    def get_output_for(self, input, **kwargs):
        conved = self.convolve(input, **kwargs)
        if self.b is None:
            activation = conved
        elif self.untie_biases:
            activation = conved + pt.shape_padleft(self.b, 1)
        else:
            activation = conved + self.b.dimshuffle(("x", 0) + ("x",) * self.n)
        return self.nonlinearity(activation)

    def convolve(self, input, **kwargs):
        """The convolution of ``input`` with ``W`` (no bias, no nonlinearity)."""
        raise NotImplementedError(
            "BaseConvLayer does not implement convolve(); use a subclass such as Conv2DLayer"
        )

    def _border_mode(self):
        return "half" if self.pad == "same" else self.pad


class Conv1DLayer(BaseConvLayer):
    """1-D convolution of ``(batch, channels, length)`` input (see :class:`BaseConvLayer`).

    Computed as a 2-D convolution over a size-1 row axis.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = Conv1DLayer(InputLayer((None, 2, 20)), 4, 5, stride=2)
    >>> l.output_shape, l.W.get_value().shape
    ((None, 4, 8), (4, 2, 5))
    """

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = 1,
        pad: int | str | Sequence[int] = 0,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = True,
        convolution: Callable[..., Variable] = conv1d,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            pad,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            n=1,
            **kwargs,
        )
        self.convolution = convolution

    def convolve(self, input, **kwargs):
        extra = {"num_groups": self.num_groups} if self.num_groups > 1 else {}
        return self.convolution(
            input,
            self.W,
            self.input_shape,
            self.get_W_shape(),
            subsample=self.stride,
            border_mode=self._border_mode(),
            filter_flip=self.flip_filters,
            **extra,
        )


class Conv2DLayer(BaseConvLayer):
    """2-D convolution of ``(batch, channels, rows, cols)`` input (see :class:`BaseConvLayer`).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = Conv2DLayer(InputLayer((None, 8, 28, 28)), 4, (5, 3), stride=2, num_groups=2)
    >>> l.output_shape, l.W.get_value().shape
    ((None, 4, 12, 13), (4, 4, 5, 3))
    """

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = (1, 1),
        pad: int | str | Sequence[int] = 0,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = True,
        convolution: Callable[..., Variable] = conv2d,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            pad,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            n=2,
            **kwargs,
        )
        self.convolution = convolution

    convolve = Conv1DLayer.convolve  # the same call; ``convolution`` is 2-D here


class Conv3DLayer(BaseConvLayer):
    """3-D convolution of ``(batch, channels, depth, rows, cols)`` input.

    See :class:`BaseConvLayer`; ``convolution`` defaults (``None``) to
    :func:`lasagne_bn.ops.conv.conv3d`.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = Conv3DLayer(InputLayer((None, 2, 8, 9, 10)), 4, 3, stride=(1, 2, 2), pad='same')
    >>> l.output_shape, l.W.get_value().shape
    ((None, 4, 8, 5, 5), (4, 2, 3, 3, 3))
    """

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = (1, 1, 1),
        pad: int | str | Sequence[int] = 0,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = True,
        convolution: Callable[..., Variable] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            pad,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            n=3,
            **kwargs,
        )
        self.convolution = conv3d if convolution is None else convolution

    convolve = Conv1DLayer.convolve  # the same call; ``convolution`` is 3-D here


class _TransposedConvLayer(BaseConvLayer):
    """The transposed convolution over ``n`` spatial axes (see :class:`TransposedConv2DLayer`)."""

    _n = 0
    _grad_inputs = None

    def __init__(
        self,
        incoming,
        num_filters,
        filter_size,
        stride,
        crop,
        untie_biases,
        W,
        b,
        nonlinearity,
        flip_filters,
        output_size,
        **kwargs,
    ):
        n = self._n
        if output_size is not None and not isinstance(output_size, Variable):
            output_size = _positive_tuple(output_size, n, "output_size", kwargs.get("name"))
        self.output_size = output_size
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            crop,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            n=n,
            **kwargs,
        )
        self.crop = self.pad
        del self.pad

    def get_W_shape(self):
        if self.input_shape[1] is None:
            raise ValueError(
                f"the number of input channels must be known to create the filters; input "
                f"shape {self.input_shape!r}; layer name={self.name!r}"
            )
        return (self.input_shape[1], self.num_filters) + self.filter_size

    def get_output_shape_for(self, input_shape):
        if self.output_size is not None:
            size = (None,) * self.n if isinstance(self.output_size, Variable) else self.output_size
            return (input_shape[0], self.num_filters, *size)
        crop = getattr(self, "crop", getattr(self, "pad", None))
        crop = crop if isinstance(crop, tuple) else (crop,) * self.n
        return (input_shape[0], self.num_filters) + tuple(
            conv_input_length(i, f, s, p)
            for i, f, s, p in zip(
                input_shape[2:], self.filter_size, self.stride, crop, strict=True
            )
        )

    def convolve(self, input, **kwargs):
        border_mode = "half" if self.crop == "same" else self.crop
        if isinstance(self.output_size, Variable):
            output_size = self.output_size
            output_size = [output_size[i] for i in range(self.n)]
        else:
            output_size = self.output_shape[2:]
            if any(s is None for s in output_size):
                output_size = self.get_output_shape_for(input.shape)[2:]
        return type(self)._grad_inputs(
            input,
            self.W,
            (None, None, *output_size),
            filter_shape=self.get_W_shape(),
            border_mode=border_mode,
            subsample=self.stride,
            filter_flip=not self.flip_filters,
        )


class TransposedConv2DLayer(_TransposedConvLayer):
    """Transposed 2-D convolution ("deconvolution"): the backward pass of a convolution.

    Think of it as spreading the input out by ``stride`` (``stride - 1``
    zeros between values), padding it by ``filter_size - 1 - crop`` and
    correlating with the filters.  ``W`` has shape ``(channels, num_filters)
    + filter_size``; ``crop`` plays the role of the forward convolution's
    ``pad``; ``flip_filters`` defaults to ``False``.  With a stride several
    output sizes are possible: ``output_size`` (ints, or a symbolic pair)
    picks one, the default is the smallest.

    To transpose a convolution with tied weights::

        deconv = TransposedConv2DLayer(conv, conv.input_shape[1], conv.filter_size,
                                       stride=conv.stride, crop=conv.pad, W=conv.W,
                                       flip_filters=not conv.flip_filters)

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = TransposedConv2DLayer(InputLayer((None, 16, 7, 7)), 8, 4, stride=2, crop=1)
    >>> l.output_shape, l.W.get_value().shape
    ((None, 8, 14, 14), (16, 8, 4, 4))
    """

    _n = 2
    _grad_inputs = staticmethod(conv2d_grad_wrt_inputs)

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = (1, 1),
        crop: int | str | Sequence[int] = 0,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = False,
        output_size: int | Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            crop,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            output_size,
            **kwargs,
        )


Deconv2DLayer = TransposedConv2DLayer


class TransposedConv3DLayer(_TransposedConvLayer):
    """Transposed 3-D convolution ("deconvolution"), as :class:`TransposedConv2DLayer`.

    Input ``(batch, channels, depth, rows, cols)``; ``W`` has shape
    ``(channels, num_filters) + filter_size``; ``output_size`` takes three
    sizes (or a symbolic vector of three).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = TransposedConv3DLayer(InputLayer((None, 4, 3, 5, 5)), 2, 3, stride=2, crop='same')
    >>> l.output_shape, l.W.get_value().shape
    ((None, 2, 5, 9, 9), (4, 2, 3, 3, 3))
    """

    _n = 3
    _grad_inputs = staticmethod(conv3d_grad_wrt_inputs)

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        stride: int | Sequence[int] = (1, 1, 1),
        crop: int | str | Sequence[int] = 0,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = False,
        output_size: int | Sequence[int] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            crop,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            output_size,
            **kwargs,
        )


Deconv3DLayer = TransposedConv3DLayer


class DilatedConv2DLayer(BaseConvLayer):
    """2-D convolution with filters dilated by ``dilation`` (holes between taps).

    As in Lasagne: no padding (``pad=0``; put a :class:`PadLayer` in front),
    no stride, ``flip_filters=False`` (a correlation), and ``W`` of shape
    ``(channels, num_filters) + filter_size``.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> DilatedConv2DLayer(InputLayer((None, 3, 20, 20)), 5, 3, dilation=(2, 4)).output_shape
    (None, 5, 16, 12)
    """

    def __init__(
        self,
        incoming: Incoming,
        num_filters: int,
        filter_size: int | Sequence[int],
        dilation: int | Sequence[int] = (1, 1),
        pad: int | str | Sequence[int] = 0,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        flip_filters: bool = False,
        **kwargs: Any,
    ) -> None:
        self.dilation = _positive_tuple(dilation, 2, "dilation", kwargs.get("name"))
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            1,
            pad,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            n=2,
            **kwargs,
        )
        del self.stride
        if self.pad not in ((0, 0), [0, 0]):
            raise NotImplementedError(
                f"DilatedConv2DLayer requires pad=0 / (0,0) / 'valid', but got {pad!r}. For a "
                "padded dilated convolution, add a PadLayer."
            )
        if flip_filters:
            raise NotImplementedError("DilatedConv2DLayer requires flip_filters=False.")

    def get_W_shape(self):
        if self.input_shape[1] is None:
            raise ValueError(
                f"the number of input channels must be known to create the filters; input "
                f"shape {self.input_shape!r}; layer name={self.name!r}"
            )
        return (self.input_shape[1], self.num_filters) + self.filter_size

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_filters) + tuple(
            conv_output_length(i, (f - 1) * d + 1, 1, 0)
            for i, f, d in zip(input_shape[2:], self.filter_size, self.dilation, strict=True)
        )

    def convolve(self, input, **kwargs):
        # a correlation with the dilated filters, channels swapped in W
        return conv2d(
            input,
            self.W.dimshuffle(1, 0, 2, 3),
            border_mode="valid",
            filter_flip=False,
            filter_dilation=self.dilation,
        )
