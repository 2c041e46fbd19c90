"""The portable convolution kernels (im2col and BLAS), called directly.

The default mode runs them instead of the tuned kernels on CPUs other than
x86-64, or with ``LASAGNE_BN_PORTABLE=1`` (CI runs the convolution tests
once so).  Here, on any machine: each kernel against the NumPy reference in
float64, on shapes that take every path (padding, strides, dilation,
groups, 1x1 with and without a stride, padding wider than the filter, an
image cut into several blocks of rows), and the same bits on one thread
and on two.
"""

from __future__ import annotations

import numba
import numpy as np
import pytensor.tensor as pt
import pytest

from lasagne_bn.ops.conv import conv2d, np_conv, np_conv_grad_inputs, np_conv_grad_weights
from lasagne_bn.ops.numba import conv_blas_kernels as kernels
from lasagne_bn.ops.numba.portable import kernels_module

# input shape, filter shape, pads ((top, bottom), (left, right)), strides, dilation, groups
CASES = {
    "3x3-padded": ((4, 3, 9, 11), (5, 3, 3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), 1),
    "groups-stride": ((5, 6, 7, 11), (4, 3, 3, 2), ((1, 0), (2, 1)), (2, 3), (1, 1), 2),
    "dilated-stride": ((2, 3, 13, 29), (4, 3, 3, 3), ((1, 2), (2, 0)), (2, 3), (1, 2), 1),
    "pointwise-stride": ((6, 12, 10, 11), (8, 6, 1, 1), ((0, 0), (0, 0)), (2, 3), (1, 1), 2),
    "pointwise": ((6, 12, 10, 11), (8, 12, 1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1),
    "pad-wider-than-filter": ((3, 2, 6, 6), (3, 2, 2, 2), ((3, 3), (3, 2)), (1, 1), (1, 1), 1),
    "row-blocks": ((2, 4, 300, 30), (4, 4, 3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), 1),
}


def _run(name, dtype):
    xs, ws, pads, strides, dilation, groups = CASES[name]
    x4 = pt.tensor4(dtype=dtype)
    op_params = conv2d(
        x4, pt.tensor4(dtype=dtype), border_mode=pads, subsample=strides,
        filter_dilation=dilation, num_groups=groups, filter_flip=False,
    ).owner.op.params  # fmt: skip
    rng = np.random.default_rng(len(name))
    x = rng.standard_normal(xs).astype(dtype)
    w = rng.standard_normal(ws).astype(dtype)
    ref = np_conv(x.astype(np.float64), w.astype(np.float64), op_params)
    dy = rng.standard_normal(ref.shape).astype(dtype)
    args = (*strides, *dilation, *pads[0], *pads[1], groups)
    out = np.full(ref.shape, np.nan, dtype=dtype)
    kernels.conv_forward(x, w, out, *args)
    dx = np.full(xs, np.nan, dtype=dtype)
    kernels.conv_grad_inputs(w, dy, dx, *args)
    dw = np.full(ws, np.nan, dtype=dtype)
    kernels.conv_grad_weights(x, dy, dw, *args, 8)
    refs = (
        ref,
        np_conv_grad_inputs(w.astype(np.float64), dy.astype(np.float64), xs[2:], op_params),
        np_conv_grad_weights(x.astype(np.float64), dy.astype(np.float64), ws[2:], op_params),
    )
    return (out, dx, dw), refs


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(CASES))
def test_kernels_match_the_numpy_reference(name, dtype):
    tol = 2e-6 if dtype == "float32" else 1e-13
    for got, expected in zip(*_run(name, dtype), strict=True):
        scale = max(1.0, np.abs(expected).max())
        np.testing.assert_allclose(got, expected, rtol=0, atol=tol * scale * 10)


def test_one_and_two_threads_give_the_same_bits():
    previous = numba.get_num_threads()
    try:
        results = []
        for threads in (1, min(2, numba.config.NUMBA_NUM_THREADS)):
            numba.set_num_threads(threads)
            results.append([_run(name, "float32")[0] for name in ("groups-stride", "row-blocks")])
    finally:
        numba.set_num_threads(previous)
    for one, two in zip(*results, strict=True):
        for a, b in zip(one, two, strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(37, 50, 3), (2, 50, 300), (64, 64, 64), (5, 0, 4), (1, 1, 1)])
def test_matmul_matches_numpy(shape):
    m, k, n = shape
    rng = np.random.default_rng(m + n)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    out = np.full((m, n), np.nan, dtype=np.float32)
    kernels.matmul(a, b, out)
    expected = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5 * np.sqrt(max(k, 1)))


def test_the_switch_chooses_the_kernels():
    assert kernels_module({"LASAGNE_BN_PORTABLE": "1"}, "x86_64") == "conv_blas_kernels"
    assert kernels_module({"LASAGNE_BN_PORTABLE": "0"}, "aarch64") == "conv_kernels"
    assert kernels_module({}, "aarch64") == "conv_blas_kernels"
    assert kernels_module({}, "AMD64") == "conv_kernels"
    with pytest.raises(ValueError, match="LASAGNE_BN_PORTABLE='yes'"):
        kernels_module({"LASAGNE_BN_PORTABLE": "yes"}, "x86_64")
