"""Fused, parallel batch-norm kernels for Numba (the default backend).

Every kernel works on a contiguous 3-D view ``(outer, channels, inner)`` of
the input (see :mod:`lasagne_bn.ops.layout`) and per-channel float64
vectors.  Pass structure, as in PyTorch's native CPU kernels:

- training forward: one pass for the statistics (shifted sums in float64,
  so ``1e6 + N(0, 1)`` keeps its variance) and one pass writing the output;
- training backward: one pass for the two reductions and one writing ``dx``;
- inference: one pass.

With ``inner > 1`` (NCHW) the work is split over (channel, batch-chunk)
pairs with contiguous inner loops; with ``inner == 1`` (dense, NHWC) the
reductions are split over tiles of (channel block, batch chunk), each
accumulating its block of channels row by row, so the innermost loop is
always the contiguous one.  No full-size temporary is made besides the
outputs.

Sums are float64.  The elementwise passes on float32 input compute
in float32 (as PyTorch and cuDNN do): the shift/mean they subtract is a
float32 value, so ``x - mean`` is as exact as in float64, and the rest is
one multiply-add rounded once more than the output; it makes those passes
memory-bound instead of conversion-bound.

The elementwise passes are cut into chunks of about ``CHUNK_BYTES``, a
``prange`` over them (same bits on any number of threads).

The drivers are exported as C-callable functions (``ENTRIES``; see
:class:`lasagne_bn.ops.numba._codegen.EntryPoints`), one per input dtype,
compiled on first use and cached on disk.
"""

from __future__ import annotations

import platform
import sys

import numba
import numpy as np
from llvmlite import ir
from numba import prange, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from lasagne_bn.ops.numba.jit import njit
from lasagne_bn.ops.numba.threads import (
    BATCH_NORM,
    ensure_symbols,
    enter_threads,
    set_num_threads,
)

# No "reassoc": with it LLVM picks the order of a vectorised sum each time it
# optimizes the loop, and Numba runs a parallel kernel's loop body optimized
# once when it has just compiled it but optimized twice (linked into its
# caller) when it loads it from the disk cache, so one seed trained to other
# last bits on a cold cache than on a warm one.  The sums that need vectors
# are written with them instead (:func:`_row_sums`), in a fixed order.
FASTMATH = {"contract", "nsz", "arcp"}  # NaN/Inf still propagate

TASKS = 32

# Start Numba's thread pool and register the thread-policy symbols now: this
# module is imported only when a kernel is about to be compiled.  Kernels
# loaded from the on-disk cache and linked into a freshly compiled PyTensor
# function do not start the pool, and the parallel-for launcher is then a
# null pointer (a segfault on first call).
ensure_symbols()

kernel = njit(parallel=True, fastmath=FASTMATH, cache=True, nogil=True)
driver = njit(fastmath=FASTMATH, cache=True, nogil=True)


@driver
def _splits(n_items: int, n_groups: int) -> int:
    """How many chunks to cut ``n_items`` into so that there are >= 32 tasks.

    A fixed task count (not the thread count, which would make the kernels
    uncacheable) keeps up to 32 threads busy; partial sums are tiny.
    """
    want = (TASKS + n_groups - 1) // n_groups
    return max(1, min(n_items, want))


# Channel-vector bytes from which the 2D elementwise passes sweep two rows at once
PAIR_SWEEP_BYTES = 8192
# Bytes of the input per chunk of an elementwise pass.
CHUNK_BYTES = 1 << 16

# Columns per tile of the 2D (inner == 1) reductions: the tile's float64
# partial sums (2 x 2 KiB) stay in L1 while its rows stream past.
COLUMN_BLOCK = 256


@driver
def _outer_splits(A: int, C: int) -> int:
    """Row chunks for the 2D reductions, given the column blocks."""
    return _splits(A, (C + COLUMN_BLOCK - 1) // COLUMN_BLOCK)


@driver
def _tile(t: int, nsplit: int, A: int, C: int):
    """First column, column count, and rows ``[a0, a1)`` of tile ``t``."""
    block = t // nsplit
    j = t - block * nsplit
    c0 = block * COLUMN_BLOCK
    return c0, min(C, c0 + COLUMN_BLOCK) - c0, j * A // nsplit, (j + 1) * A // nsplit


# --------------------------------------------------------------------------
# float16, as uint16 bits: IEEE binary16 <-> float64 in integer code
#
# The kernels never see a float16 type (Numba has none on the CPU): the
# wrappers pass float16 buffers as uint16, loads widen each element exactly
# to float64 and stores round a float64 once, to nearest even, as LLVM's
# ``fptrunc`` (and NumPy's ``astype``) do.  No LLVM ``half`` and no libcall.


@intrinsic
def _bits_of(typingctx, x):
    """The IEEE bits of a float64, as uint64."""
    if x != types.float64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.uint64(types.float64), codegen


@intrinsic
def _float_of(typingctx, bits):
    """The float64 whose IEEE bits are ``bits`` (uint64)."""
    if bits != types.uint64:
        return None

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.uint64), codegen


