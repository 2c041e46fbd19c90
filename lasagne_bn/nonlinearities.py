"""Activation functions, with the names and formulas of ``lasagne.nonlinearities``.

Each is a callable from a tensor to a tensor.  Constant coefficients are
cast to the input's dtype, so a float32 network stays float32 whatever
``floatX`` is.

>>> import numpy as np, pytensor.tensor as pt
>>> from lasagne_bn.nonlinearities import rectify, LeakyRectify
>>> x = pt.as_tensor(np.array([-2.0, 3.0]))
>>> rectify(x).eval().tolist(), LeakyRectify(0.5)(x).eval().tolist()
([0.0, 3.0], [-1.0, 3.0])
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt
from pytensor.tensor.special import softmax as _softmax
from pytensor.tensor.variable import TensorVariable

if TYPE_CHECKING:
    from lasagne_bn._typing import TensorLike

__all__ = [
    "LeakyRectify",
    "SELU",
    "ScaledTanH",
    "ScaledTanh",
    "elu",
    "identity",
    "leaky_rectify",
    "linear",
    "rectify",
    "selu",
    "sigmoid",
    "softmax",
    "softplus",
    "tanh",
    "very_leaky_rectify",
]


def _coef(value, x):
    """A number as a constant of ``x``'s dtype; anything else as it is."""
    if isinstance(value, numbers.Number | np.number):
        return pt.constant(value, dtype=x.dtype)
    return value


def sigmoid(x: TensorLike) -> TensorVariable:
    """Logistic sigmoid ``1 / (1 + exp(-x))``.

    Examples
    --------
    >>> x = pt.as_tensor(np.array([0.0, 2.0]))
    >>> sigmoid(x).eval(mode="FAST_COMPILE").round(4).tolist()
    [0.5, 0.8808]
    """
    return pt.sigmoid(x)


def softmax(x: TensorLike) -> TensorVariable:
    """Softmax over the last axis (row-wise for a matrix), computed stably.

    Examples
    --------
    >>> x = pt.as_tensor(np.log(np.array([[1.0, 1.0], [1.0, 3.0]])))
    >>> softmax(x).eval(mode="FAST_COMPILE").round(4).tolist()
    [[0.5, 0.5], [0.25, 0.75]]
    """
    return _softmax(x, axis=-1)


def tanh(x: TensorLike) -> TensorVariable:
    """Hyperbolic tangent.

    Examples
    --------
    >>> tanh(pt.as_tensor(np.array([0.0, 1.0]))).eval(mode="FAST_COMPILE").round(4).tolist()
    [0.0, 0.7616]
    """
    return pt.tanh(x)


class ScaledTanH:
    """``tanh(x * scale_in) * scale_out``.

    LeCun's recommendation is ``scale_in=2/3``, ``scale_out=1.7159``.

    Examples
    --------
    >>> f = ScaledTanH(scale_in=0.5, scale_out=2.0)
    >>> f(pt.as_tensor(np.array([0.0, 2.0]))).eval(mode="FAST_COMPILE").round(4).tolist()
    [0.0, 1.5232]
    >>> ScaledTanh is ScaledTanH  # both spellings, as in Lasagne
    True
    """

    def __init__(self, scale_in: float = 1, scale_out: float = 1) -> None:
        self.scale_in = scale_in
        self.scale_out = scale_out

    def __call__(self, x):
        x = pt.as_tensor_variable(x)
        return pt.tanh(x * _coef(self.scale_in, x)) * _coef(self.scale_out, x)


ScaledTanh = ScaledTanH


def rectify(x: TensorLike) -> TensorVariable | np.ndarray | float:
    """Rectified linear unit ``max(x, 0)``.

    Written as Theano's ``relu`` wrote it, ``0.5 * (x + |x|)``, which gives
    the same values and the same gradient (0.5 at exactly 0).  A NumPy
    array (or number) gives a NumPy array (or number), as in Lasagne.

    Examples
    --------
    >>> rectify(np.array([-1.0, 2.0]))  # NumPy in, NumPy out
    array([0., 2.])
    >>> rectify(pt.as_tensor(np.array([-1.0, 2.0]))).eval(mode="FAST_COMPILE").tolist()
    [0.0, 2.0]
    """
    if isinstance(x, np.ndarray | np.generic | numbers.Number):
        # Theano's relu was plain arithmetic on its argument, so NumPy in
        # gave NumPy out (tests compare rectify(array) with arrays).
        return 0.5 * (x + abs(x))
    x = pt.as_tensor_variable(x)
    return _coef(0.5, x) * (x + abs(x))


