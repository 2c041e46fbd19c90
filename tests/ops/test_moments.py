"""The one statistics core (Moments) and normalize step under every norm, in every mode."""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES, mode_for
from pytensor.gradient import verify_grad

from lasagne_bn.ops import Moments, batch_normalization_train, moments, normalize
from lasagne_bn.ops.statistics import np_moments

SHAPE = (4, 6, 3, 5)
GROUPS = 2
EPS = 1e-4
FLOAT16_MODES = [m for m in MODE_NAMES if m != "c"]  # mode "C" compiles no float16

#: norm -> axes of the float64 reference, on x or on the grouped x
NORM_AXES = {
    "batch": (0, 2, 3),
    "layer": (1, 2, 3),
    "instance": (2, 3),
    "group": (2, 3, 4),
}


def grouped(x):
    n, c, h, w = x.shape
    return x.reshape((n, GROUPS, c // GROUPS, h, w))


def norm_graphs(x, gamma, beta):
    """The four norms' outputs on ``x`` (gamma/beta per channel), as the layers build them."""
    per_channel = gamma.dimshuffle("x", 0, "x", "x"), beta.dimshuffle("x", 0, "x", "x")
    batch = batch_normalization_train(x, gamma, beta, axes="spatial", epsilon=EPS)[0]
    layer = normalize(x, Moments((1, 2, 3))(x), EPS, *per_channel)
    instance = normalize(x, Moments((2, 3))(x), EPS, *per_channel)
    xg = grouped(x)
    g5, b5 = (
        p.reshape((GROUPS, SHAPE[1] // GROUPS)).dimshuffle("x", 0, 1, "x", "x")
        for p in (gamma, beta)
    )
    group = normalize(xg, Moments(NORM_AXES["group"])(xg), EPS, g5, b5).reshape(x.shape)
    return {"batch": batch, "layer": layer, "instance": instance, "group": group}


def reference(data, norm, gamma, beta):
    x = data.astype(np.float64)
    if norm == "group":
        x = grouped(x)
    axes = NORM_AXES[norm]
    out = (x - x.mean(axes, keepdims=True)) / np.sqrt(x.var(axes, keepdims=True) + EPS)
    out = out.reshape(data.shape)
    return out * gamma.reshape(1, -1, 1, 1) + beta.reshape(1, -1, 1, 1)


def offset_data(dtype, offset):
    rng = np.random.default_rng(int(offset) % 1000 + len(dtype))
    # float16 cannot hold 1e6, and at 1e4 its spacing is 8: spread the data
    # over hundreds so it is not all one value
    spread = 1.0 if dtype == "float32" else 300.0
    return (offset + spread * rng.standard_normal(SHAPE)).astype(dtype)


@functools.cache
def norm_function(mode_name, dtype):
    x = pt.tensor4("x", dtype=dtype)
    gamma, beta = pt.vector("gamma", dtype="float32"), pt.vector("beta", dtype="float32")
    graphs = norm_graphs(x, gamma, beta)
    fn = pytensor.function([x, gamma, beta], list(graphs.values()), mode=mode_for(mode_name))
    return lambda *args: dict(zip(graphs, fn(*args), strict=True))


# float16: every mode but "C", which compiles no float16 graph (PyTensor 3.0.7,
# see test_bn_numerics)
CASES = [
    *((m, "float32", offset) for m in MODE_NAMES for offset in (1e4, 1e6)),
    *((m, "float16", 1e4) for m in FLOAT16_MODES),
]


@pytest.mark.parametrize(("mode_name", "dtype", "offset"), CASES)
def test_every_norm_at_large_offsets(mode_name, dtype, offset):
    data = offset_data(dtype, offset)
    rng = np.random.default_rng(3)
    gamma = rng.uniform(0.5, 2.0, SHAPE[1]).astype("float32")
    beta = rng.standard_normal(SHAPE[1]).astype("float32")
    outs = norm_function(mode_name, dtype)(data, gamma, beta)
    for norm, got in outs.items():
        assert got.dtype == np.dtype(dtype), norm
        want = reference(data, norm, gamma.astype(np.float64), beta.astype(np.float64))
        scale = np.abs(want).max()
        # float32: a few roundings of the output (spacing 1.2e-7 of its scale),
        # not the 1e-3 a plain float32 two-pass graph needed; float16: its own
        # rounding of the output (11 bits)
        atol = 2e-6 * scale if dtype == "float32" else 2e-3 * scale
        np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=norm)


@functools.cache
def moments_function(mode_name, dtype, axes):
    x = pt.tensor4("x", dtype=dtype)
    return pytensor.function([x], Moments(axes)(x), mode=mode_for(mode_name))


# (0, 2, 3): kept axis in the middle; (1, 3): kept axes not adjacent (transposed)
@pytest.mark.parametrize("mode_name", MODE_NAMES)
@pytest.mark.parametrize("axes", [(0, 2, 3), (1, 3), (0,)])
def test_statistics_match_float64(mode_name, axes):
    data = offset_data("float32", 1e6)
    mean, var, shift, shifted_mean = moments_function(mode_name, "float32", axes)(data)
    x = data.astype(np.float64)
    for got in (mean, var, shift, shifted_mean):
        assert got.dtype == np.float32 and got.shape == np.mean(x, axes, keepdims=True).shape
    # the statistics are rounded once, to float32
    np.testing.assert_allclose(mean, x.mean(axes, keepdims=True), rtol=1e-7)
    np.testing.assert_allclose(var, x.var(axes, keepdims=True), rtol=2e-6)
    np.testing.assert_allclose(
        shift + shifted_mean.astype(np.float64), x.mean(axes, keepdims=True), rtol=0, atol=1e-6
    )


@pytest.mark.parametrize("mode_name", FLOAT16_MODES)
def test_float16_statistics_are_float32(mode_name):
    rng = np.random.default_rng(5)
    data = rng.uniform(-6e4, 6e4, SHAPE).astype("float16")  # squares overflow float16
    stats = moments_function(mode_name, "float16", (0, 2, 3))(data)
    assert all(s.dtype == np.float32 for s in stats)
    x = data.astype(np.float64)
    # float32 sums (JAX) of values up to 6e4: exact to float32 rounding of that scale
    atol = 1e-6 * np.abs(x).max()
    np.testing.assert_allclose(stats[0], x.mean((0, 2, 3), keepdims=True), rtol=0, atol=atol)
    np.testing.assert_allclose(stats[1], x.var((0, 2, 3), keepdims=True), rtol=2e-6)


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_empty_reduction_gives_nan(mode_name):
    x = pt.matrix("x")
    fn = pytensor.function([x], Moments((0,))(x)[:2], mode=mode_for(mode_name))
    mean, var = fn(np.zeros((0, 3)))
    assert mean.shape == var.shape == (1, 3)
    assert np.isnan(mean).all() and np.isnan(var).all()


def test_numpy_reference_is_exact_at_offsets():
    data = offset_data("float32", 1e6)
    mean, var, shift, shifted_mean = np_moments(data, (1, 2, 3))
    x = data.astype(np.float64)
    np.testing.assert_allclose(mean, x.mean((1, 2, 3), keepdims=True), rtol=1e-15)
    np.testing.assert_allclose(var, x.var((1, 2, 3), keepdims=True), rtol=1e-9)
    np.testing.assert_array_equal(shift, x[:, :1, :1, :1])
    np.testing.assert_allclose(shift + shifted_mean, mean, rtol=1e-15)


def test_api_moments_returns_the_op_results():
    x = pt.tensor3("x")
    mean, var = moments(x, axes=(0, 2))
    assert isinstance(mean.owner.inputs[0].owner.op, Moments)
    assert mean.owner.inputs[0].owner is var.owner.inputs[0].owner
    assert mean.type.ndim == var.type.ndim == 1
    mean_k, var_k = moments(x, axes=(0, 2), keepdims=True)
    assert isinstance(mean_k.owner.op, Moments) and mean_k.type.shape == (1, None, 1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="axes"):
        Moments(())
    with pytest.raises(ValueError, match="out of range"):
        Moments((3,))(pt.matrix())
    with pytest.raises(TypeError, match="dtype int64"):
        Moments((0,))(pt.lmatrix())
    assert str(Moments((0, 2))) == "Moments{axes=(0, 2)}"


# --------------------------------------------------------------------------
# gradients (float64 finite differences), first and second order

WEIGHT = np.random.default_rng(7).standard_normal((3, 4, 5))


def stats_cost(x):
    mean, var, _, _ = Moments((0, 2))(x)
    return (mean * np.array([0.3, -1.2, 0.7, 2.0])[None, :, None]).sum() + (var * 1.7).sum()


def norm_cost(x):
    gamma = pt.as_tensor(np.array([1.5, 0.5, -1.0, 2.0]))[None, :, None]
    out = normalize(x, Moments((1, 2))(x), 1e-3, gamma, gamma * 0.3)
    return (out * WEIGHT).sum()


@pytest.mark.parametrize("mode_name", ["default", "py"])
@pytest.mark.parametrize("cost", [stats_cost, norm_cost], ids=["stats", "normalize"])
def test_verify_grad(mode_name, cost):
    data = 5.0 + np.random.default_rng(8).standard_normal((3, 4, 5))
    verify_grad(cost, [data], rng=np.random.default_rng(9), mode=mode_for(mode_name))


@pytest.mark.slow
def test_verify_grad_second_order():
    def grad_cost(x):
        return (pytensor.grad(norm_cost(x), x) * WEIGHT[::-1]).sum()

    data = np.random.default_rng(10).standard_normal((3, 4, 5))
    verify_grad(grad_cost, [data], rng=np.random.default_rng(11), mode="FAST_COMPILE")
