"""Numba kernels for 2-D pooling (the default backend).

Inputs are viewed as contiguous ``(planes, rows, cols)``; the planes (batch
times channels) are split over threads, each plane's windows are walked
directly in unpadded coordinates (padding is never read, so it never wins a
maximum).  ``mode``: 0 max, 1 sum, 2 average_inc_pad, 3 average_exc_pad.
Sums accumulate in float64.  Max-pooling gradients go to the first maximum
of each window in row-major order (NaN counts as the maximum).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import prange

numba.get_num_threads()  # start the pool before cached parallel kernels are linked

kernel = numba.njit(parallel=True, cache=True, nogil=True)
driver = numba.njit(cache=True, nogil=True)

MAX, SUM, AVG_INC, AVG_EXC = 0, 1, 2, 3


@driver
def window(o, ws, st, pad, size):
    """``(start, end)`` of window ``o`` in the input and its inc-pad extent."""
    s = o * st
    e = min(s + ws, size + 2 * pad)
    return max(s, pad) - pad, min(e, size + pad) - pad, e - s


@driver
def first_max(x2, r0, r1, c0, c1):
    """Row, col of the first maximum of ``x2[r0:r1, c0:c1]`` (a NaN wins)."""
    br, bc = r0, c0
    m = x2[r0, c0]
    if m != m:
        return br, bc
    for r in range(r0, r1):
        for c in range(c0, c1):
            v = x2[r, c]
            if v != v:
                return r, c
            if v > m:
                m = v
                br, bc = r, c
    return br, bc


@kernel
def pool_forward(x3, out3, wh, ww, sh, sw, ph, pw, mode):
    P, H, W = x3.shape
    OH, OW = out3.shape[1], out3.shape[2]
    for p in prange(P):
        for i in range(OH):
            r0, r1, nh = window(i, wh, sh, ph, H)
            for j in range(OW):
                c0, c1, nw = window(j, ww, sw, pw, W)
                if mode == MAX:
                    r, c = first_max(x3[p], r0, r1, c0, c1)
                    out3[p, i, j] = x3[p, r, c]
                    continue
                s = 0.0
                for r in range(r0, r1):
                    for c in range(c0, c1):
                        s += np.float64(x3[p, r, c])
                if mode == AVG_INC:
                    s /= nh * nw
                elif mode == AVG_EXC:
                    s /= (r1 - r0) * (c1 - c0)
                out3[p, i, j] = s


@kernel
def max_pool_grad(x3, gz3, gx3, wh, ww, sh, sw, ph, pw):
    """``gx3`` (overwritten) gets each ``gz`` at its window's first maximum."""
    P, H, W = x3.shape
    OH, OW = gz3.shape[1], gz3.shape[2]
    for p in prange(P):
        gx3[p] = 0
        for i in range(OH):
            r0, r1, _ = window(i, wh, sh, ph, H)
            for j in range(OW):
                c0, c1, _ = window(j, ww, sw, pw, W)
                r, c = first_max(x3[p], r0, r1, c0, c1)
                gx3[p, r, c] += gz3[p, i, j]


@kernel
def max_pool_grad_grad(x3, ggx3, out3, wh, ww, sh, sw, ph, pw):
    """``out3[i, j]`` = ``ggx`` at window ``(i, j)``'s first maximum."""
    P, H, W = x3.shape
    OH, OW = out3.shape[1], out3.shape[2]
    for p in prange(P):
        for i in range(OH):
            r0, r1, _ = window(i, wh, sh, ph, H)
            for j in range(OW):
                c0, c1, _ = window(j, ww, sw, pw, W)
                r, c = first_max(x3[p], r0, r1, c0, c1)
                out3[p, i, j] = ggx3[p, r, c]


@kernel
def average_pool_grad(gz3, gx3, wh, ww, sh, sw, ph, pw, mode):
    """``gx3`` (overwritten) = transpose of sum / average pooling applied to ``gz3``."""
    P, H, W = gx3.shape
    OH, OW = gz3.shape[1], gz3.shape[2]
    for p in prange(P):
        gx3[p] = 0
        for i in range(OH):
            r0, r1, nh = window(i, wh, sh, ph, H)
            for j in range(OW):
                c0, c1, nw = window(j, ww, sw, pw, W)
                g = np.float64(gz3[p, i, j])
                if mode == AVG_INC:
                    g /= nh * nw
                elif mode == AVG_EXC:
                    g /= (r1 - r0) * (c1 - c0)
                for r in range(r0, r1):
                    for c in range(c0, c1):
                        gx3[p, r, c] += g


# --------------------------------------------------------------------------
# C-callable entry points (see numba_conv_kernels.py): arrays and an int64
# parameter vector ``P, H, W, OH, OW, wh, ww, sh, sw, ph, pw, mode``.

POOL_DIMS = 12


def _pool_forward_entry(x_ptr, out_ptr, d_ptr):
    d = numba.carray(d_ptr, (POOL_DIMS,))
    x3 = numba.carray(x_ptr, (d[0], d[1], d[2]))
    out3 = numba.carray(out_ptr, (d[0], d[3], d[4]))
    pool_forward(x3, out3, d[5], d[6], d[7], d[8], d[9], d[10], d[11])
    return 0


def _max_pool_grad_entry(x_ptr, gz_ptr, gx_ptr, d_ptr):
    d = numba.carray(d_ptr, (POOL_DIMS,))
    x3 = numba.carray(x_ptr, (d[0], d[1], d[2]))
    gz3 = numba.carray(gz_ptr, (d[0], d[3], d[4]))
    gx3 = numba.carray(gx_ptr, (d[0], d[1], d[2]))
    max_pool_grad(x3, gz3, gx3, d[5], d[6], d[7], d[8], d[9], d[10])
    return 0


def _max_pool_grad_grad_entry(x_ptr, ggx_ptr, out_ptr, d_ptr):
    d = numba.carray(d_ptr, (POOL_DIMS,))
    x3 = numba.carray(x_ptr, (d[0], d[1], d[2]))
    ggx3 = numba.carray(ggx_ptr, (d[0], d[1], d[2]))
    out3 = numba.carray(out_ptr, (d[0], d[3], d[4]))
    max_pool_grad_grad(x3, ggx3, out3, d[5], d[6], d[7], d[8], d[9], d[10])
    return 0


def _average_pool_grad_entry(gz_ptr, gx_ptr, d_ptr):
    d = numba.carray(d_ptr, (POOL_DIMS,))
    gz3 = numba.carray(gz_ptr, (d[0], d[3], d[4]))
    gx3 = numba.carray(gx_ptr, (d[0], d[1], d[2]))
    average_pool_grad(gz3, gx3, d[5], d[6], d[7], d[8], d[9], d[10], d[11])
    return 0


ENTRIES = {
    "pool_forward": (_pool_forward_entry, 2),
    "max_pool_grad": (_max_pool_grad_entry, 3),
    "max_pool_grad_grad": (_max_pool_grad_grad_entry, 3),
    "average_pool_grad": (_average_pool_grad_entry, 2),
}
