"""The same computations as real Lasagne master on Theano 1.0.5, against its stored results.

tests/data/make_lasagne_oracle.py made tests/data/lasagne_oracle.npz (float64).
These check semantics, so they compile in FAST_COMPILE (quick); the other
tests run the same layers in every mode.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn import nonlinearities, objectives, updates
from lasagne_bn.layers import (
    BatchNormLayer,
    DenseLayer,
    InputLayer,
    batch_norm,
    count_params,
    get_all_layers,
    get_all_params,
    get_output,
)

MODE = "FAST_COMPILE"
ORACLE = np.load(Path(__file__).parent.parent / "data" / "lasagne_oracle.npz")


@pytest.mark.parametrize(
    ("case", "kwargs"),
    [
        ("train", {}),
        ("det", {"deterministic": True}),
        ("use_update", {"batch_norm_use_averages": True}),
    ],
)
def test_batch_norm_layer_matches_lasagne(case, kwargs):
    init = {k: ORACLE["bn4_init_" + k].copy() for k in ("beta", "gamma", "mean", "inv_std")}
    layer = BatchNormLayer(InputLayer((None, 3, 2, 4)), **init)
    x = pt.tensor4("x")
    f = pytensor.function([x], get_output(layer, x, **kwargs), mode=MODE)
    np.testing.assert_allclose(
        f(ORACLE["bn4_x"]), ORACLE[f"bn4_{case}_out"], rtol=1e-12, atol=1e-13
    )
    np.testing.assert_allclose(layer.mean.get_value(), ORACLE[f"bn4_{case}_mean"], rtol=1e-13)
    np.testing.assert_allclose(
        layer.inv_std.get_value(), ORACLE[f"bn4_{case}_inv_std"], rtol=1e-13
    )


def test_batch_norm_network_three_sgd_steps_matches_lasagne():
    l_in = InputLayer((None, 6))
    l1 = batch_norm(DenseLayer(l_in, 5, W=ORACLE["net_W1"].copy(), name="fc"))
    net = DenseLayer(
        l1,
        3,
        W=ORACLE["net_W2"].copy(),
        b=ORACLE["net_b2"].copy(),
        nonlinearity=nonlinearities.softmax,
    )
    assert [type(lyr).__name__ for lyr in get_all_layers(net)] == list(ORACLE["net_layer_types"])
    assert [str(lyr.name) for lyr in get_all_layers(net)] == list(ORACLE["net_layer_names"])
    assert [str(p.name) for p in get_all_params(net)] == list(ORACLE["net_param_names"])
    assert count_params(net) == int(ORACLE["net_count_params"])

    y = pt.ivector("y")
    loss = objectives.aggregate(objectives.categorical_crossentropy(get_output(net), y))
    params = get_all_params(net, trainable=True)
    train = pytensor.function(
        [l_in.input_var, y], loss, updates=updates.sgd(loss, params, learning_rate=0.1), mode=MODE
    )
    X, Y = ORACLE["net_X"], ORACLE["net_Y"]
    losses = [train(X[i], Y[i]) for i in range(3)]
    np.testing.assert_allclose(losses, ORACLE["net_losses"], rtol=1e-12)
    for p in get_all_params(net):
        np.testing.assert_allclose(
            p.get_value(), ORACLE["net_param_" + p.name], rtol=1e-11, atol=1e-14, err_msg=p.name
        )
    det = pytensor.function([l_in.input_var], get_output(net, deterministic=True), mode=MODE)
    np.testing.assert_allclose(det(X[0]), ORACLE["net_det_out"], rtol=1e-11, atol=1e-14)
