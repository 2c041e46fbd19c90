"""API surface of the batch-norm ops: validation, gradients, printing, helpers."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES, mode_for
from pytensor.gradient import verify_grad

from lasagne_bn.ops import (
    BatchNormTrain,
    batch_normalization,
    batch_normalization_test,
    batch_normalization_train,
    moments,
)

RNG = np.random.default_rng(0)


# --------------------------------------------------------------------------
# gradients: pytensor's finite-difference check, first and second order


def train_cost(axes, with_stats):
    def cost(x, gamma, beta):
        out, mean, invstd = batch_normalization_train(x, gamma, beta, axes=axes, epsilon=1e-3)
        total = out * np.linspace(-1.0, 2.0, 24).reshape(x.type.shape or (2, 3, 2, 2))
        result = total.sum()
        if with_stats:
            result = result + (mean * 0.7).sum() + (invstd * 1.3).sum()
        return result

    return cost


@pytest.mark.parametrize("with_stats", [False, True])
def test_verify_grad_first_order(with_stats):
    x = RNG.normal(2.0, 1.5, size=(2, 3, 2, 2))
    gamma, beta = RNG.normal(size=3), RNG.normal(size=3)

    def fn(x, g, b):
        return train_cost("spatial", with_stats)(pt.specify_shape(x, (2, 3, 2, 2)), g, b)

    verify_grad(fn, [x, gamma, beta], rng=np.random.default_rng(1), abs_tol=1e-6, rel_tol=1e-6)


def test_verify_grad_second_order():
    """The gradient op is differentiable: check d/dx of a function of dx, dgamma."""
    x = RNG.normal(-1.0, 2.0, size=(5, 3))
    gamma, beta = RNG.normal(size=3), RNG.normal(size=3)
    weight = RNG.normal(size=(5, 3))

    def grad_norm(x, g, b):
        out, mean, invstd = batch_normalization_train(x, g, b, epsilon=1e-3)
        loss = (out * weight).sum() + (out**2).sum() * 0.1
        dx, dg = pytensor.grad(loss, [x, g])
        return (dx**2).sum() + (dg * np.array([1.0, -2.0, 0.5])).sum()

    verify_grad(
        grad_norm, [x, gamma, beta], rng=np.random.default_rng(2), abs_tol=1e-5, rel_tol=1e-5
    )


def test_verify_grad_running_statistics_and_epsilon():
    x = RNG.normal(size=(4, 3))
    gamma, beta = RNG.normal(size=3), RNG.normal(size=3)
    rmean, rvar = RNG.normal(size=3), RNG.uniform(0.5, 2.0, size=3)

    def fn(x, g, b, rm, rv, eps, factor):
        outs = batch_normalization_train(
            x, g, b, epsilon=eps, running_average_factor=factor, running_mean=rm, running_var=rv
        )
        weights = [np.linspace(-1, 1, 12).reshape(4, 3), 0.3, -0.7, 1.1, 0.9]
        return sum((o * w).sum() for o, w in zip(outs, weights, strict=True))

    verify_grad(
        fn,
        [x, gamma, beta, rmean, rvar, np.array(0.01), np.array(0.3)],
        rng=np.random.default_rng(3),
        abs_tol=1e-6,
        rel_tol=1e-6,
    )


def test_verify_grad_inference_and_low_mem():
    x = RNG.normal(size=(4, 3, 2))
    params = [RNG.normal(size=3), RNG.normal(size=3), RNG.normal(size=3), RNG.uniform(1, 2, 3)]

    def fn(x, g, b, m, v):
        test = batch_normalization_test(x, g, b, m, v, axes=(0, 2))
        pattern = ("x", 0, "x")
        low = batch_normalization(
            x, *(p.dimshuffle(pattern) for p in (g, b, m)), pt.sqrt(v).dimshuffle(pattern)
        )
        return (test * np.arange(24).reshape(4, 3, 2)).sum() + (low**2).sum()

    verify_grad(fn, [x, *params], rng=np.random.default_rng(4), abs_tol=1e-6, rel_tol=1e-6)


def test_honours_gradients_of_returned_statistics():
    """Theano dropped d(loss)/d(mean) and d(loss)/d(invstd); check they arrive at x."""
    x = pt.matrix("x")
    g, b = pt.vector("g"), pt.vector("b")
    _, mean, invstd = batch_normalization_train(x, g, b, epsilon=1e-3)
    dx_mean = pytensor.grad(mean.sum(), x)
    dx_invstd = pytensor.grad(invstd.sum(), x)
    fn = pytensor.function([x, g, b], [dx_mean, dx_invstd], on_unused_input="ignore")
    data = RNG.normal(size=(4, 2))
    got_mean, got_invstd = fn(data, np.ones(2), np.zeros(2))
    np.testing.assert_allclose(got_mean, np.full((4, 2), 0.25))
    var = data.var(0)
    want = -0.5 * (var + 1e-3) ** -1.5 * 2 * (data - data.mean(0)) / 4
    np.testing.assert_allclose(got_invstd, want, rtol=1e-10)


# --------------------------------------------------------------------------
# the std form and moments


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_batch_normalization_low_and_high_mem_agree(mode_name):
    x = pt.tensor3("x")
    g, b, m, s = (pt.tensor3(n, shape=(1, None, 1)) for n in "gbms")
    outs = [batch_normalization(x, g, b, m, s, mode=mode) for mode in ("low_mem", "high_mem")]
    fn = pytensor.function([x, g, b, m, s], outs, mode=mode_for(mode_name))
    data = RNG.normal(size=(3, 4, 2))
    params = [RNG.normal(size=(1, 4, 1)) for _ in range(3)] + [RNG.uniform(1, 2, (1, 4, 1))]
    low, high = fn(data, *params)
    want = (data - params[2]) * (params[0] / params[3]) + params[1]
    np.testing.assert_allclose(low, want, rtol=1e-12)
    np.testing.assert_allclose(high, want, rtol=1e-12)


def test_batch_normalization_broadcasts_scalars_and_upcasts():
    x = pt.matrix("x", dtype="float32")
    m = pt.vector("m", dtype="float64")
    out = batch_normalization(x, 2.0, 1.0, m, 4.0)
    assert out.type.dtype == "float64" and out.type.ndim == 2
    data = RNG.normal(size=(3, 2)).astype("float32")
    got = pytensor.function([x, m], out)(data, np.array([0.5, -0.5]))
    np.testing.assert_allclose(got, (data - [0.5, -0.5]) * 0.5 + 1.0, rtol=1e-12)


def test_batch_normalization_unknown_mode():
    with pytest.raises(ValueError, match="mode='fast'"):
        batch_normalization(pt.matrix(), 1.0, 0.0, 0.0, 1.0, mode="fast")


def test_moments_is_stable_and_float16_safe():
    data = (1e6 + RNG.standard_normal((64, 3))).astype("float32")
    mean, var = moments(pt.as_tensor(data), axes=(0,))
    # the shifted float64 sums of the Moments Op: float32 rounding, not 1e-3
    np.testing.assert_allclose(var.eval(), data.astype(np.float64).var(0), rtol=2e-6)
    big = RNG.uniform(-6e4, 6e4, size=(50, 2)).astype("float16")
    mean16, var16 = moments(pt.as_tensor(big), axes=(0,), keepdims=True)
    assert var16.type.dtype == "float32" and var16.type.ndim == 2
    assert np.isfinite(var16.eval()).all()
    np.testing.assert_allclose(var16.eval()[0], big.astype(np.float64).var(0), rtol=1e-4)


def test_op_prints_readably():
    out, _, _ = batch_normalization_train(pt.tensor4(), pt.vector(), pt.vector(), axes="spatial")
    assert str(out.owner.op) == "BatchNormTrain{axes=(0, 2, 3)}"
    assert "BatchNormTrain{axes=(0, 2, 3)}" in pytensor.dprint(out, file="str")
    grad = pytensor.grad(out.sum(), out.owner.inputs[0])
    assert "BatchNormTrainGrad{axes=(0, 2, 3)}" in pytensor.dprint(grad, file="str")


def test_symbolic_running_average_factor_gives_cumulative_average():
    x = pt.matrix("x")
    f = pt.scalar("f")
    rm, rv = pytensor.shared(np.zeros(2)), pytensor.shared(np.zeros(2))
    _, _, _, nrm, nrv = batch_normalization_train(
        x, np.ones(2), np.zeros(2), running_average_factor=f, running_mean=rm, running_var=rv
    )
    step = pytensor.function([x, f], [], updates=[(rm, nrm), (rv, nrv)])
    batches = [RNG.normal(k, 1.0, size=(5, 2)) for k in range(4)]
    for n, batch in enumerate(batches, start=1):
        step(batch, 1.0 / n)
    np.testing.assert_allclose(rm.get_value(), np.mean([b.mean(0) for b in batches], 0))
    np.testing.assert_allclose(rv.get_value(), np.mean([b.var(0, ddof=1) for b in batches], 0))


# --------------------------------------------------------------------------
# bad input: ValueError / TypeError naming argument, value and expectation


def test_bad_axes():
    x, g = pt.tensor4(), pt.vector()
    with pytest.raises(ValueError, match="axes='channel'.*'per-activation', 'spatial'"):
        batch_normalization_train(x, g, g, axes="channel")
    with pytest.raises(ValueError, match=r"axes=\(\) is empty"):
        batch_normalization_train(x, g, g, axes=())
    with pytest.raises(ValueError, match=r"repeats an axis"):
        batch_normalization_train(x, g, g, axes=(0, 2, 2))
    with pytest.raises(ValueError, match=r"out of range.*ndim=4"):
        batch_normalization_train(x, g, g, axes=(0, 4))
    with pytest.raises(ValueError, match=r"out of range.*expected axes in \[-4, 3\]"):
        batch_normalization_test(x, g, g, g, g, axes=(-5,))
    with pytest.raises(TypeError, match="axes=1.5"):
        batch_normalization_train(x, g, g, axes=1.5)


def test_bad_parameter_layouts():
    x = pt.tensor4()
    with pytest.raises(ValueError, match=r"gamma has ndim=2.*ndim=1.*ndim=4"):
        batch_normalization_train(x, pt.matrix(), pt.matrix(), axes="spatial")
    with pytest.raises(ValueError, match=r"beta has ndim=2; expected ndim=1"):
        batch_normalization_train(x, pt.vector(), pt.matrix(), axes="spatial")
    with pytest.raises(ValueError, match=r"running_var has ndim=4; expected ndim=1"):
        batch_normalization_train(
            x, pt.vector(), pt.vector(), "spatial", running_mean=pt.vector(), running_var=x
        )
    gamma = pt.tensor4(shape=(2, 3, 1, 1))
    with pytest.raises(ValueError, match=r"gamma has size 2 on axis 0.*expected size 1"):
        batch_normalization_train(x, gamma, gamma, axes="spatial")
    x_static = pt.tensor4(shape=(8, 3, 4, 4))
    with pytest.raises(ValueError, match=r"gamma has shape \(1, 5, 1, 1\).*expected size 3"):
        g5 = pt.tensor4(shape=(1, 5, 1, 1))
        batch_normalization_train(x_static, g5, g5, axes="spatial")


def test_only_one_running_statistic():
    x, g = pt.matrix(), pt.vector()
    with pytest.raises(ValueError, match="only running_mean was given"):
        batch_normalization_train(x, g, g, running_mean=g)
    with pytest.raises(ValueError, match="only running_var was given"):
        batch_normalization_train(x, g, g, running_var=g)


def test_non_float_inputs():
    with pytest.raises(TypeError, match="inputs has dtype int64; expected a float dtype"):
        batch_normalization_train(pt.lmatrix(), pt.vector(), pt.vector())
    with pytest.raises(TypeError, match="gamma has dtype int32"):
        batch_normalization_test(pt.matrix(), pt.ivector(), pt.vector(), pt.vector(), pt.vector())
    with pytest.raises(TypeError, match="inputs has dtype bool"):
        batch_normalization(pt.matrix(dtype="bool"), 1.0, 0.0, 0.0, 1.0)


@pytest.mark.parametrize("epsilon", [0.0, -1e-3, np.inf])
def test_bad_epsilon(epsilon):
    with pytest.raises(ValueError, match="epsilon=.* out of range: expected a value in \\(0"):
        batch_normalization_train(pt.matrix(), pt.vector(), pt.vector(), epsilon=epsilon)
    with pytest.raises(ValueError, match="epsilon="):
        batch_normalization_test(
            pt.matrix(), pt.vector(), pt.vector(), pt.vector(), pt.vector(), epsilon=epsilon
        )


@pytest.mark.parametrize("factor", [-0.1, 1.5])
def test_bad_running_average_factor(factor):
    g = pt.vector()
    with pytest.raises(ValueError, match=r"running_average_factor=.*expected a value in \[0"):
        batch_normalization_train(
            pt.matrix(), g, g, running_average_factor=factor, running_mean=g, running_var=g
        )


def test_no_value_per_statistic_is_an_error_when_built():
    x = pt.tensor4(shape=(0, 3, 1, 1))
    with pytest.raises(ValueError, match="m=0 values.*m >= 1"):
        batch_normalization_train(x, pt.vector(), pt.vector(), axes="spatial")


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_one_value_per_statistic_trains_as_theano_did(mode_name):
    # Theano 1.0.5: variance 0, invstd 1/sqrt(eps), running var NaN (m / (m - 1) = inf).
    x, g, b, rm, rv = pt.matrix("x"), pt.vector("g"), pt.vector("b"), pt.vector(), pt.vector()
    outs = batch_normalization_train(x, g, b, "per-activation", 1e-4, 0.1, rm, rv)
    fn = pytensor.function([x, g, b, rm, rv], outs, mode=mode_for(mode_name))
    one, zero = np.ones(3), np.zeros(3)
    out, mean, invstd, new_rm, new_rv = fn(np.full((1, 3), 2.0), one, zero, zero, one)
    np.testing.assert_allclose(out, 0.0)
    np.testing.assert_allclose(mean, 2.0)
    np.testing.assert_allclose(invstd, 100.0, rtol=1e-6)
    np.testing.assert_allclose(new_rm, 0.2)
    assert np.isnan(new_rv).all()


@pytest.mark.parametrize("mode_name", MODE_NAMES)
def test_runtime_errors(mode_name):
    x = pt.matrix("x")
    g, b = pt.vector("g"), pt.vector("b")
    eps = pt.scalar("eps")
    out, mean, invstd = batch_normalization_train(x, g, b, epsilon=eps)
    fn = pytensor.function([x, g, b, eps], out, mode=mode_for(mode_name))
    ok = fn(RNG.normal(size=(3, 2)), np.ones(2), np.zeros(2), 1e-3)
    assert ok.shape == (3, 2)
    if mode_name != "jax":  # JAX cannot raise on a traced value
        with pytest.raises(ValueError, match="m >= 1|m=0"):
            fn(RNG.normal(size=(0, 2)), np.ones(2), np.zeros(2), 1e-3)
    with pytest.raises((ValueError, AssertionError)):
        fn(RNG.normal(size=(3, 2)), np.ones(5), np.zeros(5), 1e-3)
    with pytest.raises(_RUNTIME_ERRORS[mode_name], match="epsilon"):
        fn(RNG.normal(size=(3, 2)), np.ones(2), np.zeros(2), -1.0)


#: What a bad symbolic value raises: JAX passes on our ValueError (raised on
#: the host) as a ValueError or as its JaxRuntimeError (a RuntimeError) whose
#: message contains ours.
_RUNTIME_ERRORS = {
    name: (ValueError, RuntimeError) if name == "jax" else ValueError for name in MODE_NAMES
}


@pytest.fixture(scope="module")
def symbolic_scalars_fn():
    """Per mode, train (running stats) and test BN with symbolic epsilon and factor."""
    cache = {}

    def get(mode_name):
        if mode_name not in cache:
            g, b, rm, rv = (pt.vector(n) for n in ("g", "b", "rm", "rv"))
            x = pt.matrix("x")
            eps, factor = pt.scalar("eps"), pt.scalar("factor")
            train = batch_normalization_train(
                x, g, b, epsilon=eps, running_average_factor=factor, running_mean=rm,
                running_var=rv,
            )  # fmt: skip
            test = batch_normalization_test(x, g, b, rm, rv, epsilon=eps)
            cache[mode_name] = pytensor.function(
                [x, g, b, rm, rv, eps, factor], [*train, test], mode=mode_for(mode_name)
            )
        return cache[mode_name]

    return get


@pytest.mark.parametrize(
    ("epsilon", "factor", "refused"),
    [
        (-1.0, 0.1, "epsilon=-1.0 is out of range"),
        (0.0, 0.1, "epsilon=0.0 is out of range"),
        (np.nan, 0.1, "epsilon=nan is out of range"),
        (1e-4, 5.0, "running_average_factor=5.0 is out of range"),
        (1e-4, -0.5, "running_average_factor=-0.5 is out of range"),
        (1e-4, np.nan, "running_average_factor=nan is out of range"),
    ],
)
@pytest.mark.parametrize(
    "mode_name",  # JAX is the new check; the others compile for ~20 s each
    [m if m == "jax" else pytest.param(m, marks=pytest.mark.slow) for m in MODE_NAMES],
)
def test_symbolic_scalars_out_of_range_are_refused_in_every_mode(
    mode_name, epsilon, factor, refused, symbolic_scalars_fn
):
    fn = symbolic_scalars_fn(mode_name)
    x = RNG.normal(size=(4, 3))
    ones, zeros = np.ones(3), np.zeros(3)
    outs = fn(x, ones, zeros, zeros, ones, 1e-4, 1.0)  # the range's ends are allowed
    np.testing.assert_allclose(outs[4], x.var(0, ddof=1), rtol=1e-5)
    with pytest.raises(_RUNTIME_ERRORS[mode_name]) as info:
        fn(x, ones, zeros, zeros, ones, epsilon, factor)
    name = refused.partition("=")[0]
    assert name in str(info.value)
    if mode_name == "jax":  # our message, value included, inside JAX's
        assert refused in str(info.value)


def test_op_rejects_wrong_number_of_running_inputs():
    x = pt.matrix()
    with pytest.raises(TypeError, match="either no running statistics or all"):
        BatchNormTrain((0,))(x, pt.matrix(), pt.matrix(), 1e-4, 0.1)


def test_out_of_range_constant_is_shown_as_its_value():
    """A symbolic constant is reported as the number it holds, not as TensorConstant{...}."""
    g = pt.vector()
    factor = pt.constant(5.0)
    with pytest.raises(ValueError) as info:
        batch_normalization_train(
            pt.matrix(), g, g, running_average_factor=factor, running_mean=g, running_var=g
        )
    assert "running_average_factor=5.0 is out of range" in str(info.value)
    assert "TensorConstant" not in str(info.value)
