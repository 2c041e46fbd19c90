"""After training: exact statistics, freezing, folding, in every mode."""

from __future__ import annotations

import io

import numpy as np
import pytensor
import pytest
from compile_modes import mode_params

from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    Conv2DLayer,
    DenseLayer,
    DropoutLayer,
    InputLayer,
    TransposedConv2DLayer,
    batch_norm,
    get_all_layers,
    get_all_params,
    get_output,
)
from lasagne_bn.layers.bn_fold import fold_batch_norm
from lasagne_bn.layers.bn_freeze import freeze_batch_norm, unfreeze_batch_norm
from lasagne_bn.layers.bn_recompute import recompute_bn_stats
from lasagne_bn.layers.normalization import BatchNormLayer
from lasagne_bn.random import get_rng, set_rng


def build(seed=0, storage="inv_std"):
    old = get_rng()
    set_rng(np.random.RandomState(seed))
    try:
        l_in = InputLayer((None, 2, 5, 5), name="in")
        h = batch_norm(Conv2DLayer(l_in, 3, 3, pad=1, name="conv"), stat_storage=storage)
        h = batch_norm(
            TransposedConv2DLayer(h, 2, 3, stride=2, crop=1, name="deconv"), stat_storage=storage
        )
        h = batch_norm(DenseLayer(h, 4, name="fc"), stat_storage="var")
        h = DropoutLayer(h, 0.5, name="drop")
        out = DenseLayer(h, 3, nonlinearity=nonlinearities.softmax, name="out")
    finally:
        set_rng(old)
    return l_in, out


def batches(n=5, size=7, seed=1):
    r = np.random.RandomState(seed)
    return [(r.randn(size, 2, 5, 5) * 4 + 1e4).astype(pytensor.config.floatX) for _ in range(n)]


def randomize_stats(out, seed=2):
    r = np.random.RandomState(seed)
    for layer in get_all_layers(out):
        if isinstance(layer, BatchNormLayer):
            layer.gamma.set_value(r.rand(*layer.param_shape) + 0.5)
            layer.beta.set_value(r.randn(*layer.param_shape))
            layer.mean.set_value(r.randn(*layer.param_shape))
            layer._stat2.set_value(r.rand(*layer.param_shape) + 0.3)


@pytest.mark.parametrize(
    ("mode", "storage"),
    [*((p.values[0], "inv_std") for p in mode_params()), (None, "var")],
    ids=[*(f"{p.id}-inv_std" for p in mode_params()), "numba-var"],
)
def test_recompute_equals_full_dataset_statistics(mode, storage):
    l_in, out = build(storage=storage)
    randomize_stats(out)
    data = batches()
    layers = recompute_bn_stats(out, data, mode=mode, progress=False)
    assert [bn.name for bn in layers] == ["conv_bn", "deconv_bn", "fc_bn"]
    everything = np.concatenate(data).astype(np.float64)
    for bn in layers:
        # the layer's input over all data, with the layers below already recomputed
        below = pytensor.function([l_in.input_var], get_output(bn.input_layer, deterministic=True))
        x = below(np.concatenate(data)).astype(np.float64)
        want_mean, want_var = x.mean(axis=bn.axes), x.var(axis=bn.axes)
        np.testing.assert_allclose(bn.mean.get_value(), want_mean, rtol=1e-6, atol=1e-9)
        if bn.stat_storage == "var":
            np.testing.assert_allclose(bn.var.get_value(), want_var, rtol=1e-6)
        else:
            np.testing.assert_allclose(
                bn.inv_std.get_value(), 1 / np.sqrt(want_var + bn.epsilon), rtol=1e-6
            )
    assert everything.shape[0] == 35


def test_recompute_is_batching_independent():
    _, out_a = build()
    _, out_b = build()
    data = batches(6, 5)
    recompute_bn_stats(out_a, data, progress=False)
    recompute_bn_stats(out_b, [np.concatenate(data)], progress=False)
    for a, b in zip(get_all_params(out_a), get_all_params(out_b), strict=True):
        np.testing.assert_allclose(a.get_value(), b.get_value(), rtol=1e-9, atol=1e-12)


