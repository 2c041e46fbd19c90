"""Portable convolution kernels: windows unrolled (``im2col``), products in BLAS.

The twin of :mod:`.conv_kernels` for any CPU: no LLVM IR and no tuning for
one instruction set.  The 2-D convolutions, their gradients and plain
matrix products (:class:`lasagne_bn.ops.matmul.MatMul`) are products of
SciPy's BLAS (:func:`.blas.gemm`), one BLAS thread per task of Numba's
thread pool; 3-D convolutions keep :mod:`.conv_kernels`' entry points
(generic code around the same 2-D engine).
:func:`lasagne_bn.ops.numba.portable.kernels_module` says which module the
default mode uses (``LASAGNE_BN_PORTABLE=1`` forces this one).

- forward: the windows of a block of output rows are unrolled into ``col``
  (``Cg*kh*kw`` rows, one column per output position), and
  ``out[n, group][:, block] = W_group @ col``;
- input gradient, unit strides: the forward correlation of the padded
  output gradient with the flipped, transposed filters; other strides:
  ``dcol = W_group^T @ dy[n, group]``, added back over the windows
  (``col2im``);
- filter gradient: ``dW_group += dy[n, group] @ col^T`` over the images of
  a chunk; the chunks' partial sums are added in a fixed order at the end;
- a 1x1 convolution with unit strides and no padding needs no unrolling,
  and a strided one without padding is a unit-stride one of the subsampled
  input (a ResNet shortcut).

A block of output rows keeps ``col`` within :data:`COL_ELEMENTS`, so that
it is still in a core's cache when the product reads it.  The split over
tasks depends on the shapes only, never on the thread count, so neither do
the bits of a result.

It gives up speed for that: on the x86-64 machine where both were measured,
training steps took 1.6x (a DCGAN) to 1.9x (a ResNet-20) the tuned kernels'
time, while the kernels compiled in a third of theirs
(``benchmarks/net_bench.py --impl ours/default ours/portable torch``).
"""

from __future__ import annotations

import numpy as np
from numba import carray, prange

from lasagne_bn.ops.numba.blas import gemm
from lasagne_bn.ops.numba.conv_kernels import (
    CONV_DIMS,
    _conv_call,
    copy_run,
    pointwise_strided,
    span,
    subsample,
    zero_run,
)
from lasagne_bn.ops.numba.conv_kernels import (
    ENTRIES as TUNED_ENTRIES,
)
from lasagne_bn.ops.numba.jit import njit
from lasagne_bn.ops.numba.threads import CONV, enter_threads, set_num_threads

# Unrolled elements per block of output rows (a quarter of a typical L2 in float32).
COL_ELEMENTS = 1 << 16
# Matrix products are cut into this many blocks of rows (of columns for short ones).
SPLIT_TASKS = 8

kernel = njit(parallel=True, cache=True, nogil=True)
driver = njit(cache=True, nogil=True)


# --------------------------------------------------------------------------
# unrolling the windows


