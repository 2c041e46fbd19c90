"""Numba kernels for convolution (the default backend): a small GEMM engine.

Every convolution (and both gradients) is one matrix product per image and
group whose operands are *views* of a zero-padded copy of the image, so
nothing is unrolled (no ``im2col``) for unit strides:

- forward, unit stride: ``out[f, q] = sum_kk W[f, kk] * P[c, off(kk) + q]``
  where ``P`` is the padded image stored with rows of width ``Wp``, ``q =
  y*Wp + x`` runs over a "wide" output (``Wp - Wo`` extra columns per row
  are computed and dropped) and ``kk = (c, i, j)`` has offset ``off(kk) = c*L
  + i*dh*Wp + j*dw``;
- input gradient, unit stride: the same correlation of the padded output
  gradient with the flipped, transposed filters;
- filter gradient, unit stride: ``dW^T[kk, f] = sum_q P[c, off(kk) + q] *
  dy[f, q]``, summed over images per thread, then across threads;
- other strides: the windows are unrolled (``im2col``) into a thread-local
  buffer, several images side by side (``image_chunk``: small outputs such
  as 4x4 would fill half a register panel and stream the filters once per
  image; with more images than output columns the images are innermost,
  so that the copies are runs of images), and ``col2im`` scatters the
  input gradient back; the filter gradient unrolls a block of channels at
  a time so the block stays in L2, each task owning a block of channels
  when there are enough of them (no partial sums);
- a strided 1x1 convolution without padding is a unit-stride one of the
  subsampled input.

3-D convolutions are sums over the filters' depth taps of these 2-D ones
(see :func:`conv3d_forward`).  :func:`matmul` runs plain matrix products
(:class:`lasagne_bn.ops.matmul.MatMul`) on the same engine.

The product itself is a register-blocked micro-kernel written in LLVM IR
(:func:`microkernel`): an ``MR x NR`` block of the result stays in vector
registers (``NR`` = two SIMD vectors of the host's widest width) while it
accumulates ``kc`` rank-1 updates; rows of the left operand are read
through a row-offset table and rows of the right operand through a
per-``kk`` offset table, which is what lets both be views.  Work is split
over images, groups and blocks of output rows with ``prange``: one thread
pool (Numba's), one hand-over per Op.  We first used BLAS (``np.dot`` and
``numba_xxgemm``), but on a loaded machine every hand-over between Numba's
threads and the BLAS's threads costs milliseconds of spinning; OpenBLAS's
``openblas_set_num_threads_local`` is process-wide in its pthreads builds,
so BLAS cannot be made single-threaded per call.
"""

from __future__ import annotations

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import carray, prange, types
from numba.core import cgutils
from numba.extending import intrinsic

from lasagne_bn.ops.numba.jit import njit
from lasagne_bn.ops.numba.threads import (
    CONV,
    ensure_symbols,
    enter_threads,
    set_num_threads,
)

# Start Numba's thread pool and register the thread-policy symbols (see
# bn_kernels.py); this module is imported when a kernel is compiled.
ensure_symbols()

_FEATURES = llb.get_host_cpu_features()
if _FEATURES.get("avx512f", False):
    VECTOR_BYTES, MR = 64, 8  # 16 accumulators of 32 zmm registers
elif _FEATURES.get("avx", False):
    VECTOR_BYTES, MR = 32, 6  # 12 accumulators of 16 ymm registers
else:
    VECTOR_BYTES, MR = 16, 4
NV = 2  # SIMD vectors per micro-tile row: NR = NV * VECTOR_BYTES / itemsize
KC = 256  # reduction block: a KC x NR panel of the right operand stays in L1
MC = 192  # result rows per block: an MC x KC block of the left operand stays in L2
NC = 512  # result columns per block: the MC x NC result block stays in L2 too
SPLIT_TASKS = 8  # split the output rows until there are this many tasks
# Strided convolutions put several images side by side in one GEMM: at least
# this many columns (forward, input gradient) or reduction steps (filter
# gradient) per product, so that small outputs (4x4, 8x8) still fill whole
# NR-wide panels and the filters are streamed once per group of images, not
# once per image (per image, a 4x4 output ran the GEMMs at 7 GFLOP/s).
CHUNK_COLUMNS = 256
CHUNK_REDUCTION = 512
MIN_CHUNKS = 4  # ... but keep this many image groups for the threads
# ... and keep an unrolled block (rows x columns) within this many elements,
# about half the L2 of one core: written by im2col and read by the GEMM, a
# block that spills to L3 cost more in write misses than the product.
L2_ELEMENTS = 1 << 18
MIN_COLUMNS = 64
TB = 16  # rows per block of the filter gradient's final transpose
# a matrix product with fewer columns or reduction steps than this (or rows than MR)
# skips the tiles
SKINNY = 8

kernel = njit(parallel=True, cache=True, nogil=True)
driver = njit(cache=True, nogil=True)


# --------------------------------------------------------------------------
# the micro-kernel


def _microkernel(nv: int):
    """The micro-kernel computing ``nv`` of a tile row's ``NV`` SIMD vectors."""

    @intrinsic
    def microkernel(typingctx, kc, a, a0, arow, i0, b, b0, boff, p0, tile, accumulate):
        """``tile[i*NR + j] (+)= sum_kk a[a0 + arow[i0 + i] + kk] * b[b0 + boff[p0 + kk] + j]``.

        The sum runs over ``kk < kc``, for ``i < MR`` and ``j < nv *
        VECTOR_BYTES / itemsize``; ``tile`` (a 1-D array starting at the
        block) is a contiguous ``MR x NR`` block, overwritten or, with
        ``accumulate``, added to (its other columns are left as they are).
        Left-operand rows are contiguous in ``kk``; right-operand rows are
        contiguous in ``j`` (``nv`` SIMD loads each).
        """
        return _microkernel_signature(a, arow, b, boff, tile), _microkernel_codegen(nv)

    return microkernel


def _microkernel_signature(a, arow, b, boff, tile):
    return types.void(
        types.intp,
        a,
        types.intp,
        arow,
        types.intp,
        b,
        types.intp,
        boff,
        types.intp,
        tile,
        types.boolean,
    )


def _microkernel_codegen(nv: int):
    def codegen(context, builder, sig, args):
        kc, a, a0, arow, i0, b, b0, boff, p0, tile, accumulate = args
        aty, arowty, bty, boffty, tilety = (sig.args[i] for i in (1, 3, 5, 7, 9))
        adata = context.make_array(aty)(context, builder, a).data
        arowd = context.make_array(arowty)(context, builder, arow).data
        bdata = context.make_array(bty)(context, builder, b).data
        boffd = context.make_array(boffty)(context, builder, boff).data
        tdata = context.make_array(tilety)(context, builder, tile).data
        fty = adata.type.pointee
        itemsize = context.get_abi_sizeof(fty)
        vl = VECTOR_BYTES // itemsize
        nr = NV * vl  # the tile's row length, whatever nv
        vty = ir.VectorType(fty, vl)
        vptr = vty.as_pointer()
        intp = a0.type
        suffix = "f32" if itemsize == 4 else "f64"
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vty, [vty, vty, vty]), f"llvm.fma.v{vl}{suffix}"
        )
        undef = ir.Constant(vty, ir.Undefined)
        splat_mask = ir.Constant(ir.VectorType(ir.IntType(32), vl), [0] * vl)
        accs = [[cgutils.alloca_once(builder, vty) for _ in range(nv)] for _ in range(MR)]

        def tile_ptr(i, v):
            return builder.bitcast(builder.gep(tdata, [ir.Constant(intp, i * nr + v * vl)]), vptr)

        with builder.if_else(accumulate) as (then, otherwise):
            with then:
                for i in range(MR):
                    for v in range(nv):
                        builder.store(builder.load(tile_ptr(i, v), align=itemsize), accs[i][v])
            with otherwise:
                for i in range(MR):
                    for v in range(nv):
                        builder.store(ir.Constant(vty, None), accs[i][v])
        rows = []
        for i in range(MR):
            off = builder.load(builder.gep(arowd, [builder.add(i0, ir.Constant(intp, i))]))
            rows.append(builder.gep(adata, [builder.add(a0, off)]))
        bbase = builder.gep(bdata, [b0])
        obase = builder.gep(boffd, [p0])
        with cgutils.for_range(builder, kc) as loop:
            kk = loop.index
            bp = builder.gep(bbase, [builder.load(builder.gep(obase, [kk]))])
            bv = [
                builder.load(
                    builder.bitcast(builder.gep(bp, [ir.Constant(intp, v * vl)]), vptr),
                    align=itemsize,
                )
                for v in range(nv)
            ]
            for i in range(MR):
                s = builder.load(builder.gep(rows[i], [kk]))
                sv = builder.shuffle_vector(
                    builder.insert_element(undef, s, ir.Constant(ir.IntType(32), 0)),
                    undef,
                    splat_mask,
                )
                for v in range(nv):
                    acc = builder.call(fma, [sv, bv[v], builder.load(accs[i][v])])
                    builder.store(acc, accs[i][v])
        for i in range(MR):
            for v in range(nv):
                builder.store(builder.load(accs[i][v]), tile_ptr(i, v), align=itemsize)
        return context.get_dummy_value()

    return codegen