def test_recompute_progress_and_bad_batches():
    _, out = build()
    stream = io.StringIO()
    recompute_bn_stats(out, lambda: iter(batches(2)), progress=True, stream=stream)
    assert "layer 3/3 (fc_bn), 14 values per statistic" in stream.getvalue()
    with pytest.raises(TypeError, match="one-shot iterator"):
        recompute_bn_stats(out, iter(batches(2)), progress=False)
    with pytest.raises(ValueError, match="holds no data"):
        recompute_bn_stats(out, [], progress=False)


@pytest.mark.parametrize("mode", mode_params())
def test_frozen_layers_use_and_keep_their_averages_with_dropout_on(mode):
    l_in, out = build()
    randomize_stats(out)
    bns = freeze_batch_norm(out, params=True)
    assert len(bns) == 3
    trainable = {p.name for p in get_all_params(out, trainable=True)}
    assert not any(n.endswith((".gamma", ".beta")) for n in trainable)
    before = [p.get_value().copy() for p in get_all_params(out)]
    x = batches(1)[0]
    y, updates = get_output(out, deterministic=False, return_updates=True)
    train = pytensor.function([l_in.input_var], y, updates=updates, mode=mode)
    ys = [train(x) for _ in range(2)]
    for p, b in zip(get_all_params(out), before, strict=True):
        np.testing.assert_array_equal(p.get_value(), b)  # no running average moved
    assert not np.allclose(ys[0], ys[1])  # dropout still draws
    # the documented keywords give the same as the flag, on an unfrozen network
    unfreeze_batch_norm(out)
    assert {p.name for p in get_all_params(out, trainable=True)} > trainable
    no_drop = get_output(out, deterministic=True)
    by_keywords = get_output(
        out, batch_norm_use_averages=True, batch_norm_update_averages=False, deterministic=True
    )
    f = pytensor.function([l_in.input_var], [no_drop, by_keywords], mode=mode)
    a, b = f(x)
    np.testing.assert_allclose(a, b, rtol=1e-6)


@pytest.mark.parametrize(
    ("mode", "storage"),
    [*((p.values[0], "inv_std") for p in mode_params()), (None, "var")],
    ids=[*(f"{p.id}-inv_std" for p in mode_params()), "numba-var"],
)
def test_folded_network_equals_the_original(mode, storage):
    l_in, out = build(storage=storage)
    randomize_stats(out)
    folded = fold_batch_norm(out)
    kinds = [type(layer).__name__ for layer in get_all_layers(folded)]
    assert "BatchNormLayer" not in kinds
    assert any(isinstance(layer, BatchNormLayer) for layer in get_all_layers(out))  # untouched
    x = batches(1)[0]
    folded_in = get_all_layers(folded)[0]
    ref = pytensor.function([l_in.input_var], get_output(out, deterministic=True), mode=mode)(x)
    got = pytensor.function(
        [folded_in.input_var], get_output(folded, deterministic=True), mode=mode
    )(x)
    np.testing.assert_allclose(got, ref, rtol=2e-5, atol=1e-7)


def test_fold_leaves_what_it_cannot_fold():
    l_in = InputLayer((None, 3, 4, 4))
    per_pixel = BatchNormLayer(Conv2DLayer(l_in, 2, 3, nonlinearity=None), axes=(0,))
    after_relu = BatchNormLayer(DenseLayer(per_pixel, 4))  # DenseLayer applies a rectify
    folded = fold_batch_norm(after_relu)
    assert [type(layer).__name__ for layer in get_all_layers(folded)].count("BatchNormLayer") == 2
    x = np.random.RandomState(0).randn(5, 3, 4, 4).astype(pytensor.config.floatX)
    f = pytensor.function([l_in.input_var], get_output(after_relu, deterministic=True))
    g_in = get_all_layers(folded)[0]
    g = pytensor.function([g_in.input_var], get_output(folded, deterministic=True))
    np.testing.assert_allclose(g(x), f(x), rtol=1e-6)
