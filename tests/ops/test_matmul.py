"""MatMul (the default mode's matrix product beside our kernels) and its rewrite."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_for
from kernel_threads import on_threads
from pytensor.tensor.math import Dot

from lasagne_bn.ops import batch_normalization_train
from lasagne_bn.ops.matmul import MatMul
from lasagne_bn.ops.numba.portable import kernels_module

# (m, k, n): narrow and full panels, rows not a multiple of the tile, empty
# operands, a reduction longer than one cache block, a wide product; then the
# skinny products that skip the tiles: matrix-vector (whole and partial row
# blocks), an outer product, fewer rows than a tile, a short reduction
SHAPES = [(37, 300, 10), (70, 45, 100), (1, 1, 1), (5, 0, 3), (0, 4, 3), (9, 600, 33)]
SHAPES += [(83, 64, 1), (40, 300, 3), (30, 1, 70), (3, 50, 40), (20, 5, 50)]
# a row times a matrix (the kernel takes a transposed right operand as it lies)
SHAPES += [(1, 64, 83), (1, 9, 2)]


@pytest.fixture(scope="module", params=["float32", "float64"])
def compiled(request):
    """``a @ b``, ``a.T @ b`` and ``a @ b.T`` (transposed views) through MatMul, per mode."""
    dtype = request.param
    a, b = pt.matrix("a", dtype=dtype), pt.matrix("b", dtype=dtype)
    fns = {}
    for name in ("default", "py", "fast_compile", "cvm", "jax"):
        mode = mode_for(name)
        fns[name] = (
            pytensor.function([a, b], MatMul()(a, b), mode=mode),
            pytensor.function([a, b], MatMul()(a.T, b), mode=mode),
            pytensor.function([a, b], MatMul()(a, b.T), mode=mode),
        )
    return dtype, fns


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_matches_numpy(compiled, shape):
    dtype, fns = compiled
    m, k, n = shape
    rng = np.random.default_rng(m * 1000 + n)
    a = rng.standard_normal((m, k)).astype(dtype)
    b = rng.standard_normal((k, n)).astype(dtype)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    tol = 1e-5 if dtype == "float32" else 1e-12
    for name, (plain, a_view, b_view) in fns.items():
        got = np.asarray(plain(a, b))
        assert got.dtype == dtype and got.shape == (m, n), name
        np.testing.assert_allclose(got, expected, rtol=0, atol=tol * np.sqrt(max(k, 1)))
        for from_view in (
            np.asarray(a_view(np.ascontiguousarray(a.T), b)),
            np.asarray(b_view(a, np.ascontiguousarray(b.T))),
        ):
            if name == "default" and kernels_module() == "conv_kernels":
                # the tuned kernel copies the view, or beside a single column or row
                # takes the product transposed: the same sums in the same order, bit
                # for bit (BLAS, in the portable kernels, orders them by orientation)
                np.testing.assert_array_equal(from_view, got)
            else:
                atol = tol * np.sqrt(max(k, 1))
                np.testing.assert_allclose(from_view, expected, rtol=0, atol=atol)


def test_one_and_two_threads_give_the_same_bits(compiled):
    dtype, fns = compiled
    plain = fns["default"][0]
    rng = np.random.default_rng(3)
    a = rng.standard_normal((200, 300)).astype(dtype)
    b = rng.standard_normal((300, 150)).astype(dtype)
    np.testing.assert_array_equal(on_threads(1, plain, a, b), on_threads(2, plain, a, b))


@pytest.mark.parametrize(
    ("a", "b", "match"),
    [
        (pt.matrix(dtype="int32"), pt.matrix(), "a=.*int32.*float32 or float64 matrix"),
        (pt.matrix(), pt.vector(), "b=.*float32 or float64 matrix"),
        (pt.matrix(dtype="float32"), pt.matrix(dtype="float64"), "a.dtype='float32'"),
    ],
)
def test_bad_operands_are_refused_when_built(a, b, match):
    with pytest.raises(TypeError, match=match):
        MatMul()(a, b)


@pytest.mark.parametrize("mode", ["default", "py"])
def test_mismatched_shapes_raise(mode):
    a, b = pt.matrix("a"), pt.matrix("b")
    f = pytensor.function([a, b], MatMul()(a, b), mode=mode_for(mode))
    fx = pytensor.config.floatX
    with pytest.raises(ValueError, match=r"a.shape\[1\]"):
        f(np.ones((2, 3), fx), np.ones((4, 5), fx))


def test_gradient():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((3, 5))
    pytensor.gradient.verify_grad(lambda x, y: MatMul()(x, y), [a, b], rng=rng)


def _ops(f) -> set[type]:
    return {type(node.op) for node in f.maker.fgraph.apply_nodes}


def _dense_bn():
    x, w = pt.matrix("x"), pt.matrix("w")
    g, beta = pt.vector("g"), pt.vector("beta")
    out = batch_normalization_train(pt.dot(x, w), g, beta)[0]
    cost = (out**2).sum()
    return [x, w, g, beta], [cost, *pytensor.grad(cost, [x, w])]


@pytest.mark.default_mode
def test_rewrite_replaces_dot_beside_our_kernels():
    inputs, outputs = _dense_bn()
    f = pytensor.function(inputs, outputs)
    assert MatMul in _ops(f) and Dot not in _ops(f)
    reference = pytensor.function(inputs, outputs, mode=mode_for("py"))
    fx = pytensor.config.floatX
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s).astype(fx) for s in ((16, 7), (7, 5), (5,), (5,))]
    for got, want in zip(f(*args), reference(*args), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.default_mode
def test_rewrite_leaves_other_graphs_and_modes_alone():
    MatMul()  # the rewrite is registered
    x, w = pt.matrix("x"), pt.matrix("w")
    alone = pytensor.function([x, w], pt.dot(x, w))
    assert Dot in _ops(alone) and MatMul not in _ops(alone)
    inputs, outputs = _dense_bn()
    jax = pytensor.function(inputs, outputs, mode="JAX")
    assert MatMul not in _ops(jax)
