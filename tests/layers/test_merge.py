"""ConcatLayer (with axis and cropping), ElemwiseSumLayer (with coeffs), ElemwiseMergeLayer."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params

from lasagne_bn.layers import (
    ConcatLayer,
    ElemwiseMergeLayer,
    ElemwiseSumLayer,
    InputLayer,
    autocrop_array_shapes,
    get_output,
)

A = np.random.RandomState(0).randn(2, 3, 5)
B = np.random.RandomState(1).randn(2, 4, 7)


def _run(layer, *xs):
    ins = [lyr.input_var for lyr in layer.input_layers]
    return pytensor.function(ins, get_output(layer), mode="FAST_COMPILE")(*xs)


def test_concat_axis():
    a, b = InputLayer((None, 3, 5)), InputLayer((None, 4, 5))
    layer = ConcatLayer([a, b])
    assert layer.output_shape == (None, 7, 5)
    np.testing.assert_array_equal(_run(layer, A, B[:, :, :5]), np.concatenate([A, B[:, :, :5]], 1))
    c = InputLayer((None, 3, 2))
    layer = ConcatLayer([a, c], axis=-1)
    assert layer.output_shape == (None, 3, 7)
    assert ConcatLayer([InputLayer((None, 3)), InputLayer((2, 3))], axis=0).output_shape == (
        None,
        3,
    )
    # as in Lasagne, shapes are checked where they are used, not at creation
    bad = ConcatLayer([a, InputLayer((None, 4, 6))])
    with pytest.raises(ValueError, match="same except in the concatenation axis"):
        bad.output_shape  # noqa: B018
    with pytest.raises(ValueError, match="out of range"):
        ConcatLayer([a, b], axis=3).output_shape  # noqa: B018


@pytest.mark.parametrize("mode", ["lower", "upper", "center"])
def test_concat_cropping(mode):
    a, b = InputLayer((None, 3, 5)), InputLayer((None, 4, 7))
    layer = ConcatLayer([a, b], axis=1, cropping=[None, None, mode])
    assert layer.output_shape == (None, 7, 5)
    start = {"lower": 0, "upper": 2, "center": 1}[mode]
    want = np.concatenate([A, B[:, :, start : start + 5]], axis=1)
    np.testing.assert_array_equal(_run(layer, A, B), want)


def test_autocrop_shapes_and_errors():
    assert autocrop_array_shapes([(1, 2, 3), (3, None, 2)], [None, "lower", "upper"]) == [
        (1, None, 2),
        (3, None, 2),
    ]
    with pytest.raises(ValueError, match="Unknown crop mode"):
        autocrop_array_shapes([(1, 2), (1, 3)], [None, "middle"])
    with pytest.raises(ValueError, match="same dimensionality"):
        autocrop_array_shapes([(1, 2), (1, 3, 4)], [None, "lower"])


def test_elemwise_sum_coeffs():
    a, b = InputLayer((None, 3, 5)), InputLayer((None, 3, 5))
    np.testing.assert_allclose(_run(ElemwiseSumLayer([a, b]), A, A * 2), A * 3)
    layer = ElemwiseSumLayer([a, b], coeffs=[0.5, -1])
    np.testing.assert_allclose(_run(layer, A, B[:, :3, :5]), 0.5 * A - B[:, :3, :5])
    np.testing.assert_allclose(_run(ElemwiseSumLayer([a, b], coeffs=2), A, A), 4 * A)
    with pytest.raises(ValueError, match="got 3 coeffs for 2 incomings"):
        ElemwiseSumLayer([a, b], coeffs=[1, 2, 3])
    with pytest.raises(ValueError, match="not all input shapes are the same"):
        ElemwiseSumLayer([a, InputLayer((None, 4, 5))]).output_shape  # noqa: B018
    x32 = InputLayer((None, 3), input_var=pt.matrix(dtype="float32"))
    assert get_output(ElemwiseSumLayer([x32, x32], coeffs=0.1)).dtype == "float32"


def test_elemwise_merge_with_cropping():
    a, b = InputLayer((None, 3, 5)), InputLayer((None, 4, 7))
    layer = ElemwiseMergeLayer([a, b], pt.maximum, cropping=[None, "lower", "lower"])
    assert layer.output_shape == (None, 3, 5)
    np.testing.assert_array_equal(_run(layer, A, B), np.maximum(A, B[:, :3, :5]))


@pytest.mark.slow  # Numba compiles the gradient graph in each parametrisation
@pytest.mark.parametrize("mode", mode_params())
def test_concat_gradient_in_every_mode(mode):
    """The gradient splits the output by the inputs' sizes: static ones, which JAX needs."""
    a, b = InputLayer((None, 3, 5)), InputLayer((None, 4, 7))
    layer = ConcatLayer([a, b], axis=1, cropping=[None, None, "center"])
    out = get_output(layer)
    w = np.random.RandomState(2).randn(2, 7, 5)
    ga, gb = pytensor.grad((out * w).sum(), [a.input_var, b.input_var])
    fn = pytensor.function([a.input_var, b.input_var], [out, ga, gb], mode=mode)
    y, ga_v, gb_v = fn(A.astype(out.dtype), B.astype(out.dtype))
    np.testing.assert_allclose(y, np.concatenate([A, B[:, :, 1:6]], axis=1), rtol=1e-6)
    np.testing.assert_allclose(ga_v, w[:, :3], rtol=1e-6)
    want_gb = np.zeros_like(B)
    want_gb[:, :, 1:6] = w[:, 3:]
    np.testing.assert_allclose(gb_v, want_gb, rtol=1e-6)


def test_merge_layers_take_stand_ins():
    """As in Lasagne, merge layers read their inputs' shapes only where they use them."""
    from unittest.mock import Mock

    layer = ConcatLayer([Mock(), Mock()], axis=-1, cropping=["lower"] * 2)
    assert layer.get_output_shape_for([(3, 2), (4, 5)]) == (3, 7)
    assert layer.get_output_shape_for([(None, 2), (None, 5)]) == (None, 7)
    layer = ConcatLayer([Mock(), Mock()], axis=-1, cropping=["lower"] * 3)
    out = layer.get_output_for([pt.as_tensor(A), pt.as_tensor(B)]).eval(mode="FAST_COMPILE")
    np.testing.assert_array_equal(out, np.concatenate([A[:, :3], B[:, :3]], axis=2))
    total = ElemwiseSumLayer([Mock(), Mock()], coeffs=[2, -1])
    assert total.get_output_shape_for([(None, 2), (3, 2)]) == (3, 2)
    np.testing.assert_allclose(
        total.get_output_for([pt.as_tensor(A), pt.as_tensor(A)]).eval(mode="FAST_COMPILE"), A
    )