_bits = njit(cache=True, nogil=True)


@_bits
def half_bits_to_float64(h):
    """The float64 value of the float16 whose bits are ``h`` (exact)."""
    h = np.uint64(h)
    sign = (h & np.uint64(0x8000)) << np.uint64(48)
    exp = (h >> np.uint64(10)) & np.uint64(0x1F)
    mant = h & np.uint64(0x3FF)
    if exp == 0:
        value = np.float64(mant) * 5.9604644775390625e-08  # 2**-24: subnormals and zero
        return -value if sign else value
    if exp == 31:  # inf, or NaN with its payload (made quiet, as a conversion does)
        bits = np.uint64(0x7FF0000000000000) | (mant << np.uint64(42))
        if mant:
            bits |= np.uint64(0x0008000000000000)
        return _float_of(sign | bits)
    return _float_of(sign | ((exp + np.uint64(1008)) << np.uint64(52)) | (mant << np.uint64(42)))


@_bits
def float64_to_half_bits(x):
    """The bits of ``x`` rounded once to float16 (to nearest, ties to even)."""
    b = _bits_of(np.float64(x))
    sign = (b >> np.uint64(48)) & np.uint64(0x8000)
    exp = np.int64((b >> np.uint64(52)) & np.uint64(0x7FF))
    mant = b & np.uint64(0xFFFFFFFFFFFFF)
    if exp == 0x7FF:
        if mant == 0:
            return np.uint16(sign | np.uint64(0x7C00))
        # NaN: quiet, with the payload's top bits
        return np.uint16(sign | np.uint64(0x7E00) | ((mant >> np.uint64(42)) & np.uint64(0x1FF)))
    e = exp - 1008  # the float16 biased exponent (1023 - 15)
    if e >= 31:
        return np.uint16(sign | np.uint64(0x7C00))  # >= 2**16: infinity
    if e >= 1:
        m = (np.uint64(e) << np.uint64(10)) | (mant >> np.uint64(42))
        rest = mant & np.uint64(0x3FFFFFFFFFF)
        half = np.uint64(0x20000000000)
        if rest > half or (rest == half and (m & np.uint64(1))):
            m += np.uint64(1)  # a carry moves into the exponent (up to infinity): right
        return np.uint16(sign | m)
    # a float16 subnormal (or zero): the significand in units of 2**-24
    shift = 1051 - exp  # >= 43
    if shift > 53:
        return np.uint16(sign)  # below half the smallest subnormal: zero
    sig = mant | np.uint64(0x10000000000000)
    m = sig >> np.uint64(shift)
    rest = sig & ((np.uint64(1) << np.uint64(shift)) - np.uint64(1))
    half = np.uint64(1) << np.uint64(shift - 1)
    if rest > half or (rest == half and (m & np.uint64(1))):
        m += np.uint64(1)
    return np.uint16(sign | m)


def _f64(value):
    """An array element as float64 (float16 arrives as its uint16 bits)."""


@overload(_f64, jit_options={"fastmath": FASTMATH})
def _f64_impl(value):
    if value == types.uint16:
        return lambda value: half_bits_to_float64(value)
    return lambda value: np.float64(value)


def _store(value, out):
    """``value`` as an element of ``out`` (uint16 ``out`` holds float16 bits)."""


@overload(_store, jit_options={"fastmath": FASTMATH})
def _store_impl(value, out):
    if out.dtype == types.uint16:
        return lambda value, out: float64_to_half_bits(value)
    return lambda value, out: value


# --------------------------------------------------------------------------
# reductions: per channel, the sums of two terms of each element
#
# With ``y`` (the backward pass): ``y`` and ``y * (x - center)``; with
# ``y=None`` (the statistics): ``x - center`` and ``(x - center)**2``.  One
# kernel per layout serves both, compiled apart for each (``None`` is a type).


def _terms(x, y, i, center):
    """The two summands of element ``i`` of ``x`` (and of ``y``, or ``None``)."""


@overload(_terms, jit_options={"fastmath": FASTMATH})
def _terms_impl(x, y, i, center):
    if y is types.none:

        def shifted(x, y, i, center):
            d = _f64(x[i]) - center
            return d, d * d

        return shifted

    def weighted(x, y, i, center):
        v = _f64(y[i])
        return v, v * (_f64(x[i]) - center)

    return weighted


def _row(y2, a, c0, n):
    """``y2[a, c0 : c0 + n]``, or ``None`` for no ``y2``."""


