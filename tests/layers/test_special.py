"""NonlinearityLayer, BiasLayer, ScaleLayer, standardize, ExpressionLayer, InverseLayer, PReLU."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    BiasLayer,
    DenseLayer,
    ExpressionLayer,
    InputLayer,
    InverseLayer,
    NonlinearityLayer,
    ParametricRectifierLayer,
    ScaleLayer,
    get_output,
    prelu,
    standardize,
)


def _run(layer, x, l_in=None):
    l_in = l_in or layer.input_layer
    return pytensor.function([l_in.input_var], get_output(layer), mode="FAST_COMPILE")(x)


X4 = np.random.RandomState(0).randn(2, 3, 4, 5)


def test_nonlinearity_layer():
    l_in = InputLayer((None, 3, 4, 5))
    np.testing.assert_array_equal(_run(NonlinearityLayer(l_in), X4), np.maximum(X4, 0))
    np.testing.assert_array_equal(_run(NonlinearityLayer(l_in, None), X4), X4)
    # As in Lasagne, any object is stored (mocks); calling it is what fails.
    stand_in = object()
    assert NonlinearityLayer(l_in, stand_in).nonlinearity is stand_in
    with pytest.raises(TypeError, match="callable"):
        NonlinearityLayer(l_in, "relu").get_output_for(pt.tensor4())


@pytest.mark.parametrize(
    ("shared_axes", "shape"), [("auto", (3,)), (0, (3, 4, 5)), ((0, 1), (4, 5)), ((-1, 0), (3, 4))]
)
def test_bias_and_scale_layers(shared_axes, shape):
    r = np.random.RandomState(1)
    l_in = InputLayer((None, 3, 4, 5))
    bias = BiasLayer(l_in, b=r.randn(*shape), shared_axes=shared_axes)
    scale = ScaleLayer(l_in, scales=r.randn(*shape), shared_axes=shared_axes)
    assert bias.params[bias.b] == {"trainable"}
    assert scale.params[scale.scales] == {"trainable"}
    axes = bias.shared_axes
    full = [1 if i in axes else s for i, s in enumerate(X4.shape)]
    np.testing.assert_allclose(_run(bias, X4), X4 + bias.b.get_value().reshape(full))
    np.testing.assert_allclose(_run(scale, X4), X4 * scale.scales.get_value().reshape(full))


def test_bias_none_and_errors():
    l_in = InputLayer((None, 3, 4, 5))
    layer = BiasLayer(l_in, b=None)
    assert layer.get_params() == [] and _run(layer, X4) is not None
    with pytest.raises(ValueError, match="needs specified input sizes"):
        BiasLayer(InputLayer((None, None)))
    with pytest.raises(ValueError, match="out of range"):
        ScaleLayer(l_in, shared_axes=(0, 4))
    with pytest.raises(ValueError, match="shared_axes='bogus'"):
        ScaleLayer(l_in, shared_axes="bogus")


def test_standardize():
    l_in = InputLayer((None, 3, 4, 5))
    offset, scale = np.array([1.0, 2.0, 3.0]), np.array([2.0, 4.0, 8.0])
    layer = standardize(l_in, offset, scale)
    assert layer.get_params(trainable=True) == []
    assert layer.input_layer.get_params(trainable=True) == []
    want = (X4 - offset[:, None, None]) / scale[:, None, None]
    np.testing.assert_allclose(_run(layer, X4, l_in), want, rtol=1e-12)


def test_expression_layer_shapes():
    l_in = InputLayer((None, 3, 4))
    assert ExpressionLayer(l_in, lambda x: x * 2).output_shape == (None, 3, 4)
    assert ExpressionLayer(l_in, lambda x: x, output_shape=(1, 2)).output_shape == (1, 2)
    auto = ExpressionLayer(l_in, lambda x: x.sum(axis=1), output_shape="auto")
    assert auto.output_shape == (None, 4)
    func = ExpressionLayer(l_in, lambda x: x[:, 0], output_shape=lambda s: (s[0], s[2]))
    assert func.output_shape == (None, 4)
    x = np.ones((2, 3, 4))
    np.testing.assert_array_equal(_run(auto, x), 3 * np.ones((2, 4)))
    with pytest.raises(ValueError, match="output_shape='bad'"):
        ExpressionLayer(l_in, lambda x: x, output_shape="bad")


def test_inverse_layer():
    l_in = InputLayer((None, 4))
    dense = DenseLayer(l_in, 3, nonlinearity=None, b=None)
    inv = InverseLayer(dense, dense)
    assert inv.output_shape == (None, 4)
    x = np.random.RandomState(2).randn(2, 4)
    f = pytensor.function([l_in.input_var], get_output(inv), mode="FAST_COMPILE")
    W = dense.W.get_value()
    np.testing.assert_allclose(f(x), (x @ W) @ W.T, rtol=1e-12)


def test_prelu():
    l_in = InputLayer((None, 3, 4, 5))
    layer = ParametricRectifierLayer(l_in)
    assert layer.alpha.get_value().shape == (3,)
    np.testing.assert_allclose(_run(layer, X4), np.where(X4 > 0, X4, 0.25 * X4), rtol=1e-12)
    assert ParametricRectifierLayer(l_in, shared_axes="all").alpha.get_value().shape == ()
    dense = DenseLayer(InputLayer((None, 4)), 3)
    top = prelu(dense)
    assert dense.nonlinearity is nonlinearities.identity
    assert isinstance(top, ParametricRectifierLayer)
    assert top.params[top.alpha] == {"trainable"}
    assert pt.as_tensor_variable(top.alpha).ndim == 1
