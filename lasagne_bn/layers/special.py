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

from typing import TYPE_CHECKING

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytensor.tensor.random.basic as ptrb
from pytensor.graph.basic import Variable

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.base import Layer, MergeLayer
from lasagne_bn.layers.noise import _SEED_HIGH, _RandomSource
from lasagne_bn.ops.layout import broadcast_pattern
from lasagne_bn.ops.validation import LAYER_AXES_MODES, normalize_axes
from lasagne_bn.random import get_rng
from lasagne_bn.utils import as_tuple, floatX, int_types

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from lasagne_bn._typing import Incoming, Nonlinearity, ParamSpec, Shape, TensorLike

__all__ = [
    "BiasLayer",
    "ExpressionLayer",
    "InverseLayer",
    "NonlinearityLayer",
    "ParametricRectifierLayer",
    "RandomizedRectifierLayer",
    "ScaleLayer",
    "TPSTransformerLayer",
    "TransformerLayer",
    "prelu",
    "rrelu",
    "standardize",
]


def normalize_shared_axes(shared_axes, ndim: int, what: str = "shared_axes") -> tuple[int, ...]:
    """Resolve ``'auto'`` (all axes but the second), an int or a sequence of axes.

    Negative axes count from the end; ``()`` shares nothing.  Returns a
    sorted tuple (the rule of :func:`lasagne_bn.ops.validation.normalize_axes`).
    """
    return normalize_axes(shared_axes, ndim, what=what, modes=LAYER_AXES_MODES, allow_empty=True)