@overload(_row, jit_options={"fastmath": FASTMATH})
def _row_impl(y2, a, c0, n):
    if y2 is types.none:
        return lambda y2, a, c0, n: None
    return lambda y2, a, c0, n: y2[a, c0 : c0 + n]


SUM_LANES = 8  # float64 lanes per vector accumulator (one AVX-512 register)
SUM_VECTORS = 2  # accumulators per sum, so consecutive adds do not wait on each other


@intrinsic
def _row_sums(typingctx, x, y, start, n, center):
    """``sum(t1), sum(t2)`` over ``x[start : start + n]`` (flat), the two :func:`_terms`.

    Float32 or float64 ``x`` (and ``y``, or ``None``); the elements are
    widened to float64 and summed in SUM_VECTORS x SUM_LANES vector
    accumulators, element ``k`` into lane ``k % (SUM_VECTORS * SUM_LANES)``,
    the remainder in order after them, the lanes added up in a fixed tree:
    the same bits from every compile, at vector speed.
    """
    if not isinstance(x, types.Array) or x.dtype not in (types.float32, types.float64):
        return None
    if y is not types.none and (not isinstance(y, types.Array) or y.dtype != x.dtype):
        return None
    sig = types.UniTuple(types.float64, 2)(x, y, types.intp, types.intp, types.float64)

    def codegen(context, builder, signature, args):
        x_arg, y_arg, start, n, center = args
        xty, yty = signature.args[0], signature.args[1]
        f64 = ir.DoubleType()
        intp = start.type
        lanes = SUM_LANES
        block = SUM_VECTORS * lanes
        vec = ir.VectorType(f64, lanes)

        def data(ty, value):
            base = context.make_array(ty)(context, builder, value).data
            return builder.gep(base, [start])

        def widen(value):  # float32 to float64, exactly; float64 as it is
            wide = vec if isinstance(value.type, ir.VectorType) else f64
            return value if value.type == wide else builder.fpext(value, wide)

        xp = data(xty, x_arg)
        yp = None if yty is types.none else data(yty, y_arg)
        elem = xp.type.pointee
        vptr = ir.VectorType(elem, lanes).as_pointer()
        itemsize = context.get_abi_sizeof(elem)
        centers = builder.shuffle_vector(
            builder.insert_element(
                ir.Constant(vec, ir.Undefined), center, ir.Constant(ir.IntType(32), 0)
            ),
            ir.Constant(vec, ir.Undefined),
            ir.Constant(ir.VectorType(ir.IntType(32), lanes), [0] * lanes),
        )

        def terms(ptr_at, index, centre):
            d = builder.fsub(widen(ptr_at(xp, index)), centre)
            if yp is None:
                return d, builder.fmul(d, d)
            v = widen(ptr_at(yp, index))
            return v, builder.fmul(v, d)

        def load_vector(ptr, index):
            return builder.load(builder.bitcast(builder.gep(ptr, [index]), vptr), align=itemsize)

        def load_scalar(ptr, index):
            return builder.load(builder.gep(ptr, [index]))

        accs = [
            [
                cgutils.alloca_once_value(builder, ir.Constant(vec, None))
                for _ in range(SUM_VECTORS)
            ]
            for _ in range(2)
        ]
        blocks = builder.sdiv(n, ir.Constant(intp, block))
        with cgutils.for_range(builder, blocks) as loop:
            base = builder.mul(loop.index, ir.Constant(intp, block))
            for v in range(SUM_VECTORS):
                index = builder.add(base, ir.Constant(intp, v * lanes))
                for acc, term in zip(accs, terms(load_vector, index, centers), strict=True):
                    builder.store(builder.fadd(builder.load(acc[v]), term), acc[v])
        totals = []
        for acc in accs:
            summed = builder.load(acc[0])
            for v in range(1, SUM_VECTORS):
                summed = builder.fadd(summed, builder.load(acc[v]))
            parts = [
                builder.extract_element(summed, ir.Constant(ir.IntType(32), i))
                for i in range(lanes)
            ]
            while len(parts) > 1:
                half = len(parts) // 2
                parts = [builder.fadd(parts[i], parts[i + half]) for i in range(half)]
            totals.append(cgutils.alloca_once_value(builder, parts[0]))
        first = builder.mul(blocks, ir.Constant(intp, block))
        rest = builder.sub(n, first)
        with cgutils.for_range(builder, rest) as loop:
            index = builder.add(first, loop.index)
            for total, term in zip(totals, terms(load_scalar, index, center), strict=True):
                builder.store(builder.fadd(builder.load(total), term), total)
        return context.make_tuple(
            builder, signature.return_type, [builder.load(t) for t in totals]
        )

    return sig, codegen


def _channel_sums(x3, y3, c, a0, a1, center):
    """Rows ``a0 .. a1`` of channel ``c`` of ``x3`` (and ``y3``): both :func:`_terms` summed."""


