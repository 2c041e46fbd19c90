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
    from pytensor.graph.basic import Variable

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


def sigmoid(x: Variable) -> TensorVariable:
    """Logistic sigmoid ``1 / (1 + exp(-x))``."""
    return pt.sigmoid(x)


def softmax(x: Variable) -> TensorVariable:
    """Softmax over the last axis (row-wise for a matrix), computed stably."""
    return _softmax(x, axis=-1)


def tanh(x: Variable) -> TensorVariable:
    """Hyperbolic tangent."""
    return pt.tanh(x)


class ScaledTanH:
    """``tanh(x * scale_in) * scale_out``.

    LeCun's recommendation is ``scale_in=2/3``, ``scale_out=1.7159``.
    """

    def __init__(self, scale_in: float = 1, scale_out: float = 1) -> None:
        self.scale_in = scale_in
        self.scale_out = scale_out

    def __call__(self, x):
        x = pt.as_tensor_variable(x)
        return pt.tanh(x * _coef(self.scale_in, x)) * _coef(self.scale_out, x)


ScaledTanh = ScaledTanH


def rectify(x: Variable) -> TensorVariable:
    """Rectified linear unit ``max(x, 0)``.

    Written as Theano's ``relu`` wrote it, ``0.5 * (x + |x|)``, which gives
    the same values and the same gradient (0.5 at exactly 0).  A NumPy
    array (or number) gives a NumPy array (or number), as in Lasagne.
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


def elu(x: Variable) -> TensorVariable:
    """Exponential linear unit: ``x`` if ``x > 0`` else ``exp(x) - 1``."""
    x = pt.as_tensor_variable(x)
    return pt.switch(x > 0, x, pt.expm1(x))


class SELU:
    """Scaled exponential linear unit: ``scale * (x if x > 0 else scale_neg * (exp(x) - 1))``."""

    def __init__(self, scale: float = 1, scale_neg: float = 1) -> None:
        self.scale = scale
        self.scale_neg = scale_neg

    def __call__(self, x):
        x = pt.as_tensor_variable(x)
        negative = _coef(self.scale_neg, x) * pt.expm1(x)
        return _coef(self.scale, x) * pt.switch(x > 0.0, x, negative)


selu = SELU(scale=1.0507009873554804934193349852946, scale_neg=1.6732632423543772848170429916717)


def softplus(x: Variable) -> TensorVariable:
    """``log(1 + exp(x))``, computed stably."""
    return pt.softplus(x)


def linear(x: Variable) -> Variable:
    """The identity (no nonlinearity)."""
    return x


identity = linear
