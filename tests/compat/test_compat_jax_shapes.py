"""Legacy GAN graphs trace under mode JAX: sizes PyTensor knows reach JAX as numbers (issue 41).

The discriminator of a conditional DCGAN (mehdidc/lasagne-dcgan's layer kinds:
a custom MergeLayer that concatenates the condition onto every pixel,
strided convolutions, batch norm on convolution and dense layers) failed to
trace: the gradient of its concatenation is a Split whose sizes PyTensor's
JAX backend summed with ``jnp.cumsum``, which made them traced values.
"""

from __future__ import annotations

import numpy as np
import pytest
from legacy_helpers import QUIET, legacy  # noqa: F401  (the fixture)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy"), pytest.mark.slow]


def discriminator_step(mode):
    import lasagne
    import theano
    import theano.tensor as T
    from lasagne import layers, updates
    from lasagne.nonlinearities import LeakyRectify, sigmoid

    class CondConcat(layers.MergeLayer):
        def get_output_shape_for(self, shapes):
            x, y = shapes
            return x[0], x[1] + y[1], x[2], x[3]

        def get_output_for(self, inputs, **kwargs):
            x, y = inputs
            ones = T.ones((x.shape[0], y.shape[1], x.shape[2], x.shape[3]))
            return T.concatenate([x, y.dimshuffle(0, 1, "x", "x") * ones], axis=1)

    lasagne.random.set_rng(np.random.RandomState(1))
    leaky = LeakyRectify(0.2)
    x_in, y_in = layers.InputLayer((None, 1, 12, 12)), layers.InputLayer((None, 3))
    net = layers.Conv2DLayer(CondConcat((x_in, y_in)), 4, 5, stride=2, nonlinearity=leaky)
    net = layers.batch_norm(layers.Conv2DLayer(CondConcat((net, y_in)), 8, 3, stride=2))
    net = layers.batch_norm(layers.DenseLayer(net, 8, nonlinearity=leaky))
    net = layers.DenseLayer(net, 1, nonlinearity=sigmoid)
    x, y = T.tensor4("x"), T.matrix("y")
    p = layers.get_output(net, {x_in: x, y_in: y})
    cost = T.nnet.binary_crossentropy(p, T.ones_like(p)).mean()
    params = layers.get_all_params(net, trainable=True)
    step = theano.function([x, y], cost, updates=updates.adam(cost, params), mode=mode)
    rng = np.random.RandomState(0)
    xs = rng.randn(4, 1, 12, 12).astype(theano.config.floatX)
    ys = np.eye(3, dtype=theano.config.floatX)[[0, 1, 2, 0]]
    losses = [float(step(xs, ys)) for _ in range(2)]
    return losses, [v.get_value() for v in layers.get_all_params(net)]


def assert_jax_steps_as_the_default_mode(steps):
    """``steps(mode)`` gives (outputs, parameters) after its training steps."""
    outs_jax, params_jax = steps("JAX")
    outs, params = steps(None)
    np.testing.assert_allclose(outs_jax, outs, rtol=1e-5)
    for got, want in zip(params_jax, params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.default_mode
def test_conditional_dcgan_discriminator_steps_under_jax_as_in_the_default_mode():
    assert_jax_steps_as_the_default_mode(discriminator_step)


def wgan_gp_critic_step(mode, jacobian=None):
    """A WGAN-GP critic (ahmadianlab/tc-gan's kind): a layer norm built on
    ``BatchNormLayer``, and the gradient penalty through ``T.jacobian``."""
    import lasagne
    import theano
    import theano.tensor as T
    from lasagne import layers, updates
    from lasagne.nonlinearities import LeakyRectify

    class LayerNorm(layers.BatchNormLayer):
        def get_output_for(self, input, **kwargs):
            mean = input.mean(axis=1, keepdims=True)
            inv_std = T.inv(T.sqrt(input.var(axis=1, keepdims=True) + self.epsilon))
            return (input - mean) * inv_std * self.gamma + self.beta

    lasagne.random.set_rng(np.random.RandomState(2))
    net = layers.InputLayer((None, 6))
    net = LayerNorm(layers.DenseLayer(net, 16, nonlinearity=LeakyRectify(0.2)))
    net = layers.DenseLayer(net, 1, nonlinearity=None)
    real, fake, eps = T.matrix("real"), T.matrix("fake"), T.vector("eps")
    x_hat = eps.dimshuffle(0, "x") * real + (1 - eps.dimshuffle(0, "x")) * fake
    d_hat = layers.get_output(net, x_hat).flatten()
    # d_hat[i] depends on x_hat[i] only: the rows' sum is each sample's gradient
    grads = (jacobian or T.jacobian)(d_hat, x_hat).sum(axis=1)
    penalty = T.sqr(T.sqrt(T.sqr(grads).sum(axis=1)) - 1).mean()
    d_real, d_fake = (layers.get_output(net, v).mean() for v in (real, fake))
    cost = d_fake - d_real + 10 * penalty
    params = layers.get_all_params(net, trainable=True)
    step = theano.function(
        [real, fake, eps], [cost, penalty], updates=updates.adam(cost, params), mode=mode
    )
    rng = np.random.RandomState(0)
    floatx = theano.config.floatX
    batch = [rng.randn(5, 6).astype(floatx), rng.randn(5, 6).astype(floatx) + 1]
    outs = [step(*batch, rng.uniform(size=5).astype(floatx)) for _ in range(2)]
    return np.array(outs, dtype="float64"), [v.get_value() for v in params]


@pytest.mark.default_mode
def test_wgan_gp_critic_steps_under_jax_as_in_the_default_mode():
    assert_jax_steps_as_the_default_mode(wgan_gp_critic_step)


def test_jacobian_is_theanos_loop_in_values():
    import pytensor.compile.mode
    import pytensor.gradient

    def loop(expression, wrt, *args):
        return pytensor.gradient.jacobian(expression, wrt, *args, vectorize=False)

    # PyTensor 3.0.7's scan fails in FAST_COMPILE (a KeyError on a constant)
    mode = pytensor.compile.mode.Mode(linker="py", optimizer="fast_run")
    vectorized, _ = wgan_gp_critic_step(mode)
    looped, _ = wgan_gp_critic_step(mode, jacobian=loop)
    np.testing.assert_allclose(vectorized, looped, rtol=1e-6)
