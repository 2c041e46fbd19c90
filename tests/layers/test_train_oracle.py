"""Training steps against Theano 1.0.5 + Lasagne (tests/data/make_train_oracle.py).

A GAN's discriminator with batch norm used twice in one function (two
running-average updates per statistic, applied one after the other as
Theano did), a conv / transposed-conv / batch-norm network trained with
Adam, and every update rule: parameters after each step, in the default
mode and JAX (the GAN in every layer mode).
"""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import DEFAULT_MODE, mode_params

from lasagne_bn import nonlinearities as nl
from lasagne_bn import objectives, updates
from lasagne_bn.layers import (
    Conv2DLayer,
    DenseLayer,
    InputLayer,
    TransposedConv2DLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
    get_output,
    set_all_param_values,
)

DATA = np.load(os.path.join(os.path.dirname(__file__), "..", "data", "train_oracle.npz"))
TOL = dict(rtol=1e-6, atol=1e-8)


def _init(net, prefix):
    n = len(get_all_params(net))
    set_all_param_values(net, [DATA[f"{prefix}_init_{i}"] for i in range(n)])


def _check(net, prefix):
    for i, value in enumerate(get_all_param_values(net)):
        np.testing.assert_allclose(value, DATA[f"{prefix}_{i}"], err_msg=f"{prefix}_{i}", **TOL)


@pytest.fixture(autouse=True)
def _float64():
    with pytensor.config.change_flags(floatX="float64"), warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def _gan_modes():
    # Numba and JAX compile for tens of seconds; the other modes are quick.
    return [
        pytest.param(*p.values, marks=pytest.mark.slow, id=p.id) if p.id in ("numba", "jax") else p
        for p in mode_params()
    ]


@pytest.mark.parametrize("mode", _gan_modes())
def test_gan_two_passes_through_batch_norm_match_legacy(mode):
    g_in = InputLayer((None, 3))
    gen = DenseLayer(
        batch_norm(DenseLayer(g_in, 6, nonlinearity=nl.rectify)), 5, nonlinearity=nl.tanh
    )
    disc = DenseLayer(
        batch_norm(DenseLayer(InputLayer((None, 5)), 6, nonlinearity=nl.rectify)),
        1,
        nonlinearity=nl.sigmoid,
    )
    _init(gen, "gan_g")
    _init(disc, "gan_d")
    x, z = pt.matrix("X"), pt.matrix("Z")
    real_out = get_output(disc, x)
    fake_out = get_output(disc, get_output(gen, z))
    bce = objectives.binary_crossentropy
    d_loss = bce(real_out, 1).mean() + bce(fake_out, 0).mean()
    g_loss = bce(fake_out, 1).mean()
    d_upd = updates.adam(d_loss, get_all_params(disc, trainable=True), 0.01)
    g_upd = updates.adam(g_loss, get_all_params(gen, trainable=True), 0.01)
    train_d = pytensor.function([x, z], d_loss, updates=d_upd, mode=mode)
    train_g = pytensor.function([z], g_loss, updates=g_upd, mode=mode)

    np.testing.assert_allclose(train_d(DATA["gan_x0"], DATA["gan_z0"]), DATA["gan_loss_d0"])
    _check(disc, "gan_after_d0_d")  # running averages: real pass, then fake pass
    _check(gen, "gan_after_d0_g")
    np.testing.assert_allclose(train_g(DATA["gan_z1"]), DATA["gan_loss_g0"])
    _check(disc, "gan_after_g0_d")  # fake pass only
    _check(gen, "gan_after_g0_g")
    np.testing.assert_allclose(train_d(DATA["gan_x1"], DATA["gan_z2"]), DATA["gan_loss_d1"])
    _check(disc, "gan_after_d1_d")
    _check(gen, "gan_after_d1_g")


@pytest.mark.slow
@pytest.mark.parametrize("mode", [DEFAULT_MODE, "JAX"], ids=["numba", "jax"])
def test_conv_transposed_conv_batch_norm_adam_steps_match_legacy(mode):
    net = InputLayer((None, 2, 6, 6))
    net = batch_norm(Conv2DLayer(net, 4, 3, pad=1, nonlinearity=nl.rectify))
    net = TransposedConv2DLayer(net, 3, 3, stride=2, crop=1, nonlinearity=nl.leaky_rectify)
    net = batch_norm(DenseLayer(net, 5, nonlinearity=nl.tanh))
    net = DenseLayer(net, 3, nonlinearity=nl.softmax)
    _init(net, "cnn")
    x, y = pt.tensor4("X"), pt.ivector("y")
    loss = objectives.categorical_crossentropy(get_output(net, x), y).mean()
    params = get_all_params(net, trainable=True)
    grads = pytensor.function([x, y], pytensor.grad(loss, params), mode=mode)
    train = pytensor.function([x, y], loss, updates=updates.adam(loss, params, 0.01), mode=mode)
    for step in range(2):
        xs, ys = DATA[f"cnn_x{step}"], DATA[f"cnn_y{step}"]
        for i, g in enumerate(grads(xs, ys)):
            np.testing.assert_allclose(g, DATA[f"cnn_grad{step}_{i}"], err_msg=f"grad {i}", **TOL)
        np.testing.assert_allclose(train(xs, ys), DATA[f"cnn_loss{step}"], **TOL)
        _check(net, f"cnn_after{step}")
    test_fn = pytensor.function([x], get_output(net, x, deterministic=True), mode=mode)
    np.testing.assert_allclose(test_fn(DATA["cnn_x0"]), DATA["cnn_test_out"], **TOL)


RULES = {
    "sgd": lambda loss, p: updates.sgd(loss, p, 0.05),
    "momentum": lambda loss, p: updates.momentum(loss, p, 0.05, 0.8),
    "nesterov_momentum": lambda loss, p: updates.nesterov_momentum(loss, p, 0.05, 0.8),
    "adagrad": lambda loss, p: updates.adagrad(loss, p, 0.1),
    "rmsprop": lambda loss, p: updates.rmsprop(loss, p, 0.01),
    "adadelta": lambda loss, p: updates.adadelta(loss, p, 1.0),
    "adam": lambda loss, p: updates.adam(loss, p, 0.01),
    "adamax": lambda loss, p: updates.adamax(loss, p, 0.01),
    "amsgrad": lambda loss, p: updates.amsgrad(loss, p, 0.01),
}


def test_every_update_rule_matches_legacy_after_three_steps():
    a, b = pt.constant(DATA["upd_A"]), pt.constant(DATA["upd_B"])
    for name, rule in RULES.items():
        w = pytensor.shared(DATA["upd_W0"].copy(), name="W")
        loss = pt.sqr(pt.dot(a, w) - b).sum() + 0.1 * pt.abs(w).sum()
        step = pytensor.function([], loss, updates=rule(loss, [w]), mode="FAST_COMPILE")
        for _ in range(3):
            step()
        np.testing.assert_allclose(w.get_value(), DATA[f"upd_{name}"], err_msg=name, **TOL)
