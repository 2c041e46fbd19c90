"""``lasagne.layers.cuda_convnet``: Lasagne's cuda-convnet layers on lasagne_bn.

cuda-convnet worked in the ``c01b`` layout (channels, rows, columns,
batch).  These classes keep the legacy constructors, restrictions, layouts
and parameter shapes: with ``dimshuffle=True`` (the default) the layers take
and give ``bc01`` like every other layer and ``W`` is ``(num_filters,
channels, rows, cols)``; with ``dimshuffle=False`` they take and give
``c01b`` and ``W`` is ``(channels, rows, cols, num_filters)``, as a
cuda-convnet checkpoint holds it.  The numbers are computed by lasagne_bn's
portable convolution and pooling (any mode, ``mode='JAX'`` for a GPU).

``partial_sum`` only traded speed for memory inside cuda-convnet's kernel:
it is accepted and ignored (one warning when it is not 1).

>>> import lasagne_bn_compat; lasagne_bn_compat.install()
>>> from lasagne.layers import InputLayer
>>> from lasagne.layers.cuda_convnet import Conv2DCCLayer, MaxPool2DCCLayer
>>> l = Conv2DCCLayer(InputLayer((3, 8, 8, None)), 16, 3, dimshuffle=False)
>>> l.output_shape, l.W.get_value().shape
((16, 6, 6, None), (3, 3, 3, 16))
>>> MaxPool2DCCLayer(l, 3, stride=2, dimshuffle=False).output_shape
(16, 3, 3, None)
"""

from __future__ import annotations

import pytensor.tensor as pt

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.base import Layer
from lasagne_bn.layers.conv import BaseConvLayer
from lasagne_bn.ops.conv import conv2d
from lasagne_bn.ops.pool import pool_2d, pool_output_length
from lasagne_bn.utils import as_tuple
from lasagne_bn_compat.lasagne.layers._gpu import ignored_option

__all__ = [
    "Conv2DCCLayer",
    "MaxPool2DCCLayer",
    "NINLayer_c01b",
    "ShuffleBC01ToC01BLayer",
    "ShuffleC01BToBC01Layer",
    "bc01_to_c01b",
    "c01b_to_bc01",
]

_TO_C01B = (1, 2, 3, 0)
_TO_BC01 = (3, 0, 1, 2)
_PORTABLE = "lasagne.layers.Conv2DLayer(..., flip_filters=False) has no such restriction"


