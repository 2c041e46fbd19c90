"""3-D convolutions through lasagne_bn_compat against Theano 1.0.5 + Lasagne master's own outputs.

The reference data (tests/data/conv3d_oracle, made by
tests/data/make_conv3d_oracle.py) holds ``T.nnet.conv3d`` and its two
gradient functions on a few argument sets, and a pickled network of
``Conv3DLayer`` / ``TransposedConv3DLayer`` (the latter built on Theano's
``AbstractConv3d_gradInputs``) with its input and output.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytest
from compile_modes import mode_for
from legacy_helpers import DATA, QUIET
from legacy_helpers import legacy as legacy  # the fixture

import lasagne_bn_compat.io as cio
from lasagne_bn import init, nonlinearities
from lasagne_bn.layers import (
    Conv3DLayer,
    InputLayer,
    TransposedConv3DLayer,
    get_all_layers,
    get_output,
    set_all_param_values,
)

pytestmark = QUIET
ORACLE = DATA / "conv3d_oracle"

CASES = [
    dict(border_mode="valid"),
    dict(border_mode="half", subsample=(2, 1, 2), num_groups=2),
    dict(border_mode=(1, 0, 2), filter_dilation=(2, 1, 2), filter_flip=False),
    dict(border_mode="full", subsample=(2, 2, 1)),
]


@pytest.fixture(scope="module")
def expected():
    with np.load(ORACLE / "expected.npz") as f:
        return dict(f)


# The default (Numba) mode is checked against a NumPy reference in tests/ops/test_conv3d.py.
@pytest.mark.parametrize(
    "mode_name", ["fast_compile", pytest.param("jax", marks=pytest.mark.slow)]
)
def test_theano_conv3d_functions_match_theano(legacy, expected, mode_name):
    if mode_name == "jax":
        pytest.importorskip("jax")
    import theano
    import theano.tensor as T
    from theano.tensor.nnet import abstract_conv

    inputs, outputs, values, wanted = [], [], [], []
    for i, kw in enumerate(CASES):
        c = {k: expected[f"case{i}_{k}"] for k in ("x", "w", "r", "y", "gx", "gw")}
        x, w, r = T.tensor5(), T.tensor5(), T.tensor5()
        xs, ws = c["x"].shape, c["w"].shape
        outputs += [
            T.nnet.conv3d(x, w, **kw),
            abstract_conv.conv3d_grad_wrt_inputs(r, w, xs, filter_shape=ws, **kw),
            abstract_conv.conv3d_grad_wrt_weights(x, r, ws, input_shape=xs, **kw),
        ]
        inputs += [x, w, r]
        values += [c["x"], c["w"], c["r"]]
        wanted += [c["y"], c["gx"], c["gw"]]
    f = theano.function(inputs, outputs, mode=mode_for(mode_name))
    for got, want in zip(f(*values), wanted, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_theano_pickled_conv3d_network(legacy, expected):
    """Lasagne's pickled Conv3DLayer / TransposedConv3DLayer network: rebuilt, same output."""
    x, y = expected["x"], expected["y"]
    network = cio.load_network(ORACLE / "net_p4.pkl")
    layers = get_all_layers(network)
    assert [type(layer).__name__ for layer in layers] == [
        "InputLayer", "Conv3DLayer", "TransposedConv3DLayer", "Conv3DLayer",
    ]  # fmt: skip
    assert layers[1].pad == "same" and layers[1].stride == (1, 2, 1)
    assert layers[2].crop == (1, 1, 1) and layers[3].num_groups == 2
    f = pytensor.function(
        [layers[0].input_var], get_output(network), mode=mode_for("fast_compile")
    )
    np.testing.assert_allclose(f(x), y, rtol=1e-5, atol=1e-5)
    # the same values in a network built on lasagne_bn
    l_in = InputLayer((None, 2, 5, 6, 7))
    l1 = Conv3DLayer(l_in, 4, 3, stride=(1, 2, 1), pad="same")
    l2 = TransposedConv3DLayer(l1, 4, (2, 3, 2), stride=2, crop=1, nonlinearity=None)
    l3 = Conv3DLayer(
        l2, 2, 2, pad="full", flip_filters=False, num_groups=2, untie_biases=True,
        b=init.Constant(0.0), nonlinearity=nonlinearities.tanh,
    )  # fmt: skip
    set_all_param_values(l3, [expected[f"p{i}"] for i in range(6)])
    assert l3.output_shape[1:] == y.shape[1:]
    g = pytensor.function([l_in.input_var], get_output(l3), mode=mode_for("fast_compile"))
    np.testing.assert_allclose(g(x), y, rtol=1e-5, atol=1e-5)
