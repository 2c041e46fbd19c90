"""Numerical stability of the batch-norm ops in every compile mode (DESIGN §4)."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES, mode_for

from lasagne_bn.ops import batch_normalization_test, batch_normalization_train

SPATIAL = (0, 2, 3)


@functools.cache
def offset_outputs(mode_name: str):
    """float32 ``offset + N(0, 1)`` data, normalized in training mode, and the
    gradients for a random output gradient."""
    rng = np.random.default_rng(1)
    x, dy = pt.tensor4("x", dtype="float32"), pt.tensor4("dy", dtype="float32")
    g, b = pt.vector("g", dtype="float32"), pt.vector("b", dtype="float32")
    out, mean, invstd = batch_normalization_train(x, g, b, axes="spatial")
    grads = pytensor.grad(None, [x, g, b], known_grads={out: dy})
    fn = pytensor.function([x, g, b, dy], [out, mean, invstd, *grads], mode=mode_for(mode_name))
    results = {}
    for offset in (1e4, 1e6):
        data = (offset + rng.standard_normal((16, 3, 6, 6))).astype("float32")
        dy_data = rng.standard_normal(data.shape).astype("float32")
        ones, zeros = np.ones(3, "float32"), np.zeros(3, "float32")
        results[offset] = data, dy_data, fn(data, ones, zeros, dy_data)
    return results


@pytest.mark.parametrize("mode_name", MODE_NAMES)
@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_large_offset_float32_normalizes(mode_name, offset):
    data, _, (out, mean, invstd, *_) = offset_outputs(mode_name)[offset]
    assert out.dtype == np.float32
    assert np.isfinite(out).all() and np.isfinite(mean).all() and np.isfinite(invstd).all()
    channel_mean = out.astype(np.float64).mean(axis=SPATIAL)
    channel_std = out.astype(np.float64).std(axis=SPATIAL)
    assert np.abs(channel_mean).max() < 1e-3, channel_mean
    assert np.abs(channel_std - 1).max() < 1e-2, channel_std
    np.testing.assert_allclose(mean, data.astype(np.float64).mean(axis=SPATIAL), rtol=1e-7)


@pytest.mark.parametrize("mode_name", MODE_NAMES)
@pytest.mark.parametrize("offset", [1e4, 1e6])
def test_large_offset_float32_gradients_match_float64(mode_name, offset):
    data, dy, (*_, dx, dgamma, dbeta) = offset_outputs(mode_name)[offset]
    x64, dy64 = data.astype(np.float64), dy.astype(np.float64)
    invstd = 1 / np.sqrt(x64.var(axis=SPATIAL, keepdims=True) + 1e-4)
    xhat = (x64 - x64.mean(axis=SPATIAL, keepdims=True)) * invstd
    mean_dy = dy64.mean(axis=SPATIAL, keepdims=True)
    mean_dy_xhat = (dy64 * xhat).mean(axis=SPATIAL, keepdims=True)
    want_dx = invstd * (dy64 - mean_dy - xhat * mean_dy_xhat)
    # The gradient op receives the batch mean as float32 (Theano's output
    # dtype), rounded by up to half a float32 spacing of the offset; that
    # shifts dx by |mean(dy * xhat)| * invstd (~0.1) times it; |dx| is O(1).
    atol = 1e-3 + 0.1 * float(np.spacing(np.float32(offset)))
    np.testing.assert_allclose(dx, want_dx, atol=atol)
    # dgamma = sum(dy * (x - mean)) * invstd: the same rounding of the mean
    # moves it by up to half a spacing times |sum(dy)| * invstd.
    half_spacing = 0.5 * float(np.spacing(np.float32(offset)))
    mean_shift = half_spacing * np.abs(dy64.sum(axis=SPATIAL)) * invstd.reshape(-1)
    want_dgamma = (dy64 * xhat).sum(axis=SPATIAL)
    assert (np.abs(dgamma - want_dgamma) <= 1e-3 + mean_shift).all(), (dgamma, want_dgamma)
    np.testing.assert_allclose(dbeta, dy64.sum(axis=SPATIAL), rtol=1e-5, atol=1e-4)


FLOAT16_MODES = [m for m in MODE_NAMES if m != "c"]


@functools.cache
def float16_outputs(mode_name: str):
    rng = np.random.default_rng(2)
    data = rng.uniform(-6e4, 6e4, size=(32, 5)).astype("float16")
    x = pt.matrix("x", dtype="float16")
    g, b = pt.vector("g", dtype="float32"), pt.vector("b", dtype="float32")
    mean_in, var_in = pt.vector("m", dtype="float32"), pt.vector("v", dtype="float32")
    out, mean, invstd = batch_normalization_train(x, g, b)
    test_out = batch_normalization_test(x, g, b, mean_in, var_in)
    weight = pt.as_tensor(rng.standard_normal((32, 5)).astype("float32"))
    loss = (pt.cast(out, "float32") * weight).sum()
    dx = pytensor.grad(loss, x)
    fn = pytensor.function(
        [x, g, b, mean_in, var_in], [out, mean, invstd, test_out, dx], mode=mode_for(mode_name)
    )
    d64 = data.astype(np.float64)
    stats = (d64.mean(0).astype("float32"), d64.var(0).astype("float32"))
    return data, fn(data, np.ones(5, "float32"), np.zeros(5, "float32"), *stats)


@pytest.mark.parametrize("mode_name", FLOAT16_MODES)
def test_float16_with_overflowing_squares(mode_name):
    data, (out, mean, invstd, test_out, dx) = float16_outputs(mode_name)
    assert out.dtype == np.float16 and test_out.dtype == np.float16 and dx.dtype == np.float16
    assert mean.dtype == np.float32 and invstd.dtype == np.float32
    d64 = data.astype(np.float64)
    ref = (d64 - d64.mean(0)) / np.sqrt(d64.var(0) + 1e-4)
    for got in (out, test_out, dx):
        assert np.isfinite(got).all()
    # float16 has 11 significant bits: compare to its rounding of the reference.
    np.testing.assert_allclose(out.astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(test_out.astype(np.float64), ref, rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(mean, d64.mean(0), rtol=1e-6)


def test_float16_under_whole_graph_c_linker_is_pytensor_limitation():
    """Mode "C" compiles no float16 elementwise op at all (PyTensor 3.0.7).

    When this starts failing, PyTensor gained float16 C code: add "c" to
    FLOAT16_MODES.
    """
    x = pt.matrix("x", dtype="float16")
    with pytest.raises(NotImplementedError):
        pytensor.function([x], pt.cast(x, "float32"), mode="C")


@functools.cache
def constant_channel_outputs(mode_name: str):
    x = pt.tensor4("x")
    g, b = pt.vector("g"), pt.vector("b")
    out, mean, invstd = batch_normalization_train(x, g, b, axes="spatial")
    loss = (out * np.arange(2 * 3 * 2 * 2).reshape(2, 3, 2, 2)).sum() + invstd.sum()
    grads = pytensor.grad(loss, [x, g, b])
    fn = pytensor.function([x, g, b], [out, *grads], mode=mode_for(mode_name))
    data = np.random.default_rng(3).normal(size=(2, 3, 2, 2))
    data[:, 1] = 7.25  # variance 0
    return fn(data, np.array([1.0, 2.0, 3.0]), np.array([0.1, 0.2, 0.3]))


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_constant_channel_gives_beta_and_finite_gradients(mode_name):
    out, dx, dg, db = constant_channel_outputs(mode_name)
    np.testing.assert_allclose(out[:, 1], 0.2, atol=1e-12)
    for grad in (dx, dg, db):
        assert np.isfinite(grad).all()
    # gamma's gradient sums (x - mean) * invstd over the channel: zero here
    np.testing.assert_allclose(dg[1], 0.0, atol=1e-9)


@pytest.mark.parametrize("mode_name", ["DebugMode", "NanGuardMode"])
def test_debug_modes_small_input(mode_name):
    x = pt.tensor4("x")
    g, b = pt.vector("g"), pt.vector("b")
    rm, rv = pt.vector("rm"), pt.vector("rv")
    out, mean, invstd, nrm, nrv = batch_normalization_train(
        x, g, b, axes="spatial", running_mean=rm, running_var=rv
    )
    test_out = batch_normalization_test(x, g, b, rm, rv, axes="spatial")
    grads = pytensor.grad((out**2).sum() + test_out.sum(), [x, g, b])
    fn = pytensor.function([x, g, b, rm, rv], [out, nrm, nrv, test_out, *grads], mode=mode_name)
    data = np.random.default_rng(4).normal(5.0, 2.0, size=(3, 2, 2, 2))
    results = fn(data, np.ones(2), np.zeros(2), np.zeros(2), np.ones(2))
    for r in results:
        assert np.isfinite(r).all()
    np.testing.assert_allclose(results[0].mean(axis=SPATIAL), 0.0, atol=1e-12)
