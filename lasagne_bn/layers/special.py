"""Layers that transform their input elementwise or by a given expression.

:class:`NonlinearityLayer`, :class:`BiasLayer`, :class:`ScaleLayer`,
:func:`standardize`, :class:`ExpressionLayer`, :class:`InverseLayer`,
:class:`ParametricRectifierLayer` / :func:`prelu`, as in
``lasagne.layers.special``.

>>> from lasagne_bn.layers import InputLayer, BiasLayer
>>> l = BiasLayer(InputLayer((None, 3, 8, 8)))
>>> l.b.get_value().shape, l.shared_axes
((3,), (0, 2, 3))
"""

from __future__ import annotations

import pytensor
import pytensor.tensor as pt

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.base import Layer, MergeLayer
from lasagne_bn.utils import floatX, int_types

__all__ = [
    "BiasLayer",
    "ExpressionLayer",
    "InverseLayer",
    "NonlinearityLayer",
    "ParametricRectifierLayer",
    "ScaleLayer",
    "prelu",
    "standardize",
]


def normalize_shared_axes(shared_axes, ndim: int, what: str = "shared_axes") -> tuple[int, ...]:
    """Resolve ``'auto'`` (all axes but the second), an int or a sequence of axes.

    Negative axes count from the end.  Returns a sorted tuple.
    """
    if isinstance(shared_axes, str):
        if shared_axes != "auto":
            raise ValueError(
                f"{what}={shared_axes!r} is not understood: expected 'auto', an int or a "
                "tuple of ints"
            )
        return (0, *range(2, ndim))
    if isinstance(shared_axes, int_types):
        shared_axes = (shared_axes,)
    try:
        axes = list(shared_axes)
    except TypeError:
        raise TypeError(
            f"{what}={shared_axes!r} must be 'auto', an int or a tuple of ints"
        ) from None
    result = []
    for a in axes:
        if isinstance(a, bool) or not isinstance(a, int_types):
            raise TypeError(f"{what}={shared_axes!r} must contain only ints, not {a!r}")
        if not -ndim <= a < ndim:
            raise ValueError(
                f"{what}={tuple(axes)!r} is out of range for a {ndim}-dimensional input"
            )
        result.append(int(a) % ndim)
    if len(set(result)) != len(result):
        raise ValueError(f"{what}={tuple(axes)!r} repeats an axis")
    return tuple(sorted(result))


def param_pattern(axes: tuple[int, ...], ndim: int) -> list:
    """Dimshuffle pattern that broadcasts a parameter without ``axes`` to ``ndim`` dims."""
    kept = iter(range(ndim - len(axes)))
    return ["x" if i in axes else next(kept) for i in range(ndim)]


class NonlinearityLayer(Layer):
    """Applies a nonlinearity to its input.

    Parameters
    ----------
    incoming : Layer or tuple
    nonlinearity : callable or None
        ``None`` means the identity.

    >>> from lasagne_bn.layers import InputLayer
    >>> NonlinearityLayer(InputLayer((None, 3))).nonlinearity.__name__
    'rectify'
    """

    def __init__(self, incoming, nonlinearity=nonlinearities.rectify, **kwargs):
        super().__init__(incoming, **kwargs)
        # Not checked here: Lasagne stored any object (mocks in users' tests)
        # and failed only when calling it.
        self.nonlinearity = nonlinearities.identity if nonlinearity is None else nonlinearity

    def get_output_for(self, input, **kwargs):
        return self.nonlinearity(input)


def _unshared_shape(layer, what: str) -> list:
    """The parameter shape of ``layer``: its input sizes on the axes not shared."""
    shape = [s for a, s in enumerate(layer.input_shape) if a not in layer.shared_axes]
    if any(s is None for s in shape):
        raise ValueError(
            f"{type(layer).__name__} needs specified input sizes for all axes that {what} "
            f"are not shared over; got input_shape={layer.input_shape!r}, "
            f"shared_axes={layer.shared_axes!r}"
        )
    return shape