class NonlinearityLayer(Layer):
    """Applies a nonlinearity to its input.

    Parameters
    ----------
    incoming : Layer or tuple
    nonlinearity : callable or None
        ``None`` means the identity.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> NonlinearityLayer(InputLayer((None, 3))).nonlinearity.__name__
    'rectify'
    """

    def __init__(
        self,
        incoming: Incoming,
        nonlinearity: Nonlinearity = nonlinearities.rectify,
        **kwargs: Any,
    ) -> None:
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

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> BiasLayer(InputLayer((None, 3, 4, 4))).b.get_value().shape
    (3,)
    >>> BiasLayer(InputLayer((None, 3, 4, 4)), shared_axes=0).b.get_value().shape
    (3, 4, 4)
    """

    def __init__(
        self,
        incoming: Incoming,
        b: ParamSpec = init.Constant(0),
        shared_axes: str | int | Sequence[int] = "auto",
        **kwargs: Any,
    ) -> None:
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
        return input + self.b.dimshuffle(*broadcast_pattern(self.shared_axes, input.ndim))


class ScaleLayer(Layer):
    """Multiplies by a scale, shared over ``shared_axes``.

    Parameters
    ----------
    incoming : Layer or tuple
    scales : initializer, array or expression
        Shape: the input shape without ``shared_axes``.  Not regularizable.
    shared_axes : 'auto', int or tuple of int
        Axes the scales are shared over; ``'auto'`` is all but the second.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = ScaleLayer(InputLayer((None, 3, 4, 4)))
    >>> l.scales.get_value().tolist(), l.output_shape
    ([1.0, 1.0, 1.0], (None, 3, 4, 4))
    """

    def __init__(
        self,
        incoming: Incoming,
        scales: ParamSpec = init.Constant(1),
        shared_axes: str | int | Sequence[int] = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        self.shared_axes = normalize_shared_axes(shared_axes, len(self.input_shape))
        shape = _unshared_shape(self, "scales")
        self.scales = self.add_param(scales, shape, "scales", regularizable=False)

    def get_output_for(self, input, **kwargs):
        return input * self.scales.dimshuffle(*broadcast_pattern(self.shared_axes, input.ndim))


def standardize(
    layer: Layer,
    offset: TensorLike,
    scale: TensorLike,
    shared_axes: str | int | Sequence[int] = "auto",
) -> Layer:
    """Subtract ``offset`` and divide by ``scale`` (fixed, not trainable).

    Adds a :class:`BiasLayer` with ``-offset`` and a :class:`ScaleLayer`
    with ``1 / scale``, both without the ``trainable`` tag.

    Examples
    --------
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

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = ExpressionLayer(InputLayer((2, 3)), lambda x: x.sum(axis=1), output_shape='auto')
    >>> l.output_shape
    (2,)
    """

    def __init__(
        self,
        incoming: Incoming,
        function: Callable[[Variable], Variable],
        output_shape: Shape | str | Callable[[Shape], Shape] | None = None,
        **kwargs: Any,
    ) -> None:
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

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> encoder = DenseLayer(InputLayer((None, 6)), 2)
    >>> decoder = InverseLayer(encoder, encoder)
    >>> decoder.output_shape, decoder.get_params()
    ((None, 6), [])
    """

    def __init__(self, incoming: Incoming, layer: Layer, **kwargs: Any) -> None:
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

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> ParametricRectifierLayer(InputLayer((None, 3, 4, 4))).alpha.get_value().shape
    (3,)
    >>> l = ParametricRectifierLayer(InputLayer((None, 3, 4, 4)), shared_axes='all')
    >>> l.alpha.get_value().tolist()
    0.25
    """

    def __init__(
        self,
        incoming: Incoming,
        alpha: ParamSpec = init.Constant(0.25),
        shared_axes: str | int | Sequence[int] = "auto",
        **kwargs: Any,
    ) -> None:
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
        alpha = self.alpha.dimshuffle(*broadcast_pattern(self.shared_axes, input.ndim))
        return nonlinearities.LeakyRectify(alpha)(input)


def prelu(layer: Layer, **kwargs: Any) -> Layer:
    """Replace ``layer``'s nonlinearity by a :class:`ParametricRectifierLayer` on top.

    ``layer.nonlinearity`` becomes the identity; ``kwargs`` go to the new
    layer.  Returns the new layer.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, get_all_layers
    >>> net = prelu(DenseLayer(InputLayer((None, 4)), 3, name='fc'))
    >>> [type(l).__name__ for l in get_all_layers(net)]
    ['InputLayer', 'DenseLayer', 'ParametricRectifierLayer']
    >>> from lasagne_bn.nonlinearities import identity
    >>> net.input_layer.nonlinearity is identity
    True
    """
    nonlinearity = getattr(layer, "nonlinearity", None)
    if nonlinearity is not None:
        layer.nonlinearity = nonlinearities.identity
    return ParametricRectifierLayer(layer, **kwargs)


class RandomizedRectifierLayer(Layer):
    """Leaky rectifier with random negative slopes in training (RReLU, Xu et al., 2015).

    In training each negative slope is drawn uniformly from
    ``[lower, upper)``, one per position of the axes not in
    ``shared_axes``; deterministic output (or ``lower == upper``) uses
    the mean slope ``(lower + upper) / 2``.

    Parameters
    ----------
    incoming : Layer or tuple
    lower, upper : float or scalar tensor
        Range of the slopes (``lower <= upper``).
    shared_axes : 'auto', 'all', int or tuple of int
        Axes one slope is shared over; ``'auto'`` is all but the second,
        ``'all'`` draws a single slope.

    Examples
    --------
    >>> import numpy as np
    >>> from lasagne_bn.layers import InputLayer, get_output
    >>> l = RandomizedRectifierLayer(InputLayer((None, 3)), lower=0.2, upper=0.4)
    >>> get_output(l, np.array([[-1.0, 0.0, 2.0]]), deterministic=True).eval()
    array([[-0.3,  0. ,  2. ]])
    """

    def __init__(
        self,
        incoming: Incoming,
        lower: float = 0.3,
        upper: float = 0.8,
        shared_axes: str | int | Sequence[int] = "auto",
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        self._random = _RandomSource(int(get_rng().randint(1, _SEED_HIGH)))
        self.lower = lower
        self.upper = upper
        if not isinstance(lower, Variable) and not isinstance(upper, Variable) and lower > upper:
            raise ValueError(
                f"lower={lower!r} > upper={upper!r}: the upper bound of the slopes must be at "
                "least the lower one"
            )
        if isinstance(shared_axes, str) and shared_axes == "all":
            self.shared_axes = tuple(range(len(self.input_shape)))
        else:
            self.shared_axes = normalize_shared_axes(shared_axes, len(self.input_shape))

    def get_output_for(self, input, deterministic=False, **kwargs):
        input = pt.as_tensor_variable(input)
        fixed = (
            not isinstance(self.lower, Variable)
            and not isinstance(self.upper, Variable)
            and self.lower == self.upper
        )
        if deterministic or fixed:
            return nonlinearities.LeakyRectify((self.upper + self.lower) / 2.0)(input)
        shape = list(self.input_shape)
        if len(shape) != input.ndim or any(s is None for s in shape):
            shape = [input.shape[i] for i in range(input.ndim)]
        for axis in self.shared_axes:
            shape[axis] = 1
        slopes = self._random.draw(
            ptrb.uniform,
            self.lower,
            self.upper,
            size=tuple(shape),
            dtype=pytensor.config.floatX,
            name=self.name or "rrelu",
        )
        unknown = [a for a in self.shared_axes if slopes.type.shape[a] != 1]
        if unknown:
            slopes = pt.specify_broadcastable(slopes, *unknown)
        return nonlinearities.LeakyRectify(slopes)(input)


def rrelu(layer: Layer, **kwargs: Any) -> Layer:
    """Replace ``layer``'s nonlinearity by a :class:`RandomizedRectifierLayer` on top.

    ``layer.nonlinearity`` becomes the identity; ``kwargs`` go to the new
    layer.  Returns the new layer.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> net = rrelu(DenseLayer(InputLayer((None, 4)), 3))
    >>> type(net).__name__, net.lower, net.upper, net.get_params()
    ('RandomizedRectifierLayer', 0.3, 0.8, [])
    """
    nonlinearity = getattr(layer, "nonlinearity", None)
    if nonlinearity is not None:
        layer.nonlinearity = nonlinearities.identity
    return RandomizedRectifierLayer(layer, **kwargs)


# --------------------------------------------------------------------------
# spatial transformers

_BORDER_MODES = ("nearest", "mirror", "wrap")


def _known_sizes(layer_shape, x) -> list:
    """Per axis of ``x``: its size as an int where the layer or ``x``'s type knows it."""
    declared = layer_shape if isinstance(layer_shape, tuple | list) else ()
    if len(declared) != x.ndim:
        declared = (None,) * x.ndim
    sizes = []
    for d, (k, t) in enumerate(zip(declared, x.type.shape, strict=True)):
        size = t if t is not None else k
        sizes.append(int(size) if isinstance(size, int_types) else x.shape[d])
    return sizes


