"""Generate tests/data/train_oracle.npz with Theano 1.0.5 and Lasagne master (0.2.dev1).

Training steps as legacy scripts ran them, for tests/layers/test_train_oracle.py:

- ``gan_*``: a GAN whose discriminator (with batch norm) is applied twice in
  one training function (real and fake data).  Theano's default mode applied
  the two running-average updates of each BatchNormLayer one after the
  other, in the order the passes appear in the loss; the generator function
  (fake data only) updates them once.
- ``cnn_*``: batch_norm(Conv2DLayer), TransposedConv2DLayer, batch_norm(
  DenseLayer), softmax; two Adam steps with ``deterministic=False``.
- ``upd_<rule>_*``: three steps of every update rule of ``lasagne.updates``
  on a small least-squares problem.

Not run by the tests (they must not need Theano).  Run with the recipe of
/work/shared/LEGACY_ORACLE.md, default mode (C/CVM), floatX=float64:

    PYTHONPATH=$L/lasagne \\
    THEANO_FLAGS=device=cpu,floatX=float64,blas.ldflags=,base_compiledir=$L/theano-cache \\
        $L/venv/bin/python tests/data/make_train_oracle.py

Initial values and data come from fixed seeds and are stored next to the results.
"""

import os

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    DenseLayer,
    InputLayer,
    TransposedConv2DLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
    get_output,
    set_all_param_values,
)

out = {}
nl = lasagne.nonlinearities


def randomize(net, rng, prefix):
    """Give every parameter (statistics too) random values; store them."""
    values = []
    for p in get_all_params(net):
        v = p.get_value()
        if p.name.endswith("inv_std") or p.name.endswith("gamma"):
            v = rng.rand(*v.shape) + 0.5
        else:
            v = rng.randn(*v.shape) * 0.5
        values.append(v)
    set_all_param_values(net, values)
    for i, v in enumerate(values):
        out[f"{prefix}_init_{i}"] = v


def record(net, prefix):
    for i, v in enumerate(get_all_param_values(net)):
        out[f"{prefix}_{i}"] = v


# ---------------------------------------------------------------- GAN
r = np.random.RandomState(20)
g_in = InputLayer((None, 3))
gen = DenseLayer(batch_norm(DenseLayer(g_in, 6, nonlinearity=nl.rectify)), 5, nonlinearity=nl.tanh)
d_in = InputLayer((None, 5))
disc = DenseLayer(
    batch_norm(DenseLayer(d_in, 6, nonlinearity=nl.rectify)), 1, nonlinearity=nl.sigmoid
)
randomize(gen, r, "gan_g")
randomize(disc, r, "gan_d")
X, Z = T.matrix("X"), T.matrix("Z")
real_out = get_output(disc, X)
fake_out = get_output(disc, get_output(gen, Z))
bce = lasagne.objectives.binary_crossentropy
d_loss = bce(real_out, 1).mean() + bce(fake_out, 0).mean()
g_loss = bce(fake_out, 1).mean()
d_params = get_all_params(disc, trainable=True)
g_params = get_all_params(gen, trainable=True)
train_d = theano.function([X, Z], d_loss, updates=lasagne.updates.adam(d_loss, d_params, 0.01))
train_g = theano.function([Z], g_loss, updates=lasagne.updates.adam(g_loss, g_params, 0.01))
data = {
    "x0": r.randn(8, 5) + 1,
    "z0": r.randn(8, 3),
    "z1": r.randn(6, 3),
    "x1": r.randn(8, 5) - 0.5,
    "z2": r.randn(8, 3),
}
out.update({"gan_" + k: v for k, v in data.items()})
out["gan_loss_d0"] = train_d(data["x0"], data["z0"])
record(disc, "gan_after_d0_d")
record(gen, "gan_after_d0_g")
out["gan_loss_g0"] = train_g(data["z1"])
record(disc, "gan_after_g0_d")
record(gen, "gan_after_g0_g")
out["gan_loss_d1"] = train_d(data["x1"], data["z2"])
record(disc, "gan_after_d1_d")
record(gen, "gan_after_d1_g")

# ---------------------------------------------------------------- CNN
r = np.random.RandomState(21)
net = InputLayer((None, 2, 6, 6))
net = batch_norm(lasagne.layers.Conv2DLayer(net, 4, 3, pad=1, nonlinearity=nl.rectify))
net = TransposedConv2DLayer(net, 3, 3, stride=2, crop=1, nonlinearity=nl.leaky_rectify)
net = batch_norm(DenseLayer(net, 5, nonlinearity=nl.tanh))
net = DenseLayer(net, 3, nonlinearity=nl.softmax)
randomize(net, r, "cnn")
Xc, y = T.tensor4("X"), T.ivector("y")
loss = lasagne.objectives.categorical_crossentropy(get_output(net, Xc), y).mean()
params = get_all_params(net, trainable=True)
train = theano.function([Xc, y], loss, updates=lasagne.updates.adam(loss, params, 0.01))
grads = theano.function([Xc, y], theano.grad(loss, params))
for step in range(2):
    xs = r.randn(4, 2, 6, 6)
    ys = r.randint(0, 3, 4).astype("int32")
    out[f"cnn_x{step}"], out[f"cnn_y{step}"] = xs, ys
    for i, g in enumerate(grads(xs, ys)):
        out[f"cnn_grad{step}_{i}"] = g
    out[f"cnn_loss{step}"] = train(xs, ys)
    record(net, f"cnn_after{step}")
out["cnn_test_out"] = theano.function([Xc], get_output(net, Xc, deterministic=True))(out["cnn_x0"])

# ---------------------------------------------------------------- update rules
r = np.random.RandomState(22)
A, B, W0 = r.randn(6, 4), r.randn(6, 3), r.randn(4, 3) * 0.3
out.update(upd_A=A, upd_B=B, upd_W0=W0)
rules = {
    "sgd": lambda l, p: lasagne.updates.sgd(l, p, 0.05),
    "momentum": lambda l, p: lasagne.updates.momentum(l, p, 0.05, 0.8),
    "nesterov_momentum": lambda l, p: lasagne.updates.nesterov_momentum(l, p, 0.05, 0.8),
    "adagrad": lambda l, p: lasagne.updates.adagrad(l, p, 0.1),
    "rmsprop": lambda l, p: lasagne.updates.rmsprop(l, p, 0.01),
    "adadelta": lambda l, p: lasagne.updates.adadelta(l, p, 1.0),
    "adam": lambda l, p: lasagne.updates.adam(l, p, 0.01),
    "adamax": lambda l, p: lasagne.updates.adamax(l, p, 0.01),
    "amsgrad": lambda l, p: lasagne.updates.amsgrad(l, p, 0.01),
}
for name, rule in rules.items():
    W = theano.shared(W0.copy(), name="W")
    l2 = T.sqr(T.dot(A, W) - B).sum() + 0.1 * T.abs_(W).sum()
    step = theano.function([], l2, updates=rule(l2, [W]))
    for _ in range(3):
        step()
    out[f"upd_{name}"] = W.get_value()

np.savez(os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_oracle.npz"), **out)
print(len(out), "arrays")