@overload(_channel_sums, jit_options={"fastmath": FASTMATH})
def _channel_sums_impl(x3, y3, c, a0, a1, center):
    if x3.dtype in (types.float32, types.float64):

        def vectors(x3, y3, c, a0, a1, center):
            A, C, B = x3.shape
            x = x3.reshape(A * C * B)
            y = _flat(y3, A * C * B)
            acc1 = 0.0
            acc2 = 0.0
            for a in range(a0, a1):
                u, v = _row_sums(x, y, (a * C + c) * B, B, center)
                acc1 += u
                acc2 += v
            return acc1, acc2

        return vectors

    def scalars(x3, y3, c, a0, a1, center):  # float16 bits: one element at a time
        acc1 = 0.0
        acc2 = 0.0
        for a in range(a0, a1):
            for b in range(x3.shape[2]):
                u, v = _terms(x3, y3, (a, c, b), center)
                acc1 += u
                acc2 += v
        return acc1, acc2

    return scalars


def _flat(y3, size):
    """``y3`` as a 1-D array of ``size``, or ``None``."""


@overload(_flat, jit_options={"fastmath": FASTMATH})
def _flat_impl(y3, size):
    if y3 is types.none:
        return lambda y3, size: None
    return lambda y3, size: y3.reshape(size)


