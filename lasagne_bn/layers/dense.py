"""Fully connected layers: :class:`DenseLayer` and :class:`NINLayer`.

>>> from lasagne_bn.layers import InputLayer, DenseLayer
>>> l = DenseLayer(InputLayer((None, 10, 20, 30)), num_units=50, num_leading_axes=2)
>>> l.output_shape, l.W.get_value().shape
((None, 10, 50), (600, 50))
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.base import Layer
from lasagne_bn.utils import int_types

if TYPE_CHECKING:
    from typing import Any

    from lasagne_bn._typing import Incoming, Nonlinearity, ParamSpec

__all__ = ["DenseLayer", "NINLayer"]


def _check_units(num_units, name) -> int:
    if isinstance(num_units, bool) or not isinstance(num_units, int_types) or num_units <= 0:
        raise ValueError(f"num_units={num_units!r} must be a positive int; layer name={name!r}")
    return int(num_units)


class DenseLayer(Layer):
    """A fully connected layer: ``nonlinearity(dot(input, W) + b)``.

    Parameters
    ----------
    incoming : Layer or tuple
        The input layer or its shape.
    num_units : int
        Number of output units.
    W : initializer, array or expression
        Weights of shape ``(num_inputs, num_units)``, where ``num_inputs``
        is the product of the trailing input sizes.
    b : initializer, array, expression or None
        Biases of shape ``(num_units,)``; ``None`` for no bias.  Not
        regularizable.
    nonlinearity : callable or None
        Applied to the activations; ``None`` means the identity.
    num_leading_axes : int
        Number of leading axes kept as they are (batch axes); the others
        are flattened into the dot product.  Negative counts from the end.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = DenseLayer(InputLayer((None, 4)), num_units=3, b=None)
    >>> [p.name for p in l.get_params()]
    ['W']
    """

    def __init__(
        self,
        incoming: Incoming,
        num_units: int,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        num_leading_axes: int = 1,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.num_units = _check_units(num_units, self.name)
        ndim = len(self.input_shape)
        if isinstance(num_leading_axes, bool) or not isinstance(num_leading_axes, int_types):
            raise TypeError(f"num_leading_axes={num_leading_axes!r} must be an int")
        if num_leading_axes >= ndim:
            raise ValueError(
                f"Got num_leading_axes={num_leading_axes} for a {ndim}-dimensional input, "
                "leaving no trailing axes for the dot product."
            )
        if num_leading_axes < -ndim:
            raise ValueError(
                f"Got num_leading_axes={num_leading_axes} for a {ndim}-dimensional input, "
                "requesting more trailing axes than there are input dimensions."
            )
        self.num_leading_axes = int(num_leading_axes)
        trailing = self.input_shape[self.num_leading_axes :]
        if any(s is None for s in trailing):
            raise ValueError(
                "A DenseLayer requires a fixed input shape (except for the leading axes). "
                f"Got {self.input_shape!r} for num_leading_axes={self.num_leading_axes}."
            )
        num_inputs = int(np.prod(trailing))
        self.W = self.add_param(W, (num_inputs, self.num_units), name="W")
        if b is None:
            self.b = None
        else:
            self.b = self.add_param(b, (self.num_units,), name="b", regularizable=False)

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape[: self.num_leading_axes]) + (self.num_units,)

    def get_output_for(self, input, **kwargs):
        num_leading_axes = self.num_leading_axes
        if num_leading_axes < 0:
            num_leading_axes += input.ndim
        if input.ndim > num_leading_axes + 1:
            input = pt.flatten(input, num_leading_axes + 1)
        activation = pt.dot(input, self.W)
        if self.b is not None:
            activation = activation + self.b
        return self.nonlinearity(activation)


class NINLayer(Layer):
    """Network-in-network: a dense layer applied to each position, over axis 1.

    Parameters
    ----------
    incoming : Layer or tuple
        Input of shape ``(batch, channels, ...)``.
    num_units : int
        Number of output channels.
    untie_biases : bool
        One bias per channel and position (shape ``(num_units,) +
        spatial``) instead of one per channel.
    W, b, nonlinearity
        As for :class:`DenseLayer`; ``W`` has shape ``(channels, num_units)``.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> NINLayer(InputLayer((None, 3, 5, 5)), num_units=8).output_shape
    (None, 8, 5, 5)
    """

    def __init__(
        self,
        incoming: Incoming,
        num_units: int,
        untie_biases: bool = False,
        W: ParamSpec = init.GlorotUniform(),
        b: ParamSpec = init.Constant(0.0),
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity
        self.num_units = _check_units(num_units, self.name)
        self.untie_biases = untie_biases
        if len(self.input_shape) < 2 or self.input_shape[1] is None:
            raise ValueError(
                f"NINLayer needs an input of at least 2 dimensions with a known size on axis 1; "
                f"got input_shape={self.input_shape!r}"
            )
        num_input_channels = self.input_shape[1]
        self.W = self.add_param(W, (num_input_channels, self.num_units), name="W")
        if b is None:
            self.b = None
        else:
            if self.untie_biases:
                biases_shape = (self.num_units,) + tuple(self.output_shape[2:])
            else:
                biases_shape = (self.num_units,)
            self.b = self.add_param(b, biases_shape, name="b", regularizable=False)

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_units) + tuple(input_shape[2:])

    def get_output_for(self, input, **kwargs):
        out_r = pt.tensordot(self.W, input, axes=[[0], [1]])
        remaining_dims = range(2, input.ndim)
        out = out_r.dimshuffle(1, 0, *remaining_dims)
        if self.b is None:
            activation = out
        else:
            if self.untie_biases:
                pattern = ["x", 0, *range(1, input.ndim - 1)]
            else:
                pattern = ["x", 0] + ["x"] * (input.ndim - 2)
            activation = out + self.b.dimshuffle(*pattern)
        return self.nonlinearity(activation)
