"""Activation functions vs NumPy, and dtype preservation."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
import pytest

from lasagne_bn import nonlinearities as nl

X = np.array([[-3.0, -0.5, 0.0, 0.25, 2.0], [1.0, -1.0, 4.0, -4.0, 0.1]])


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


CASES = {
    "sigmoid": (nl.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "softmax": (nl.softmax, _softmax),
    "tanh": (nl.tanh, np.tanh),
    "scaled_tanh": (nl.ScaledTanH(0.5, 2.0), lambda x: np.tanh(0.5 * x) * 2.0),
    "rectify": (nl.rectify, lambda x: np.maximum(x, 0)),
    "leaky": (nl.leaky_rectify, lambda x: np.where(x > 0, x, 0.01 * x)),
    "very_leaky": (nl.very_leaky_rectify, lambda x: np.where(x > 0, x, x / 3)),
    "elu": (nl.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "selu": (
        nl.selu,
        lambda x: 1.0507009873554805 * np.where(x > 0, x, 1.6732632423543772 * np.expm1(x)),
    ),
    "softplus": (nl.softplus, lambda x: np.log1p(np.exp(x))),
    "linear": (nl.linear, lambda x: x),
    "identity": (nl.identity, lambda x: x),
}


@pytest.mark.parametrize("name", list(CASES))
def test_values(name):
    fn, ref = CASES[name]
    np.testing.assert_allclose(
        pt.as_tensor(fn(pt.as_tensor(X))).eval(mode="FAST_COMPILE"), ref(X), rtol=1e-12
    )


@pytest.mark.parametrize("name", [n for n in CASES if n not in ("linear", "identity")])
def test_float32_stays_float32(name):
    fn, _ = CASES[name]
    assert fn(pt.matrix(dtype="float32")).dtype == "float32"


def test_rectify_gradient_at_zero_is_theanos():
    x = pt.vector()
    g = pt.grad(nl.rectify(x).sum(), x)
    np.testing.assert_array_equal(
        g.eval({x: np.array([-1.0, 0.0, 1.0])}, mode="FAST_COMPILE"), [0.0, 0.5, 1.0]
    )


def test_leaky_rectify_with_symbolic_leakiness():
    alpha = pt.scalar("alpha")
    out = nl.LeakyRectify(alpha)(pt.as_tensor(X))
    np.testing.assert_allclose(
        out.eval({alpha: 0.2}, mode="FAST_COMPILE"), np.where(X > 0, X, 0.2 * X), rtol=1e-12
    )
    assert nl.ScaledTanh is nl.ScaledTanH


def test_rectify_of_numpy_is_numpy_as_theanos_relu():
    x32 = X.astype("float32")
    for fn in (nl.rectify, nl.LeakyRectify(0)):
        got = fn(x32)
        assert isinstance(got, np.ndarray) and got.dtype == np.float32
        np.testing.assert_array_equal(got, np.maximum(x32, 0))
    assert nl.rectify(-2.0) == 0.0 and nl.rectify(3) == 3.0
    # a nonzero leakiness made Theano build a graph, even from NumPy input
    assert isinstance(nl.LeakyRectify(0.1)(X), pt.TensorVariable)
