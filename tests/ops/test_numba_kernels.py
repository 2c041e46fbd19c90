"""The fused Numba kernels against float64 NumPy, at the sizes their tiling splits.

The dense (inner == 1) reductions work in tiles of COLUMN_BLOCK channels and
sweep four rows at a time; these shapes leave remainders on both.  The dense
elementwise passes sweep two rows at a time from PAIR_SWEEP_BYTES of
channel constants on (float32: WIDE channels), here with an odd row left.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from lasagne_bn.ops.numba import bn_kernels as nk

WIDE = nk.PAIR_SWEEP_BYTES // 4

SHAPES = [
    (2, 3, 1),  # fewer rows than one sweep
    (7, 300, 1),  # a partial column block, 3 leftover rows
    (130, 513, 1),  # several blocks and row chunks
    (4, 2 * nk.COLUMN_BLOCK, 1),  # exact blocks, one sweep
    (9, 5, 6),  # inner > 1 (NCHW-like), shorter rows than one vector block
    (3, 4, 2 * nk.SUM_VECTORS * nk.SUM_LANES),  # inner > 1, whole vector blocks
    (5, 3, 3 * nk.SUM_VECTORS * nk.SUM_LANES + 7),  # inner > 1, blocks and a remainder
    (5, WIDE, 1),  # dense passes two rows per sweep, one row left over
    (3, WIDE + 3, 1),  # ... and a partial vector
]


def reference_forward(x3, gamma, beta, eps):
    x = x3.astype(np.float64)
    mean = x.mean(axis=(0, 2))
    var = x.var(axis=(0, 2))
    invstd = 1 / np.sqrt(var + eps)
    out = (x - mean[:, None]) * (gamma * invstd)[:, None] + beta[:, None]
    return out, mean, invstd, var


def reference_backward(x3, dy3, gamma, mean, invstd):
    """The exact gradient for the statistics the backward kernel is given.

    The Op hands the backward pass the mean in the input's dtype; with a
    float32 mean of 1e3-offset data the gradient's sensitivity to that
    rounding grows like invstd**3, so the reference uses the same mean.
    """
    x = x3.astype(np.float64)
    dy = dy3.astype(np.float64)
    m = x.shape[0] * x.shape[2]
    xc = x - mean[:, None]
    dbeta = dy.sum(axis=(0, 2))
    dot = (dy * xc).sum(axis=(0, 2))
    k1 = gamma * invstd
    dx = k1[:, None] * dy - (k1 * invstd**2 * dot / m)[:, None] * xc - (k1 * dbeta / m)[:, None]
    return dx, dot * invstd, dbeta


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_train_forward_and_backward(shape, dtype):
    rng = np.random.default_rng(sum(shape))
    x3 = (1e3 + rng.standard_normal(shape)).astype(dtype)
    dy3 = rng.standard_normal(shape).astype(dtype)
    C = shape[1]
    gamma = rng.uniform(0.5, 1.5, C)
    beta = rng.standard_normal(C)
    eps = 1e-4
    out3 = np.empty_like(x3)
    mean, invstd, var = nk.train_forward(x3, gamma, beta, eps, out3)
    mean_in = mean.astype(dtype).astype(np.float64)  # as the Op hands it back
    zeros = np.zeros(C)
    dx3 = np.empty_like(x3)
    dgamma, dbeta = nk.train_backward(x3, dy3, gamma, mean_in, invstd, zeros, zeros, dx3)
    tol = {"float32": 2e-5, "float64": 1e-9}[dtype]
    got = {"out": out3, "mean": mean, "invstd": invstd, "var": var}
    want = dict(zip(got, reference_forward(x3, gamma, beta, eps), strict=True))
    got |= {"dx": dx3, "dgamma": dgamma, "dbeta": dbeta}
    want |= dict(
        zip(
            ("dx", "dgamma", "dbeta"),
            reference_backward(x3, dy3, gamma, mean_in, invstd),
            strict=True,
        )
    )
    for name, w in want.items():
        scale = max(1.0, float(np.abs(w).max()))
        np.testing.assert_allclose(got[name], w, rtol=tol, atol=tol * scale, err_msg=name)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("rows", [1, 2, 7])
def test_pair_sweeps_give_the_one_row_bits(rows, dtype):
    """Two rows per sweep changes the memory traffic, not one bit of the results."""
    rng = np.random.default_rng(rows)
    C = WIDE + 5
    x2, dy2 = (rng.standard_normal((rows, C)).astype(dtype) for _ in range(2))
    consts = [rng.standard_normal(C).astype(dtype) for _ in range(4)]
    assert nk._pair_sweeps(consts[0]) and not nk._pair_sweeps(consts[0][:16])
    x3, dy3 = x2.reshape(rows, C, 1), dy2.reshape(rows, C, 1)
    results = []
    for pairs in (False, True):
        out, dx = np.empty_like(x3), np.empty_like(x3)
        nk._affine_span(x3, *consts[:3], out, 0, rows, pairs)
        nk._grad_span(x3, dy3, *consts, dx, 0, rows, pairs)
        results.append((out.reshape(rows, C), dx.reshape(rows, C)))
    (out1, dx1), (out2, dx2) = results
    assert np.array_equal(out1, out2)
    assert np.array_equal(dx1, dx2)
    k = consts[1]
    np.testing.assert_allclose(out1, (x2 - consts[0]) * k + consts[2], rtol=1e-6, atol=1e-6)


def test_large_outputs_stream_with_the_same_bits():
    """From STREAM_BYTES the float32 affine pass writes with non-temporal
    stores: the same bits as the ordinary stores of a smaller output, also
    into an output whose runs start off a 32-byte boundary."""
    if not nk.STREAM_BYTES:
        pytest.skip("non-temporal stores are used on x86-64 only")
    A, C = 2, 8
    B = nk.STREAM_BYTES // (4 * A * C) + 13  # odd runs: head, vectors and tail
    rng = np.random.default_rng(5)
    x3 = rng.standard_normal((A, C, B)).astype(np.float32)
    shift, scale, offset = (rng.standard_normal(C).astype(np.float32) for _ in range(3))
    streamed = np.empty_like(x3)
    nk._affine_span(x3, shift, scale, offset, streamed, 0, A * C, False)
    misaligned = np.empty(x3.size + 1, np.float32)[1:].reshape(x3.shape)
    nk._affine_span(x3, shift, scale, offset, misaligned, 0, A * C, False)
    for a in range(A):  # each half is below STREAM_BYTES: ordinary stores
        half = np.empty_like(x3[a : a + 1])
        nk._affine_span(x3[a : a + 1], shift, scale, offset, half, 0, C, False)
        np.testing.assert_array_equal(streamed[a], half[0])
        np.testing.assert_array_equal(misaligned[a], half[0])
    # The dispatcher may come from Numba's disk cache, which keeps no
    # assembly: compile the same function afresh to read its code.
    fresh = numba.njit(fastmath=nk.FASTMATH)(nk._affine_span.py_func)
    fresh(x3, shift, scale, offset, streamed, 0, A * C, False)
    assert "movntps" in "".join(fresh.inspect_asm().values())