class LeakyRectify:
    """Leaky rectifier: ``x`` for positive input, ``leakiness * x`` otherwise.

    Parameters
    ----------
    leakiness : float
        Slope for negative input (0.01 by default).

    Examples
    --------
    >>> f = LeakyRectify(0.1)
    >>> f(pt.as_tensor(np.array([-1.0, 2.0]))).eval(mode="FAST_COMPILE").round(4).tolist()
    [-0.1, 2.0]
    >>> leaky_rectify.leakiness, round(very_leaky_rectify.leakiness, 4)
    (0.01, 0.3333)
    """

    def __init__(self, leakiness: float = 0.01) -> None:
        self.leakiness = leakiness

    def __call__(self, x):
        alpha = self.leakiness
        if isinstance(alpha, numbers.Number | np.number) and alpha == 0:
            return rectify(x)  # NumPy in, NumPy out, as Theano's relu(x, 0)
        x = pt.as_tensor_variable(x)
        if isinstance(alpha, numbers.Number | np.number):
            f1, f2 = _coef(0.5 * (1 + alpha), x), _coef(0.5 * (1 - alpha), x)
        else:
            alpha = pt.as_tensor_variable(alpha)
            f1, f2 = 0.5 * (1 + alpha), 0.5 * (1 - alpha)
        return f1 * x + f2 * abs(x)


leaky_rectify = LeakyRectify()
very_leaky_rectify = LeakyRectify(1.0 / 3)


def elu(x: TensorLike) -> TensorVariable:
    """Exponential linear unit: ``x`` if ``x > 0`` else ``exp(x) - 1``.

    Examples
    --------
    >>> elu(pt.as_tensor(np.array([-1.0, 2.0]))).eval(mode="FAST_COMPILE").round(4).tolist()
    [-0.6321, 2.0]
    """
    x = pt.as_tensor_variable(x)
    return pt.switch(x > 0, x, pt.expm1(x))


class SELU:
    """Scaled exponential linear unit: ``scale * (x if x > 0 else scale_neg * (exp(x) - 1))``.

    Examples
    --------
    >>> f = SELU(scale=2.0, scale_neg=0.5)
    >>> f(pt.as_tensor(np.array([-1.0, 2.0]))).eval(mode="FAST_COMPILE").round(4).tolist()
    [-0.6321, 4.0]
    >>> round(selu.scale, 4), round(selu.scale_neg, 4)  # the self-normalizing constants
    (1.0507, 1.6733)
    """

    def __init__(self, scale: float = 1, scale_neg: float = 1) -> None:
        self.scale = scale
        self.scale_neg = scale_neg

    def __call__(self, x):
        x = pt.as_tensor_variable(x)
        negative = _coef(self.scale_neg, x) * pt.expm1(x)
        return _coef(self.scale, x) * pt.switch(x > 0.0, x, negative)


selu = SELU(scale=1.0507009873554804934193349852946, scale_neg=1.6732632423543772848170429916717)


def softplus(x: TensorLike) -> TensorVariable:
    """``log(1 + exp(x))``, computed stably.

    Examples
    --------
    >>> softplus(pt.as_tensor(np.array([0.0, 50.0]))).eval(mode="FAST_COMPILE").round(4).tolist()
    [0.6931, 50.0]
    """
    return pt.softplus(x)


def linear(x: TensorLike) -> TensorLike:
    """The identity (no nonlinearity).

    Examples
    --------
    >>> x = pt.vector('x')
    >>> linear(x) is x, identity is linear
    (True, True)
    """
    return x


identity = linear
