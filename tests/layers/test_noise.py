"""DropoutLayer and GaussianNoiseLayer: masks, rescaling, shared axes, generator updates."""

from __future__ import annotations

import numpy as np
import pytensor
import pytest
from compile_modes import mode_params

from lasagne_bn.layers import (
    DropoutLayer,
    GaussianNoiseLayer,
    InputLayer,
    dropout_channels,
    dropout_locations,
    get_output,
    spatial_dropout,
)
from lasagne_bn.random import get_rng, set_rng

ONES = np.ones((50, 40))


def test_deterministic_and_zero_p_are_identity():
    l_in = InputLayer((None, 40))
    assert get_output(DropoutLayer(l_in), deterministic=True) is l_in.input_var
    assert get_output(DropoutLayer(l_in, p=0)) is l_in.input_var
    assert get_output(GaussianNoiseLayer(l_in), deterministic=True) is l_in.input_var
    assert get_output(GaussianNoiseLayer(l_in, sigma=0)) is l_in.input_var


@pytest.mark.parametrize("way", ["lasagne", "explicit"])
@pytest.mark.parametrize("mode", mode_params())
def test_dropout_masks_and_generator_updates(mode, way):
    l_in = InputLayer((None, 40))
    layer = DropoutLayer(l_in, p=0.25)
    if way == "lasagne":
        out, upd = get_output(layer), {}
    else:
        out, upd = get_output(layer, return_updates=True)
        assert len(upd) == 1 and next(iter(upd)).default_update is None
    f = pytensor.function([l_in.input_var], out, updates=upd, mode=mode)
    a, b = f(ONES), f(ONES)
    for y in (a, b):
        assert set(np.unique(y)) == {0.0, 1 / 0.75}
        assert 0.18 < (y == 0).mean() < 0.32
    assert not np.array_equal(a, b), "the generator state must advance between calls"


def test_dropout_without_rescale_and_shared_axes():
    l_in = InputLayer((None, 3, 8, 8))
    x = np.ones((20, 3, 8, 8))
    layer = DropoutLayer(l_in, p=0.5, rescale=False, shared_axes=(2, 3))
    y = pytensor.function([l_in.input_var], get_output(layer), mode="FAST_COMPILE")(x)
    assert set(np.unique(y)) <= {0.0, 1.0}
    # one mask value per (example, channel)
    assert np.all(y == y[:, :, :1, :1])
    assert 0 < y[:, :, 0, 0].mean() < 1
    assert dropout_channels(l_in).shared_axes == (2, 3)
    assert spatial_dropout(l_in).shared_axes == (2, 3)
    assert dropout_locations(l_in).shared_axes == (1,)


@pytest.mark.parametrize("mode", mode_params())
def test_dropout_of_integer_input(mode):
    # Lasagne accepted integer input: a 0/1 mask of the input's dtype without
    # rescaling, a true division (float64, as Theano's int32 / float) with it.
    l_in = InputLayer((None, 40))
    x = pytensor.tensor.imatrix("x")
    kept = get_output(DropoutLayer(l_in, p=0.5, rescale=False), x)
    scaled = get_output(DropoutLayer(l_in, p=0.5), x)
    assert kept.dtype == "int32" and scaled.dtype == "float64"
    y, z = pytensor.function([x], [kept, scaled], mode=mode)(np.full((50, 40), 3, "int32"))
    assert y.dtype == np.int32 and set(np.unique(y)) == {0, 3}
    assert 0.35 < (y == 0).mean() < 0.65
    assert set(np.unique(z)) == {0.0, 6.0}


@pytest.mark.parametrize("p", [1.0, -0.1, 2])
def test_dropout_bad_p(p):
    with pytest.raises(ValueError, match=f"p={p!r} must be a probability"):
        DropoutLayer(InputLayer((None, 3)), p=p)


def test_dropout_bad_shared_axes():
    with pytest.raises(ValueError, match="shared_axes"):
        DropoutLayer(InputLayer((None, 3)), shared_axes=(2,))


def test_seeding_through_lasagne_bn_random():
    old = get_rng()
    try:
        outs = []
        for _ in range(2):
            set_rng(np.random.RandomState(42))
            l_in = InputLayer((None, 40))
            layer = DropoutLayer(l_in)
            f = pytensor.function([l_in.input_var], get_output(layer), mode="FAST_COMPILE")
            outs.append(f(ONES))
        np.testing.assert_array_equal(outs[0], outs[1])
    finally:
        set_rng(old)


def test_gaussian_noise():
    l_in = InputLayer((None, 40))
    layer = GaussianNoiseLayer(l_in, sigma=0.5)
    f = pytensor.function([l_in.input_var], get_output(layer), mode="FAST_COMPILE")
    noise = f(ONES) - 1
    assert 0.4 < noise.std() < 0.6 and abs(noise.mean()) < 0.1
    assert not np.array_equal(f(ONES), f(ONES))
    with pytest.raises(ValueError, match="sigma"):
        GaussianNoiseLayer(l_in, sigma=-1)
