"""TransformerLayer, TPSTransformerLayer and RandomizedRectifierLayer / rrelu.

The spatial transformers' outputs and gradients are compared, in every
mode, with Theano 1.0.5 + Lasagne master (tests/data/transformer_oracle.npz,
made by tests/data/make_transformer_oracle.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import LAYER_MODES, mode_params

from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    DenseLayer,
    InputLayer,
    RandomizedRectifierLayer,
    ReshapeLayer,
    TPSTransformerLayer,
    TransformerLayer,
    get_output,
    rrelu,
)

ORACLE = np.load(os.path.join(os.path.dirname(__file__), "..", "data", "transformer_oracle.npz"))
CASES = sorted({key.split("/")[0] for key in ORACLE.files})


def _layer(case, x_shape, loc_shape, batch=None):
    """The layer the oracle case was made with; ``batch=None`` leaves the batch size open."""
    kwargs = {}
    border = case.rsplit("_", 1)[-1]
    if border in ("nearest", "mirror", "wrap"):
        kwargs["border_mode"] = border
    if case.endswith("down"):
        kwargs["downsample_factor"] = (0.7, 2.3)
    l_in = InputLayer((batch, *x_shape[1:]))
    l_loc = InputLayer((batch, loc_shape[1]))
    if case.startswith("affine"):
        return l_in, l_loc, TransformerLayer(l_in, l_loc, **kwargs)
    kwargs["control_points"] = loc_shape[1] // 2
    kwargs["precompute_grid"] = case != "tps_nopre"
    return l_in, l_loc, TPSTransformerLayer(l_in, l_loc, **kwargs)


# every case in the python-linker mode; two of them in the others, whose
# compilation (Numba's above all) takes long
CASES_PER_MODE = {"py": CASES}
SOME_CASES = ["affine_mirror", "tps_down"]


@pytest.fixture(scope="module", params=mode_params())
def transformer_results(request):
    """Outputs and gradients of the oracle cases, from one function per mode."""
    name = next(k for k, v in LAYER_MODES.items() if v is request.param)
    cases = CASES_PER_MODE.get(name, SOME_CASES)
    ins, outs, shapes = [], [], {}
    for case in cases:
        x, theta, w = (ORACLE[f"{case}/{k}"] for k in ("x", "theta", "w"))
        l_in, l_loc, layer = _layer(case, x.shape, theta.shape)
        shapes[case] = layer.output_shape
        y = get_output(layer)
        gx, gt = pytensor.grad((y * w).sum(), [l_in.input_var, l_loc.input_var])
        ins += [l_in.input_var, l_loc.input_var]
        outs += [y, gx, gt]
    fn = pytensor.function(ins, outs, mode=request.param)
    values = fn(*[ORACLE[f"{c}/{k}"] for c in cases for k in ("x", "theta")])
    return shapes, {c: values[3 * i : 3 * i + 3] for i, c in enumerate(cases)}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_transformers_match_lasagne(transformer_results, case):
    shapes, results = transformer_results
    if case not in results:
        return  # this mode checks only SOME_CASES
    out, grad_x, grad_theta = results[case]
    assert out.shape[1:] == shapes[case][1:]
    for got, key in ((out, "out"), (grad_x, "grad_x"), (grad_theta, "grad_theta")):
        want = ORACLE[f"{case}/{key}"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_transformer_shapes_and_errors():
    l_in = InputLayer((None, 3, 28, 28))
    loc6, loc32 = DenseLayer(l_in, 6), DenseLayer(l_in, 32)
    assert TransformerLayer(l_in, loc6, downsample_factor=(0.7, 2.3)).output_shape == (
        None,
        3,
        40,
        12,
    )
    with pytest.raises(ValueError, match="localization network must have output shape"):
        TransformerLayer(l_in, DenseLayer(l_in, 5))
    with pytest.raises(ValueError, match="4-dimensional"):
        TransformerLayer(InputLayer((3, 28, 28)), DenseLayer(InputLayer((3, 28)), 6))
    # border_mode is checked where it is used, as in Lasagne
    bad = TransformerLayer(l_in, loc6, border_mode="reflect")
    with pytest.raises(ValueError, match="border_mode='reflect'"):
        get_output(bad)
    assert TPSTransformerLayer(l_in, loc32).precompute_grid is True
    l_var = InputLayer((None, 3, None, 28))
    loc_var = DenseLayer(ReshapeLayer(l_var, ([0], 3 * 28 * 28)), 32)
    tps = TPSTransformerLayer(l_var, loc_var)
    assert tps.precompute_grid is False and tps.output_shape == (None, 3, None, 28)
    with pytest.raises(ValueError, match="precompute_grid=True"):
        TPSTransformerLayer(l_var, loc_var, precompute_grid=True)
    with pytest.raises(ValueError, match="perfect square"):
        TPSTransformerLayer(l_in, DenseLayer(l_in, 34), control_points=17)
    with pytest.raises(ValueError, match="2\\*control_points"):
        TPSTransformerLayer(l_in, DenseLayer(l_in, 30))


def test_tps_variable_size_identity():
    """Zero offsets on an image of a size known only at run time give the image back."""
    l_in = InputLayer((None, 2, None, 6))
    l_loc = InputLayer((None, 8))
    layer = TPSTransformerLayer(l_in, l_loc, control_points=4)
    x = np.random.RandomState(0).rand(3, 2, 5, 6).astype(pytensor.config.floatX)
    out = get_output(layer, {l_in: pt.constant(x), l_loc: pt.zeros((3, 8))})
    np.testing.assert_allclose(out.eval(mode="FAST_COMPILE"), x, atol=1e-5)


@pytest.mark.slow  # Numba compiles the gradient graph in each parametrisation
@pytest.mark.parametrize("mode", mode_params())
def test_rrelu_slopes_in_range_and_shared(mode):
    l_in = InputLayer((None, 3, 4, 5))
    layer = RandomizedRectifierLayer(l_in, lower=0.2, upper=0.6)
    det = RandomizedRectifierLayer(l_in, lower=0.2, upper=0.6)
    x = l_in.input_var
    out, updates = get_output(layer, return_updates=True)
    fn = pytensor.function(
        [x], [out, get_output(det, deterministic=True)], updates=updates, mode=mode
    )
    data = -np.ones((2, 3, 4, 5), dtype=pytensor.config.floatX)
    y, y_det = fn(data)
    slopes = y / data
    assert slopes.min() >= 0.2 and slopes.max() <= 0.6
    # one slope per channel ('auto' shares all axes but the second)
    np.testing.assert_allclose(slopes, slopes[:1, :, :1, :1] * np.ones_like(slopes))
    assert slopes[0, :, 0, 0].var() > 0
    np.testing.assert_allclose(y_det, data * 0.4, rtol=1e-6)
    # the generator advances: the next call draws other slopes
    assert not np.allclose(fn(data)[0], y)
    np.testing.assert_allclose(fn(-data)[0], -data)


def test_rrelu_options():
    l_in = InputLayer((2, 3))
    with pytest.raises(ValueError, match="upper bound"):
        RandomizedRectifierLayer(l_in, lower=0.9, upper=0.1)
    assert RandomizedRectifierLayer(l_in, shared_axes="all").shared_axes == (0, 1)
    assert RandomizedRectifierLayer(l_in, shared_axes=0).shared_axes == (0,)
    fixed = RandomizedRectifierLayer(l_in, lower=0.5, upper=0.5)
    np.testing.assert_allclose(get_output(fixed, -np.ones((2, 3))).eval(), -0.5)
    dense = DenseLayer(l_in, 4)
    layer = rrelu(dense, lower=0.1)
    assert dense.nonlinearity is nonlinearities.identity and layer.lower == 0.1
