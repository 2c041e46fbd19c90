"""Big graphs compile node by node in the default mode, and JAX traces shape arithmetic.

- :class:`NumbaNodeLinker` compiles a graph with many inputs and outputs
  (a training step) node by node: without fastmath, bit for bit the
  whole-graph function's results (two Nesterov steps, every parameter,
  velocity and running average), close to ``FAST_COMPILE``'s; constants,
  views, repeated and constant outputs, errors that name their node.
- Small graphs are compiled whole, exactly as PyTensor does; ``theano.function``
  uses the linker when no mode is named; ``use_by_default`` is explicit.
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
from lasagne_bn.ops.numba import linker as numba_linker
from lasagne_bn.ops.numba.linker import NumbaNodeLinker
from lasagne_bn.random import get_rng, set_rng

# About PyTensor's default (Numba) mode itself: the default tier keeps it there.
pytestmark = pytest.mark.default_mode


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


def _node_mode(**kwargs):
    return Mode(NumbaNodeLinker(**kwargs), NUMBA.provided_optimizer)


def _one_step(mode, x, y, loss, upd, xs, ys):
    """Two training steps; every updated variable (velocities too) restored after."""
    state = list(upd.keys())
    start = [p.get_value() for p in state]
    f = pytensor.function([x, y], loss, updates=upd, mode=mode)
    losses = [float(f(xs, ys)) for _ in range(2)]
    after = [p.get_value() for p in state]
    for p, v in zip(state, start, strict=True):
        p.set_value(v)
    return f, losses, after


@pytest.mark.slow
def test_node_by_node_trains_exactly_like_the_whole_graph(seeded_init):
    x, y, net, loss, upd = training_graph(blocks=3, size=6)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((2, 3, 6, 6)).astype(pytensor.config.floatX)
    ys = np.array([0, 2], dtype="int32")
    # PyTensor compiles its Elemwise loops with fastmath, and LLVM then
    # decides per compile whether a multiply and an add become one FMA: on
    # PyTensor 3.3 the same graph's dense weights came out 1-2 ulps apart in
    # a fresh process and after test_conv_networks' training tests, and the
    # two functions here up to 20 ulps apart in one CI run.  Without
    # fastmath both are bit for bit, whatever ran before.
    with pytensor.config.change_flags(numba__fastmath=False):
        f, node_loss, node_state = _one_step(_node_mode(max_interface=0), x, y, loss, upd, xs, ys)
        assert f.maker.linker.per_node(f.maker.fgraph)
        g, whole_loss, whole_state = _one_step(NUMBA, x, y, loss, upd, xs, ys)
    # the same node functions on the same buffers in the same order
    np.testing.assert_array_equal(np.array(node_loss), np.array(whole_loss))
    for got, want in zip(node_state, whole_state, strict=True):
        np.testing.assert_array_equal(got, want)
    _, ref_loss, ref_state = _one_step("FAST_COMPILE", x, y, loss, upd, xs, ys)
    np.testing.assert_allclose(node_loss, ref_loss, rtol=1e-5)
    for got, want in zip(node_state, ref_state, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)


def test_the_interface_size_decides():
    x = pt.vector("x")
    small = pytensor.function([x], pt.exp(x) + 1, mode=numba_linker.big_graph_mode())
    assert not small.maker.linker.per_node(small.maker.fgraph)
    # A training-style function: many shared values read and returned.
    shared = [pytensor.shared(np.full(3, float(k)), name=f"p{k}") for k in range(70)]
    f = pytensor.function(
        [x],
        pt.sum(x),
        updates=[(p, p * 2 + x) for p in shared],
        mode=numba_linker.big_graph_mode(),
    )
    assert len(f.maker.fgraph.inputs) + len(f.maker.fgraph.outputs) > 128
    assert f.maker.linker.per_node(f.maker.fgraph)
    assert float(f(np.ones(3))) == 3.0
    for k, p in enumerate(shared):
        np.testing.assert_array_equal(p.get_value(), np.full(3, 2.0 * k + 1))


def test_constants_views_and_repeated_outputs():
    x = pt.matrix("x")
    inner = pt.exp(x[:, 1:]) * 2.0  # slices and a scalar constant, bound in the node
    outputs = [inner, inner.sum(), x, pt.constant(np.float64(4.0)), inner[::-1]]
    f = pytensor.function([x], outputs, mode=_node_mode(max_interface=0))
    xs = np.arange(6.0).reshape(2, 3) / 10
    got = f(xs)
    e = np.exp(xs[:, 1:]) * 2
    want = [e, e.sum(), xs, 4.0, e[::-1]]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w)
    # Intermediate values are dropped after their last reader (the exp, read
    # only by the product); returned ones are kept.
    program = f.vm.jit_fn
    dropped = {i for step in program.steps for i in step[4]}
    returned = {i for kind, i in program.outputs if kind == "value"}
    assert dropped and not dropped & returned


def test_errors_name_the_node():
    x = pt.vector("x")
    y = pt.vector("y")
    f = pytensor.function([x, y], pt.exp(x) + y, mode=_node_mode(max_interface=0))
    with pytest.raises(Exception) as info:
        f(np.ones(3), np.ones(4))
    assert "lasagne_bn: raised computing node" in "".join(getattr(info.value, "__notes__", []))


def test_linker_arguments_are_checked():
    with pytest.raises(TypeError, match="max_interface must be an int or None, got '3'"):
        NumbaNodeLinker(max_interface="3")


def test_theano_function_compiles_big_graphs_node_by_node():
    from lasagne_bn_compat import theano

    x = pt.vector("x")
    shared = [pytensor.shared(np.zeros(2), name=f"q{k}") for k in range(70)]
    # 140 nodes: past the graphs theano.function runs uncompiled (test_compat_small_graphs)
    f = theano.function([x], x.sum(), updates=[(p, (p + x) * 2 - 1) for p in shared])
    assert isinstance(f.maker.linker, NumbaNodeLinker)
    assert f.maker.linker.per_node(f.maker.fgraph)
    f(np.ones(2))
    np.testing.assert_array_equal(shared[-1].get_value(), np.ones(2))
    # A mode the caller names is used as it is.
    g = theano.function([x], x.sum(), mode="FAST_COMPILE")
    assert not isinstance(g.maker.linker, NumbaNodeLinker)


def test_use_by_default_is_explicit_and_reversible():
    x = pt.vector("x")
    assert not isinstance(pytensor.function([x], x + 1).maker.linker, NumbaNodeLinker)
    previous = numba_linker.use_by_default()
    try:
        f = pytensor.function([x], x + 1)
        assert isinstance(f.maker.linker, NumbaNodeLinker)
    finally:
        pytensor.config.mode = previous
    assert not isinstance(pytensor.function([x], x + 1).maker.linker, NumbaNodeLinker)


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


def test_big_graph_mode_keeps_the_default_rewrites_setting():
    # optimizer=None (a THEANO_FLAGS setting legacy scripts use) means no
    # rewrites in the default mode; theano.function's mode must keep that.
    import os
    import subprocess
    import sys

    script = (
        "import pytensor, pytensor.tensor as pt\n"
        "from lasagne_bn.ops.numba.linker import big_graph_mode\n"
        "x = pt.vector('x')\n"
        "f = pytensor.function([x], pt.exp(pt.log(x)), mode=big_graph_mode())\n"
        "print(sorted(type(n.op.scalar_op).__name__ for n in f.maker.fgraph.apply_nodes))\n"
    )
    env = dict(os.environ, PYTENSOR_FLAGS="optimizer=None")
    out = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "['Exp', 'Log']"
