"""``perform`` through the Numba kernels, once per Op: the same values as the NumPy reference.

``FAST_COMPILE`` and the python linker call each Op's ``perform``, which runs the
node's Numba function (:mod:`lasagne_bn.ops.compiled_perform`).  The default
tier runs every other test's ``perform`` as the NumPy reference (tests/conftest.py)
and the kernels' numerics in the Numba mode; this file checks the dispatch itself
for every Op that has it: the compiled function ran, and gave the reference's
values.  The full tier runs the whole suite with the compiled ``perform``.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.ops import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
    Moments,
    batch_normalization,
    batch_normalization_test,
    batch_normalization_train,
    moments,
)
from lasagne_bn.ops import conv as conv_ops
from lasagne_bn.ops import pool as pool_ops
from lasagne_bn.ops.compiled_perform import numpy_perform

pytestmark = pytest.mark.compiled_perform


def _rng():
    return np.random.default_rng(7)


def bn_graph(dtype):
    x = pt.tensor4("x", dtype=dtype)
    g, b = pt.vector("g", dtype=dtype), pt.vector("b", dtype=dtype)
    rm, rv = pt.vector("rm", dtype=dtype), pt.vector("rv", dtype=dtype)
    out, mean, invstd, new_rm, new_rv = batch_normalization_train(
        x, g.dimshuffle("x", 0, "x", "x"), b.dimshuffle("x", 0, "x", "x"), "spatial",
        running_mean=rm.dimshuffle("x", 0, "x", "x"), running_var=rv.dimshuffle("x", 0, "x", "x"),
    )  # fmt: skip
    cost = (out * pt.cos(x)).sum()
    grads = pytensor.grad(cost, [x, g, b])
    test = batch_normalization_test(
        x, g.dimshuffle("x", 0, "x", "x"), b.dimshuffle("x", 0, "x", "x"),
        rm.dimshuffle("x", 0, "x", "x"), rv.dimshuffle("x", 0, "x", "x"), "spatial",
    )  # fmt: skip
    g4, b4 = g.dimshuffle("x", 0, "x", "x"), b.dimshuffle("x", 0, "x", "x")
    applied = batch_normalization(x, g4, b4, mean, 1 / invstd)
    m, v = moments(x, (0, 2, 3))
    rng = _rng()
    values = [
        rng.standard_normal((3, 4, 5, 6)).astype(dtype) + 2,
        rng.uniform(0.5, 1.5, 4).astype(dtype),
        rng.standard_normal(4).astype(dtype),
        np.zeros(4, dtype),
        np.ones(4, dtype),
    ]
    return [x, g, b, rm, rv], [out, new_rm, new_rv, *grads, test, applied, m, v], values


def conv_graph(dtype):
    x2, w2 = pt.tensor4("x2", dtype=dtype), pt.tensor4("w2", dtype=dtype)
    y2 = conv_ops.conv2d(x2, w2, border_mode=1, subsample=(2, 1))
    x3, w3 = pt.tensor5("x3", dtype=dtype), pt.tensor5("w3", dtype=dtype)
    y3 = conv_ops.conv3d(x3, w3, border_mode="half")
    cost = (y2 * pt.sin(y2)).sum() + (y3**2).sum()
    grads = pytensor.grad(cost, [x2, w2, x3, w3])
    rng = _rng()
    values = [
        rng.standard_normal(s).astype(dtype)
        for s in ((2, 3, 7, 6), (4, 3, 3, 2), (1, 2, 4, 5, 3), (3, 2, 3, 3, 1))
    ]
    return [x2, w2, x3, w3], [y2, y3, *grads], values


def pool_graph(dtype):
    x = pt.tensor4("x", dtype=dtype)
    mx = pool_ops.pool_2d(x, ws=(2, 2), ignore_border=True, mode="max")
    avg = pool_ops.pool_2d(x, ws=(3, 2), stride=(2, 2), pad=(1, 0), ignore_border=True,
                           mode="average_exc_pad")  # fmt: skip
    x5 = pt.tensor5("x5", dtype=dtype)
    mx3 = pool_ops.pool_3d(x5, ws=(2, 2, 2), ignore_border=True, mode="max")
    cost = (mx**2).sum() + (avg * pt.cos(avg)).sum() + (mx3**2).sum()
    gx, gx5 = pytensor.grad(cost, [x, x5])
    # the max-pool gradient's own gradient (MaxPoolGradGrad): a second-order term
    ggx = pytensor.grad((gx * pt.sin(x)).sum(), x)
    rng = _rng()
    # distinct values: the maximum of each window is unique
    values = [
        rng.permutation(2 * 3 * 6 * 5).reshape(2, 3, 6, 5).astype(dtype) / 10,
        rng.permutation(1 * 2 * 4 * 4 * 4).reshape(1, 2, 4, 4, 4).astype(dtype) / 10,
    ]
    return [x, x5], [mx, avg, mx3, gx, gx5, ggx], values


GRAPHS = {
    "batch_norm": (bn_graph, {BatchNormTrain, BatchNormTrainGrad, BatchNormInference,
                              BatchNormApply, Moments}),
    "conv": (conv_graph, {conv_ops.Conv2d, conv_ops.Conv2dGradInputs, conv_ops.Conv2dGradWeights,
                          conv_ops.Conv3d, conv_ops.Conv3dGradInputs,
                          conv_ops.Conv3dGradWeights}),
    "pool": (pool_graph, {pool_ops.Pool, pool_ops.MaxPoolGrad, pool_ops.MaxPoolGradGrad,
                          pool_ops.AveragePoolGrad}),
}  # fmt: skip


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("family", GRAPHS)
def test_perform_runs_the_compiled_kernels_with_the_references_values(family, dtype):
    make, op_types = GRAPHS[family]
    inputs, outputs, values = make(dtype)
    fn = pytensor.function(inputs, outputs, mode="FAST_COMPILE")
    ours = {type(node.op): node for node in fn.maker.fgraph.apply_nodes}
    assert op_types <= set(ours), op_types - set(ours)
    with numpy_perform():
        reference = fn(*values)
    for node in fn.maker.fgraph.apply_nodes:  # the reference call compiled nothing
        assert getattr(node.tag, "lasagne_bn_compiled", False) is False
    got = fn(*values)
    for op_type in op_types:
        # each Op's perform found its Numba function (None: it fell back to NumPy)
        assert ours[op_type].tag.lasagne_bn_compiled not in (None, False), op_type
    rtol = 2e-4 if dtype == "float32" else 1e-10
    for k, (a, b) in enumerate(zip(got, reference, strict=True)):
        assert a.dtype == b.dtype and a.shape == b.shape, k
        scale = max(1.0, float(np.abs(b).max()))
        np.testing.assert_allclose(a, b, rtol=rtol, atol=rtol * scale, err_msg=f"output {k}")


def test_the_python_linker_runs_them_too():
    """``Mode(linker='py', optimizer=None)``: no rewrites, the same dispatch."""
    inputs, outputs, values = bn_graph("float64")
    fn = pytensor.function(inputs, outputs, mode=pytensor.compile.mode.Mode("py", None))
    with numpy_perform():
        reference = fn(*values)
    got = fn(*values)
    train = [n for n in fn.maker.fgraph.apply_nodes if isinstance(n.op, BatchNormTrain)]
    assert train and all(n.tag.lasagne_bn_compiled not in (None, False) for n in train)
    for a, b in zip(got, reference, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
