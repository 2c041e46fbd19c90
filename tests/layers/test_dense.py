"""DenseLayer and NINLayer: shapes, parameters, numerics, errors."""

from __future__ import annotations

import numpy as np
import pytensor
import pytest

from lasagne_bn import nonlinearities
from lasagne_bn.layers import DenseLayer, InputLayer, NINLayer, get_output


def _run(layer, x):
    l_in = layer.input_layer
    return pytensor.function([l_in.input_var], get_output(layer), mode="FAST_COMPILE")(x)


def test_dense_numerics_and_params():
    r = np.random.RandomState(0)
    W, b = r.randn(4, 3), r.randn(3)
    layer = DenseLayer(InputLayer((None, 4)), 3, W=W, b=b, name="d")
    assert [p.name for p in layer.get_params()] == ["d.W", "d.b"]
    assert layer.params[layer.b] == {"trainable"}
    assert layer.nonlinearity is nonlinearities.rectify
    x = r.randn(5, 4)
    np.testing.assert_allclose(_run(layer, x), np.maximum(x @ W + b, 0), rtol=1e-12)


@pytest.mark.parametrize(
    ("num_leading_axes", "out_shape", "w_shape"),
    [(1, (None, 60), (20, 60)), (2, (None, 4, 60), (5, 60)), (-1, (None, 4, 60), (5, 60))],
)
def test_dense_num_leading_axes(num_leading_axes, out_shape, w_shape):
    r = np.random.RandomState(1)
    layer = DenseLayer(
        InputLayer((None, 4, 5)), 60, num_leading_axes=num_leading_axes, nonlinearity=None
    )
    assert layer.output_shape == out_shape
    assert layer.W.get_value().shape == w_shape
    x = r.randn(2, 4, 5)
    W, b = layer.W.get_value(), layer.b.get_value()
    want = (x.reshape(2, -1) if num_leading_axes == 1 else x) @ W + b
    np.testing.assert_allclose(_run(layer, x), want, rtol=1e-12, atol=1e-12)


def test_dense_errors():
    with pytest.raises(ValueError, match="leaving no trailing axes"):
        DenseLayer(InputLayer((None, 4)), 3, num_leading_axes=2)
    with pytest.raises(ValueError, match="more trailing axes"):
        DenseLayer(InputLayer((None, 4)), 3, num_leading_axes=-3)
    with pytest.raises(ValueError, match="fixed input shape"):
        DenseLayer(InputLayer((None, None)), 3)
    with pytest.raises(ValueError, match="num_units=0"):
        DenseLayer(InputLayer((None, 4)), 0)
    with pytest.raises(ValueError, match="should be \\(4, 3\\)"):
        DenseLayer(InputLayer((None, 4)), 3, W=np.zeros((3, 4)))


@pytest.mark.parametrize("untie_biases", [False, True])
def test_nin_layer(untie_biases):
    r = np.random.RandomState(2)
    layer = NINLayer(InputLayer((None, 3, 4, 5)), 6, untie_biases=untie_biases)
    assert layer.output_shape == (None, 6, 4, 5)
    assert layer.b.get_value().shape == ((6, 4, 5) if untie_biases else (6,))
    layer.b.set_value(r.randn(*layer.b.get_value().shape))
    x = r.randn(2, 3, 4, 5)
    W, b = layer.W.get_value(), layer.b.get_value()
    bias = b[None] if untie_biases else b[None, :, None, None]
    want = np.maximum(np.einsum("nchw,cf->nfhw", x, W) + bias, 0)
    np.testing.assert_allclose(_run(layer, x), want, rtol=1e-12, atol=1e-12)
