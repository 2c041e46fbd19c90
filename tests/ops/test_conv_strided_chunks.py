"""The default mode's strided convolution kernels on shapes that split their work.

Strided convolutions put several images side by side in one GEMM and the
filter gradient unrolls a block of channels at a time (see
``numba_conv_kernels``); these shapes leave a short last group of images
(odd batch), use two filter groups, and have enough channels for several
channel blocks, with one and with two threads.  With at least
``SPLIT_TASKS`` channels per group the filter gradient is split over
blocks of channels (``grad_weights_by_rows``), with fewer over images (one
partial sum per task).  The reference is the NumPy ``perform`` in float64.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from kernel_threads import on_threads

from lasagne_bn.ops.conv import (
    conv2d,
    conv2d_grad_wrt_inputs,
    conv2d_grad_wrt_weights,
    np_conv,
    np_conv_grad_inputs,
    np_conv_grad_weights,
)
from lasagne_bn.ops.numba import conv_kernels as kernels
from lasagne_bn.ops.numba.threads import set_kernel_threads

# input shape, filter shape, conv2d keyword arguments
CASES = {
    # 8x8 outputs: 7 images in groups of 3 (last group: 1), 2 filter groups,
    # 40 channels per group: 640 unrolled rows, more than one channel block
    "8x8-groups-blocks": (
        (7, 80, 16, 16),
        (4, 40, 4, 4),
        dict(border_mode=1, subsample=(2, 2), num_groups=2, filter_flip=False),
    ),
    # odd sizes: 3x4 outputs, asymmetric padding, stride (2, 3), flipped filters
    "odd-stride": (
        (5, 3, 7, 11),
        (4, 3, 3, 2),
        dict(border_mode=((1, 0), (2, 1)), subsample=(2, 3)),
    ),
    # positions outer (9 output columns, 2 images), column stride 3 and
    # dilation 2: the rows come from three column phases of the padded image
    "phases-stride3-dilated": (
        (2, 3, 13, 29),
        (4, 3, 3, 3),
        dict(border_mode=((1, 2), (2, 0)), subsample=(2, 3), filter_dilation=(1, 2)),
    ),
    # a strided 1x1 convolution without padding (a ResNet shortcut): run as a
    # unit-stride one of the subsampled input; the rows and columns the
    # stride skips (the last row and column among them) get a zero gradient
    "pointwise-stride": (
        (6, 12, 10, 11),
        (8, 6, 1, 1),
        dict(border_mode=0, subsample=(2, 3), num_groups=2),
    ),
    # 4x4 outputs of 3 channels: the filter gradient split over images (5 per
    # task), each task's images unrolled with the images innermost
    "few-channels-images-inner": (
        (40, 3, 8, 8),
        (5, 3, 3, 3),
        dict(border_mode=1, subsample=(2, 2)),
    ),
    # 4x4 outputs: 37 images in reductions of 32 (last: 5), 20 channels in
    # blocks of 3 (last: 2), the filter gradient split over channel blocks
    "by-rows-remainders": (
        (37, 20, 8, 8),
        (12, 20, 3, 3),
        dict(border_mode=1, subsample=(2, 2)),
    ),
}


@pytest.fixture(scope="module")
def compiled():
    """Per case: the three Ops compiled in the default mode, and their inputs."""
    rng = np.random.default_rng(13)
    out = {}
    for name, (xs, ws, kw) in CASES.items():
        x = pt.tensor4("x", dtype="float32")
        w = pt.tensor4("w", dtype="float32")
        y = conv2d(x, w, **kw)
        dy = pt.tensor4("dy", dtype="float32")
        fns = (
            pytensor.function([x, w], y),
            pytensor.function([w, dy], conv2d_grad_wrt_inputs(dy, w, xs, **kw)),
            pytensor.function([x, dy], conv2d_grad_wrt_weights(x, dy, ws, **kw)),
        )
        xv = rng.standard_normal(xs).astype(np.float32)
        wv = rng.standard_normal(ws).astype(np.float32)
        dyv = rng.standard_normal(fns[0](xv, wv).shape).astype(np.float32)
        out[name] = (fns, xv, wv, dyv, y.owner.op.params)
    return out


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    previous = set_kernel_threads(request.param)
    yield request.param
    set_kernel_threads(previous)


def _close(actual, expected):
    scale = np.abs(expected).max()
    np.testing.assert_allclose(actual, expected, rtol=0, atol=2e-5 * scale)


@pytest.mark.parametrize("name", list(CASES))
def test_strided_ops_match_reference(compiled, threads, name):
    (fwd, gin, gwt), x, w, dy, params = compiled[name]
    x64, w64, dy64 = (a.astype(np.float64) for a in (x, w, dy))
    _close(fwd(x, w), np_conv(x64, w64, params))
    _close(gin(w, dy), np_conv_grad_inputs(w64, dy64, x.shape[2:], params))
    _close(gwt(x, dy), np_conv_grad_weights(x64, dy64, w.shape[2:], params))


def test_first_case_splits_the_work():
    """The first case really has a short last image group and several channel blocks."""
    _, cg, kh, kw = CASES["8x8-groups-blocks"][1]
    rows, positions = cg * kh * kw, 8 * 8
    nc = kernels.image_chunk(7, 2, positions, kernels.CHUNK_COLUMNS, rows)
    assert 1 < nc < 7 and 7 % nc != 0
    reduction = min(7, kernels.CHUNK_REDUCTION // positions) * positions
    assert kernels.L2_ELEMENTS // (reduction * kh * kw) < cg


def test_row_split_case_has_remainders():
    """The last case really splits its filter gradient over channel blocks with short
    last blocks of images and of channels."""
    n, cg = CASES["by-rows-remainders"][0][:2]
    assert cg >= kernels.SPLIT_TASKS
    nc = kernels.CHUNK_REDUCTION // 16
    assert n % nc != 0
    cb = -(-cg // kernels.SPLIT_TASKS)
    assert cg % cb != 0


@pytest.mark.parametrize("name", list(CASES))
def test_filter_gradient_same_bits_on_one_and_two_threads(compiled, name):
    (_, _, gwt), x, _, dy, _ = compiled[name]
    np.testing.assert_array_equal(on_threads(1, gwt, x, dy), on_threads(2, gwt, x, dy))


def test_pointwise_case_takes_the_subsampled_path():
    _, _, kh, kw = CASES["pointwise-stride"][1]
    assert kernels.pointwise_strided(kh, kw, 2, 3, 0, 0, 0, 0)
    assert not kernels.pointwise_strided(kh, kw, 1, 1, 0, 0, 0, 0)
    assert not kernels.pointwise_strided(kh, kw, 2, 2, 0, 0, 1, 0)
    assert not kernels.pointwise_strided(3, 3, 2, 2, 0, 0, 0, 0)


def test_cases_unroll_both_column_orders():
    """Strided unrolling puts the images innermost when there are more of them than
    output columns: both orders are exercised, in the forward pass and in both
    splits of the filter gradient."""
    assert not kernels.images_inner(3, 8)  # 8x8-groups-blocks
    assert kernels.images_inner(5, 4)  # odd-stride's forward; few-channels' filter gradient
    assert kernels.images_inner(32, 4) and kernels.images_inner(5, 4)  # by-rows-remainders
    assert not kernels.images_inner(1, 4)
    assert kernels.column(2, 1, 3, 16, True) == 7 and kernels.column(2, 1, 3, 16, False) == 18


@pytest.mark.parametrize(
    "m, sh, sw, dh, dw, pt_, pl",
    [(3, 2, 2, 1, 1, 1, 1), (2, 2, 3, 1, 2, 2, 0), (1, 3, 1, 2, 1, 0, 3), (2, 1, 2, 1, 1, 2, 2)],
)
def test_im2col_matches_numpy(m, sh, sw, dh, dw, pt_, pl):
    """The unrolled windows, positions outer (each image padded into its column
    phases), are the padded image's windows, read with NumPy's strided slices."""
    rng = np.random.default_rng(3)
    n_total, cx, c0, C, H, W, kh, kw = 5, 6, 1, 4, 9, 14, 3, 2
    ho = (H + 2 * pt_ - (kh - 1) * dh - 1) // sh + 1
    wo = (W + pl + 1 - (kw - 1) * dw - 1) // sw + 1
    assert not kernels.images_inner(m, wo)
    x = rng.standard_normal((n_total, cx, H, W)).astype(np.float32)
    n0, ld = 1, m * ho * wo + 5
    col = np.full(C * kh * kw * ld, np.nan, dtype=np.float32)
    xp = np.full(kernels.im2col_scratch(C, m, ho, wo, kh, kw, sh, sw, dh, dw), np.nan, np.float32)
    kernels.im2col(x, n0, m, c0, C, col, ld, kh, kw, sh, sw, dh, dw, pt_, pl, ho, wo, xp)
    # pad enough on every side for the windows (the right edge may need more than pl + 1)
    padded = np.zeros((m, C, H + 2 * pt_ + sh * ho, W + pl + sw * wo + kw * dw), np.float32)
    padded[:, :, pt_ : pt_ + H, pl : pl + W] = x[n0 : n0 + m, c0 : c0 + C]
    rows = col.reshape(C * kh * kw, ld)[:, : m * ho * wo].reshape(C, kh, kw, m, ho, wo)
    for i in range(kh):
        for j in range(kw):
            window = padded[:, :, i * dh : i * dh + sh * ho : sh, j * dw : j * dw + sw * wo : sw]
            np.testing.assert_array_equal(rows[:, i, j], window.transpose(1, 0, 2, 3))