@kernel
def _sums_inner(x3, y3, center, nsplit):
    """Per channel: the sums of both :func:`_terms` of its elements, inner > 1."""
    A, C, _ = x3.shape
    s1 = np.zeros(C * nsplit)
    s2 = np.zeros(C * nsplit)
    for t in prange(C * nsplit):
        c = t // nsplit
        j = t - c * nsplit
        s1[t], s2[t] = _channel_sums(x3, y3, c, j * A // nsplit, (j + 1) * A // nsplit, center[c])
    out1 = np.zeros(C)
    out2 = np.zeros(C)
    for c in range(C):
        for j in range(nsplit):
            out1[c] += s1[c * nsplit + j]
            out2[c] += s2[c * nsplit + j]
    return out1, out2


@kernel
def _sums_outer(x2, y2, center, nsplit):
    """Per channel: the sums of both :func:`_terms` of its elements, inner == 1."""
    A, C = x2.shape
    nblock = (C + COLUMN_BLOCK - 1) // COLUMN_BLOCK
    s1 = np.zeros((nsplit, C))
    s2 = np.zeros((nsplit, C))
    for t in prange(nblock * nsplit):
        c0, n, a0, a1 = _tile(t, nsplit, A, C)
        # Task-local accumulators and row slices, so LLVM sees no aliasing and
        # vectorizes; four rows per sweep, so the accumulators are loaded and
        # stored once per four values (stores were the bottleneck).
        acc1 = np.zeros(COLUMN_BLOCK)
        acc2 = np.zeros(COLUMN_BLOCK)
        mu = center[c0 : c0 + n]
        a = a0
        while a + 4 <= a1:
            x0, x1 = x2[a, c0 : c0 + n], x2[a + 1, c0 : c0 + n]
            x2_, x3 = x2[a + 2, c0 : c0 + n], x2[a + 3, c0 : c0 + n]
            y0, y1 = _row(y2, a, c0, n), _row(y2, a + 1, c0, n)
            y2_, y3 = _row(y2, a + 2, c0, n), _row(y2, a + 3, c0, n)
            for i in range(n):
                m = mu[i]
                u0, v0 = _terms(x0, y0, i, m)
                u1, v1 = _terms(x1, y1, i, m)
                u2, v2 = _terms(x2_, y2_, i, m)
                u3, v3 = _terms(x3, y3, i, m)
                acc1[i] += (u0 + u1) + (u2 + u3)
                acc2[i] += (v0 + v1) + (v2 + v3)
            a += 4
        while a < a1:
            xr, yr = x2[a, c0 : c0 + n], _row(y2, a, c0, n)
            for i in range(n):
                u, v = _terms(xr, yr, i, mu[i])
                acc1[i] += u
                acc2[i] += v
            a += 1
        j = t % nsplit
        s1[j, c0 : c0 + n] = acc1[:n]
        s2[j, c0 : c0 + n] = acc2[:n]
    return s1.sum(axis=0), s2.sum(axis=0)


# --------------------------------------------------------------------------
# working precision of the elementwise passes


def _work_vector(vec, like):
    """``vec`` in the elementwise working precision for ``like``'s dtype."""


@overload(_work_vector, jit_options={"fastmath": FASTMATH})
def _work_vector_impl(vec, like):
    if like.dtype == types.float32:
        return lambda vec, like: vec.astype(np.float32)
    return lambda vec, like: vec


def _load(value, like):
    """``value`` converted to the type of the scalar ``like``."""


@overload(_load, jit_options={"fastmath": FASTMATH})
def _load_impl(value, like):
    if value == types.uint16:  # float16 bits: float64 is the working precision
        return lambda value, like: half_bits_to_float64(value)
    if like == types.float32:
        return lambda value, like: np.float32(value)
    return lambda value, like: np.float64(value)


# --------------------------------------------------------------------------
# elementwise passes: out = (x - shift) * scale + offset  [+ dy * dscale]
#
# Each formula is written once (:func:`_affine_value`, :func:`_grad_value`)
# and inlined into the loops of every layout (channels inner or outer, one or
# two rows per sweep): the layouts differ only in how they walk the arrays,
# and each element gets the same operations, so the same bits, in all of them.

inline = njit(fastmath=FASTMATH, cache=True, nogil=True, inline="always")


@inline
def _affine_value(x, shift, scale, offset):
    """``(x - shift) * scale + offset`` in ``scale``'s precision."""
    return (_load(x, scale) - shift) * scale + offset


@inline
def _grad_value(dy, x, mean, k_dy, k_x, k_0):
    """``dy * k_dy - (x - mean) * k_x - k_0`` in ``k_dy``'s precision."""
    return _load(dy, k_dy) * k_dy - (_load(x, k_x) - mean) * k_x - k_0


# --------------------------------------------------------------------------
# non-temporal stores for outputs too large to stay in the caches
#
# A store to a line not in the cache first reads that line from memory
# ("read for ownership"), so an elementwise pass moves three bytes of DRAM
# traffic for every two it needs.  Non-temporal stores write whole lines
# without reading them: a (32, 256, 28, 28) float32 affine pass on two
# threads of a Zen 3 VM, 1.33 -> 1.06 ms.  Small outputs keep ordinary
# stores, which leave them in the cache for the next layer to read.

#: Output bytes from which the float32 affine pass (training forward and
#: inference) writes with non-temporal stores: past the L2s and half the L3
#: of common machines, where the next layer reads the output from memory
#: anyway.  x86-64 only (``sfence``).
STREAM_BYTES = 16 << 20 if platform.machine().lower() in ("x86_64", "amd64") else 0
_FLAGS = tuple(sorted(FASTMATH))
_F32x8 = ir.VectorType(ir.FloatType(), 8)


@intrinsic
def _stream_affine8(typingctx, x_address, out_address, shift, scale, offset):
    """``out[0:8] = (x[0:8] - shift) * scale + offset`` (float32), one
    non-temporal store; ``out`` is 32-byte aligned.  Same operations and
    fast-math flags as :func:`_affine_value`, so the same bits."""
    sig = types.void(types.int64, types.int64, types.float32, types.float32, types.float32)

    def codegen(context, builder, signature, args):
        xa, oa, sh, k, o = args
        lanes = ir.Constant(ir.VectorType(ir.IntType(32), 8), [0] * 8)

        def splat(value):
            one = builder.insert_element(
                ir.Constant(_F32x8, ir.Undefined), value, ir.Constant(ir.IntType(32), 0)
            )
            return builder.shuffle_vector(one, one, lanes)

        v = builder.load(builder.inttoptr(xa, _F32x8.as_pointer()), align=4)
        v = builder.fsub(v, splat(sh), flags=_FLAGS)
        v = builder.fmul(v, splat(k), flags=_FLAGS)
        v = builder.fadd(v, splat(o), flags=_FLAGS)
        store = builder.store(v, builder.inttoptr(oa, _F32x8.as_pointer()), align=32)
        if STREAM_BYTES:
            nontemporal = builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)])
            store.set_metadata("nontemporal", nontemporal)
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _sfence(typingctx):
    """Order the non-temporal stores before anything this thread stores next
    (the chunk counter that tells the caller a chunk is done)."""

    def codegen(context, builder, signature, args):
        if STREAM_BYTES:
            fence = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(ir.VoidType(), []), "llvm.x86.sse.sfence"
            )
            builder.call(fence, [])
        return context.get_dummy_value()

    return types.void(), codegen


def _streams(out, scale):
    """Whether the affine pass writes ``out`` with non-temporal stores."""


@overload(_streams, jit_options={"fastmath": FASTMATH})
def _streams_impl(out, scale):
    if STREAM_BYTES and out.dtype == types.float32 and scale.dtype == types.float32:
        return lambda out, scale: out.size * 4 >= STREAM_BYTES and (out.ctypes.data & 3) == 0
    return lambda out, scale: False


