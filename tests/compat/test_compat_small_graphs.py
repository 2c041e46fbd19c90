"""``theano.function`` with no mode: small graphs run without compiling, big ones compile.

In the real default mode (``default_mode``): the choice is made only where
the call names no mode and PyTensor's default is its Numba mode.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytest
from pytensor.compile.builders import OpFromGraph
from pytensor.link.vm import VMLinker
from pytensor.scalar import Composite

import lasagne_bn.cli as cli
import lasagne_bn_compat
from lasagne_bn.ops.numba.linker import NumbaNodeLinker, big_graph_mode
from lasagne_bn_compat.small_graphs import SMALL_GRAPH_NODES, GraphSizeMode

pytestmark = pytest.mark.default_mode


@pytest.fixture
def theano():
    lasagne_bn_compat.install()
    import theano

    yield theano
    lasagne_bn_compat.uninstall()


def mlp_step(theano, updates_as=list):
    """A two-layer softmax classifier's SGD step: tens of nodes, as Keras builds."""
    T = theano.tensor
    rng = np.random.RandomState(0)
    x, y = T.fmatrix("x"), T.ivector("y")
    params = [
        theano.shared(rng.standard_normal((20, 10)).astype("float32"), name="W"),
        theano.shared(np.zeros(10, "float32"), name="b"),
        theano.shared(rng.standard_normal((10, 5)).astype("float32"), name="W2"),
    ]
    W, b, W2 = params
    p = T.nnet.softmax(T.dot(T.nnet.relu(T.dot(x, W) + b), W2))
    loss = T.nnet.categorical_crossentropy(p, y).mean()
    grads = T.grad(loss, params)
    updates = updates_as((v, v - np.float32(0.1) * g) for v, g in zip(params, grads, strict=True))
    return [x, y], loss, updates, params


def run_steps(f, params, steps=3):
    rng = np.random.RandomState(1)
    x = rng.standard_normal((8, 20)).astype("float32")
    y = (np.arange(8) % 5).astype("int32")
    losses = [float(f(x, y)) for _ in range(steps)]
    return losses, [p.get_value() for p in params]


