"""FlattenLayer, ReshapeLayer, DimshuffleLayer, SliceLayer, PadLayer and padding.pad."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params

from lasagne_bn.layers import (
    DimshuffleLayer,
    FlattenLayer,
    InputLayer,
    PadLayer,
    ReshapeLayer,
    SliceLayer,
    get_output,
    get_output_shape,
)


def _run(layer, x, extra=()):
    l_in = layer.input_layer
    f = pytensor.function([l_in.input_var, *extra], get_output(layer), mode="FAST_COMPILE")
    return f(x, *([3] * len(extra)))


X = np.arange(2 * 3 * 4 * 5, dtype=float).reshape(2, 3, 4, 5)


@pytest.mark.parametrize(("outdim", "shape"), [(1, (120,)), (2, (2, 60)), (3, (2, 3, 20))])
def test_flatten(outdim, shape):
    layer = FlattenLayer(InputLayer((2, 3, 4, 5)), outdim=outdim)
    assert layer.output_shape == shape
    np.testing.assert_array_equal(_run(layer, X), X.reshape(shape))
    assert FlattenLayer(InputLayer((None, 3, 4, 5))).output_shape == (None, 60)
    assert FlattenLayer(InputLayer((2, None, 4))).output_shape == (2, None)


def test_flatten_errors():
    with pytest.raises(ValueError, match="outdim must be > 0"):
        FlattenLayer(InputLayer((2, 3)), outdim=0)
    with pytest.raises(ValueError, match="more than the 2 input dimensions"):
        FlattenLayer(InputLayer((2, 3)), outdim=3).output_shape  # noqa: B018


@pytest.mark.parametrize(
    ("spec", "shape"),
    [
        (([0], [1], 20), (None, 3, 20)),
        (([0], -1), (None, 60)),
        ((-1, 5), (None, 5)),
        (([0], 3, [2], 5), (None, 3, 4, 5)),
        (([0], [3], [1], [2]), (None, 5, 3, 4)),
    ],
)
def test_reshape(spec, shape):
    layer = ReshapeLayer(InputLayer((None, 3, 4, 5)), spec)
    assert layer.output_shape == shape
    want = X.reshape(tuple(-1 if s is None else s for s in shape))
    np.testing.assert_array_equal(_run(layer, X), want)


def test_reshape_symbolic_size():
    n = pt.iscalar("n")
    layer = ReshapeLayer(InputLayer((2, 3, 4, 5)), ([0], n, -1))
    assert layer.output_shape == (2, None, None)
    np.testing.assert_array_equal(_run(layer, X, extra=[n]), X.reshape(2, 3, 20))


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ((0, 2), "positive or -1"),
        (([0, 1], 2), "single-element lists"),
        ((-1, -1), "multiple -1"),
        ((1.5, 2), "tuple of int"),
        (([4], -1), r"contains \[4\]"),
        (([0], 7), "total size mismatches"),
    ],
)
def test_reshape_errors(spec, match):
    with pytest.raises(ValueError, match=match):
        ReshapeLayer(InputLayer((None, 3, 4, 5)), spec)
    with pytest.raises(ValueError, match="total size mismatches"):
        ReshapeLayer(InputLayer((2, 3, 4, 5)), (7, -1))


def test_dimshuffle():
    layer = DimshuffleLayer(InputLayer((None, 3, 4, 5)), (0, 3, "x", 1, 2))
    assert layer.output_shape == (None, 5, 1, 3, 4)
    np.testing.assert_array_equal(_run(layer, X), X.transpose(0, 3, 1, 2)[:, :, None])
    # an axis of unknown size may be dropped (it must be 1 when the graph runs)
    drop = DimshuffleLayer(InputLayer((None, None, 4)), (0, 2))
    assert drop.output_shape == (None, 4)
    np.testing.assert_array_equal(_run(drop, np.ones((2, 1, 4))), np.ones((2, 4)))
    with pytest.raises(ValueError, match="more than once"):
        DimshuffleLayer(InputLayer((2, 3)), (0, 0))
    with pytest.raises(ValueError, match="dimension indices or 'x'"):
        DimshuffleLayer(InputLayer((2, 3)), (0, "y"))
    with pytest.raises(ValueError, match="collapse dimension 1 of size 3"):
        DimshuffleLayer(InputLayer((2, 3)), (0,))
    with pytest.raises(ValueError, match="pattern contains 2"):
        DimshuffleLayer(InputLayer((2, 3)), (0, 1, 2))


def test_slice_layer():
    l_in = InputLayer((None, 3, 4, 5))
    assert get_output_shape(SliceLayer(l_in, 1, axis=1)) == (None, 4, 5)
    layer = SliceLayer(l_in, slice(1, None, 2), axis=-1)
    assert layer.output_shape == (None, 3, 4, 2)
    np.testing.assert_array_equal(_run(layer, X), X[..., 1::2])
    np.testing.assert_array_equal(_run(SliceLayer(l_in, 0, axis=1), X), X[:, 0])
    with pytest.raises(ValueError, match="out of range"):
        SliceLayer(l_in, 0, axis=4).output_shape  # noqa: B018


# --------------------------------------------------------------------------
# PadLayer and theano_extensions.padding.pad


@pytest.mark.slow  # Numba compiles the gradient graph in each parametrisation
@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("declared", [(None, 3, 4, 5), (None, 3, None, 5)])
def test_pad_layer_values_and_gradient(mode, declared):
    """Values and input gradient in every mode, also with a size known only at run time."""
    l_in = InputLayer(declared)
    layer = PadLayer(l_in, width=[(1, 2), 3], val=0.5)
    assert layer.output_shape == (None, 3, None if declared[2] is None else 7, 11)
    out = get_output(layer)
    w = np.random.RandomState(0).randn(2, 3, 7, 11).astype(out.dtype)
    grad = pytensor.grad((out * w).sum(), l_in.input_var)
    fn = pytensor.function([l_in.input_var], [out, grad], mode=mode)
    x = X.astype(out.dtype)
    y, g = fn(x)
    want = np.pad(x, [(0, 0), (0, 0), (1, 2), (3, 3)], constant_values=0.5)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(g, w[:, :, 1:-2, 3:-3])


def test_pad_function_and_permissive_layers():
    from unittest.mock import Mock

    from lasagne_bn.theano_extensions import padding

    x = pt.as_tensor(np.ones((2, 3), dtype="float32"))
    # Lasagne's defaults: batch_ndim=1, an int pads every axis after it
    np.testing.assert_array_equal(
        padding.pad(x, 1).eval(mode="FAST_COMPILE"), np.pad(np.ones((2, 3)), [(0, 0), (1, 1)])
    )
    np.testing.assert_array_equal(
        padding.pad(x, [(2, 0)], val=pt.constant(3.0), batch_ndim=0).eval(mode="FAST_COMPILE"),
        np.pad(np.ones((2, 3)), [(2, 0), (0, 0)], constant_values=3),
    )
    with pytest.raises(ValueError, match="must be >= 0"):
        padding.pad(x, -1)
    with pytest.raises(ValueError, match="only 1 axes follow"):
        padding.pad(x, [1, 1])
    with pytest.raises(TypeError, match="width="):
        PadLayer(InputLayer((2, 3)), 1.5)
    # as in Lasagne, the incoming layer's shape is read only where it is used
    stand_in = Mock(output_shape=(None,))
    assert PadLayer(stand_in, width=2).get_output_shape_for((2, 3, 4, 5)) == (2, 3, 8, 9)
    assert FlattenLayer(stand_in, outdim=3).get_output_shape_for((2, 3, 4, 5)) == (2, 3, 20)
    assert SliceLayer(stand_in, [0, 2], axis=1).get_output_shape_for((2, 3)) == (2, 2)
    with pytest.raises(ValueError, match="more than the 2 input dimensions"):
        FlattenLayer(stand_in, outdim=3).get_output_shape_for((2, 3))
    # symbolic sizes in the input shape count as unknown
    s = pt.as_tensor(np.ones((3, 4, 5))).shape
    layer = ReshapeLayer(InputLayer((None, None, None)), (s[0] * s[1], [2]))
    assert layer.get_output_shape_for((s[0], s[1], s[2])) == (None, None)
