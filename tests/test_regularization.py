"""Penalties and their application to layers and networks."""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt

from lasagne_bn.layers import DenseLayer, InputLayer, batch_norm
from lasagne_bn.regularization import (
    apply_penalty,
    l1,
    l2,
    regularize_layer_params,
    regularize_layer_params_weighted,
    regularize_network_params,
)


def _net():
    l_in = InputLayer((None, 3))
    l1_ = batch_norm(DenseLayer(l_in, 2, W=np.full((3, 2), 2.0), b=np.ones(2)))
    l2_ = DenseLayer(l1_, 1, W=np.full((2, 1), -1.0), b=np.full(1, 5.0))
    return l1_.input_layer.input_layer, l2_


def test_penalties():
    x = np.array([[1.0, -2.0], [3.0, 0.5]])
    assert float(l1(pt.as_tensor(x)).eval(mode="FAST_COMPILE")) == 6.5
    assert float(l2(pt.as_tensor(x)).eval(mode="FAST_COMPILE")) == 14.25
    both = apply_penalty([pt.as_tensor(x), pt.as_tensor(x)], l2)
    assert float(both.eval(mode="FAST_COMPILE")) == 28.5
    assert float(apply_penalty(pt.as_tensor(x), l1).eval(mode="FAST_COMPILE")) == 6.5


def test_regularize_layers_and_network():
    dense, top = _net()
    # regularizable: dense W (6 * 4), bn gamma (2 * 1), top W (2 * 1); biases, beta, stats not
    assert float(regularize_network_params(top, l2).eval(mode="FAST_COMPILE")) == 24 + 2 + 2
    assert float(regularize_layer_params(dense, l1).eval(mode="FAST_COMPILE")) == 12
    assert float(regularize_layer_params([dense, top], l1).eval(mode="FAST_COMPILE")) == 14
    weighted = regularize_layer_params_weighted({dense: 0.5, top: 2.0}, l2)
    assert float(weighted.eval(mode="FAST_COMPILE")) == 0.5 * 24 + 2.0 * 2
    everything = regularize_network_params(top, l1, tags={})
    # W 12, beta 0, gamma 2, mean 0, inv_std 2, top W 2, top b 5
    assert float(everything.eval(mode="FAST_COMPILE")) == 23


def test_penalty_over_forty_params_runs_in_every_mode():
    # An L2 penalty over 40 parameters: Python's sum became one 40-input add,
    # which FAST_COMPILE and the python linker could not run.
    import pytensor
    from pytensor.compile.mode import Mode

    from lasagne_bn.updates import total_norm_constraint

    params = [pytensor.shared(np.full(2, float(i)), name=f"w{i}") for i in range(40)]
    want = sum(2.0 * i * i for i in range(40))
    penalty = apply_penalty(params, l2)
    weighted = regularize_layer_params_weighted({DenseLayer(InputLayer((None, 2)), 1): 0.5}, l2)
    scaled = total_norm_constraint(params, max_norm=1.0)
    grad = pytensor.grad(penalty, params[3])
    for mode in ["FAST_COMPILE", Mode(linker="py", optimizer=None)]:
        fn = pytensor.function([], [penalty, grad, scaled[39], weighted], mode=mode)
        value, g, s39, _ = fn()
        np.testing.assert_allclose(value, want)
        np.testing.assert_allclose(g, [6.0, 6.0])
        np.testing.assert_allclose(s39, np.full(2, 39.0) / np.sqrt(want), rtol=1e-6)