class Conv2DCCLayer(BaseConvLayer):
    """cuda-convnet 2-D convolution (a correlation unless ``flip_filters=True``).

    Parameters
    ----------
    incoming, num_filters, filter_size, stride, pad, untie_biases, b, nonlinearity
        As ``Conv2DLayer``'s.  cuda-convnet's limits stay: square filters,
        strides and padding, ``num_filters`` a multiple of 16, and 1, 2, 3
        or a multiple of 4 input channels (``RuntimeError`` otherwise).
    W : initializer, array or expression, optional
        ``GlorotUniform()`` (``GlorotUniform(c01b=True)`` with
        ``dimshuffle=False``) if not given.
    dimshuffle : bool
        True: ``bc01`` input and output, ``W`` of shape ``(num_filters,
        channels, rows, cols)``.  False: ``c01b`` input and output, ``W`` of
        shape ``(channels, rows, cols, num_filters)``, untied biases
        ``(num_filters, out rows, out cols)``.
    flip_filters : bool
        Default False, as cuda-convnet.
    partial_sum : int or None
        Accepted and ignored (it tuned cuda-convnet's kernel).
    """

    def __init__(
        self,
        incoming,
        num_filters,
        filter_size,
        stride=(1, 1),
        pad=0,
        untie_biases=False,
        W=None,
        b=init.Constant(0.0),
        nonlinearity=nonlinearities.rectify,
        dimshuffle=True,
        flip_filters=False,
        partial_sum=1,
        **kwargs,
    ):
        if W is None:
            W = init.GlorotUniform() if dimshuffle else init.GlorotUniform(c01b=True)
        self.dimshuffle = dimshuffle
        # In c01b the untied biases follow the output rows and columns, not
        # the trailing axes BaseConvLayer would take: made below instead.
        c01b_untied = not dimshuffle and untie_biases and b is not None
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            pad,
            untie_biases,
            W,
            None if c01b_untied else b,
            nonlinearity,
            flip_filters,
            n=2,
            **kwargs,
        )
        if partial_sum != 1:
            ignored_option("Conv2DCCLayer", "partial_sum", partial_sum, "a cuda-convnet tuning")
        self.partial_sum = partial_sum
        if self.filter_size[0] != self.filter_size[1]:
            raise RuntimeError(
                "Conv2DCCLayer only supports square filters, but filter_size="
                f"{self.filter_size}; {_PORTABLE}"
            )
        if self.stride[0] != self.stride[1]:
            raise RuntimeError(
                f"Conv2DCCLayer only supports square strides, but stride={self.stride}; "
                + _PORTABLE
            )
        if self.num_filters % 16 != 0:
            raise RuntimeError(
                "Conv2DCCLayer requires num_filters to be a multiple of 16, but num_filters "
                f"is {self.num_filters}; {_PORTABLE}"
            )
        channels = self.num_input_channels
        if not (channels < 4 or channels % 4 == 0):
            raise RuntimeError(
                "Conv2DCCLayer requires the number of input channels to be 1, 2, 3 or a "
                f"multiple of 4, but it is {channels}; {_PORTABLE}"
            )
        if isinstance(self.pad, tuple) and self.pad[0] != self.pad[1]:
            raise RuntimeError(
                f"Conv2DCCLayer only supports square padding, but pad={self.pad}; " + _PORTABLE
            )
        if c01b_untied:
            out = self.output_shape
            self.b = self.add_param(
                b, (self.num_filters, out[1], out[2]), name="b", regularizable=False
            )

    @property
    def num_input_channels(self):
        """The number of input channels (axis 1 of ``bc01``, axis 0 of ``c01b``)."""
        return self.input_shape[1] if self.dimshuffle else self.input_shape[0]

    def get_W_shape(self):
        if self.dimshuffle:
            return super().get_W_shape()
        return (self.num_input_channels, *self.filter_size, self.num_filters)

    def get_output_shape_for(self, input_shape):
        if self.dimshuffle:
            return super().get_output_shape_for(input_shape)
        bc01 = tuple(input_shape[i] for i in _TO_BC01)
        shape = super().get_output_shape_for(bc01)
        return tuple(shape[i] for i in _TO_C01B)

    def get_output_for(self, input, **kwargs):
        if self.dimshuffle:
            image, image_shape, filters = input, self.input_shape, self.W
        else:
            image = pt.as_tensor_variable(input).dimshuffle(_TO_BC01)
            image_shape = tuple(self.input_shape[i] for i in _TO_BC01)
            filters = self.W.dimshuffle(_TO_BC01)
        conved = conv2d(
            image,
            filters,
            image_shape,
            (self.num_filters, self.num_input_channels, *self.filter_size),
            subsample=self.stride,
            border_mode=self._border_mode(),
            filter_flip=self.flip_filters,
        ).dimshuffle(_TO_C01B)
        # Bias and nonlinearity act in c01b, where cuda-convnet applied them.
        if self.b is not None:
            if self.untie_biases:
                conved = conved + self.b.dimshuffle(0, 1, 2, "x")
            else:
                conved = conved + self.b.dimshuffle(0, "x", "x", "x")
        conved = self.nonlinearity(conved)
        return conved.dimshuffle(_TO_BC01) if self.dimshuffle else conved