microkernel = _microkernel(NV)
# For the last column panel when it is at most half full (the filter
# gradient of a layer with 16 filters in float32 is one such panel): the
# full tile would spend half its FMAs on padding.  Each result element is
# the same chain of FMAs either way.
microkernel_narrow = _microkernel(1)


@driver
def tile_product(narrow, kc, a, a0, arow, i0, b, b0, boff, p0, tile, accumulate):
    """One tile of a product: :func:`microkernel`, or the narrow one for a half-full panel."""
    if narrow:
        microkernel_narrow(kc, a, a0, arow, i0, b, b0, boff, p0, tile, accumulate)
    else:
        microkernel(kc, a, a0, arow, i0, b, b0, boff, p0, tile, accumulate)


@driver
def panel_width(x):
    """``NR`` for arrays of ``x``'s dtype."""
    return NV * VECTOR_BYTES // x.itemsize


@driver
def padded_rows(m):
    return (m + MR - 1) // MR * MR


@driver
def row_table(m, stride):
    """``arow`` for a row-major matrix: ``i * stride``, padded rows repeat row 0."""
    t = np.zeros(padded_rows(m), dtype=np.intp)
    for i in range(m):
        t[i] = i * stride
    return t


@driver
def gemm(m, n, k, a, a0, arow, b, b0, boff, dst, d0, ldd, wrow, wout, panel):
    """``dst[d0 + r*ldd + map(q)] = sum_kk a[a0 + arow[r] + kk] * b[b0 + boff[kk] + q]``.

    For ``r < m`` and ``q < n``, where ``map(q) = (q // wrow) * wout + q % wrow``
    drops the columns with ``q % wrow >= wout`` (the "wide" layout).
    ``arow`` must have ``padded_rows(m)`` entries and every ``b`` row must
    be readable ``NR - 1`` elements past the last column used; ``panel`` is
    a scratch buffer, used when it holds the ``MC x NC`` result block.

    Blocked for the caches: for each block of ``MC`` result rows and each
    ``KC`` slice of the reduction, the ``MC x KC`` block of ``a`` stays in L2
    while every ``KC x NR`` panel of ``b`` (in L1) goes by, and the result
    block accumulates in ``panel``; so ``a`` is read once per ``NC`` columns,
    not once per column panel.  A last column panel at most half full runs
    the narrow micro-kernel.
    """
    nr = panel_width(dst)
    mp = padded_rows(m)
    mc = min(mp, MC)
    npan = min((n + nr - 1) // nr, NC // nr)  # panels per column block
    if panel.size >= mc * npan * nr:
        cbuf = panel
    else:
        cbuf = np.empty(mc * npan * nr, dtype=dst.dtype)
    for jb in range(0, n, npan * nr):
        nb = min(npan * nr, n - jb)
        npb = (nb + nr - 1) // nr
        for ib in range(0, mp, mc):
            rows = min(mc, mp - ib)
            for p0 in range(0, k, KC):
                kc = min(KC, k - p0)
                for jp in range(npb):
                    narrow = (nb - jp * nr) * NV <= nr
                    for i0 in range(0, rows, MR):
                        tile_product(
                            narrow, kc, a, a0 + p0, arow, ib + i0, b, b0 + jb + jp * nr, boff, p0,
                            cbuf[(jp * mc + i0) * nr :], p0 > 0,
                        )  # fmt: skip
            if k == 0:
                cbuf[:] = 0
            for jp in range(npb):
                j0 = jb + jp * nr
                nj = min(nr, n - j0)
                tile = jp * mc * nr
                if wrow == wout:  # plain row-major result: contiguous rows
                    for r in range(ib, min(ib + rows, m)):
                        copy_run(dst, d0 + r * ldd + j0, cbuf, tile + (r - ib) * nr, nj)
                    continue
                # wide layout: the panel's columns are runs of a row of wrow,
                # of which the first wout are kept; copied run by run
                for r in range(ib, min(ib + rows, m)):
                    row = d0 + r * ldd
                    t = tile + (r - ib) * nr
                    q = j0
                    while q < j0 + nj:
                        y = q // wrow
                        x = q - y * wrow
                        run = min(wrow - x, j0 + nj - q)
                        keep = min(run, wout - x)
                        if keep > 0:
                            copy_run(dst, row + y * wout + x, cbuf, t + q - j0, keep)
                        q += run


@driver
def gemm_tiles(m, n, k, a, a0, arow, b, b0, boff, tiles, accumulate):
    """``T (+)= sum_kk a[a0 + arow[r] + kk] * b[b0 + boff[kk] + q]``, ``T`` held as tiles.

    The result stays in the micro-kernel's tile layout (see :func:`tile_rows`
    to read it): a sum over many products (the filter gradient's sum over
    images) then accumulates in the micro-kernel's registers, where adding
    each product's result into a row-major array cost a third of the time on
    small images.  ``tiles`` holds ``padded_rows(m) * ceil(n / NR) * NR``
    elements.
    """
    nr = panel_width(tiles)
    mp = padded_rows(m)
    npb = (n + nr - 1) // nr
    if k == 0:
        if not accumulate:
            tiles[: mp * npb * nr] = 0
        return
    for ib in range(0, mp, MC):
        rows = min(MC, mp - ib)
        for p0 in range(0, k, KC):
            kc = min(KC, k - p0)
            add = accumulate or p0 > 0
            for jp in range(npb):
                narrow = (n - jp * nr) * NV <= nr
                for i0 in range(ib, ib + rows, MR):
                    tile_product(
                        narrow, kc, a, a0 + p0, arow, i0, b, b0 + jp * nr, boff, p0,
                        tiles[(jp * mp + i0) * nr :], add,
                    )  # fmt: skip


@driver
def tile_rows(tiles, m, n, dst, d0, ldd):
    """``dst[d0 + r*ldd + q] = T[r, q]`` for the result ``T`` (m x n) of :func:`gemm_tiles`."""
    nr = panel_width(tiles)
    mp = padded_rows(m)
    for jp in range((n + nr - 1) // nr):
        j0 = jp * nr
        nj = min(nr, n - j0)
        for r in range(m):
            t = (jp * mp + r) * nr
            copy_run(dst, d0 + r * ldd + j0, tiles, t, nj)


# --------------------------------------------------------------------------
# copies


@driver
def span(pad, offset, stride, size, n_out):
    """Output positions ``[lo, hi)`` whose input index ``o*stride + offset - pad`` is in range."""
    a = pad - offset
    lo = 0 if a <= 0 else (a + stride - 1) // stride
    b = size + pad - offset
    hi = 0 if b <= 0 else (b + stride - 1) // stride
    lo = min(lo, n_out)
    hi = min(max(hi, lo), n_out)
    return lo, hi


@intrinsic
def _memory_op(typingctx, dst, d, src, s, n):
    """``dst[d : d + n] = src[s : s + n]`` (``llvm.memcpy``), or ``dst[d : d + n] = 0``
    (``llvm.memset``) when ``src`` is None; 1-D arrays of one dtype, ``n >= 0``."""
    zero = isinstance(src, types.NoneType)

    def flat(arr):  # the copy is by address: contiguous 1-D arrays only
        return isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"

    if not flat(dst) or not (zero or (flat(src) and src.dtype == dst.dtype)):
        return None  # a typing error at the call, not a wrong copy
    sig = types.void(dst, types.intp, src, types.intp, types.intp)

    def codegen(context, builder, signature, args):
        dst_, d_, src_, s_, n_ = args
        darr = context.make_array(signature.args[0])(context, builder, dst_)
        itemsize = context.get_abi_sizeof(darr.data.type.pointee)
        dp = builder.gep(darr.data, [d_])
        if zero:
            cgutils.memset(builder, dp, builder.mul(n_, ir.Constant(n_.type, itemsize)), 0)
        else:
            sarr = context.make_array(signature.args[2])(context, builder, src_)
            cgutils.raw_memcpy(builder, dp, builder.gep(sarr.data, [s_]), n_, itemsize)
        return context.get_dummy_value()

    return sig, codegen


@driver
def copy_run(dst, d, src, s, n):
    """``dst[d : d + n] = src[s : s + n]`` for 1-D arrays, as one ``memcpy``.

    Numba's slice assignment builds two array views per call and tests its
    signed indices for wrap-around; a loop over a run length known only at
    run time vectorises in blocks of 32-64 elements, so a 32-element image
    row ran in its scalar remainder.  Runs of a few dozen elements (a padded
    image row, a result row's run) paid that per run: an eighth of a
    unit-stride forward pass on 32x32 images.  ``memcpy`` copies a 32-float
    row 2-5x faster than either.
    """
    if n > 0:
        _memory_op(dst, d, src, s, n)


@driver
def zero_run(dst, d, n):
    """``dst[d : d + n] = 0``, as one ``memset`` (see :func:`copy_run`)."""
    if n > 0:
        _memory_op(dst, d, None, 0, n)


@driver
def pad_into(src, s0, C, R, S, dst, d0, ld, rows, width, top, left):
    """Copy ``C`` planes of ``R x S`` (row-major in the 1-D ``src`` from ``s0``) into
    ``dst`` at (top, left), zeros around them.

    Channel ``c`` is a ``rows x width`` row-major plane at ``d0 + c*ld``; the
    rest of its ``ld`` elements (the tail the last taps' views run into) is
    zero too.  Source rows and columns that fall outside are dropped.  Each
    destination element is written once (zeroing the whole buffer first,
    then copying, wrote the image twice).
    """
    lo, hi = span(-left, 0, 1, width, S)
    r_lo, r_hi = span(-top, 0, 1, rows, R)
    for c in range(C):
        plane = d0 + c * ld
        if hi <= lo or r_hi <= r_lo:
            zero_run(dst, plane, ld)
            continue
        first, last = r_lo + top, r_hi + top  # destination rows that receive a source row
        zero_run(dst, plane, first * width)
        for d in range(first, last):
            base = plane + d * width
            zero_run(dst, base, left + lo)
            copy_run(dst, base + left + lo, src, s0 + (c * R + d - top) * S + lo, hi - lo)
            zero_run(dst, base + left + hi, width - left - hi)
        zero_run(dst, plane + last * width, ld - last * width)


@driver
def window_extent(n_out, k, stride, dilation):
    """Rows (or columns) of the padded input that ``n_out`` windows read."""
    return (n_out - 1) * stride + (k - 1) * dilation + 1


@driver
def images_inner(m, wo):
    """Whether the unrolled columns of ``m`` images run over positions, then images
    (more images than output columns: runs of ``m`` beat rows of ``wo``)."""
    return m > wo


@driver
def column(p, n, m, P, inner):
    """The unrolled column of position ``p`` of image ``n`` (of ``m``, ``P`` positions each)."""
    return p * m + n if inner else n * P + p


@driver
def copy_short(dst, d, src, s, n):
    """``dst[d : d + n] = src[s : s + n]`` for the short runs of :func:`im2col` (``n`` ~ 4-32).

    As ``memcpy`` calls of a constant 8 or 4 elements, which compile to one
    vector move each (3 ns a run of 8, against 6 for a ``memcpy`` of a
    run-time length, a library call, and 13 with an element loop for the
    remainder, which does not vectorise: the arrays may alias).
    """
    o = 0
    while o + 8 <= n:
        copy_run(dst, d + o, src, s + o, 8)
        o += 8
    if o + 4 <= n:
        copy_run(dst, d + o, src, s + o, 4)
        o += 4
    copy_run(dst, d + o, src, s + o, n - o)


@driver
def phase_width(wn, sw):
    """Columns of each stride phase of a padded row ``wn`` wide (see :func:`pad_phases`)."""
    return (wn + sw - 1) // sw


@driver
def pad_phases(src, s0, C, R, S, dst, plane, rows, wq, sw, top, left):
    """Copy ``C`` planes of ``R x S`` (row-major in the 1-D ``src`` from ``s0``) into
    ``dst``, zero-padded to ``rows`` rows and split into column phases.

    Padded element ``(c, r, s)`` goes to ``dst[c*plane + (r*sw + s % sw)*wq +
    s // sw]``: each padded row as its ``sw`` phases of ``wq`` columns, so a
    window row read with column stride ``sw`` is a contiguous run of one
    phase.  Everything else in the first ``rows * sw * wq`` elements of each
    plane is zero.
    """
    usw = np.uintp(sw)
    # the phase columns t whose source column t*sw + ph - left is in [0, S)
    lo = np.empty(sw, dtype=np.intp)
    hi = np.empty(sw, dtype=np.intp)
    for ph in range(sw):
        lo[ph], hi[ph] = span(left, ph, sw, S, wq)
    r_lo, r_hi = max(0, top), min(rows, R + top)  # padded rows holding a source row
    for c in range(C):
        p0 = c * plane
        zero_run(dst, p0, r_lo * sw * wq)
        zero_run(dst, p0 + r_hi * sw * wq, (rows - r_hi) * sw * wq)
        for d in range(r_lo, r_hi):
            row = s0 + (c * R + d - top) * S
            for ph in range(sw):
                b = p0 + (d * sw + ph) * wq
                # the few padding columns: stores, not memset calls
                for t in range(lo[ph]):
                    dst[b + t] = 0
                for t in range(hi[ph], wq):
                    dst[b + t] = 0
                first = row + lo[ph] * sw + ph - left
                count = np.uintp(hi[ph] - lo[ph])
                if sw == 1:
                    copy_run(dst, b + lo[ph], src, first, count)
                    continue
                db, sb = np.uintp(b + lo[ph]), np.uintp(first)
                t0 = np.uintp(0)
                # stride 2 in blocks of 8, a constant trip count and stride, which
                # vectorises; over a run-time count of 8 the vector loop never ran
                if sw == 2:
                    while t0 + np.uintp(8) <= count:
                        for t in range(np.uintp(8)):
                            dst[db + t0 + t] = src[sb + np.uintp(2) * (t0 + t)]
                        t0 += np.uintp(8)
                for t in range(t0, count):
                    dst[db + t] = src[sb + usw * t]


@driver
def im2col_scratch(C, m, ho, wo, kh, kw, sh, sw, dh, dw):
    """Elements of :func:`im2col`'s scratch ``xp`` for ``C`` channels of up to ``m``
    images: one channel of the images (images inner) or the phases of one image's
    ``C`` channels (positions outer), whichever order a chunk gets."""
    hn, wn = window_extent(ho, kh, sh, dh), window_extent(wo, kw, sw, dw)
    return max(m * hn * wn, C * hn * sw * phase_width(wn, sw))


@driver
def im2col(x, n0, m, c0, C, col, ld, kh, kw, sh, sw, dh, dw, pt, pl, ho, wo, xp):
    """``col[((c*kh + i)*kw + j)*ld + column(y*wo + o, n, m, ho*wo, wo)] = pad(x[n0 +
    n])[c0 + c, y*sh + i*dh, o*sw + j*dw]`` for ``m`` images and ``C`` channels.

    With more images than output columns (:func:`images_inner`) the columns
    run over positions, then images, so that a window row is ``wo`` runs of
    ``m`` contiguous elements: each channel is first padded into the scratch
    ``xp`` with the images innermost; on 4x4 outputs, rows of 4 elements
    gathered image by image were a fifth of the forward pass.  Otherwise
    each image is padded whole into ``xp`` split into its column stride
    phases (:func:`pad_phases`), so every window row is a contiguous run:
    gathered with the stride, tap by tap, the rows took a quarter of a
    stride-2 forward pass.  ``xp`` holds :func:`im2col_scratch` elements.
    Either way every copy is free of bounds tests: branches on the padding,
    whose outcome changes from tap to tap, cost half of the copy's time.
    """
    Cx, H, W = x.shape[1], x.shape[2], x.shape[3]
    xf = x.reshape(-1)
    hn, wn = window_extent(ho, kh, sh, dh), window_extent(wo, kw, sw, dw)
    if not images_inner(m, wo):
        wq = phase_width(wn, sw)
        plane = hn * sw * wq
        for n in range(m):
            pad_phases(xf, ((n0 + n) * Cx + c0) * H * W, C, H, W, xp, plane, hn, wq, sw, pt, pl)
            for c in range(C):
                for i in range(kh):
                    for j in range(kw):
                        row = (c * kh + i) * kw + j
                        ph, shift = (j * dw) % sw, (j * dw) // sw
                        for y in range(ho):
                            src = c * plane + ((y * sh + i * dh) * sw + ph) * wq + shift
                            copy_short(col, row * ld + (n * ho + y) * wo, xp, src, wo)
        return
    um = np.uintp(m)
    lo, hi = span(-pl, 0, 1, wn, W)
    for c in range(C):
        # xp[(r*wn + s)*m + n] = pad(x[n0 + n])[c0 + c, r, s]
        xp[: hn * wn * m] = 0
        for n in range(m):
            for r in range(H):
                d = r + pt
                if d < 0 or d >= hn:
                    continue
                base = np.uintp((d * wn + pl) * m + n)
                for q in range(lo, hi):
                    xp[base + np.uintp(q) * um] = x[n0 + n, c0 + c, r, q]
        for i in range(kh):
            for j in range(kw):
                row = (c * kh + i) * kw + j
                for y in range(ho):
                    base = np.uintp(row * ld + y * wo * m)
                    src = np.uintp(((y * sh + i * dh) * wn + j * dw) * m)
                    for o in range(np.uintp(wo)):
                        b = base + o * um
                        a = src + o * np.uintp(sw) * um
                        for t in range(um):
                            col[b + t] = xp[a + t]


@driver
def phase_size(ho, wo, kh, kw, sh, sw, dh, dw):
    """Elements per channel of :func:`col2im`'s scratch: the padded plane as ``sh * sw`` phases."""
    hn, wn = window_extent(ho, kh, sh, dh), window_extent(wo, kw, sw, dw)
    return sh * sw * ((hn + sh - 1) // sh) * ((wn + sw - 1) // sw)


@driver
def col2im(col, ld, dx, n0, m, c0, C, kh, kw, sh, sw, dh, dw, pt, pl, ho, wo, xp):
    """Transpose of :func:`im2col` for ``m`` images at once: ``dx[n0 : n0 + m, c0 : c0 +
    C]`` = the sum of every column entry at its place.

    ``col``'s columns run over positions, then images (``q = (y*wo + o)*m +
    n``), so one window row of all the images is ``wo*m`` contiguous entries:
    a vector add even when ``wo`` is 4 (rows of 4 entries, one image at a
    time, took a fifth of a DCGAN generator layer's time).  Each channel's
    sums go into the scratch ``xp`` (``m * phase_size(...)`` elements): the
    padded plane split into its ``sh * sw`` stride phases, images innermost;
    the phases are then interleaved into ``dx``, image by image.
    """
    H, W = dx.shape[2], dx.shape[3]
    hn, wn = window_extent(ho, kh, sh, dh), window_extent(wo, kw, sw, dw)
    hs, ws = (hn + sh - 1) // sh, (wn + sw - 1) // sw
    plane = hs * ws * m
    run = np.uintp(wo * m)
    r1, s1 = min(H, hn - pt), min(W, wn - pl)
    Ctot = dx.shape[1]
    dxf = dx.reshape(-1)
    # every element of the planes is written unless some rows or columns are
    # out of every window's reach (then the planes are zeroed first)
    r0, s0 = max(0, -pt), max(0, -pl)
    covered = r0 == 0 and s0 == 0 and r1 == H and s1 == W
    # padded (r + pt, s + pl) is phase ((r + pt) % sh, (s + pl) % sw) at
    # ((r + pt) // sh, (s + pl) // sw): each row's offset in the phases, and
    # per column phase its first column, offset and length, computed once
    # (recomputed for every row of every image, they cost 5-8% of DCGAN's
    # transposed convolutions)
    rsrc = np.empty(max(r1, 1), dtype=np.uintp)
    for r in range(r0, r1):
        rsrc[r] = (r + pt) % sh * sw * plane + (r + pt) // sh * ws * m
    cfirst = np.empty(sw, dtype=np.uintp)
    csrc = np.empty(sw, dtype=np.uintp)
    ccount = np.empty(sw, dtype=np.uintp)
    for b in range(sw):
        first = s0 + (b - pl - s0) % sw  # the first column >= s0 with (s + pl) % sw == b
        cfirst[b] = first
        csrc[b] = b * plane + (first + pl) // sw * m
        ccount[b] = max(0, (s1 - first + sw - 1) // sw)
    usw, um = np.uintp(sw), np.uintp(m)
    for c in range(C):
        xp[: sh * sw * plane] = 0
        for i in range(kh):
            a, u0 = (i * dh) % sh, (i * dh) // sh
            for j in range(kw):
                b, v0 = (j * dw) % sw, (j * dw) // sw
                row = (c * kh + i) * kw + j
                pbase = (a * sw + b) * plane + (u0 * ws + v0) * m
                for y in range(ho):
                    # unsigned indices: see im2col
                    d = np.uintp(pbase + y * ws * m)
                    base = np.uintp(row * ld + y * wo * m)
                    for t in range(run):
                        xp[d + t] += col[base + t]
        for n in range(m):
            # flat, unsigned offsets into dx: a 2-D view per image and signed
            # indices (tested for wrap-around) were a fifth to a quarter of this function
            obase = np.uintp(((n0 + n) * Ctot + c0 + c) * H * W)
            if not covered:
                zero_run(dxf, obase, H * W)
            for r in range(r0, r1):
                rbase = obase + np.uintp(r * W)
                src = rsrc[r] + np.uintp(n)
                for b in range(sw):
                    d, q = rbase + cfirst[b], src + csrc[b]
                    for k in range(ccount[b]):
                        dxf[d + k * usw] = xp[q + k * um]


@driver
def tap_offsets(cin, ld, kh, kw, dh, dw, width):
    """``off[(c*kh + i)*kw + j] = c*ld + i*dh*width + j*dw`` (views of a padded image)."""
    t = np.empty(cin * kh * kw, dtype=np.intp)
    for c in range(cin):
        for i in range(kh):
            for j in range(kw):
                t[(c * kh + i) * kw + j] = c * ld + i * dh * width + j * dw
    return t


@driver
def image_chunk(n, groups, per_image, target, rows):
    """Images per GEMM: ``target`` columns' worth, fewer when ``rows`` of them would leave
    the L2 (down to ``MIN_COLUMNS``), leaving ``MIN_CHUNKS`` tasks if possible."""
    target = max(MIN_COLUMNS, min(target, L2_ELEMENTS // max(1, rows)))
    nc = max(1, min(n, (target + per_image - 1) // per_image))
    spread = max(1, (n * groups) // MIN_CHUNKS)
    return max(1, min(nc, spread))


@driver
def row_splits(items, rows):
    """How many blocks of output rows to cut each item into (to have enough tasks)."""
    want = (SPLIT_TASKS + items - 1) // items
    return max(1, min(rows, want))


# --------------------------------------------------------------------------
# forward


@driver
def pointwise_strided(kh, kw, sh, sw, pt, pb, pl, pr):
    """A 1x1 convolution with a stride and no padding (a ResNet shortcut)."""
    unpadded = pt == 0 and pb == 0 and pl == 0 and pr == 0
    return kh == 1 and kw == 1 and (sh != 1 or sw != 1) and unpadded


@kernel
def subsample(x, sh, sw, ho, wo):
    """``x[:, :, ::sh, ::sw]``, its first ``ho x wo``, as a new contiguous array."""
    N, C = x.shape[0], x.shape[1]
    xs = np.empty((N, C, ho, wo), dtype=x.dtype)
    for t in prange(N * C):
        n, c = t // C, t % C
        for y in range(ho):
            for o in range(wo):
                xs[n, c, y, o] = x[n, c, y * sh, o * sw]
    return xs


# A strided 1x1 convolution without padding is a unit-stride one of the
# subsampled input: a GEMM over views, where the strided path unrolled a
# padded copy of every image for a reduction of Cg steps (ResNet-20's
# shortcut, (128, 16, 32, 32) x 32 filters: 4 ms a pass on one thread).


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
    Fg = F // G
    K = Cg * kh * kw
    nr = panel_width(x)
    kf = k.reshape(-1)
    of = out.reshape(-1)
    xf = x.reshape(-1)
    arow = row_table(Fg, K)
    items = N * G
    if sh == 1 and sw == 1:
        Hp, Wp = H + pt + pb, W + pl + pr
        L = Hp * Wp + (kw - 1) * dw + nr
        boff = tap_offsets(Cg, L, kh, kw, dh, dw, Wp)
        nsplit = row_splits(items, Ho)
        for task in prange(items * nsplit):
            it, s = task // nsplit, task % nsplit
            n, g = it // G, it % G
            y0, y1 = s * Ho // nsplit, (s + 1) * Ho // nsplit
            if y1 <= y0:
                continue
            # each task pads its image into its own buffer, which stays in
            # the core's cache for the product (a padded copy of the whole
            # batch went out to L3 and came back: a quarter of the time)
            pbuf = np.empty(Cg * L, dtype=x.dtype)
            pad_into(xf, (n * C + g * Cg) * H * W, Cg, H, W, pbuf, 0, L, Hp, Wp, pt, pl)
            panel = np.empty(padded_rows(Fg) * nr, dtype=x.dtype)
            ncols = (y1 - y0 - 1) * Wp + Wo
            gemm(
                Fg,
                ncols,
                K,
                kf,
                g * Fg * K,
                arow,
                pbuf,
                y0 * Wp,
                boff,
                of,
                (n * F + g * Fg) * Ho * Wo + y0 * Wo,
                Ho * Wo,
                Wp,
                Wo,
                panel,
            )
        return
    # strided: the unrolled windows of ``nc`` images side by side, one GEMM per group
    Q = Ho * Wo
    nc = image_chunk(N, G, Q, CHUNK_COLUMNS, K)
    chunks = (N + nc - 1) // nc
    ld = nc * Q + nr
    boff = np.arange(K) * ld
    for task in prange(G * chunks):
        g, n0 = task // chunks, (task % chunks) * nc
        m = min(nc, N - n0)
        col = np.empty(K * ld, dtype=x.dtype)
        xp = np.empty(im2col_scratch(Cg, m, Ho, Wo, kh, kw, sh, sw, dh, dw), dtype=x.dtype)
        im2col(x, n0, m, g * Cg, Cg, col, ld, kh, kw, sh, sw, dh, dw, pt, pl, Ho, Wo, xp)
        for r in range(K):  # the columns past the last image: read, never stored
            zero_run(col, r * ld + m * Q, ld - m * Q)
        panel = np.empty(padded_rows(Fg) * nr, dtype=x.dtype)
        if not images_inner(m, Wo):
            # column j*Q + p is out[n0 + j, g*Fg + f, p]: rows of Q, F*Q apart
            gemm(
                Fg, m * Q, K, kf, g * Fg * K, arow, col, 0, boff, of, (n0 * F + g * Fg) * Q, Q,
                Q, F * Q, panel,
            )  # fmt: skip
            continue
        # column p*m + j is out[n0 + j, g*Fg + f, p]: a product, then the images apart
        res = np.empty(Fg * m * Q, dtype=x.dtype)
        gemm(Fg, m * Q, K, kf, g * Fg * K, arow, col, 0, boff, res, 0, m * Q, m * Q, m * Q, panel)
        um = np.uintp(m)
        for f in range(Fg):
            for j in range(m):
                d = np.uintp(((n0 + j) * F + g * Fg + f) * Q)
                src = np.uintp(f * m * Q + j)
                for q in range(np.uintp(Q)):
                    of[d + q] = res[src + q * um]


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


@kernel
def _grad_inputs(k, dy, dx, sh, sw, dh, dw, pt, pb, pl, pr, G):
    N, F, Ho, Wo = dy.shape
    C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    _, Cg, kh, kw = k.shape
    Fg = F // G
    T = kh * kw
    K = Cg * T
    nr = panel_width(dy)
    xf = dx.reshape(-1)
    yf = dy.reshape(-1)
    items = N * G
    if sh == 1 and sw == 1:
        # correlation of the padded output gradient with flipped, transposed filters
        kt = np.empty(G * Cg * Fg * T, dtype=dy.dtype)
        for g in range(G):
            for c in range(Cg):
                for f in range(Fg):
                    for i in range(kh):
                        for j in range(kw):
                            kt[((g * Cg + c) * Fg + f) * T + i * kw + j] = k[
                                g * Fg + f, c, kh - 1 - i, kw - 1 - j
                            ]
        arow = row_table(Cg, Fg * T)
        dkh, dkw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        Hq, Wq = H + dkh - 1, W + dkw - 1
        L = Hq * Wq + dkw - 1 + nr
        boff = tap_offsets(Fg, L, kh, kw, dh, dw, Wq)
        nsplit = row_splits(items, H)
        for task in prange(items * nsplit):
            it, s = task // nsplit, task % nsplit
            n, g = it // G, it % G
            y0, y1 = s * H // nsplit, (s + 1) * H // nsplit
            if y1 <= y0:
                continue
            qbuf = np.empty(Fg * L, dtype=dy.dtype)  # per task, as in conv_forward
            pad_into(
                yf, (n * F + g * Fg) * Ho * Wo, Fg, Ho, Wo, qbuf, 0, L, Hq, Wq, dkh - 1 - pt,
                dkw - 1 - pl,
            )  # fmt: skip
            panel = np.empty(padded_rows(Cg) * nr, dtype=dy.dtype)
            ncols = (y1 - y0 - 1) * Wq + W
            gemm(
                Cg,
                ncols,
                Fg * T,
                kt,
                g * Cg * Fg * T,
                arow,
                qbuf,
                y0 * Wq,
                boff,
                xf,
                (n * C + g * Cg) * H * W + y0 * W,
                H * W,
                Wq,
                W,
                panel,
            )
        return
    # strided: dcol = W^T dy for ``nc`` images side by side, then col2im
    # wt[g][kk, f] = k[g*Fg + f, kk]: in blocks of TB rows of kk (reads in
    # runs, TB write streams); reading k column by column cost a sixth of the
    # whole call on (256, 128, 4, 4) filters
    wt = np.empty(G * K * Fg, dtype=dy.dtype)
    kf = k.reshape(-1)
    nb = (K + TB - 1) // TB
    for blk in prange(G * nb):
        g, k0 = blk // nb, (blk % nb) * TB
        k1 = min(K, k0 + TB)
        for f in range(Fg):
            s = (g * Fg + f) * K
            for kk in range(k0, k1):
                wt[(g * K + kk) * Fg + f] = kf[s + kk]
    arow = row_table(K, Fg)
    P = Ho * Wo
    nc = image_chunk(N, G, P, CHUNK_COLUMNS, K)
    chunks = (N + nc - 1) // nc
    ld = nc * P + nr
    boff = np.arange(Fg) * ld
    for task in prange(G * chunks):
        g, n0 = task // chunks, (task % chunks) * nc
        m = min(nc, N - n0)
        ncol = m * P
        # ybuf[f, p*m + j] = dy[n0 + j, g*Fg + f, p]: positions, then images (see col2im)
        ybuf = np.empty(Fg * ld, dtype=dy.dtype)
        um = np.uintp(m)
        for f in range(Fg):
            for j in range(m):
                src = np.uintp(((n0 + j) * F + g * Fg + f) * P)
                d = np.uintp(f * ld + j)
                if m == 1:  # a plain copy, which vectorises
                    copy_run(ybuf, d, yf, src, P)
                    continue
                for p in range(np.uintp(P)):
                    ybuf[d + p * um] = yf[src + p]
            zero_run(ybuf, f * ld + ncol, ld - ncol)
        col = np.empty(K * ncol, dtype=dy.dtype)
        panel = np.empty(padded_rows(K) * nr, dtype=dy.dtype)
        gemm(
            K,
            ncol,
            Fg,
            wt,
            g * K * Fg,
            arow,
            ybuf,
            0,
            boff,
            col,
            0,
            ncol,
            ncol,
            ncol,
            panel,
        )
        xp = np.empty(m * phase_size(Ho, Wo, kh, kw, sh, sw, dh, dw), dtype=dy.dtype)
        col2im(col, ncol, dx, n0, m, g * Cg, Cg, kh, kw, sh, sw, dh, dw, pt, pl, Ho, Wo, xp)


# --------------------------------------------------------------------------
# filter gradient


@driver
def conv_grad_weights(x, dy, dk, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks):
    """``dk`` (F, Cg, kh, kw), oriented: sum over the batch of ``dy (x) windows(x)``
    (:func:`_grad_weights`; strided with at least ``SPLIT_TASKS`` channels per
    group, :func:`grad_weights_by_rows`)."""
    Ho, Wo = dy.shape[2], dy.shape[3]
    if pointwise_strided(dk.shape[2], dk.shape[3], sh, sw, pt, pb, pl, pr):
        _grad_weights(subsample(x, sh, sw, Ho, Wo), dy, dk, 1, 1, dh, dw, 0, 0, 0, 0, G, tasks)
    elif (sh != 1 or sw != 1) and dk.shape[1] >= SPLIT_TASKS:
        grad_weights_by_rows(x, dy, dk, sh, sw, dh, dw, pt, pl, G)
    else:
        _grad_weights(x, dy, dk, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks)


@kernel
def _grad_weights(x, dy, dk, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks):
    """``dk`` (F, Cg, kh, kw), oriented: sum over the batch of ``dy (x) windows(x)``.

    Computed as ``dW^T[kk, f] = sum_q A[kk, q] * dyT[q, f]`` with ``A`` the
    unrolled images (a view of the padded image for unit strides; for other
    strides the windows of several images side by side, so that one product
    sums over ``CHUNK_REDUCTION`` positions), in at most ``tasks`` partial
    sums over the images reduced at the end.  ``tasks`` is fixed by the
    wrapper, not by the threads a call gets, so the sums (and their rounding)
    are the same on one thread as on several.
    """
    N, C, H, W = x.shape
    F, Ho, Wo = dy.shape[1], dy.shape[2], dy.shape[3]
    _, Cg, kh, kw = dk.shape
    Fg = F // G
    T = kh * kw
    K = Cg * T
    nr = panel_width(x)
    fp = (Fg + nr - 1) // nr * nr  # dyT row length
    ntask = max(1, min(N, tasks))
    acc = np.zeros((ntask, G, K, Fg), dtype=x.dtype)
    accf = acc.reshape(-1)
    yf = dy.reshape(-1)
    xf = x.reshape(-1)
    Hp, Wp = H + pt + pb, W + pl + pr
    unit = sh == 1 and sw == 1
    P = Ho * Wo
    if unit:
        nc = 1
        cb = Cg
        L = Hp * Wp + (kw - 1) * dw + nr
        a_size = Cg * L
        arow = np.zeros(padded_rows(K), dtype=np.intp)
        arow[:K] = tap_offsets(Cg, L, kh, kw, dh, dw, Wp)
        Q = (Ho - 1) * Wp + Wo  # wide positions that carry outputs
        width = Wp
    else:
        nc = max(1, min(N, (CHUNK_REDUCTION + P - 1) // P))
        L = nc * P  # A row length: the positions of nc images
        # unrolled a block of channels at a time (cb channels: cb*T rows of A)
        cb = max(1, min(Cg, L2_ELEMENTS // (L * T)))
        a_size = cb * T * L
        arow = row_table(cb * T, L)
        Q = L
        width = Wo
    boff_q = np.arange(Q) * fp
    xp_size = 0
    if not unit:
        xp_size = im2col_scratch(cb, nc, Ho, Wo, kh, kw, sh, sw, dh, dw)
    if unit:
        nblk, bsize = 1, padded_rows(K) * fp
    else:
        nblk, bsize = (Cg + cb - 1) // cb, padded_rows(cb * T) * fp
    for task in prange(ntask):
        a_buf = np.empty(a_size, dtype=x.dtype)
        yt = np.empty(Q * fp + nr, dtype=x.dtype)
        if unit:
            yt[:] = 0  # the wide layout's gaps and the padded filters stay zero
        else:
            for q in range(Q):
                zero_run(yt, q * fp + Fg, fp - Fg)
            yt[Q * fp :] = 0
        # this task's partial dW^T, one tile block per channel block
        tiles = np.empty(nblk * bsize, dtype=x.dtype)
        xp = np.empty(xp_size, dtype=x.dtype)  # im2col's scratch
        n_lo, n_hi = task * N // ntask, (task + 1) * N // ntask
        for g in range(G):
            first = True
            for n0 in range(n_lo, n_hi, nc):
                m = min(nc, n_hi - n0)
                for j in range(m):
                    n = n0 + j
                    # dyT[column(y*width + x, j, ...), f] = dy[n, g*Fg + f, y, x]
                    # (im2col's columns; unit strides: one image, width Wp)
                    inner = not unit and images_inner(m, Wo)
                    step = np.uintp((m if inner else 1) * fp)
                    for f in range(Fg):
                        src = (n * F + g * Fg + f) * P
                        for y in range(Ho):
                            # unsigned indices: no wrap-around test per element
                            d = np.uintp(column(y * width, j, m, P, inner) * fp + f)
                            r = np.uintp(src + y * Wo)
                            for xx in range(np.uintp(Wo)):
                                yt[d + xx * step] = yf[r + xx]
                    if unit:
                        pad_into(
                            xf, (n * C + g * Cg) * H * W, Cg, H, W, a_buf, 0, L, Hp, Wp, pt, pl
                        )
                        gemm_tiles(K, Fg, Q, a_buf, 0, arow, yt, 0, boff_q, tiles, not first)
                        first = False
                if unit:
                    continue
                for blk in range(nblk):
                    c0, c1 = blk * cb, min(Cg, (blk + 1) * cb)
                    im2col(
                        x, n0, m, g * Cg + c0, c1 - c0, a_buf, L, kh, kw, sh, sw, dh, dw, pt, pl,
                        Ho, Wo, xp,
                    )  # fmt: skip
                    gemm_tiles(
                        (c1 - c0) * T, Fg, m * P, a_buf, 0, arow, yt, 0, boff_q,
                        tiles[blk * bsize :], not first,
                    )  # fmt: skip
                first = False
            if first:  # no images: acc stays zero
                continue
            base = (task * G + g) * K * Fg
            for blk in range(nblk):
                c0, c1 = blk * cb, min(Cg, (blk + 1) * cb)
                rows = K if unit else (c1 - c0) * T
                tile_rows(tiles[blk * bsize :], rows, Fg, accf, base + c0 * T * Fg, Fg)
    # dk[g*Fg + f, kk] = sum of the partial dW^T[kk, f]: a transpose, in blocks
    # of TB rows of kk so that the writes are runs and the reads TB streams
    dkf = dk.reshape(-1)
    nb = (K + TB - 1) // TB
    for blk in prange(G * nb):
        g, k0 = blk // nb, (blk % nb) * TB
        k1 = min(K, k0 + TB)
        for f in range(Fg):
            d = (g * Fg + f) * K
            for kk in range(k0, k1):
                s = acc[0, g, kk, f]
                for task in range(1, ntask):
                    s += acc[task, g, kk, f]
                dkf[d + kk] = s


@kernel
def grad_weights_by_rows(x, dy, dk, sh, sw, dh, dw, pt, pl, G):
    """The strided filter gradient, split over blocks of channels instead of images.

    Each task owns the rows ``kk`` of ``dW^T`` of a block of channels and sums
    over the whole batch in its micro-kernel tiles, so no partial sums are
    stored and reduced: for (64, 128, 8, 8) images and 256 filters, eight
    partial ``dW^T`` were 16 MB to zero, write and add (a third of the
    time).  ``dy`` is transposed once for the batch and shared.  Every
    element is one chain of sums over the images in order, whatever the
    threads.
    """
    N, C, H, W = x.shape
    F, Ho, Wo = dy.shape[1], dy.shape[2], dy.shape[3]
    _, Cg, kh, kw = dk.shape
    Fg = F // G
    T = kh * kw
    K = Cg * T
    P = Ho * Wo
    nr = panel_width(x)
    fp = (Fg + nr - 1) // nr * nr
    nc = max(1, min(N, (CHUNK_REDUCTION + P - 1) // P))  # images per product
    L = nc * P
    # dyT[g][n0*P + column(p, j, ...), f] = dy[n0 + j, g*Fg + f, p] for the chunk
    # of m images from n0 (im2col's columns); the columns past Fg stay zero
    gsize = N * P * fp
    yt = np.empty(G * gsize + nr, dtype=x.dtype)
    yt[G * gsize :] = 0
    yf = dy.reshape(-1)
    for it in prange(G * N):
        g, n = it // N, it % N
        n0 = n // nc * nc
        m, j = min(nc, N - n0), n - n0
        inner = images_inner(m, Wo)
        base = g * gsize + n0 * P * fp
        for p in range(P):
            q = base + column(p, j, m, P, inner) * fp
            zero_run(yt, q + Fg, fp - Fg)
        d0 = base + column(0, j, m, P, inner) * fp
        step = np.uintp((m if inner else 1) * fp)
        for f in range(Fg):
            # unsigned indices: no wrap-around test per element
            d = np.uintp(d0 + f)
            r = np.uintp((n * F + g * Fg + f) * P)
            for p in range(np.uintp(P)):
                yt[d + p * step] = yf[r + p]
    cb = max(1, min((Cg + SPLIT_TASKS - 1) // SPLIT_TASKS, L2_ELEMENTS // (L * T)))
    nblk = (Cg + cb - 1) // cb
    arow = row_table(cb * T, L)
    boff = np.arange(L) * fp
    xp_size = im2col_scratch(cb, nc, Ho, Wo, kh, kw, sh, sw, dh, dw)
    dkf = dk.reshape(-1)
    for task in prange(G * nblk):
        g, blk = task // nblk, task % nblk
        c0, c1 = blk * cb, min(Cg, (blk + 1) * cb)
        rows = (c1 - c0) * T
        mp = padded_rows(rows)
        a_buf = np.empty(cb * T * L, dtype=x.dtype)
        xp = np.empty(xp_size, dtype=x.dtype)
        tiles = np.zeros(mp * fp, dtype=x.dtype)  # stays zero without images
        for n0 in range(0, N, nc):
            m = min(nc, N - n0)
            im2col(
                x, n0, m, g * Cg + c0, c1 - c0, a_buf, L, kh, kw, sh, sw, dh, dw, pt, pl, Ho, Wo,
                xp,
            )  # fmt: skip
            gemm_tiles(
                rows, Fg, m * P, a_buf, 0, arow, yt, g * gsize + n0 * P * fp, boff, tiles, n0 > 0
            )
        # dk[g*Fg + f, c0*T + r] = dW^T[r, f]: contiguous writes, reads nr apart
        for f in range(Fg):
            jp, j = f // nr, f % nr
            d = np.uintp((g * Fg + f) * K + c0 * T)
            t = np.uintp(jp * mp * nr + j)
            for r in range(np.uintp(rows)):
                dkf[d + r] = tiles[t + r * np.uintp(nr)]


# --------------------------------------------------------------------------
# matrix product (lasagne_bn.ops.matmul.MatMul)


@driver
def product_blocks(m, n, nr):
    """Rows and columns per task of :func:`matmul`: at most cache-sized blocks of
    equal size (``prange`` gives each thread a contiguous run of tasks, so
    unequal blocks leave a thread idle), split further, the larger side first,
    until there are ``SPLIT_TASKS`` of them or they are one tile."""
    nrb = (padded_rows(m) + MC - 1) // MC
    ncb = (n + NC - 1) // NC
    while True:
        rb = ((m + nrb - 1) // nrb + MR - 1) // MR * MR
        cb = ((n + ncb - 1) // ncb + nr - 1) // nr * nr
        if nrb * ncb >= SPLIT_TASKS or (rb <= MR and cb <= nr):
            return rb, cb
        if rb > MR and (rb >= cb or cb <= nr):
            nrb *= 2
        else:
            ncb *= 2


@kernel
def skinny_product(a, b, out):
    """``out = a @ b`` when a side is too narrow for the micro-kernel's tiles.

    A matrix-vector product (a dense layer's gradient, ``(4096, 64) x (64,
    1)``) filled one column of each 32-wide panel and an outer product
    (``k`` = 1) reloaded the tiles for every rank-1 update: both took about
    a millisecond.  Here, per block of ``MR`` rows: with few columns, ``MR``
    independent sums per column; otherwise (few rows or a short reduction)
    each row of ``out`` accumulates rows of ``b`` scaled by ``a``, a
    vector loop over the columns.  Each element is one chain of sums over
    ``k`` in order, whatever the threads.
    """
    m, k = a.shape
    n = b.shape[1]
    of = out.reshape(-1)
    for blk in prange((m + MR - 1) // MR):
        i0 = blk * MR
        rows = min(MR, m - i0)
        if n < SKINNY and k >= SKINNY and rows == MR:
            acc = np.empty(MR, dtype=a.dtype)
            for j in range(n):
                acc[:] = 0
                for p in range(k):
                    bj = b[p, j]
                    for r in range(MR):
                        acc[r] += a[i0 + r, p] * bj
                for r in range(MR):
                    of[(i0 + r) * n + j] = acc[r]
            continue
        for i in range(i0, i0 + rows):
            d = np.uintp(i * n)
            for j in range(np.uintp(n)):
                of[d + j] = 0
            for p in range(k):
                s = a[i, p]
                for j in range(np.uintp(n)):
                    of[d + j] += s * b[p, j]


@kernel
def matmul(a, b, out):
    """``out = a @ b`` for C-contiguous ``a`` (m, k), ``b`` (k, n) and ``out`` (m, n).

    ``b`` is copied into rows padded by a panel (the micro-kernel reads
    whole panels); each task computes one block of ``out`` with
    :func:`gemm`, every element one chain of FMAs over ``k`` in order, so
    the bits do not depend on the thread count.
    """
    m, k = a.shape
    n = b.shape[1]
    of = out.reshape(-1)
    if k == 0:
        of[:] = 0
        return
    if n < SKINNY or k < SKINNY or m < MR:
        skinny_product(a, b, out)
        return
    nr = panel_width(a)
    ldb = n + nr
    bp = np.empty(k * ldb, dtype=a.dtype)
    bf = b.reshape(-1)
    for r in prange(k):
        copy_run(bp, r * ldb, bf, r * n, n)
        zero_run(bp, r * ldb + n, ldb - n)
    boff = np.arange(k) * ldb
    af = a.reshape(-1)
    rb, cb = product_blocks(m, n, nr)
    ncb = (n + cb - 1) // cb
    for task in prange(((m + rb - 1) // rb) * ncb):
        r0, c0 = (task // ncb) * rb, (task % ncb) * cb
        mm, nn = min(rb, m - r0), min(cb, n - c0)
        panel = np.empty(padded_rows(mm) * ((nn + nr - 1) // nr * nr), dtype=a.dtype)
        gemm(
            mm, nn, k, af, r0 * k, row_table(mm, k), bp, c0, boff, of, r0 * n + c0, n, nn, nn,
            panel,
        )  # fmt: skip


# --------------------------------------------------------------------------
# 3-D: a sum over depth taps of 2-D convolutions
#
# Output plane ``z`` of a 3-D convolution is ``sum_i conv2d(x[:, :, z*sd +
# i*dd - pf], k[:, :, i])``.  For each depth tap ``i`` the input planes it
# reads are gathered into a batch of ``N * Do`` images (zeros in the
# padding), and the 2-D kernels above do the work on that batch: the
# filters' depth taps cost ``kd`` passes of the tuned 2-D GEMMs and a copy
# of the input per tap.


@kernel
def gather_depth(x, xs, i, sd, dd, pf):
    """``xs[n*Do + z] = x[n, :, z*sd + i*dd - pf]``, zeros where that plane is padding."""
    N, D = x.shape[0], x.shape[2]
    Do = xs.shape[0] // N
    for t in prange(N * Do):
        n, z = t // Do, t % Do
        d = z * sd + i * dd - pf
        if 0 <= d < D:
            xs[t] = x[n, :, d]
        else:
            xs[t] = 0


@kernel
def scatter_depth(src, dst, i, sd, dd, pf):
    """``dst[n, :, z*sd + i*dd - pf] += src[n*Do + z]`` where that plane exists.

    Race-free: for one tap, distinct ``z`` give distinct planes.
    """
    N, D = dst.shape[0], dst.shape[2]
    Do = src.shape[0] // N
    for t in prange(N * Do):
        n, z = t // Do, t % Do
        d = z * sd + i * dd - pf
        if 0 <= d < D:
            dst[n, :, d] += src[t]


@kernel
def depth_to_batch(y, ys):
    """``ys[n*Do + z] = y[n, :, z]`` ((N, F, Do, H, W) -> (N*Do, F, H, W))."""
    N, Do = y.shape[0], y.shape[2]
    for t in prange(N * Do):
        ys[t] = y[t // Do, :, t % Do]


@kernel
def batch_to_depth(ys, y):
    """The inverse of :func:`depth_to_batch`."""
    N, Do = y.shape[0], y.shape[2]
    for t in prange(N * Do):
        y[t // Do, :, t % Do] = ys[t]


@driver
def conv3d_forward(x, k, out, sd, sh, sw, dd, dh, dw, pf, pt, pb, pl, pr, G):
    """``out = conv(x, k)`` in 3-D; ``k`` is ``(F, Cg, kd, kh, kw)``, already oriented."""
    N, C, H, W = x.shape[0], x.shape[1], x.shape[3], x.shape[4]
    F, kd = k.shape[0], k.shape[2]
    Do, Ho, Wo = out.shape[2], out.shape[3], out.shape[4]
    xs = np.empty((N * Do, C, H, W), dtype=x.dtype)
    acc = np.empty((N * Do, F, Ho, Wo), dtype=x.dtype)
    tmp = np.empty((N * Do, F, Ho, Wo), dtype=x.dtype) if kd > 1 else acc
    for i in range(kd):
        gather_depth(x, xs, i, sd, dd, pf)
        ki = np.ascontiguousarray(k[:, :, i])
        conv_forward(xs, ki, acc if i == 0 else tmp, sh, sw, dh, dw, pt, pb, pl, pr, G)
        if i > 0:
            add_into(acc, tmp)
    batch_to_depth(acc, out)


@kernel
def add_into(dst, src):
    """``dst += src`` (same shapes, contiguous), in parallel."""
    a = dst.reshape(-1)
    b = src.reshape(-1)
    for j in prange(a.size):
        a[j] += b[j]


@driver
def conv3d_grad_inputs(k, dy, dx, sd, sh, sw, dd, dh, dw, pf, pt, pb, pl, pr, G):
    """``dx = conv^T(dy)`` in 3-D, overwritten; ``k`` oriented as in the forward pass."""
    N, F, Do = dy.shape[0], dy.shape[1], dy.shape[2]
    C, H, W = dx.shape[1], dx.shape[3], dx.shape[4]
    kd = k.shape[2]
    ys = np.empty((N * Do, F, dy.shape[3], dy.shape[4]), dtype=dy.dtype)
    depth_to_batch(dy, ys)
    tmp = np.empty((N * Do, C, H, W), dtype=dy.dtype)
    dx[:] = 0
    for i in range(kd):
        ki = np.ascontiguousarray(k[:, :, i])
        conv_grad_inputs(ki, ys, tmp, sh, sw, dh, dw, pt, pb, pl, pr, G)
        scatter_depth(tmp, dx, i, sd, dd, pf)


@driver
def conv3d_grad_weights(x, dy, dk, sd, sh, sw, dd, dh, dw, pf, pt, pb, pl, pr, G, tasks):
    """``dk`` (F, Cg, kd, kh, kw), oriented: one 2-D filter gradient per depth tap."""
    N, C, H, W = x.shape[0], x.shape[1], x.shape[3], x.shape[4]
    F, Do = dy.shape[1], dy.shape[2]
    Cg, kd, kh, kw = dk.shape[1], dk.shape[2], dk.shape[3], dk.shape[4]
    ys = np.empty((N * Do, F, dy.shape[3], dy.shape[4]), dtype=dy.dtype)
    depth_to_batch(dy, ys)
    xs = np.empty((N * Do, C, H, W), dtype=x.dtype)
    dki = np.empty((F, Cg, kh, kw), dtype=x.dtype)
    for i in range(kd):
        gather_depth(x, xs, i, sd, dd, pf)
        conv_grad_weights(xs, ys, dki, sh, sw, dh, dw, pt, pb, pl, pr, G, tasks)
        dk[:, :, i] = dki


# --------------------------------------------------------------------------
# C-callable entry points: array pointers and an int64 parameter vector in.
# PyTensor's generated functions call these through pointers (see
# _codegen.py) instead of linking the kernels' IR into every graph, which
# made each new ``pytensor.function`` with a convolution re-optimize the
# parallel kernels (tens of seconds per function).

CONV_DIMS = 19  # N, C, H, W, F, Cg, kh, kw, Ho, Wo, sh, sw, dh, dw, pt, pb, pl, pr, G
# N, C, D, H, W, F, Cg, kd, kh, kw, Do, Ho, Wo, sd, sh, sw, dd, dh, dw, pf, pk, pt, pb, pl, pr, G
CONV3D_DIMS = 26


@driver
def _conv_call(d_ptr, size):
    """A 2-D call's parameter vector (``size`` long), the shapes of its input, filters
    and output, the kernel's other arguments, and the thread count it replaced (set
    for its multiply-adds, N F Ho Wo Cg kh kw)."""
    d = carray(d_ptr, (size,))
    shapes = (d[0], d[1], d[2], d[3]), (d[4], d[5], d[6], d[7]), (d[0], d[4], d[8], d[9])
    params = (d[10], d[11], d[12], d[13], d[14], d[15], d[16], d[17], d[18])
    return d, shapes, params, enter_threads(d[0] * d[4] * d[8] * d[9] * d[5] * d[6] * d[7], CONV)


@driver
def _conv3d_call(d_ptr, size):
    """As :func:`_conv_call` for a 3-D call (N F Do Ho Wo Cg kd kh kw multiply-adds; the
    depth padding after, ``pk``, is not a kernel argument)."""
    d = carray(d_ptr, (size,))
    x, k = (d[0], d[1], d[2], d[3], d[4]), (d[5], d[6], d[7], d[8], d[9])
    shapes = x, k, (d[0], d[5], d[10], d[11], d[12])
    params = (d[13], d[14], d[15], d[16], d[17], d[18], d[19], d[21], d[22], d[23], d[24], d[25])
    work = d[0] * d[5] * d[10] * d[11] * d[12] * d[6] * d[7] * d[8] * d[9]
    return d, shapes, params, enter_threads(work, CONV)


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


def _conv3d_forward_entry(x_ptr, k_ptr, out_ptr, d_ptr):
    _, (xs, ks, ys), params, previous = _conv3d_call(d_ptr, CONV3D_DIMS)
    conv3d_forward(carray(x_ptr, xs), carray(k_ptr, ks), carray(out_ptr, ys), *params)
    set_num_threads(previous)
    return 0


def _conv3d_grad_inputs_entry(k_ptr, dy_ptr, dx_ptr, d_ptr):
    _, (xs, ks, ys), params, previous = _conv3d_call(d_ptr, CONV3D_DIMS)
    conv3d_grad_inputs(carray(k_ptr, ks), carray(dy_ptr, ys), carray(dx_ptr, xs), *params)
    set_num_threads(previous)
    return 0


def _conv3d_grad_weights_entry(x_ptr, dy_ptr, dk_ptr, d_ptr):
    d, (xs, ks, ys), params, previous = _conv3d_call(d_ptr, CONV3D_DIMS + 1)  # + tasks
    conv3d_grad_weights(carray(x_ptr, xs), carray(dy_ptr, ys), carray(dk_ptr, ks), *params, d[26])
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
    "conv_forward": (_conv_forward_entry, 3),
    "conv_grad_inputs": (_conv_grad_inputs_entry, 3),
    "conv_grad_weights": (_conv_grad_weights_entry, 3),
    "conv3d_forward": (_conv3d_forward_entry, 3),
    "conv3d_grad_inputs": (_conv3d_grad_inputs_entry, 3),
    "conv3d_grad_weights": (_conv3d_grad_weights_entry, 3),
    "matmul": (_matmul_entry, 3),
}