def test_a_small_training_step_runs_uncompiled_and_as_the_compiled_one(theano):
    inputs, loss, updates, params = mlp_step(theano)
    f = theano.function(inputs, loss, updates=updates)
    assert isinstance(f.maker.linker, VMLinker) and not f.maker.linker.c_thunks
    nodes = f.maker.fgraph.apply_nodes
    # PyTensor's Softmax is an inner graph: inlined, else its perform would
    # compile it in the Numba mode; and no fused Composite (no NumPy perform)
    assert not [n for n in nodes if isinstance(n.op, OpFromGraph)]
    assert not [n for n in nodes if isinstance(getattr(n.op, "scalar_op", None), Composite)]
    got = run_steps(f, params)

    inputs, loss, updates, params = mlp_step(theano)
    g = pytensor.function(inputs, loss, updates=updates, mode=big_graph_mode())
    expected = run_steps(g, params)
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
    for a, e in zip(got[1], expected[1], strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("updates_as", [list, dict], ids=["list", "dict"])
def test_every_form_of_updates_is_applied(theano, updates_as):
    inputs, loss, updates, params = mlp_step(theano, updates_as)
    before = [p.get_value() for p in params]
    f = theano.function(inputs, loss, None, updates)  # mode given as None by position
    run_steps(f, params, steps=1)
    assert all(not np.array_equal(a, p.get_value()) for a, p in zip(before, params, strict=True))


def big_chain(theano, n):
    x = theano.tensor.fvector("x")
    y = x
    for i in range(n):
        y = theano.tensor.sin(y) + np.float32(i)
    return x, y


def test_a_big_graph_compiles(theano):
    x, y = big_chain(theano, SMALL_GRAPH_NODES)
    f = theano.function([x], y)
    assert isinstance(f.maker.linker, NumbaNodeLinker)
    x, y = big_chain(theano, 3)
    assert not isinstance(theano.function([x], y).maker.linker, NumbaNodeLinker)


def test_updates_count_and_a_named_mode_is_kept(theano):
    x, y = big_chain(theano, SMALL_GRAPH_NODES)
    s = theano.shared(np.zeros(3, "float32"))
    f = theano.function([x], s * 2, updates=[(s, s + y.sum())])
    assert isinstance(f.maker.linker, NumbaNodeLinker)
    f([1.0, 2.0])
    assert s.get_value()[0] != 0
    named = GraphSizeMode(limit=0)
    g = theano.function([x], x + 1, mode=named)
    assert isinstance(g.maker.linker, NumbaNodeLinker)
    g = theano.function([x], x + 1, mode="FAST_COMPILE")
    assert not isinstance(g.maker.mode, GraphSizeMode)


def test_the_mode_clones_and_refuses_a_bad_limit(theano):
    mode = GraphSizeMode(limit=5).excluding("fusion").including("fast_run")
    assert isinstance(mode, GraphSizeMode) and mode.limit == 5
    x = theano.tensor.fvector("x")
    assert isinstance(pytensor.function([x], x * 2, mode=mode).maker.linker, VMLinker)
    for bad in (-1, 2.0, True, "5"):
        with pytest.raises(TypeError, match="limit="):
            GraphSizeMode(limit=bad)


def test_lasagne_bn_run_makes_it_the_default_while_the_script_runs(theano, tmp_path):
    script = tmp_path / "evals.py"
    script.write_text(
        "import pytensor, pytensor.tensor as pt\n"
        "x = pt.vector('x')\n"
        "assert type(pytensor.config.mode).__name__ == 'GraphSizeMode'\n"
        "assert (pt.exp(x) + 1).eval({x: [0.0]}).tolist() == [2.0]\n"
    )
    before = pytensor.config.mode
    assert cli.main(["run", str(script)]) == 0
    assert pytensor.config.mode is before


def test_batch_norm_and_ifelse_in_a_small_graph(theano):
    T = theano.tensor
    x = T.ftensor4("x")
    gamma, beta = T.fvector("gamma"), T.fvector("beta")
    out, mean, invstd = T.nnet.bn.batch_normalization_train(x, gamma, beta, "spatial")
    cond = T.fscalar("c")
    picked = theano.ifelse.ifelse(T.gt(cond, 0), out, -out)
    f = theano.function([x, gamma, beta, cond], [picked, mean, invstd])
    assert isinstance(f.maker.linker, VMLinker) and not f.maker.linker.c_thunks
    xv = np.random.RandomState(0).standard_normal((4, 3, 5, 5)).astype("float32")
    g, b = np.array([1.0, 2.0, 0.5], "float32"), np.zeros(3, "float32")
    y, m, s = f(xv, g, b, 1.0)
    ref_m = xv.mean(axis=(0, 2, 3), dtype="float64")
    ref_s = 1 / np.sqrt(xv.var(axis=(0, 2, 3), dtype="float64") + 1e-4)
    np.testing.assert_allclose(m.ravel(), ref_m, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s.ravel(), ref_s, rtol=1e-5)
    ref_y = (xv - ref_m[:, None, None]) * (g * ref_s)[:, None, None]
    np.testing.assert_allclose(y, ref_y, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(f(xv, g, b, -1.0)[0], -ref_y, rtol=1e-4, atol=1e-5)


def test_updates_reach_the_shared_variables_uncompiled():
    # PyTensor's VM learns the updates through the linker the function was made
    # with; without that, the new values were computed and dropped.
    s = pytensor.shared(np.zeros(3))
    x = pytensor.tensor.vector("x")
    f = pytensor.function([x], (s * 2).sum(), updates=[(s, s + x)], mode=GraphSizeMode())
    assert isinstance(f.maker.linker, VMLinker)
    assert [f(np.ones(3)) for _ in range(3)] == [0.0, 6.0, 12.0]
    np.testing.assert_array_equal(s.get_value(), [3.0, 3.0, 3.0])


def test_random_draws_run_uncompiled_and_advance(theano):
    # The Numba-only rewrites (random variables wrapped in inner graphs for
    # Numba) stay out: the wrapped, in-place draw could not run by perform.
    srng = theano.sandbox.rng_mrg.MRG_RandomStreams(1)
    draw = srng.uniform((10, 10), low=-1, high=1)
    f = theano.function([], draw)
    assert isinstance(f.maker.linker, VMLinker)
    first, second = f(), f()
    assert first.shape == (10, 10) and not np.array_equal(first, second)
    assert -1 <= first.min() and first.max() <= 1
    assert draw.eval().shape == (10, 10)