def _downsampled(size, factor):
    """Lasagne's output size ``size // factor`` (an int where ``size`` is one)."""
    if isinstance(size, int_types):
        return int(size // factor)
    return pt.cast(size // factor, "int64")


def _np_linspace(num: int, dtype) -> np.ndarray:
    """``num`` points from -1 to 1 as Lasagne computed them: ``start + i * step`` in ``dtype``."""
    num_f = dtype.type(num)
    with np.errstate(divide="ignore", invalid="ignore"):
        step = (dtype.type(1.0) - dtype.type(-1.0)) / (num_f - dtype.type(1))
        return np.arange(num, dtype=dtype) * step + dtype.type(-1.0)


def _sampling_grid(out_height, out_width):
    """``(3, out_height * out_width)``: x, y in [-1, 1] (row-major) and ones.

    A constant where both sizes are ints (so JAX sees static shapes), else
    built symbolically in the same way.
    """
    dtype = np.dtype(pytensor.config.floatX)
    if isinstance(out_height, int) and isinstance(out_width, int):
        xs = np.ones((out_height, 1), dtype) @ _np_linspace(out_width, dtype)[None, :]
        ys = _np_linspace(out_height, dtype)[:, None] @ np.ones((1, out_width), dtype)
        ones = np.ones(out_height * out_width, dtype)
        return pt.constant(np.stack([xs.ravel(), ys.ravel(), ones]))

    def linspace(num):
        num_f = pt.cast(num, dtype)
        step = (np.asarray(1.0, dtype) - np.asarray(-1.0, dtype)) / (num_f - 1)
        return pt.arange(num, dtype=dtype) * step + np.asarray(-1.0, dtype)

    xs = pt.dot(pt.ones((out_height, 1), dtype=dtype), linspace(out_width)[None, :])
    ys = pt.dot(linspace(out_height)[:, None], pt.ones((1, out_width), dtype=dtype))
    xs, ys = xs.reshape((1, -1)), ys.reshape((1, -1))
    return pt.concatenate([xs, ys, pt.ones_like(xs)], axis=0)


def _border_indices(lo, hi, size, border_mode):
    """Integer sample positions for the corners ``lo``, ``hi`` (floats) on an axis of ``size``."""
    if border_mode == "nearest":
        lo, hi = pt.clip(lo, 0, size - 1), pt.clip(hi, 0, size - 1)
    elif border_mode == "mirror":
        period = 2 * (size - 1)
        lo = pt.minimum(lo % period, -lo % period)
        hi = pt.minimum(hi % period, -hi % period)
    elif border_mode == "wrap":
        lo, hi = pt.mod(lo, size), pt.mod(hi, size)
    else:
        raise ValueError(
            f"border_mode={border_mode!r} is not understood: expected one of {_BORDER_MODES}"
        )
    return pt.cast(lo, "int64"), pt.cast(hi, "int64")


def _bilinear_sample(input, sizes, xs, ys, out_height, out_width, border_mode):
    """Sample ``input`` (b, c, h, w) at ``xs``, ``ys`` (b, n) in [-1, 1]; (b, c, oh, ow) out.

    Bilinear interpolation between the four neighbouring pixels, indices
    outside the image mapped back by ``border_mode``.  Gathers along the
    flattened image axis per example (no index built from the batch size,
    which JAX could not trace).
    """
    _, channels, height, width = sizes
    dtype = pytensor.config.floatX

    def as_float(size):
        return (
            pt.constant(np.asarray(size, dtype)) if isinstance(size, int) else pt.cast(size, dtype)
        )

    height_f, width_f = as_float(height), as_float(width)
    x = (xs + 1) / 2 * (width_f - 1)
    y = (ys + 1) / 2 * (height_f - 1)
    x0_f, y0_f = pt.floor(x), pt.floor(y)
    x1_f, y1_f = x0_f + 1, y0_f + 1
    x0, x1 = _border_indices(x0_f, x1_f, width_f, border_mode)
    y0, y1 = _border_indices(y0_f, y1_f, height_f, border_mode)

    flat = input.reshape((input.shape[0], channels, height * width))

    def gather(yi, xi):
        return pt.take_along_axis(flat, (yi * width + xi)[:, None, :], axis=2)

    wa = ((x1_f - x) * (y1_f - y))[:, None, :]
    wb = ((x1_f - x) * (y - y0_f))[:, None, :]
    wc = ((x - x0_f) * (y1_f - y))[:, None, :]
    wd = ((x - x0_f) * (y - y0_f))[:, None, :]
    out = wa * gather(y0, x0) + wb * gather(y1, x0) + wc * gather(y0, x1) + wd * gather(y1, x1)
    return out.reshape((input.shape[0], channels, out_height, out_width))


def _check_transformer_input(input_shape):
    if len(input_shape) != 4:
        raise ValueError(
            "The input network must have a 4-dimensional output shape: (batch_size, "
            f"num_input_channels, input_rows, input_columns); got {tuple(input_shape)!r}"
        )


def _downsampled_shape(shape, factors) -> tuple:
    return tuple(shape[:2]) + tuple(
        None if s is None else int(s // f) for s, f in zip(shape[2:], factors, strict=False)
    )


class TransformerLayer(MergeLayer):
    """Spatial transformer: resamples its input on an affine grid (Jaderberg et al., 2015).

    Parameters
    ----------
    incoming : Layer or tuple
        The images, shape ``(batch, channels, rows, cols)``.
    localization_network : Layer
        Gives the transform, shape ``(batch, 6)``: the rows of a 2x3 matrix
        mapping output to input coordinates, both in [-1, 1]
        (``[1, 0, 0, 0, 1, 0]`` is the identity).
    downsample_factor : float or tuple of 2 floats
        The output is ``rows // factor`` by ``cols // factor`` (a factor < 1
        upsamples).
    border_mode : 'nearest', 'mirror' or 'wrap'
        How samples outside the input are filled: the closest pixel, the
        mirror image, or the image repeated.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> l_in = InputLayer((None, 3, 28, 28))
    >>> l_loc = DenseLayer(l_in, num_units=6)
    >>> TransformerLayer(l_in, l_loc, downsample_factor=2).output_shape
    (None, 3, 14, 14)
    """

    def __init__(
        self,
        incoming: Incoming,
        localization_network: Layer,
        downsample_factor: float | Sequence[float] = 1,
        border_mode: str = "nearest",
        **kwargs: Any,
    ) -> None:
        super().__init__([incoming, localization_network], **kwargs)
        self.downsample_factor = as_tuple(downsample_factor, 2)
        self.border_mode = border_mode
        input_shp, loc_shp = self.input_shapes
        if len(loc_shp) != 2 or loc_shp[-1] != 6:
            raise ValueError(
                "The localization network must have output shape: (batch_size, 6); got "
                f"{tuple(loc_shp)!r}"
            )
        _check_transformer_input(input_shp)

    def get_output_shape_for(self, input_shapes):
        return _downsampled_shape(input_shapes[0], self.downsample_factor)

    def get_output_for(self, inputs, **kwargs):
        input, theta = (pt.as_tensor_variable(v) for v in inputs)
        sizes = _known_sizes(self.input_shapes[0], input)
        out_height = _downsampled(sizes[2], self.downsample_factor[0])
        out_width = _downsampled(sizes[3], self.downsample_factor[1])
        grid_x, grid_y = (_sampling_grid(out_height, out_width)[i][None, :] for i in (0, 1))
        if theta.ndim != 2:
            theta = theta.reshape((-1, 6))
        # the 2x3 matrix times (x, y, 1), written out: a batched dot would
        # reshape by a size that JAX cannot trace in the gradient
        t = [theta[:, i][:, None] for i in range(6)]
        xs = t[0] * grid_x + t[1] * grid_y + t[2]
        ys = t[3] * grid_x + t[4] * grid_y + t[5]
        return _bilinear_sample(input, sizes, xs, ys, out_height, out_width, self.border_mode)


def _tps_kernel(r_2):
    """The thin-plate radial basis ``r² log r²`` (0 at ``r = 0``), in NumPy."""
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r_2 = np.log(r_2)
    log_r_2[np.isinf(log_r_2)] = 0
    return r_2 * log_r_2


def _tps_setup(num_control_points, out_height, out_width):
    """Control points (2, n), the inverse of the TPS system matrix, and the precomputed
    ``(n + 3, oh * ow)`` basis of the output grid (None without sizes).

    All in floatX, computed in NumPy at layer creation as Lasagne did.
    """
    dtype = np.dtype(pytensor.config.floatX)
    side = round(np.sqrt(num_control_points))
    xc, yc = np.meshgrid(np.linspace(-1, 1, side), np.linspace(-1, 1, side))
    source = np.vstack([xc.ravel(), yc.ravel()]).astype(dtype)
    n = num_control_points
    system = np.zeros((n + 3, n + 3), dtype)
    system[0, 3:] = 1
    system[1:3, 3:] = source
    system[3:, 0] = 1
    system[3:, 1:3] = source.T
    diff = source[:, :, None] - source[:, None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        r_2 = (diff[0] ** 2 + diff[1] ** 2).astype(dtype)
        system[3:, 3:] = np.where(r_2 == 0, 0, r_2 * np.log(r_2))
    system_inv = np.linalg.inv(system)
    basis = None
    if out_height is not None:
        xt, yt = np.meshgrid(np.linspace(-1, 1, out_width), np.linspace(-1, 1, out_height))
        grid = np.vstack([xt.ravel(), yt.ravel()]).astype(dtype)
        r_2 = np.sum((grid[None, :, :] - source.T[:, :, None]) ** 2, axis=1)
        ones = np.ones((1, grid.shape[1]), dtype)
        basis = np.concatenate([ones, grid, _tps_kernel(r_2)], axis=0)
    return source, system_inv, basis


class TPSTransformerLayer(MergeLayer):
    """Spatial transformer on a thin-plate-spline warp (Jaderberg et al., 2015).

    A regular grid of ``control_points`` points over the input is moved by
    the localization network's offsets; the smooth warp through them gives
    each output pixel's place in the input, sampled bilinearly.

    Parameters
    ----------
    incoming : Layer or tuple
        The images, shape ``(batch, channels, rows, cols)``.
    localization_network : Layer
        Gives the offsets of the control points, shape
        ``(batch, 2 * control_points)``: all x offsets, then all y offsets,
        in [-1, 1] coordinates (zeros are the identity).
    downsample_factor : float or tuple of 2 floats
        The output is ``rows // factor`` by ``cols // factor``.
    control_points : int
        Number of control points, a perfect square (16 = a 4x4 grid).
    precompute_grid : 'auto' or bool
        Compute the warp basis of the output grid once, at creation (needs
        known rows and cols; ``'auto'``: when they are known).  As in Lasagne
        master, the basis computed on the fly (``False``) keeps only the
        affine part of the warp: its radial terms come out as zeros, so
        networks trained that way give the same outputs here.
    border_mode : 'nearest', 'mirror' or 'wrap'
        How samples outside the input are filled.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> l_in = InputLayer((None, 3, 28, 28))
    >>> l_loc = DenseLayer(l_in, num_units=32)
    >>> TPSTransformerLayer(l_in, l_loc, control_points=16).output_shape
    (None, 3, 28, 28)
    """

    def __init__(
        self,
        incoming: Incoming,
        localization_network: Layer,
        downsample_factor: float | Sequence[float] = 1,
        control_points: int = 16,
        precompute_grid: bool | str = "auto",
        border_mode: str = "nearest",
        **kwargs: Any,
    ) -> None:
        super().__init__([incoming, localization_network], **kwargs)
        self.border_mode = border_mode
        self.downsample_factor = as_tuple(downsample_factor, 2)
        self.control_points = control_points
        input_shp, loc_shp = self.input_shapes
        if len(loc_shp) != 2 or loc_shp[-1] != 2 * control_points:
            raise ValueError(
                "The localization network must have output shape: (batch_size, "
                f"2*control_points) = (batch_size, {2 * control_points}); got {tuple(loc_shp)!r}"
            )
        if round(np.sqrt(control_points)) ** 2 != control_points:
            raise ValueError(
                f"control_points={control_points!r}: the number of control points must be a "
                "perfect square"
            )
        _check_transformer_input(input_shp)
        can_precompute = all(s is not None for s in input_shp[2:])
        if isinstance(precompute_grid, str) and precompute_grid == "auto":
            precompute_grid = can_precompute
        elif precompute_grid and not can_precompute:
            raise ValueError(
                "precompute_grid=True: the grid can only be precomputed if the input height and "
                f"width are known; got input shape {tuple(input_shp)!r}"
            )
        self.precompute_grid = precompute_grid
        if precompute_grid:
            self.out_height = int(input_shp[2] // self.downsample_factor[0])
            self.out_width = int(input_shp[3] // self.downsample_factor[1])
        else:
            self.out_height = self.out_width = None
        source, system_inv, basis = _tps_setup(control_points, self.out_height, self.out_width)
        self.source_points = pt.constant(source)
        self.L_inv = pt.constant(system_inv)
        self.right_mat = None if basis is None else pt.constant(basis)

    def get_output_shape_for(self, input_shapes):
        return _downsampled_shape(input_shapes[0], self.downsample_factor)

    def get_output_for(self, inputs, **kwargs):
        input, offsets = (pt.as_tensor_variable(v) for v in inputs)
        sizes = _known_sizes(self.input_shapes[0], input)
        n = self.control_points
        if offsets.ndim != 2:
            offsets = offsets.reshape((-1, 2 * n))
        # per coordinate (x, then y), as 2-D dots: a batched dot would
        # reshape by a size that JAX cannot trace in the gradient
        weights = self.L_inv[:, 3:].T
        coefficients = [
            pt.dot(self.source_points[i][None, :] + offsets[:, i * n : (i + 1) * n], weights)
            for i in (0, 1)
        ]
        if self.precompute_grid:
            out_height, out_width = self.out_height, self.out_width
            xs, ys = (pt.dot(c, self.right_mat) for c in coefficients)
        else:
            out_height = _downsampled(sizes[2], self.downsample_factor[0])
            out_width = _downsampled(sizes[3], self.downsample_factor[1])
            grid = _sampling_grid(out_height, out_width)
            grid_x, grid_y = grid[0][None, :], grid[1][None, :]
            # the affine part only: Lasagne master's radial terms are zero here
            xs, ys = (
                c[:, 0][:, None] + c[:, 1][:, None] * grid_x + c[:, 2][:, None] * grid_y
                for c in coefficients
            )
        return _bilinear_sample(input, sizes, xs, ys, out_height, out_width, self.border_mode)
