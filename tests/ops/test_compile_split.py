"""Big graphs compile in bounded pieces (default mode), and JAX traces shape arithmetic.

- ``lasagne_bn_numba_split`` cuts a deep training graph into pieces of
  bounded weight (the whole-graph module was what exhausted memory: a
  ResNet-50 step went past 8 GB); checked on the graph alone for a deep
  ResNet, and numerically (one Nesterov step, every parameter and running
  average) against ``FAST_COMPILE`` on a small net with low thresholds.
- Small graphs are compiled whole, exactly as PyTensor does.
- JAX mode trains a CIFAR-style ResNet whose downsampling shortcuts slice
  ``X[:, :, ::2, ::2]`` and zero-pad channels (``PadLayer`` or
  ``set_subtensor`` into ``zeros`` with sizes from ``X.shape``).
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import NUMBA, Mode
from pytensor.link.numba.linker import NumbaLinker

from lasagne_bn import objectives, updates
from lasagne_bn.layers import (
    Conv2DLayer,
    DenseLayer,
    ElemwiseSumLayer,
    ExpressionLayer,
    GlobalPoolLayer,
    InputLayer,
    NonlinearityLayer,
    PadLayer,
    batch_norm,
    get_all_params,
    get_output,
)
from lasagne_bn.nonlinearities import rectify, softmax
from lasagne_bn.ops import numba_split
from lasagne_bn.random import get_rng, set_rng


@pytest.fixture
def seeded_init():
    old = get_rng()
    set_rng(np.random.RandomState(3))
    yield
    set_rng(old)


def residual_net(x, blocks, filters=4, size=8, shortcut="projection"):
    """A small ResNet: a stem, ``blocks`` residual blocks (every third one strided)."""
    net = InputLayer((2, 3, size, size), x)
    net = batch_norm(Conv2DLayer(net, filters, 3, pad="same", nonlinearity=rectify))
    for k in range(blocks):
        down = k % 3 == 2
        out_f = net.output_shape[1] * (2 if down else 1)
        out = batch_norm(Conv2DLayer(net, out_f, 3, stride=2 if down else 1, pad="same"))
        out = batch_norm(Conv2DLayer(out, out_f, 3, pad="same", nonlinearity=None))
        if not down:
            short = net
        elif shortcut == "projection":
            short = batch_norm(Conv2DLayer(net, out_f, 1, stride=2, nonlinearity=None))
        else:
            short = _legacy_shortcut(net, out_f, shortcut)
        net = NonlinearityLayer(ElemwiseSumLayer([out, short]), rectify)
    return DenseLayer(GlobalPoolLayer(net), 3, nonlinearity=softmax)


def _legacy_shortcut(net, out_f, how):
    """Subsample by slicing, then zero-pad the channels, as legacy CIFAR ResNets did."""
    in_f = net.output_shape[1]
    if how == "pad":
        sub = ExpressionLayer(
            net,
            lambda X: X[:, :, ::2, ::2],
            lambda s: (s[0], s[1], (s[2] + 1) // 2, (s[3] + 1) // 2),
        )
        return PadLayer(sub, [(out_f - in_f) // 2, 0, 0], batch_ndim=1)

    def zero_pad(X):
        X = X[:, :, ::2, ::2]
        z = pt.zeros((X.shape[0], out_f, X.shape[2], X.shape[3]), dtype=X.dtype)
        return pt.set_subtensor(z[:, : X.shape[1]], X)

    return ExpressionLayer(
        net, zero_pad, lambda s: (s[0], out_f, (s[2] + 1) // 2, (s[3] + 1) // 2)
    )


def training_graph(blocks, shortcut="projection", size=8):
    x = pt.tensor4("x")
    y = pt.ivector("y")
    net = residual_net(x, blocks, size=size, shortcut=shortcut)
    loss = objectives.categorical_crossentropy(get_output(net), y).mean()
    params = get_all_params(net, trainable=True)
    return x, y, net, loss, updates.nesterov_momentum(loss, params, 0.05)


class _GraphOnly(Exception):
    pass


class _RewriteOnlyLinker(NumbaLinker):
    """Runs the default mode's rewrites, then stops before any Numba compile."""

    def fgraph_convert(self, fgraph, **kwargs):
        _RewriteOnlyLinker.graph = fgraph
        raise _GraphOnly


def rewritten_numba_graph(inputs, outputs, updates_):
    mode = Mode(_RewriteOnlyLinker(), NUMBA.provided_optimizer)
    with pytest.raises(_GraphOnly), numba_split.graph_splitting():
        pytensor.function(inputs, outputs, updates=updates_, mode=mode)
    return _RewriteOnlyLinker.graph


