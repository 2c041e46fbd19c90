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
from compile_modes import mode_params

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


@pytest.fixture(scope="module", params=mode_params())
def transformer_results(request):
    """Outputs and gradients of every oracle case, from one function per mode."""
    ins, outs, shapes = [], [], {}
    for case in CASES:
        x, theta, w = (ORACLE[f"{case}/{k}"] for k in ("x", "theta", "w"))
        l_in, l_loc, layer = _layer(case, x.shape, theta.shape)
        shapes[case] = layer.output_shape
        y = get_output(layer)
        gx, gt = pytensor.grad((y * w).sum(), [l_in.input_var, l_loc.input_var])
        ins += [l_in.input_var, l_loc.input_var]
        outs += [y, gx, gt]
    fn = pytensor.function(ins, outs, mode=request.param)
    args = [ORACLE[f"{c}/{k}"] for c in CASES for k in ("x", "theta")]
    values = fn(*args)
    return shapes, {c: values[3 * i : 3 * i + 3] for i, c in enumerate(CASES)}


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_transformers_match_lasagne(transformer_results, case):
    shapes, results = transformer_results
    out, grad_x, grad_theta = results[case]
    assert out.shape[1:] == shapes[case][1:]
    for got, key in ((out, "out"), (grad_x, "grad_x"), (grad_theta, "grad_theta")):
        want = ORACLE[f"{case}/{key}"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())
