"""Numba kernels for 2-D and 3-D pooling (the default backend).

Inputs are viewed as contiguous ``(planes, depth, rows, cols)`` (2-D pooling
is 3-D pooling with a depth of 1 and a window depth of 1); the planes (batch
times channels) are split over threads, each plane's windows are walked
directly in unpadded coordinates (padding is never read, so it never wins a
maximum).  ``mode``: 0 max, 1 sum, 2 average_inc_pad, 3 average_exc_pad.
Sums accumulate in float64.  Max-pooling gradients go to the first maximum
of each window in row-major order (NaN counts as the maximum).
"""

from __future__ import annotations

import numpy as np
from numba import carray, prange

from lasagne_bn.ops.numba.jit import njit
from lasagne_bn.ops.numba.threads import POOL, ensure_symbols, enter_threads, set_num_threads

ensure_symbols()  # start the pool before cached parallel kernels are linked

kernel = njit(parallel=True, cache=True, nogil=True)
driver = njit(cache=True, nogil=True)

MAX, SUM, AVG_INC, AVG_EXC = 0, 1, 2, 3  # pool._MODE_CODES repeats them


@driver
def window(o, ws, st, pad, size):
    """``(start, end)`` of window ``o`` in the input and its inc-pad extent."""
    s = o * st
    e = min(s + ws, size + 2 * pad)
    return max(s, pad) - pad, min(e, size + pad) - pad, e - s


@driver
def first_max(x3, d0, d1, r0, r1, c0, c1):
    """Depth, row, col of the first maximum of ``x3[d0:d1, r0:r1, c0:c1]`` (a NaN wins)."""
    bd, br, bc = d0, r0, c0
    m = x3[d0, r0, c0]
    if m != m:
        return bd, br, bc
    for d in range(d0, d1):
        for r in range(r0, r1):
            for c in range(c0, c1):
                v = x3[d, r, c]
                if v != v:
                    return d, r, c
                if v > m:
                    m = v
                    bd, br, bc = d, r, c
    return bd, br, bc


@kernel
def pool_forward(x4, out4, w, s, pd, mode):
    """``w``, ``s``, ``pd``: window, stride and padding per pooled axis (3 each)."""
    P, D, H, W = x4.shape
    OD, OH, OW = out4.shape[1], out4.shape[2], out4.shape[3]
    for p in prange(P):
        for k in range(OD):
            d0, d1, nd = window(k, w[0], s[0], pd[0], D)
            for i in range(OH):
                r0, r1, nh = window(i, w[1], s[1], pd[1], H)
                for j in range(OW):
                    c0, c1, nw = window(j, w[2], s[2], pd[2], W)
                    if mode == MAX:
                        d, r, c = first_max(x4[p], d0, d1, r0, r1, c0, c1)
                        out4[p, k, i, j] = x4[p, d, r, c]
                        continue
                    acc = 0.0
                    for d in range(d0, d1):
                        for r in range(r0, r1):
                            for c in range(c0, c1):
                                acc += np.float64(x4[p, d, r, c])
                    if mode == AVG_INC:
                        acc /= nd * nh * nw
                    elif mode == AVG_EXC:
                        acc /= (d1 - d0) * (r1 - r0) * (c1 - c0)
                    out4[p, k, i, j] = acc


@kernel
def max_pool_grad(x4, gz4, gx4, w, s, pd):
    """``gx4`` (overwritten) gets each ``gz`` at its window's first maximum."""
    P, D, H, W = x4.shape
    OD, OH, OW = gz4.shape[1], gz4.shape[2], gz4.shape[3]
    for p in prange(P):
        gx4[p] = 0
        for k in range(OD):
            d0, d1, _ = window(k, w[0], s[0], pd[0], D)
            for i in range(OH):
                r0, r1, _ = window(i, w[1], s[1], pd[1], H)
                for j in range(OW):
                    c0, c1, _ = window(j, w[2], s[2], pd[2], W)
                    d, r, c = first_max(x4[p], d0, d1, r0, r1, c0, c1)
                    gx4[p, d, r, c] += gz4[p, k, i, j]