class BiasLayer(Layer):
    """Adds a bias, shared over ``shared_axes``.

    Parameters
    ----------
    incoming : Layer or tuple
    b : initializer, array, expression or None
        The bias; its shape is the input shape without ``shared_axes``.
        ``None`` adds nothing.  Not regularizable.
    shared_axes : 'auto', int or tuple of int
        Axes the bias is shared over; ``'auto'`` is all but the second.
    """

    def __init__(self, incoming, b=init.Constant(0), shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        self.shared_axes = normalize_shared_axes(shared_axes, len(self.input_shape))
        if b is None:
            self.b = None
        else:
            shape = _unshared_shape(self, "biases")
            self.b = self.add_param(b, shape, "b", regularizable=False)

    def get_output_for(self, input, **kwargs):
        if self.b is None:
            return input
        return input + self.b.dimshuffle(*param_pattern(self.shared_axes, input.ndim))


class ScaleLayer(Layer):
    """Multiplies by a scale, shared over ``shared_axes``.

    Parameters
    ----------
    incoming : Layer or tuple
    scales : initializer, array or expression
        Shape: the input shape without ``shared_axes``.  Not regularizable.
    shared_axes : 'auto', int or tuple of int
        Axes the scales are shared over; ``'auto'`` is all but the second.
    """

    def __init__(self, incoming, scales=init.Constant(1), shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        self.shared_axes = normalize_shared_axes(shared_axes, len(self.input_shape))
        shape = _unshared_shape(self, "scales")
        self.scales = self.add_param(scales, shape, "scales", regularizable=False)

    def get_output_for(self, input, **kwargs):
        return input * self.scales.dimshuffle(*param_pattern(self.shared_axes, input.ndim))


def standardize(layer, offset, scale, shared_axes="auto"):
    """Subtract ``offset`` and divide by ``scale`` (fixed, not trainable).

    Adds a :class:`BiasLayer` with ``-offset`` and a :class:`ScaleLayer`
    with ``1 / scale``, both without the ``trainable`` tag.

    >>> import numpy as np
    >>> from lasagne_bn.layers import InputLayer
    >>> l = standardize(InputLayer((None, 2)), np.array([1.0, 2.0]), np.array([2.0, 4.0]))
    >>> l.get_params(trainable=True)
    []
    """
    layer = BiasLayer(layer, -offset, shared_axes)
    layer.params[layer.b].remove("trainable")
    layer = ScaleLayer(layer, floatX(1.0) / scale, shared_axes)
    layer.params[layer.scales].remove("trainable")
    return layer


class ExpressionLayer(Layer):
    """Applies a given function (expression) to its input.

    Parameters
    ----------
    incoming : Layer or tuple
    function : callable
        Maps the input expression to the output expression.
    output_shape : None, tuple, callable or 'auto'
        ``None``: same as the input; a tuple: that shape; a callable: maps
        the input shape to the output shape; ``'auto'``: found by applying
        ``function`` to a zero-filled array (unknown sizes as 0).

    >>> from lasagne_bn.layers import InputLayer
    >>> l = ExpressionLayer(InputLayer((2, 3)), lambda x: x.sum(axis=1), output_shape='auto')
    >>> l.output_shape
    (2,)
    """

    def __init__(self, incoming, function, output_shape=None, **kwargs):
        super().__init__(incoming, **kwargs)
        if not callable(function):
            raise TypeError(f"function={function!r} must be callable")
        if output_shape is None:
            self._output_shape = None
        elif isinstance(output_shape, str):
            if output_shape != "auto":
                raise ValueError(
                    f"output_shape={output_shape!r} is not understood: expected None, a tuple, "
                    "a callable or 'auto'"
                )
            self._output_shape = "auto"
        elif callable(output_shape):
            self.get_output_shape_for = output_shape
        else:
            self._output_shape = tuple(output_shape)
        self.function = function

    def get_output_shape_for(self, input_shape):
        if self._output_shape is None:
            return input_shape
        if self._output_shape == "auto":
            zeros = pt.zeros(tuple(0 if s is None else s for s in input_shape))
            shape_fn = pytensor.function([], self.function(zeros).shape, mode="FAST_COMPILE")
            return tuple(int(s) if s else None for s in shape_fn())
        return self._output_shape

    def get_output_for(self, input, **kwargs):
        return self.function(input)


class InverseLayer(MergeLayer):
    """The "inverse" of a layer: the gradient of its output w.r.t. its input.

    Backpropagates ``incoming`` through ``layer`` (for example to undo a
    pooling or a convolution in a decoder).  The output shape is
    ``layer``'s input shape.

    Parameters
    ----------
    incoming : Layer or tuple
        What to backpropagate (shaped like ``layer``'s output).
    layer : Layer
        The layer to invert.
    """

    def __init__(self, incoming, layer, **kwargs):
        super().__init__([incoming, layer, layer.input_layer], **kwargs)

    def get_output_shape_for(self, input_shapes):
        return input_shapes[2]

    def get_output_for(self, inputs, **kwargs):
        input, layer_out, layer_in = inputs
        return pytensor.grad(None, wrt=layer_in, known_grads={layer_out: input})


class ParametricRectifierLayer(Layer):
    """Rectifier with a learned negative slope ``alpha`` (PReLU).

    Parameters
    ----------
    incoming : Layer or tuple
    alpha : initializer, array or expression
        Negative slopes, shaped like the input without ``shared_axes``.
        Not regularizable.
    shared_axes : 'auto', 'all', int or tuple of int
        Axes the slopes are shared over; ``'auto'`` is all but the second,
        ``'all'`` gives a single slope.
    """

    def __init__(self, incoming, alpha=init.Constant(0.25), shared_axes="auto", **kwargs):
        super().__init__(incoming, **kwargs)
        ndim = len(self.input_shape)
        if isinstance(shared_axes, str) and shared_axes == "all":
            self.shared_axes = tuple(range(ndim))
        else:
            self.shared_axes = normalize_shared_axes(shared_axes, ndim)
        shape = [s for a, s in enumerate(self.input_shape) if a not in self.shared_axes]
        if any(s is None for s in shape):
            raise ValueError(
                "ParametricRectifierLayer needs input sizes for all axes that alpha's are not "
                f"shared over; got input_shape={self.input_shape!r}"
            )
        self.alpha = self.add_param(alpha, shape, name="alpha", regularizable=False)

    def get_output_for(self, input, **kwargs):
        alpha = self.alpha.dimshuffle(*param_pattern(self.shared_axes, input.ndim))
        return nonlinearities.LeakyRectify(alpha)(input)


def prelu(layer, **kwargs):
    """Replace ``layer``'s nonlinearity by a :class:`ParametricRectifierLayer` on top.

    ``layer.nonlinearity`` becomes the identity; ``kwargs`` go to the new
    layer.  Returns the new layer.
    """
    nonlinearity = getattr(layer, "nonlinearity", None)
    if nonlinearity is not None:
        layer.nonlinearity = nonlinearities.identity
    return ParametricRectifierLayer(layer, **kwargs)
