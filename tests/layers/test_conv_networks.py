"""Whole convolutional networks with batch normalization train, in the default mode and JAX.

A small ResNet (conv -> batch_norm -> rectify stem, max pooling, an identity
and a strided projection shortcut summed elementwise, global average
pooling, a dense softmax) learns a synthetic 3-class image task; a
DCGAN-style generator (dense -> reshape -> transposed convolutions with
batch norm) learns to draw fixed targets from fixed codes.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import DEFAULT_MODE

from lasagne_bn import objectives, updates
from lasagne_bn.layers import (
    BatchNormLayer,
    Conv2DLayer,
    Deconv2DLayer,
    DenseLayer,
    ElemwiseSumLayer,
    GlobalPoolLayer,
    InputLayer,
    MaxPool2DLayer,
    NonlinearityLayer,
    ReshapeLayer,
    batch_norm,
    get_all_layers,
    get_all_params,
    get_output,
)
from lasagne_bn.nonlinearities import rectify, sigmoid, softmax
from lasagne_bn.random import get_rng, set_rng

MODES = [pytest.param(DEFAULT_MODE, id="default"), pytest.param("JAX", id="jax")]


@pytest.fixture
def seeded_init():
    """Deterministic initial weights (restores the previous generator)."""
    old = get_rng()
    set_rng(np.random.RandomState(1))
    yield
    set_rng(old)


def conv_bn(incoming, num_filters, filter_size=3, stride=1, nonlinearity=rectify):
    return batch_norm(
        Conv2DLayer(
            incoming,
            num_filters,
            filter_size,
            stride=stride,
            pad="same",
            nonlinearity=nonlinearity,
        )
    )


def resnet(l_in):
    net = conv_bn(l_in, 8)
    net = MaxPool2DLayer(net, 3, stride=2, pad=1)  # 12x12 -> 6x6
    # identity shortcut
    branch = conv_bn(net, 8)
    branch = conv_bn(branch, 8, nonlinearity=None)
    net = NonlinearityLayer(ElemwiseSumLayer([branch, net]), rectify)
    # strided block with a 1x1 projection shortcut
    branch = conv_bn(net, 16, stride=2)
    branch = conv_bn(branch, 16, nonlinearity=None)
    shortcut = conv_bn(net, 16, filter_size=1, stride=2, nonlinearity=None)
    net = NonlinearityLayer(ElemwiseSumLayer([branch, shortcut]), rectify)
    net = GlobalPoolLayer(net)
    return DenseLayer(net, 3, nonlinearity=softmax)


def image_task(n=24, seed=0):
    """Class 0: a bright top-left blob, 1: bottom-right blob, 2: horizontal stripes."""
    r = np.random.RandomState(seed)
    x = r.randn(n, 3, 12, 12).astype(np.float32) * 0.5
    y = np.arange(n, dtype=np.int32) % 3
    x[y == 0, :, 1:5, 1:5] += 2.0
    x[y == 1, :, 7:11, 7:11] += 2.0
    x[y == 2, :, ::3, :] += 1.5
    return x, y


def train_steps(train, args, steps):
    return [float(train(*args)) for _ in range(steps)]


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_small_resnet_with_batch_norm_trains(mode, seeded_init):
    l_in = InputLayer((None, 3, 12, 12))
    net = resnet(l_in)
    assert net.output_shape == (None, 3)
    bns = [layer for layer in get_all_layers(net) if isinstance(layer, BatchNormLayer)]
    assert len(bns) == 6 and all(bn.axes == (0, 2, 3) for bn in bns)
    y = pt.ivector("y")
    out, state = get_output(net, return_updates=True)
    loss = objectives.aggregate(objectives.categorical_crossentropy(out, y))
    upd = updates.adam(loss, get_all_params(net, trainable=True), learning_rate=0.01)
    upd.update(state)
    train = pytensor.function([l_in.input_var, y], loss, updates=upd, mode=mode)
    x, target = image_task()
    losses = train_steps(train, (x, target), 25)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
    # inference with the running statistics gathered while training
    acc = objectives.aggregate(
        objectives.categorical_accuracy(get_output(net, deterministic=True), y)
    )
    accuracy = pytensor.function([l_in.input_var, y], acc, mode=mode)
    assert accuracy(*image_task(n=30, seed=5)) >= 0.6


def generator(l_z):
    net = batch_norm(DenseLayer(l_z, 32 * 4 * 4))
    net = ReshapeLayer(net, ([0], 32, 4, 4))
    net = batch_norm(Deconv2DLayer(net, 16, 4, stride=2, crop=1))  # 8x8
    return Deconv2DLayer(net, 1, 4, stride=2, crop=1, nonlinearity=sigmoid)  # 16x16


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
def test_dcgan_generator_with_batch_norm_trains(mode, seeded_init):
    l_z = InputLayer((None, 8))
    net = generator(l_z)
    assert net.output_shape == (None, 1, 16, 16)
    target = pt.tensor4("target")
    out, state = get_output(net, return_updates=True)
    loss = objectives.aggregate(objectives.squared_error(out, target))
    upd = updates.adam(loss, get_all_params(net, trainable=True), learning_rate=0.01)
    upd.update(state)
    train = pytensor.function([l_z.input_var, target], loss, updates=upd, mode=mode)
    r = np.random.RandomState(3)
    z = r.randn(12, 8).astype(np.float32)
    images = np.zeros((12, 1, 16, 16), dtype=np.float32)
    for i in range(12):  # a square per sample, its place given by the sample
        a, b = 2 + (i % 3) * 4, 2 + (i // 3) * 3
        images[i, 0, a : a + 4, b : b + 4] = 1
    losses = train_steps(train, (z, images), 30)
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], losses
    sample = pytensor.function([l_z.input_var], get_output(net, deterministic=True), mode=mode)
    assert sample(z).shape == (12, 1, 16, 16)


@pytest.mark.default_mode
def test_conv_net_trains_alternately_under_jax_and_numba(seeded_init):
    """One set of shared parameters, updated by JAX and Numba functions in turn."""
    l_in = InputLayer((None, 2, 8, 8))
    net = batch_norm(Conv2DLayer(l_in, 4, 3, pad="same"))
    net = MaxPool2DLayer(net, 2)
    net = DenseLayer(GlobalPoolLayer(net), 2, nonlinearity=softmax)
    y = pt.ivector("y")
    out, state = get_output(net, return_updates=True)
    loss = objectives.aggregate(objectives.categorical_crossentropy(out, y))
    upd = updates.sgd(loss, get_all_params(net, trainable=True), 0.1)
    upd.update(state)
    train_jax = pytensor.function([l_in.input_var, y], loss, updates=upd, mode="JAX")
    train_numba = pytensor.function([l_in.input_var, y], loss, updates=upd)
    x = np.random.RandomState(0).randn(6, 2, 8, 8).astype(np.float32)
    x[::2, :, :4] += 1.5
    target = np.array([0, 1] * 3, dtype=np.int32)
    losses = [float(f(x, target)) for f in (train_jax, train_numba) * 4]
    assert losses[-1] < losses[0], losses
    evaluate = pytensor.function([l_in.input_var], get_output(net, deterministic=True))
    assert evaluate(x).shape == (6, 2)