@kernel
def max_pool_grad_grad(x4, ggx4, out4, w, s, pd):
    """``out4[k, i, j]`` = ``ggx`` at window ``(k, i, j)``'s first maximum."""
    P, D, H, W = x4.shape
    OD, OH, OW = out4.shape[1], out4.shape[2], out4.shape[3]
    for p in prange(P):
        for k in range(OD):
            d0, d1, _ = window(k, w[0], s[0], pd[0], D)
            for i in range(OH):
                r0, r1, _ = window(i, w[1], s[1], pd[1], H)
                for j in range(OW):
                    c0, c1, _ = window(j, w[2], s[2], pd[2], W)
                    d, r, c = first_max(x4[p], d0, d1, r0, r1, c0, c1)
                    out4[p, k, i, j] = ggx4[p, d, r, c]


@kernel
def average_pool_grad(gz4, gx4, w, s, pd, mode):
    """``gx4`` (overwritten) = transpose of sum / average pooling applied to ``gz4``."""
    P, D, H, W = gx4.shape
    OD, OH, OW = gz4.shape[1], gz4.shape[2], gz4.shape[3]
    for p in prange(P):
        gx4[p] = 0
        for k in range(OD):
            d0, d1, nd = window(k, w[0], s[0], pd[0], D)
            for i in range(OH):
                r0, r1, nh = window(i, w[1], s[1], pd[1], H)
                for j in range(OW):
                    c0, c1, nw = window(j, w[2], s[2], pd[2], W)
                    g = np.float64(gz4[p, k, i, j])
                    if mode == AVG_INC:
                        g /= nd * nh * nw
                    elif mode == AVG_EXC:
                        g /= (d1 - d0) * (r1 - r0) * (c1 - c0)
                    for d in range(d0, d1):
                        for r in range(r0, r1):
                            for c in range(c0, c1):
                                gx4[p, d, r, c] += g


# --------------------------------------------------------------------------
# C-callable entry points (see conv_kernels.py): arrays and an int64
# parameter vector ``P, D, H, W, OD, OH, OW, wd, wh, ww, sd, sh, sw, pd, ph,
# pw, mode``.

POOL_DIMS = 17


@driver
def _pool_call(d_ptr):
    """A call's input and output shapes, window, stride and padding, mode, and the
    thread count it replaced (set for its window reads, P OD OH OW wd wh ww)."""
    d = carray(d_ptr, (POOL_DIMS,))
    shapes = (d[0], d[1], d[2], d[3]), (d[0], d[4], d[5], d[6])
    previous = enter_threads(d[0] * d[4] * d[5] * d[6] * d[7] * d[8] * d[9], POOL)
    return shapes, (d[7:10], d[10:13], d[13:16]), d[16], previous


def _pool_forward_entry(x_ptr, out_ptr, d_ptr):
    (xs, ys), windows, mode, previous = _pool_call(d_ptr)
    pool_forward(carray(x_ptr, xs), carray(out_ptr, ys), *windows, mode)
    set_num_threads(previous)
    return 0


def _max_pool_grad_entry(x_ptr, gz_ptr, gx_ptr, d_ptr):
    (xs, ys), windows, _, previous = _pool_call(d_ptr)
    max_pool_grad(carray(x_ptr, xs), carray(gz_ptr, ys), carray(gx_ptr, xs), *windows)
    set_num_threads(previous)
    return 0


def _max_pool_grad_grad_entry(x_ptr, ggx_ptr, out_ptr, d_ptr):
    (xs, ys), windows, _, previous = _pool_call(d_ptr)
    max_pool_grad_grad(carray(x_ptr, xs), carray(ggx_ptr, xs), carray(out_ptr, ys), *windows)
    set_num_threads(previous)
    return 0


def _average_pool_grad_entry(gz_ptr, gx_ptr, d_ptr):
    (xs, ys), windows, mode, previous = _pool_call(d_ptr)
    average_pool_grad(carray(gz_ptr, ys), carray(gx_ptr, xs), *windows, mode)
    set_num_threads(previous)
    return 0


ENTRIES = {
    "pool_forward": (_pool_forward_entry, 2),
    "max_pool_grad": (_max_pool_grad_entry, 3),
    "max_pool_grad_grad": (_max_pool_grad_grad_entry, 3),
    "average_pool_grad": (_average_pool_grad_entry, 2),
}