class MaxPool2DCCLayer(Layer):
    """cuda-convnet max pooling: square windows, partial last windows kept.

    Parameters
    ----------
    incoming : Layer or tuple
    pool_size : int or (int, int)
        Square (stored as one int).
    stride : int, (int, int) or None
        At most ``pool_size``; ``None`` means ``pool_size``.
    ignore_border : bool
        Must be False (cuda-convnet keeps partial windows).
    dimshuffle : bool
        True: ``bc01`` input and output; False: ``c01b``.
    **kwargs
        ``name``; ``pad`` other than 0 raises ``NotImplementedError``.
    """

    def __init__(
        self, incoming, pool_size, stride=None, ignore_border=False, dimshuffle=True, **kwargs
    ):
        if "pad" in kwargs:
            pad = kwargs.pop("pad")
            if as_tuple(pad, 2) != (0, 0):
                raise NotImplementedError(
                    "MaxPool2DCCLayer does not support padding (lasagne.layers.MaxPool2DLayer "
                    "does)"
                )
        super().__init__(incoming, **kwargs)
        pool_size = as_tuple(pool_size, 2)
        if pool_size[0] != pool_size[1]:
            raise NotImplementedError(
                "MaxPool2DCCLayer only supports square pooling regions, but "
                f"pool_size={pool_size} (lasagne.layers.MaxPool2DLayer does not)"
            )
        self.pool_size = pool_size[0]
        if stride is None:
            self.stride = self.pool_size
        else:
            stride = as_tuple(stride, 2)
            if stride[0] != stride[1]:
                raise NotImplementedError(
                    "MaxPool2DCCLayer only supports using the same stride in both directions "
                    f"but stride={stride} (lasagne.layers.MaxPool2DLayer does not)"
                )
            self.stride = stride[0]
        if self.stride > self.pool_size:
            raise NotImplementedError(
                "MaxPool2DCCLayer only supports stride <= pool_size. "
                "(lasagne.layers.MaxPool2DLayer takes any stride)"
            )
        if ignore_border:
            raise NotImplementedError(
                "MaxPool2DCCLayer does not support ignore_border=True. "
                "(lasagne.layers.MaxPool2DLayer does)"
            )
        self.dimshuffle = dimshuffle

    def get_output_shape_for(self, input_shape):
        batch, channels, rows, cols = (
            input_shape if self.dimshuffle else tuple(input_shape[i] for i in _TO_BC01)
        )
        rows, cols = (
            pool_output_length(size, self.pool_size, self.stride, 0, False)
            for size in (rows, cols)
        )
        if self.dimshuffle:
            return (batch, channels, rows, cols)
        return (channels, rows, cols, batch)

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        if not self.dimshuffle:
            input = input.dimshuffle(_TO_BC01)
        pooled = pool_2d(
            input,
            ws=(self.pool_size,) * 2,
            stride=(self.stride,) * 2,
            ignore_border=False,
            mode="max",
        )
        return pooled if self.dimshuffle else pooled.dimshuffle(_TO_C01B)


class ShuffleBC01ToC01BLayer(Layer):
    """Reorders ``bc01`` input (batch, channels, rows, cols) to ``c01b``."""

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[i] for i in _TO_C01B)

    def get_output_for(self, input, **kwargs):
        return pt.as_tensor_variable(input).dimshuffle(_TO_C01B)


bc01_to_c01b = ShuffleBC01ToC01BLayer


class ShuffleC01BToBC01Layer(Layer):
    """Reorders ``c01b`` input (channels, rows, cols, batch) to ``bc01``."""

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[i] for i in _TO_BC01)

    def get_output_for(self, input, **kwargs):
        return pt.as_tensor_variable(input).dimshuffle(_TO_BC01)


c01b_to_bc01 = ShuffleC01BToBC01Layer


class NINLayer_c01b(Layer):  # noqa: N801 - Lasagne's name
    """Network-in-network layer (a 1x1 convolution) on ``c01b`` input.

    Parameters
    ----------
    incoming : Layer or tuple
        ``c01b`` input: channels first, batch last.
    num_units : int
        Output channels.
    untie_biases : bool
        One bias per output channel and position (``(num_units, rows,
        cols)``) instead of per channel.
    W : initializer, array or expression
        ``(num_units, channels)``.
    b : initializer, array, expression or None
    nonlinearity : callable or None
        ``None`` is the identity.
    """

    def __init__(
        self,
        incoming,
        num_units,
        untie_biases=False,
        W=init.GlorotUniform(),
        b=init.Constant(0.0),
        nonlinearity=nonlinearities.rectify,
        **kwargs,
    ):
        super().__init__(incoming, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.num_units = num_units
        self.untie_biases = untie_biases
        self.W = self.add_param(W, (num_units, self.input_shape[0]), name="W")
        if b is None:
            self.b = None
        else:
            shape = (num_units, *self.output_shape[1:-1]) if untie_biases else (num_units,)
            self.b = self.add_param(b, shape, name="b", regularizable=False)

    def get_output_shape_for(self, input_shape):
        return (self.num_units, *input_shape[1:])

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        activation = pt.tensordot(self.W, input, axes=[[1], [0]])
        if self.b is not None:
            if self.untie_biases:
                pattern = [*range(input.ndim - 1), "x"]
            else:
                pattern = [0] + ["x"] * (input.ndim - 1)
            activation = activation + self.b.dimshuffle(pattern)
        return self.nonlinearity(activation)