@pytest.mark.slow
def test_deep_training_graph_is_cut_into_bounded_pieces(seeded_init):
    x, y, _, loss, upd = training_graph(blocks=9)
    fgraph = rewritten_numba_graph([x, y], loss, upd)
    pieces = [n for n in fgraph.apply_nodes if isinstance(n.op, numba_split.NumbaGraphPiece)]
    inner_nodes = sum(len(p.op.fgraph.apply_nodes) for p in pieces)
    # Everything went into pieces but the few nodes that cannot cross
    # Numba's object-mode boundary, and no piece is heavier than the limit
    # (plus one node: a piece closes after the node that reaches it).
    assert len(pieces) >= 3
    assert len(fgraph.apply_nodes) - len(pieces) <= 2
    assert inner_nodes > 300
    heaviest_node = 2 + max(
        numba_split.node_weight(n) for p in pieces for n in p.op.fgraph.apply_nodes
    )
    for p in pieces:
        assert (
            numba_split.graph_weight(p.op.fgraph) <= numba_split.MAX_PIECE_WEIGHT + heaviest_node
        )
    # The parameter updates stay in place: pieces declare what they destroy.
    assert sum(len(p.op.destroy_map) for p in pieces) > 0


def test_small_graph_is_compiled_whole():
    x = pt.tensor4("x")
    net = batch_norm(Conv2DLayer(InputLayer((2, 3, 6, 6), x), 4, 3))
    out = get_output(net).sum()
    fgraph = rewritten_numba_graph([x], out, None)
    assert not any(isinstance(n.op, numba_split.NumbaGraphPiece) for n in fgraph.apply_nodes)


def _one_step(mode, x, y, net, loss, upd, xs, ys):
    # every updated variable: the parameters, running averages and velocities
    state = list(upd.keys())
    start = [p.get_value() for p in state]
    with numba_split.graph_splitting():
        f = pytensor.function([x, y], loss, updates=upd, mode=mode)
    value = f(xs, ys)
    after = [p.get_value() for p in state]
    for p, v in zip(state, start, strict=True):
        p.set_value(v)
    return f, value, after


@pytest.mark.slow
def test_pieces_train_like_fast_compile(seeded_init, monkeypatch):
    monkeypatch.setattr(numba_split, "MIN_GRAPH_WEIGHT", 40)
    monkeypatch.setattr(numba_split, "MAX_PIECE_WEIGHT", 30)
    x, y, net, loss, upd = training_graph(blocks=3, size=6)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((2, 3, 6, 6)).astype(pytensor.config.floatX)
    ys = np.array([0, 2], dtype="int32")
    f, split_loss, split_params = _one_step(NUMBA, x, y, net, loss, upd, xs, ys)
    n_pieces = sum(
        isinstance(n.op, numba_split.NumbaGraphPiece) for n in f.maker.fgraph.apply_nodes
    )
    assert n_pieces >= 2
    _, ref_loss, ref_params = _one_step("FAST_COMPILE", x, y, net, loss, upd, xs, ys)
    np.testing.assert_allclose(split_loss, ref_loss, rtol=1e-5)
    for got, want in zip(split_params, ref_params, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("shortcut", ["pad", "zeros"])
def test_jax_traces_legacy_cifar_shortcuts(seeded_init, shortcut):
    x, y, net, loss, _ = training_graph(blocks=3, shortcut=shortcut, size=6)
    params = get_all_params(net, trainable=True)
    grads = pytensor.grad(loss, params)
    rng = np.random.default_rng(1)
    xs = rng.standard_normal((2, 3, 6, 6)).astype(pytensor.config.floatX)
    ys = np.array([1, 2], dtype="int32")
    got = pytensor.function([x, y], [loss, *grads], mode="JAX")(xs, ys)
    want = pytensor.function([x, y], [loss, *grads], mode="FAST_COMPILE")(xs, ys)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), w, rtol=2e-4, atol=1e-5)


def test_jax_shape_arithmetic_is_static():
    x = pt.matrix("x")
    t = pt.ivector("t")
    n = x.shape[1]
    out = pt.zeros((x.shape[0], n + 2))[:, 1 : n + 1] + x
    picked = out[pt.arange(t.shape[0]), t]
    f = pytensor.function([x, t], [out, picked], mode="JAX")
    xs = np.arange(6.0).reshape(2, 3).astype(pytensor.config.floatX)
    got_out, got_picked = f(xs, np.array([2, 0], dtype="int32"))
    np.testing.assert_allclose(got_out, xs)
    np.testing.assert_allclose(got_picked, [xs[0, 2], xs[1, 0]])
