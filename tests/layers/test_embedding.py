"""EmbeddingLayer: Lasagne's constructor and shapes; lookups in every mode against NumPy."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params

from lasagne_bn import init
from lasagne_bn.layers import EmbeddingLayer, InputLayer, get_all_params, get_output

TABLE = np.random.RandomState(0).randn(7, 4).astype("float32")


@pytest.mark.parametrize("mode", mode_params())
def test_lookup_of_1d_2d_and_3d_ids(mode):
    ids = [pt.ivector(), pt.imatrix(), pt.tensor3(dtype="int64")]
    values = [np.array([6, 0, 0], "int32"), np.array([[1, 2], [6, 5]], "int32")]
    values.append(np.arange(12).reshape(2, 3, 2) % 7)
    outs = []
    for v in ids:
        layer = EmbeddingLayer(InputLayer((None,) * v.ndim), input_size=7, output_size=4, W=TABLE)
        outs.append(get_output(layer, v))
    got = pytensor.function(ids, outs, mode=mode)(*values)
    for value, out in zip(values, got, strict=True):
        assert out.dtype == np.float32
        np.testing.assert_array_equal(out, TABLE[value])


def test_gradient_accumulates_over_repeated_ids():
    layer = EmbeddingLayer(InputLayer((None,)), 7, 4, W=TABLE)
    ids = pt.ivector()
    grad = pytensor.grad(get_output(layer, ids).sum(), layer.W)
    got = grad.eval({ids: np.array([3, 3, 1], "int32")}, mode="FAST_COMPILE")
    want = np.zeros((7, 4))
    want[3], want[1] = 2, 1
    np.testing.assert_array_equal(got, want)


def test_parameters_and_shapes():
    layer = EmbeddingLayer(InputLayer((None, 5)), input_size=10, output_size=3, name="emb")
    assert layer.output_shape == (None, 5, 3)
    assert layer.get_output_shape_for((2, 5)) == (2, 5, 3)
    assert layer.W.get_value().shape == (10, 3)
    assert [p.name for p in get_all_params(layer, trainable=True, regularizable=True)] == ["emb.W"]
    default = EmbeddingLayer.__init__.__defaults__[0]
    assert isinstance(default, init.Normal)
    assert (layer.input_size, layer.output_size) == (10, 3)


def test_float_ids_are_refused():
    layer = EmbeddingLayer(InputLayer((None,)), 7, 4, W=TABLE)
    with pytest.raises(TypeError, match="float64: expected integer ids"):
        get_output(layer, pt.vector())
