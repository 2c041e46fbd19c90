"""Opt-in matrix products in C without a BLAS to link (:mod:`lasagne_bn.ops.c.gemm`)."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.ops.c.gemm import ScipyDot22, c_mode


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matrix_product_and_scaled_product_in_mode_c(dtype):
    x = pt.matrix("x", dtype=dtype)
    w = pt.matrix("w", dtype=dtype)
    f = pytensor.function([x, w], [x @ w, 2 * (x @ w)], mode=c_mode())
    if not pytensor.config.blas__ldflags:  # the rewrite only acts where PyTensor has no BLAS
        ops = {type(n.op) for n in f.maker.fgraph.apply_nodes}
        assert ScipyDot22 in ops
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(5, 7)).astype(dtype)
    wv = np.asfortranarray(rng.normal(size=(7, 3)).astype(dtype))  # non-contiguous
    got = f(xv, wv)
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got[0], xv @ wv, rtol=tol, atol=tol)
    np.testing.assert_allclose(got[1], 2 * (xv @ wv), rtol=tol, atol=tol)
    assert got[0].dtype == dtype


def test_plain_mode_c_is_unchanged_without_the_tag():
    x = pt.matrix("x")
    f = pytensor.function([x], x @ x.T, mode="CVM")
    assert not any(isinstance(n.op, ScipyDot22) for n in f.maker.fgraph.apply_nodes)


@pytest.mark.default_mode
@pytest.mark.slow
def test_demo_network_trains_in_mode_c_as_in_the_default_mode():
    """conv, batch norm, pooling, dense and softmax: one C module."""
    from lasagne_bn import demo, layers, objectives, updates

    rng = np.random.default_rng(1)
    xv = rng.normal(size=(8, 1, 8, 8)).astype(pytensor.config.floatX)
    tv = (np.arange(8) % 10).astype("int32")
    start = None
    results = []
    for mode in (None, c_mode()):
        net = demo.build_network()
        if start is None:
            start = layers.get_all_param_values(net)
        layers.set_all_param_values(net, start)
        x, t = pt.tensor4("x"), pt.ivector("t")
        out = layers.get_output(net, x)
        loss = objectives.categorical_crossentropy(out, t).mean()
        params = layers.get_all_params(net, trainable=True)
        f = pytensor.function([x, t], loss, updates=updates.sgd(loss, params, 0.05), mode=mode)
        if mode is not None:
            assert type(f.maker.linker).__name__ == "CLinker"
        results.append(([float(f(xv, tv)) for _ in range(2)], layers.get_all_param_values(net)))
    (l0, v0), (l1, v1) = results
    np.testing.assert_allclose(l1, l0, rtol=1e-4)
    for a, b in zip(v1, v0, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-5)
