"""Every normalization layer keeps float32 data at large offsets (one statistics core)."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytest
from compile_modes import LAYER_MODES, mode_params

from lasagne_bn.layers import (
    BatchNormLayer,
    GroupNormLayer,
    InputLayer,
    StandardizationLayer,
    get_output,
)

SHAPE = (4, 6, 3, 5)


def np_standardize(x, axes, eps):
    return (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + eps)


def references(x):
    """float64 outputs of the layers below (identity gamma/beta)."""
    n, c, h, w = x.shape
    grouped = x.reshape(n, 3, c // 3, h, w)
    return {
        "batch": np_standardize(x, (0, 2, 3), 1e-4),
        "layer": np_standardize(x, (1, 2, 3), 1e-4),
        "instance": np_standardize(x, (2, 3), 1e-4),
        "group": np_standardize(grouped, (2, 3, 4), 1e-3).reshape(x.shape),
    }


@functools.cache
def layer_function(mode_key):
    l_in = InputLayer((None, *SHAPE[1:]))
    layers = {
        "batch": BatchNormLayer(l_in),
        "layer": StandardizationLayer(l_in, "features"),
        "instance": StandardizationLayer(l_in, "spatial"),
        "group": GroupNormLayer(l_in, groups=3),
    }
    outs = get_output(list(layers.values()), return_updates=True)[0]
    fn = pytensor.function([l_in.input_var], outs, mode=LAYER_MODES[mode_key])
    return lambda x: dict(zip(layers, fn(x), strict=True))


@pytest.mark.parametrize("mode", mode_params())
@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_layers_at_large_offsets_float32(mode, offset):
    key = next(k for k, v in LAYER_MODES.items() if v is mode)
    x = (offset + np.random.default_rng(1).standard_normal(SHAPE)).astype("float32")
    with pytensor.config.change_flags(floatX="float32"):
        got = layer_function(key)(x)
    for name, want in references(x.astype(np.float64)).items():
        assert got[name].dtype == np.float32, name
        # float32 rounding of the output's scale (~3), not the 1e-3 of a
        # plain float32 two-pass graph
        np.testing.assert_allclose(got[name], want, rtol=0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize(
    "make",
    [
        lambda l_in, eps: StandardizationLayer(l_in, "features", epsilon=eps),
        lambda l_in, eps: GroupNormLayer(l_in, groups=3, epsilon=eps),
    ],
    ids=["layer", "group"],
)
def test_symbolic_epsilon_is_used_and_checked_when_run(make):
    import pytensor.tensor as pt

    from lasagne_bn.ops.validation import OutOfRange

    eps = pt.dscalar("eps")
    l_in = InputLayer((None, *SHAPE[1:]))
    fn = pytensor.function([l_in.input_var, eps], get_output(make(l_in, eps)), mode="FAST_COMPILE")
    x = np.random.default_rng(2).standard_normal(SHAPE).astype(pytensor.config.floatX)
    assert np.isfinite(fn(x, 0.5)).all()
    with pytest.raises(OutOfRange, match=r"epsilon=-1\.0 is out of range"):
        fn(x, -1.0)