@driver
def block_rows(K, Ho, Wo):
    """Output rows per block: ``col`` (``K`` rows of ``rows * Wo``) within ``COL_ELEMENTS``."""
    return max(1, min(Ho, COL_ELEMENTS // max(1, K * Wo)))


@driver
def im2col(xf, x0, Cg, H, W, col, y0, y1, Wo, kh, kw, sh, sw, dh, dw, pt, pl):
    """Unroll output rows ``[y0, y1)``: ``col[(c*kh + i)*kw + j, (y - y0)*Wo + o] =
    x[c, y*sh + i*dh - pt, o*sw + j*dw - pl]`` (zero where that is padding).

    ``x`` is ``Cg`` planes of ``H x W`` in the flat ``xf`` from ``x0``; ``col``
    is row-major with rows of ``(y1 - y0) * Wo``.
    """
    ld = (y1 - y0) * Wo
    for c in range(Cg):
        for i in range(kh):
            for j in range(kw):
                r = ((c * kh + i) * kw + j) * ld
                lo, hi = span(pl, j * dw, sw, W, Wo)
                for y in range(y0, y1):
                    d = r + (y - y0) * Wo
                    yy = y * sh + i * dh - pt
                    if yy < 0 or yy >= H or hi <= lo:
                        zero_run(col, d, Wo)
                        continue
                    zero_run(col, d, lo)
                    s = x0 + (c * H + yy) * W + j * dw - pl
                    if sw == 1:
                        copy_run(col, d + lo, xf, s + lo, hi - lo)
                    else:
                        for o in range(lo, hi):
                            col[d + o] = xf[s + o * sw]
                    zero_run(col, d + hi, Wo - hi)


@driver
def col2im(col, dxf, x0, Cg, H, W, y0, y1, Wo, kh, kw, sh, sw, dh, dw, pt, pl):
    """The transpose of :func:`im2col`: each ``col`` element added to the input
    element it was read from (``dxf`` from ``x0``, ``Cg`` planes of ``H x W``)."""
    ld = (y1 - y0) * Wo
    for c in range(Cg):
        for i in range(kh):
            for j in range(kw):
                r = ((c * kh + i) * kw + j) * ld
                lo, hi = span(pl, j * dw, sw, W, Wo)
                for y in range(y0, y1):
                    yy = y * sh + i * dh - pt
                    if yy < 0 or yy >= H:
                        continue
                    d = r + (y - y0) * Wo
                    s = x0 + (c * H + yy) * W + j * dw - pl
                    if sw == 1:  # a loop LLVM vectorises
                        for o in range(lo, hi):
                            dxf[s + o] += col[d + o]
                    else:
                        for o in range(lo, hi):
                            dxf[s + o * sw] += col[d + o]


@driver
def pointwise(kh, kw, sh, sw, pt, pb, pl, pr):
    """A 1x1 convolution with unit strides and no padding: ``col`` is the image itself."""
    unpadded = pt == 0 and pb == 0 and pl == 0 and pr == 0
    return kh == 1 and kw == 1 and sh == 1 and sw == 1 and unpadded


# --------------------------------------------------------------------------
# forward


@driver
def conv_forward(x, k, out, sh, sw, dh, dw, pt, pb, pl, pr, G):
    """``out = conv(x, k)``; ``k`` is ``(F, Cg, kh, kw)``, already oriented (flipped)."""
    Ho, Wo = out.shape[2], out.shape[3]
    if pointwise_strided(k.shape[2], k.shape[3], sh, sw, pt, pb, pl, pr):
        _forward(subsample(x, sh, sw, Ho, Wo), k, out, 1, 1, dh, dw, 0, 0, 0, 0, G)
    else:
        _forward(x, k, out, sh, sw, dh, dw, pt, pb, pl, pr, G)


@kernel
def _forward(x, k, out, sh, sw, dh, dw, pt, pb, pl, pr, G):
    N, C, H, W = x.shape
    F, Cg, kh, kw = k.shape
    Ho, Wo = out.shape[2], out.shape[3]
    Fg, K, Q = F // G, Cg * kh * kw, Ho * Wo
    kf, of, xf = k.reshape(-1), out.reshape(-1), x.reshape(-1)
    if pointwise(kh, kw, sh, sw, pt, pb, pl, pr):
        for task in prange(N * G):
            n, g = task // G, task % G
            x0, o0 = (n * C + g * Cg) * Q, (n * F + g * Fg) * Q
            gemm(False, False, Fg, Q, K, kf, g * Fg * K, K, xf, x0, Q, 0.0, of, o0, Q)
        return
    rows = block_rows(K, Ho, Wo)
    blocks = (Ho + rows - 1) // rows
    for task in prange(N * G * blocks):
        item, b = task // blocks, task % blocks
        n, g = item // G, item % G
        y0 = b * rows
        y1 = min(Ho, y0 + rows)
        ld = (y1 - y0) * Wo
        col = np.empty(K * ld, dtype=x.dtype)
        im2col(xf, (n * C + g * Cg) * H * W, Cg, H, W, col, y0, y1, Wo, kh, kw, sh, sw, dh, dw,
               pt, pl)  # fmt: skip
        o0 = (n * F + g * Fg) * Q + y0 * Wo
        gemm(False, False, Fg, ld, K, kf, g * Fg * K, K, col, 0, ld, 0.0, of, o0, Q)


# --------------------------------------------------------------------------
# input gradient


@kernel
def conv_grad_inputs(k, dy, dx, sh, sw, dh, dw, pt, pb, pl, pr, G):
    """``dx = conv^T(dy)``, overwritten; ``k`` oriented as in the forward pass."""
    N, C, H, W = dx.shape
    Ho, Wo = dy.shape[2], dy.shape[3]
    if not pointwise_strided(k.shape[2], k.shape[3], sh, sw, pt, pb, pl, pr):
        _grad_inputs(k, dy, dx, sh, sw, dh, dw, pt, pb, pl, pr, G)
        return
    dxs = np.empty((N, C, Ho, Wo), dtype=dx.dtype)
    _grad_inputs(k, dy, dxs, 1, 1, dh, dw, 0, 0, 0, 0, G)
    for t in prange(N * C):
        n, c = t // C, t % C
        dx[n, c] = 0
        for y in range(Ho):
            for o in range(Wo):
                dx[n, c, y * sh, o * sw] = dxs[n, c, y, o]


@driver
def transposed_flipped(k, G):
    """The filters of the input gradient's correlation: ``kt[g*Cg + c, f, i, j] =
    k[g*Fg + f, c, kh-1-i, kw-1-j]`` (``(C, Fg, kh, kw)``)."""
    F, Cg, kh, kw = k.shape
    Fg = F // G
    kt = np.empty((G * Cg, Fg, kh, kw), dtype=k.dtype)
    for g in range(G):
        for c in range(Cg):
            for f in range(Fg):
                for i in range(kh):
                    for j in range(kw):
                        kt[g * Cg + c, f, i, j] = k[g * Fg + f, c, kh - 1 - i, kw - 1 - j]
    return kt


@kernel
def _grad_inputs(k, dy, dx, sh, sw, dh, dw, pt, pb, pl, pr, G):
    N, F, Ho, Wo = dy.shape
    C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    _, Cg, kh, kw = k.shape
    Fg, K, Q = F // G, Cg * kh * kw, Ho * Wo
    # Unit strides: a forward correlation of the padded output gradient with
    # the flipped, transposed filters; it writes dx once, where the scatter
    # below adds into it kh*kw times.
    qt, qb = (kh - 1) * dh - pt, (kh - 1) * dh - pb
    ql, qr = (kw - 1) * dw - pl, (kw - 1) * dw - pr
    if sh == 1 and sw == 1 and min(min(qt, qb), min(ql, qr)) >= 0:
        _forward(dy, transposed_flipped(k, G), dx, 1, 1, dh, dw, qt, qb, ql, qr, G)
        return
    kf, yf, xf = k.reshape(-1), dy.reshape(-1), dx.reshape(-1)
    rows = block_rows(K, Ho, Wo)
    for task in prange(N * G):  # one image and group per task: its dx planes are its own
        n, g = task // G, task % G
        x0 = (n * C + g * Cg) * H * W
        zero_run(xf, x0, Cg * H * W)
        col = np.empty(K * rows * Wo, dtype=dy.dtype)
        for y0 in range(0, Ho, rows):
            y1 = min(Ho, y0 + rows)
            ld = (y1 - y0) * Wo
            d0 = (n * F + g * Fg) * Q + y0 * Wo
            gemm(True, False, K, ld, Fg, kf, g * Fg * K, K, yf, d0, Q, 0.0, col, 0, ld)
            col2im(col, xf, x0, Cg, H, W, y0, y1, Wo, kh, kw, sh, sw, dh, dw, pt, pl)


# --------------------------------------------------------------------------
# filter gradient


@driver
def conv_grad_weights(x, dy, dk, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks):
    """``dk`` (F, Cg, kh, kw), oriented as the forward pass's ``k``, overwritten.

    The images are cut into at most ``tasks`` chunks (a constant of the Op,
    so the sum's order depends on the shapes only), whose partial sums are
    added in order at the end.
    """
    Ho, Wo = dy.shape[2], dy.shape[3]
    if pointwise_strided(dk.shape[2], dk.shape[3], sh, sw, pt, pb, pl, pr):
        _grad_weights(subsample(x, sh, sw, Ho, Wo), dy, dk, 1, 1, dh, dw, 0, 0, 0, 0, G, tasks)
    else:
        _grad_weights(x, dy, dk, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks)


@kernel
def _grad_weights(x, dy, dk, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks):
    N, C, H, W = x.shape
    F, Ho, Wo = dy.shape[1], dy.shape[2], dy.shape[3]
    Cg, kh, kw = dk.shape[1], dk.shape[2], dk.shape[3]
    Fg, K, Q = F // G, Cg * kh * kw, Ho * Wo
    xf, yf, kf = x.reshape(-1), dy.reshape(-1), dk.reshape(-1)
    chunks = max(1, min(N, tasks))
    direct = pointwise(kh, kw, sh, sw, pt, pb, pl, pr)
    rows = block_rows(K, Ho, Wo)
    partial = np.empty((chunks * G, Fg * K), dtype=x.dtype)
    for task in prange(chunks * G):
        chunk, g = task // G, task % G
        part = partial[task]
        col = np.empty(0 if direct else K * rows * Wo, dtype=x.dtype)
        beta = 0.0
        for n in range(chunk * N // chunks, (chunk + 1) * N // chunks):
            x0, d0 = (n * C + g * Cg) * H * W, (n * F + g * Fg) * Q
            if direct:
                gemm(False, True, Fg, K, Q, yf, d0, Q, xf, x0, Q, beta, part, 0, K)
                beta = 1.0
                continue
            for y0 in range(0, Ho, rows):
                y1 = min(Ho, y0 + rows)
                ld = (y1 - y0) * Wo
                im2col(xf, x0, Cg, H, W, col, y0, y1, Wo, kh, kw, sh, sw, dh, dw, pt, pl)
                gemm(False, True, Fg, K, ld, yf, d0 + y0 * Wo, Q, col, 0, ld, beta, part, 0, K)
                beta = 1.0
    for g in prange(G):
        out = kf[g * Fg * K : (g + 1) * Fg * K]
        out[:] = partial[g]
        for chunk in range(1, chunks):
            out += partial[chunk * G + g]


# --------------------------------------------------------------------------
# matrix product (lasagne_bn.ops.matmul.MatMul)


@kernel
def matmul(a, b, out):
    """``out = a @ b`` for C-contiguous ``a`` (m, k), ``b`` (k, n) and ``out`` (m, n).

    Cut into ``SPLIT_TASKS`` blocks of rows (of columns when there are fewer
    rows than that), one BLAS call each.
    """
    m, k = a.shape
    n = b.shape[1]
    af, bf, of = a.reshape(-1), b.reshape(-1), out.reshape(-1)
    if k == 0:
        of[:] = 0
        return
    by_rows = m >= SPLIT_TASKS or m >= n
    size = m if by_rows else n
    blocks = min(SPLIT_TASKS, size)
    for t in prange(blocks):
        lo, hi = t * size // blocks, (t + 1) * size // blocks
        if by_rows:
            gemm(False, False, hi - lo, n, k, af, lo * k, k, bf, 0, n, 0.0, of, lo * n, n)
        else:
            gemm(False, False, m, hi - lo, k, af, 0, k, bf, lo, n, 0.0, of, lo, n)


# --------------------------------------------------------------------------
# C-callable entry points, as in conv_kernels.py


def _conv_forward_entry(x_ptr, k_ptr, out_ptr, d_ptr):
    _, (xs, ks, ys), params, previous = _conv_call(d_ptr, CONV_DIMS)
    conv_forward(carray(x_ptr, xs), carray(k_ptr, ks), carray(out_ptr, ys), *params)
    set_num_threads(previous)
    return 0


def _conv_grad_inputs_entry(k_ptr, dy_ptr, dx_ptr, d_ptr):
    _, (xs, ks, ys), params, previous = _conv_call(d_ptr, CONV_DIMS)
    conv_grad_inputs(carray(k_ptr, ks), carray(dy_ptr, ys), carray(dx_ptr, xs), *params)
    set_num_threads(previous)
    return 0


def _conv_grad_weights_entry(x_ptr, dy_ptr, dk_ptr, d_ptr):
    d, (xs, ks, ys), params, previous = _conv_call(d_ptr, CONV_DIMS + 1)  # + tasks
    conv_grad_weights(carray(x_ptr, xs), carray(dy_ptr, ys), carray(dk_ptr, ks), *params, d[19])
    set_num_threads(previous)
    return 0


def _matmul_entry(a_ptr, b_ptr, out_ptr, d_ptr):
    d = carray(d_ptr, (3,))
    m, k, n = d[0], d[1], d[2]
    previous = enter_threads(m * k * n, CONV)
    matmul(carray(a_ptr, (m, k)), carray(b_ptr, (k, n)), carray(out_ptr, (m, n)))
    set_num_threads(previous)
    return 0


ENTRIES = {
    **TUNED_ENTRIES,  # 3-D
    "conv_forward": (_conv_forward_entry, 3),
    "conv_grad_inputs": (_conv_grad_inputs_entry, 3),
    "conv_grad_weights": (_conv_grad_weights_entry, 3),
    "matmul": (_matmul_entry, 3),
}