@inline
def _stream_affine_run(x, out, sh, k, o):
    """One contiguous float32 run of the affine pass, the aligned middle streamed."""
    n = x.size
    xa, oa = x.ctypes.data, out.ctypes.data
    head = min(n, ((32 - (oa & 31)) & 31) // 4)
    for b in range(head):
        out[b] = _affine_value(x[b], sh, k, o)
    b = head
    while b + 8 <= n:
        _stream_affine8(xa + 4 * b, oa + 4 * b, sh, k, o)
        b += 8
    for t in range(b, n):
        out[t] = _affine_value(x[t], sh, k, o)


@driver
def _affine_span(x3, shift, scale, offset, out3, lo, hi, pairs):
    """Items ``lo .. hi-1`` of the affine pass: rows if ``inner == 1``, else (outer, channel) runs.

    With ``pairs``, rows go two per sweep (see :func:`_pair_sweeps`); an odd
    last row is swept as both rows of its pair.
    """
    A, C, B = x3.shape
    if B == 1:
        x2, out2 = x3.reshape((A, C)), out3.reshape((A, C))
        if pairs:
            for a in range(lo, hi, 2):
                b = min(a + 1, hi - 1)
                x0, x1, y0, y1 = x2[a], x2[b], out2[a], out2[b]
                for c in range(C):
                    sh, k, o = shift[c], scale[c], offset[c]
                    v0, v1 = _affine_value(x0[c], sh, k, o), _affine_value(x1[c], sh, k, o)
                    y0[c], y1[c] = _store(v0, out2), _store(v1, out2)
        else:
            for a in range(lo, hi):
                x, out = x2[a], out2[a]
                for c in range(C):
                    out[c] = _store(_affine_value(x[c], shift[c], scale[c], offset[c]), out2)
    elif _streams(out3, scale):
        for t in range(lo, hi):
            a = t // C
            c = t - a * C
            _stream_affine_run(x3[a, c], out3[a, c], shift[c], scale[c], offset[c])
        _sfence()
    else:
        for t in range(lo, hi):
            a = t // C
            c = t - a * C
            sh, k, o = shift[c], scale[c], offset[c]
            x, out = x3[a, c], out3[a, c]
            for b in range(B):
                out[b] = _store(_affine_value(x[b], sh, k, o), out3)


@driver
def _grad_span(x3, dy3, mean, k_dy, k_x, k_0, dx3, lo, hi, pairs):
    """Items ``lo .. hi-1`` of the ``dx`` pass (as :func:`_affine_span`)."""
    A, C, B = x3.shape
    if B == 1:
        x2, dy2, dx2 = x3.reshape((A, C)), dy3.reshape((A, C)), dx3.reshape((A, C))
        if pairs:
            for a in range(lo, hi, 2):
                b = min(a + 1, hi - 1)
                x0, g0, d0 = x2[a], dy2[a], dx2[a]
                x1, g1, d1 = x2[b], dy2[b], dx2[b]
                for c in range(C):
                    mu, k1, k2, k3 = mean[c], k_dy[c], k_x[c], k_0[c]
                    v0 = _grad_value(g0[c], x0[c], mu, k1, k2, k3)
                    v1 = _grad_value(g1[c], x1[c], mu, k1, k2, k3)
                    d0[c], d1[c] = _store(v0, dx2), _store(v1, dx2)
        else:
            for a in range(lo, hi):
                x, dy, dx = x2[a], dy2[a], dx2[a]
                for c in range(C):
                    v = _grad_value(dy[c], x[c], mean[c], k_dy[c], k_x[c], k_0[c])
                    dx[c] = _store(v, dx2)
    else:
        for t in range(lo, hi):
            a = t // C
            c = t - a * C
            mu, k1, k2, k3 = mean[c], k_dy[c], k_x[c], k_0[c]
            x, dy, dx = x3[a, c], dy3[a, c], dx3[a, c]
            for b in range(B):
                dx[b] = _store(_grad_value(dy[b], x[b], mu, k1, k2, k3), dx3)


@driver
def _span_items(x3, pairs):
    """``(items, items per chunk)`` of an elementwise pass over ``x3``.

    A chunk is about ``CHUNK_BYTES`` of ``x3``: small enough that the
    threads share the pass evenly, large enough that each ``prange``
    iteration's overhead is noise.
    """
    A, C, B = x3.shape
    items = A if B == 1 else A * C
    per_item = (C if B == 1 else B) * x3.itemsize
    chunk = max(1, CHUNK_BYTES // max(per_item, 1))
    if pairs:
        chunk += chunk & 1
    return items, chunk


@kernel
def _affine_chunks(x3, shift, scale, offset, out3, chunk, pairs):
    items = _span_items(x3, pairs)[0]
    for i in prange((items + chunk - 1) // chunk):
        lo = i * chunk
        _affine_span(x3, shift, scale, offset, out3, lo, min(items, lo + chunk), pairs)


@kernel
def _grad_chunks(x3, dy3, mean, k_dy, k_x, k_0, dx3, chunk, pairs):
    items = _span_items(x3, pairs)[0]
    for i in prange((items + chunk - 1) // chunk):
        lo = i * chunk
        _grad_span(x3, dy3, mean, k_dy, k_x, k_0, dx3, lo, min(items, lo + chunk), pairs)


@driver
def _pair_sweeps(constants):
    """Whether a 2D elementwise pass should sweep two rows at once.

    The pass reads three or four channel constants per element.  From 8 KiB
    per constant vector they no longer stay in L1 beside the rows and come
    from L2; sweeping two rows at once halves those reads (a (256, 4096)
    float32 inference 0.22 -> 0.17 ms on one thread, the backward's dx pass
    0.61 -> 0.56 ms; same bits).  With smaller vectors the two-row kernels
    were 3-10% slower ((1024, 784) float32), so the one-row ones stay.
    """
    return constants.size * constants.itemsize >= PAIR_SWEEP_BYTES


# --------------------------------------------------------------------------
# drivers: take (A, C, B) contiguous views and float64 channel vectors


@driver
def _channel_shift(x3):
    """First sample of each channel: the shift that keeps the sums exact."""
    C = x3.shape[1]
    shift = np.empty(C)
    for c in range(C):
        shift[c] = _f64(x3[0, c, 0])
    return shift


@driver
def channel_moments(x3):
    """The statistics pass: float64 ``(shift, shifted mean, biased var)`` per channel.

    ``shift`` is each channel's first sample, the mean is ``shift + shifted
    mean``.  Shared by :func:`train_forward` and the ``Moments`` Op (layer,
    instance and group norm), so every norm has the same statistics.
    """
    A, C, B = x3.shape
    shift = _channel_shift(x3)
    if B == 1:
        s1, s2 = _sums_outer(x3.reshape((A, C)), None, shift, _outer_splits(A, C))
    else:
        s1, s2 = _sums_inner(x3, None, shift, _splits(A, C))
    mu = s1 / (A * B)
    var = np.maximum(s2 / (A * B) - mu * mu, 0.0)
    return shift, mu, var


@driver
def _affine(x3, shift, scale, offset, out3):
    """``out3 = (x3 - shift) * scale + offset`` per channel, in the working precision:
    a ``prange`` over chunks of about ``CHUNK_BYTES``."""
    B = x3.shape[2]
    sh, k, o = _work_vector(shift, x3), _work_vector(scale, x3), _work_vector(offset, x3)
    pairs = B == 1 and _pair_sweeps(k)
    _affine_chunks(x3, sh, k, o, out3, _span_items(x3, pairs)[1], pairs)


@driver
def train_forward(x3, gamma, beta, epsilon, out3):
    """Fill ``out3``; return float64 ``(mean, invstd, var)`` per channel."""
    A, C, B = x3.shape
    previous = enter_threads(A * C * B, BATCH_NORM)
    shift, mu, var = channel_moments(x3)
    invstd = 1.0 / np.sqrt(var + epsilon)
    scale = gamma * invstd
    offset = beta - mu * scale
    _affine(x3, shift, scale, offset, out3)
    set_num_threads(previous)
    return shift + mu, invstd, var


@driver
def train_backward(x3, dy3, gamma, mean, invstd, g_mean, g_var, dx3):
    """Fill ``dx3``; return float64 ``(dgamma, dbeta)`` per channel.

    ``g_mean``/``g_var``: gradients that reached the batch mean and biased
    variance (zeros when none), folded into the same elementwise pass.
    """
    A, C, B = x3.shape
    previous = enter_threads(A * C * B, BATCH_NORM)
    if B == 1:
        s_dy, s_dyx = _sums_outer(
            x3.reshape((A, C)), dy3.reshape((A, C)), mean, _outer_splits(A, C)
        )
    else:
        s_dy, s_dyx = _sums_inner(x3, dy3, mean, _splits(A, C))
    k_dy = gamma * invstd
    k_x = (k_dy * invstd * invstd * s_dyx - 2.0 * g_var) / (A * B)
    k_0 = (k_dy * s_dy - g_mean) / (A * B)
    mu, k1 = _work_vector(mean, x3), _work_vector(k_dy, x3)
    k2, k3 = _work_vector(k_x, x3), _work_vector(k_0, x3)
    pairs = B == 1 and _pair_sweeps(k1)
    _grad_chunks(x3, dy3, mu, k1, k2, k3, dx3, _span_items(x3, pairs)[1], pairs)
    set_num_threads(previous)
    return s_dyx * invstd, s_dy


@driver
def inference(x3, gamma, beta, mean, var, epsilon, out3):
    """Fill ``out3`` with ``(x - mean) * gamma / sqrt(var + eps) + beta``."""
    A, C, B = x3.shape
    previous = enter_threads(A * C * B, BATCH_NORM)
    scale = gamma / np.sqrt(var + epsilon)
    _affine(x3, mean, scale, beta, out3)
    set_num_threads(previous)


# --------------------------------------------------------------------------
# Fresh outputs: ask for transparent huge pages before the first write.
#
# Numba allocates with plain malloc (mmap for big arrays); the kernels'
# threads then fault the pages in 4 KiB at a time, serialized on the
# process's memory map, which can cost several times the write itself.
# NumPy madvises its large arrays for huge pages; we do the same.

_MADV_HUGEPAGE = 14 if sys.platform.startswith("linux") else -1
_HUGE = 2 * 1024 * 1024
_madvise = types.ExternalFunction("madvise", types.int32(types.uintp, types.uintp, types.int32))


@driver
def _prefer_huge_pages(arr):
    if _MADV_HUGEPAGE < 0 or arr.nbytes < 2 * _HUGE:
        return
    start = (arr.ctypes.data + 4095) // 4096 * 4096
    end = (arr.ctypes.data + arr.nbytes) // 4096 * 4096
    _madvise(start, end - start, _MADV_HUGEPAGE)


# --------------------------------------------------------------------------
# C-callable entry points: pointers and sizes in, status code out.


@driver
def _views(x_ptr, out_ptr, A, C, B):
    """The ``(A, C, B)`` input and output; the output (fresh) asks for huge pages."""
    out3 = numba.carray(out_ptr, (A, C, B))
    _prefer_huge_pages(out3)
    return numba.carray(x_ptr, (A, C, B)), out3


def _train_forward_entry(x_ptr, A, C, B, gamma_ptr, beta_ptr, epsilon, out_ptr, stats_ptr):
    x3, out3 = _views(x_ptr, out_ptr, A, C, B)
    gamma = numba.carray(gamma_ptr, (C,))
    beta = numba.carray(beta_ptr, (C,))
    stats = numba.carray(stats_ptr, (3, C))
    mean, invstd, var = train_forward(x3, gamma, beta, epsilon, out3)
    for c in range(C):
        stats[0, c] = mean[c]
        stats[1, c] = invstd[c]
        stats[2, c] = var[c]
    return 0


def _train_backward_entry(x_ptr, dy_ptr, A, C, B, stats_ptr, dx_ptr):
    x3, dx3 = _views(x_ptr, dx_ptr, A, C, B)
    dy3 = numba.carray(dy_ptr, (A, C, B))
    # rows: gamma, mean, invstd, g_mean, g_var in; dgamma, dbeta out
    stats = numba.carray(stats_ptr, (7, C))
    dgamma, dbeta = train_backward(x3, dy3, stats[0], stats[1], stats[2], stats[3], stats[4], dx3)
    for c in range(C):
        stats[5, c] = dgamma[c]
        stats[6, c] = dbeta[c]
    return 0


def _inference_entry(x_ptr, A, C, B, stats_ptr, epsilon, out_ptr):
    x3, out3 = _views(x_ptr, out_ptr, A, C, B)
    # rows: gamma, beta, mean, var
    stats = numba.carray(stats_ptr, (4, C))
    inference(x3, stats[0], stats[1], stats[2], stats[3], epsilon, out3)
    return 0


def _moments_entry(x_ptr, A, C, B, stats_ptr):
    x3 = numba.carray(x_ptr, (A, C, B))
    # rows out: mean, var, shift, shifted mean
    stats = numba.carray(stats_ptr, (4, C))
    previous = enter_threads(A * C * B, BATCH_NORM)
    shift, mu, var = channel_moments(x3)
    set_num_threads(previous)
    for c in range(C):
        stats[0, c] = shift[c] + mu[c]
        stats[1, c] = var[c]
        stats[2, c] = shift[c]
        stats[3, c] = mu[c]
    return 0


ENTRIES = {
    "moments": (_moments_entry, ("x", "n", "n", "n", "f")),
    "train_forward": (_train_forward_entry, ("x", "n", "n", "n", "f", "f", "d", "x", "f")),
    "train_backward": (_train_backward_entry, ("x", "x", "n", "n", "n", "f", "x")),
    "inference": (_inference_entry, ("x", "n", "n", "n", "f", "d", "x")),
}


def entry_signature(name: str, dtype: str):
    """The C signature of entry point ``name`` for input dtype ``dtype``.

    float16 arrays are passed as their uint16 bits.
    """
    element = np.dtype("uint16" if np.dtype(dtype) == np.float16 else dtype)
    codes = {
        "x": types.CPointer(numba.from_dtype(element)),
        "n": types.intp,
        "f": types.CPointer(types.float64),
        "d": types.float64,
    }
    return types.int32(*(codes[c] for c in ENTRIES[name][1]))
