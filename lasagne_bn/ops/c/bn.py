"""C implementations of the batch-norm Ops (modes ``C`` and ``CVM``).

The Ops in :mod:`lasagne_bn.ops.bn` delegate their ``c_code`` here, and so
does :class:`~lasagne_bn.ops.statistics.Moments`, whose C code is the
statistics pass of ``BatchNormTrain`` (``lbn_moments``).  The
numerics are those of the Numba kernels (:mod:`lasagne_bn.ops.numba.bn_kernels`):

- the input is viewed as a C-contiguous ``(outer, channels, inner)`` array
  (see :mod:`lasagne_bn.ops.layout`); a non-contiguous input, or one whose
  kept axes are not adjacent, is copied (transposed) first;
- statistics are sums of ``x - shift`` (the first sample of each channel)
  accumulated in float64, which keeps the variance of ``1e6 + N(0, 1)``
  float32 data; the inner loops keep eight independent accumulators, so a
  sum is not one long chain of dependent additions;
- the elementwise passes compute in the input's precision (float32 on
  float32 input), one multiply-add per element.

Large tensors are split over threads: at most the CPUs in the process's
affinity mask and at most 4 (``LASAGNE_BN_C_THREADS=n`` sets that limit
instead, ``1``: single-threaded; read once per compiled module).  A
reduction over rows of channels (``inner > 1``) is cut into one piece per
``MIN_ELEMENTS_PER_THREAD`` elements, up to that limit, each with its own
partial sums; a 2-D one (``inner == 1``) into blocks of 1024 columns, each
column summed in row order by one piece; an elementwise pass into pieces
of 64 KiB.  The calling thread takes pieces, and so do the helper threads
every C module of ours shares (``lbn_run_pieces`` in
:mod:`lasagne_bn.ops.c.common`: after a job they watch for the next one for
0.1 ms, then sleep in a futex; they take pieces only once they get a core,
so the caller never waits for a helper that has not started).  When other
processes keep our CPUs busy (``/proc/loadavg``'s runnable tasks, less our
own helpers), fewer helpers are offered the same pieces, and the result is
the same bits however loaded the machine is.

float16 has no C code here: ``c_code`` raises ``NotImplementedError`` and
PyTensor's ``CVM`` runs the NumPy ``perform`` for that node instead (mode
``C`` cannot compile float16 graphs at all in PyTensor 3.0.7).

Invalid runtime values (shapes, ``epsilon``, ``running_average_factor``)
are detected in C, and the error is then raised by the same NumPy code
``perform`` runs (:func:`raise_like_perform`), so the messages are the same
in every mode.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops import batch_normalization_train
>>> x, g = pt.matrix("x"), pt.vector("g")
>>> out, mean, invstd = batch_normalization_train(x, g, g * 0)
>>> f = pytensor.function([x, g], mean, mode="CVM")   # runs the C code
>>> f(np.array([[1.0, 2.0], [3.0, 6.0]]), np.ones(2))
array([2., 4.])
"""

from __future__ import annotations

import ast

import numpy as np

from lasagne_bn.ops import validation
from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
)
from lasagne_bn.ops.c import common as c_common
from lasagne_bn.ops.c_code import CCode, register_c_code
from lasagne_bn.ops.layout import channel_block, kept_axes
from lasagne_bn.ops.statistics import Moments

#: Keys PyTensor's on-disk cache of compiled modules (the Ops' and Moments'):
#: this file, and the validation rules, which are generated into the code too.
C_CODE_VERSION = c_common.code_version(__file__, validation.__file__)

#: Elements per thread below which splitting the work does not pay.
MIN_ELEMENTS_PER_THREAD = 1 << 18

#: Output bytes from which the float32 affine pass streams its stores (on
#: AVX machines), as the default mode's does.
STREAM_BYTES = 16 << 20


# --------------------------------------------------------------------------
# kernels: one copy per element type ($T), with $W the working precision of
# the elementwise passes (the same type here) and $S a name suffix.

_KERNELS = r"""
/* Per channel: s1 += x - shift, s2 += (x - shift)^2 over rows [a0, a1), inner > 1.
   Lanes: sixteen doubles for each sum, as four vectors of four (AVX's width),
   so the sums are neither one chain of dependent additions nor scalar (GCC
   vectorizes no float reduction without -ffast-math, so the vectors are
   written out).  Vectors of eight doubles, one AVX-512 register, went
   through the stack on AVX2 machines, at a third of this speed. */
static void lbn_moments_inner_$S(const $T* x, npy_intp a0, npy_intp a1, npy_intp C,
                                 npy_intp B, npy_intp c0, npy_intp c1,
                                 const double* shift, double* s1, double* s2)
{
    for (npy_intp c = c0; c < c1; ++c) {
        const double sh = shift[c];
        lbn_v4d p0 = lbn_zero4(), p1 = lbn_zero4(), p2 = lbn_zero4(), p3 = lbn_zero4();
        lbn_v4d q0 = lbn_zero4(), q1 = lbn_zero4(), q2 = lbn_zero4(), q3 = lbn_zero4();
        double t1 = 0, t2 = 0;
        for (npy_intp a = a0; a < a1; ++a) {
            const $T* row = x + (a * C + c) * B;
            npy_intp b = 0;
            for (; b + 16 <= B; b += 16) {
                const lbn_v4d d0 = lbn_load4_$S(row + b) - sh;
                const lbn_v4d d1 = lbn_load4_$S(row + b + 4) - sh;
                const lbn_v4d d2 = lbn_load4_$S(row + b + 8) - sh;
                const lbn_v4d d3 = lbn_load4_$S(row + b + 12) - sh;
                p0 += d0;
                p1 += d1;
                p2 += d2;
                p3 += d3;
                q0 += d0 * d0;
                q1 += d1 * d1;
                q2 += d2 * d2;
                q3 += d3 * d3;
            }
            for (; b + 8 <= B; b += 8) {
                const lbn_v4d d0 = lbn_load4_$S(row + b) - sh;
                const lbn_v4d d1 = lbn_load4_$S(row + b + 4) - sh;
                p0 += d0;
                p1 += d1;
                q0 += d0 * d0;
                q1 += d1 * d1;
            }
            for (; b < B; ++b) {
                const double d = (double)row[b] - sh;
                t1 += d;
                t2 += d * d;
            }
        }
        s1[c] += lbn_hsum4x2(p0 + p2, p1 + p3) + t1;
        s2[c] += lbn_hsum4x2(q0 + q2, q1 + q3) + t2;
    }
}

/* The same for inner == 1: rows of C contiguous channels, columns [c0, c1). */
static void lbn_moments_outer_$S(const $T* x, npy_intp a0, npy_intp a1, npy_intp C,
                                 npy_intp c0, npy_intp c1,
                                 const double* shift, double* s1, double* s2)
{
    npy_intp a = a0;
    for (; a + 4 <= a1; a += 4) {
        const $T* r0 = x + a * C;
        const $T* r1 = r0 + C;
        const $T* r2 = r1 + C;
        const $T* r3 = r2 + C;
        for (npy_intp c = c0; c < c1; ++c) {
            const double sh = shift[c];
            const double d0 = (double)r0[c] - sh, d1 = (double)r1[c] - sh;
            const double d2 = (double)r2[c] - sh, d3 = (double)r3[c] - sh;
            s1[c] += (d0 + d1) + (d2 + d3);
            s2[c] += (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
        }
    }
    for (; a < a1; ++a) {
        const $T* r0 = x + a * C;
        for (npy_intp c = c0; c < c1; ++c) {
            const double d0 = (double)r0[c] - shift[c];
            s1[c] += d0;
            s2[c] += d0 * d0;
        }
    }
}

/* Per channel: sy += dy, syx += dy * (x - center), inner > 1 (vectors as above). */
static void lbn_sums_inner_$S(const $T* x, const $T* dy, npy_intp a0, npy_intp a1,
                              npy_intp C, npy_intp B, npy_intp c0, npy_intp c1,
                              const double* center, double* sy, double* syx)
{
    for (npy_intp c = c0; c < c1; ++c) {
        const double mu = center[c];
        lbn_v4d p0 = lbn_zero4(), p1 = lbn_zero4(), p2 = lbn_zero4(), p3 = lbn_zero4();
        lbn_v4d q0 = lbn_zero4(), q1 = lbn_zero4(), q2 = lbn_zero4(), q3 = lbn_zero4();
        double t1 = 0, t2 = 0;
        for (npy_intp a = a0; a < a1; ++a) {
            const $T* xr = x + (a * C + c) * B;
            const $T* yr = dy + (a * C + c) * B;
            npy_intp b = 0;
            for (; b + 16 <= B; b += 16) {
                const lbn_v4d y0 = lbn_load4_$S(yr + b);
                const lbn_v4d y1 = lbn_load4_$S(yr + b + 4);
                const lbn_v4d y2 = lbn_load4_$S(yr + b + 8);
                const lbn_v4d y3 = lbn_load4_$S(yr + b + 12);
                p0 += y0;
                p1 += y1;
                p2 += y2;
                p3 += y3;
                q0 += y0 * (lbn_load4_$S(xr + b) - mu);
                q1 += y1 * (lbn_load4_$S(xr + b + 4) - mu);
                q2 += y2 * (lbn_load4_$S(xr + b + 8) - mu);
                q3 += y3 * (lbn_load4_$S(xr + b + 12) - mu);
            }
            for (; b + 8 <= B; b += 8) {
                const lbn_v4d y0 = lbn_load4_$S(yr + b);
                const lbn_v4d y1 = lbn_load4_$S(yr + b + 4);
                p0 += y0;
                p1 += y1;
                q0 += y0 * (lbn_load4_$S(xr + b) - mu);
                q1 += y1 * (lbn_load4_$S(xr + b + 4) - mu);
            }
            for (; b < B; ++b) {
                const double y = (double)yr[b];
                t1 += y;
                t2 += y * ((double)xr[b] - mu);
            }
        }
        sy[c] += lbn_hsum4x2(p0 + p2, p1 + p3) + t1;
        syx[c] += lbn_hsum4x2(q0 + q2, q1 + q3) + t2;
    }
}

static void lbn_sums_outer_$S(const $T* x, const $T* dy, npy_intp a0, npy_intp a1,
                              npy_intp C, npy_intp c0, npy_intp c1,
                              const double* center, double* sy, double* syx)
{
    npy_intp a = a0;
    for (; a + 4 <= a1; a += 4) {
        const $T* x0 = x + a * C;
        const $T* y0 = dy + a * C;
        for (npy_intp c = c0; c < c1; ++c) {
            const double mu = center[c];
            const double v0 = (double)y0[c], v1 = (double)y0[c + C];
            const double v2 = (double)y0[c + 2 * C], v3 = (double)y0[c + 3 * C];
            sy[c] += (v0 + v1) + (v2 + v3);
            syx[c] += (v0 * ((double)x0[c] - mu) + v1 * ((double)x0[c + C] - mu))
                      + (v2 * ((double)x0[c + 2 * C] - mu) + v3 * ((double)x0[c + 3 * C] - mu));
        }
    }
    for (; a < a1; ++a) {
        const $T* x0 = x + a * C;
        const $T* y0 = dy + a * C;
        for (npy_intp c = c0; c < c1; ++c) {
            const double v0 = (double)y0[c];
            sy[c] += v0;
            syx[c] += v0 * ((double)x0[c] - center[c]);
        }
    }
}

/* out = (x - shift) * scale + offset over the (a, c) rows [r0, r1) of a
   (A, C, B) array, in $W. */
static void lbn_affine_$S(const $T* __restrict__ x, npy_intp r0, npy_intp r1, npy_intp C,
                          npy_intp B, const $W* __restrict__ shift, const $W* __restrict__ scale,
                          const $W* __restrict__ offset, $T* __restrict__ out)
{
    if (B == 1) {
        for (npy_intp a = r0; a < r1; ++a) {
            const $T* __restrict__ xr = x + a * C;
            $T* __restrict__ orow = out + a * C;
            for (npy_intp c = 0; c < C; ++c)
                orow[c] = ($T)((($W)xr[c] - shift[c]) * scale[c] + offset[c]);
        }
        return;
    }
    for (npy_intp r = r0; r < r1; ++r) {
        const npy_intp c = r % C;
        const $W sh = shift[c], k = scale[c], o = offset[c];
        const $T* __restrict__ xr = x + r * B;
        $T* __restrict__ orow = out + r * B;
        for (npy_intp b = 0; b < B; ++b)
            orow[b] = ($T)((($W)xr[b] - sh) * k + o);
    }
}

/* dx = dy * k1 - (x - mu) * k2 - k3, rows as in lbn_affine. */
static void lbn_grad_$S(const $T* __restrict__ x, const $T* __restrict__ dy, npy_intp r0,
                        npy_intp r1, npy_intp C, npy_intp B, const $W* __restrict__ mu,
                        const $W* __restrict__ k1, const $W* __restrict__ k2,
                        const $W* __restrict__ k3, $T* __restrict__ dx)
{
    if (B == 1) {
        for (npy_intp a = r0; a < r1; ++a) {
            const $T* __restrict__ xr = x + a * C;
            const $T* __restrict__ yr = dy + a * C;
            $T* __restrict__ drow = dx + a * C;
            for (npy_intp c = 0; c < C; ++c)
                drow[c] = ($T)(($W)yr[c] * k1[c] - (($W)xr[c] - mu[c]) * k2[c] - k3[c]);
        }
        return;
    }
    for (npy_intp r = r0; r < r1; ++r) {
        const npy_intp c = r % C;
        const $W m = mu[c], a1 = k1[c], a2 = k2[c], a3 = k3[c];
        const $T* __restrict__ xr = x + r * B;
        const $T* __restrict__ yr = dy + r * B;
        $T* __restrict__ drow = dx + r * B;
        for (npy_intp b = 0; b < B; ++b)
            drow[b] = ($T)(($W)yr[b] * a1 - (($W)xr[b] - m) * a2 - a3);
    }
}

static void lbn_task_$S(lbn_task* t)
{
    const npy_intp C = t->C, B = t->B;
    const $T* x = (const $T*)t->x;
    const $T* dy = (const $T*)t->dy;
    if (t->kind == 0 && B == 1)
        lbn_moments_outer_$S(x, t->lo, t->hi, C, t->c0, t->c1, t->center, t->s1, t->s2);
    else if (t->kind == 0)
        lbn_moments_inner_$S(x, t->lo, t->hi, C, B, t->c0, t->c1, t->center, t->s1, t->s2);
    else if (t->kind == 1 && B == 1)
        lbn_sums_outer_$S(x, dy, t->lo, t->hi, C, t->c0, t->c1, t->center, t->s1, t->s2);
    else if (t->kind == 1)
        lbn_sums_inner_$S(x, dy, t->lo, t->hi, C, B, t->c0, t->c1, t->center, t->s1,
                          t->s2);
    else if (t->kind == 2 && t->stream)  /* set for float32 only */
        lbn_affine_stream_f32((const float*)x, t->lo, t->hi, C, B, (const float*)t->v0,
                              (const float*)t->v1, (const float*)t->v2, (float*)t->out);
    else if (t->kind == 2)
        lbn_affine_$S(x, t->lo, t->hi, C, B, (const $W*)t->v0, (const $W*)t->v1,
                      (const $W*)t->v2, ($T*)t->out);
    else
        lbn_grad_$S(x, dy, t->lo, t->hi, C, B, (const $W*)t->v0, (const $W*)t->v1,
                    (const $W*)t->v2, (const $W*)t->v3, ($T*)t->out);
}
"""

# Dispatch over the element type, the splitting of work over threads, and the
# Python glue shared by the four Ops.
_COMMON = r"""
#include <math.h>
#include <string.h>
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>
#ifdef __AVX__
#include <immintrin.h>
#endif

#define LBN_MIN_PER_THREAD ((npy_intp)%(min_per_thread)d)
#define LBN_STREAM_BYTES ((npy_intp)%(stream_bytes)d)
/* Elements per piece of a split elementwise pass (64 KiB of float32), and at
   most this many pieces (lbn_run_pieces counts them in 8 bits). */
#define LBN_CHUNK ((npy_intp)1 << 14)
#define LBN_MAX_PIECES 128
/* Columns per piece of a 2-D reduction. */
#define LBN_COLUMN_BLOCK ((npy_intp)1024)

/* Four doubles as one vector (one AVX register; GCC emulates it where there
   is no SIMD). */
typedef double lbn_v4d __attribute__((vector_size(32)));
/* Unaligned views: loaded with one instruction (a memcpy into a vector was
   two 8-byte loads and a shuffle per vector with GCC). */
typedef float lbn_v4f_u __attribute__((vector_size(16), aligned(4)));
typedef double lbn_v4d_u __attribute__((vector_size(32), aligned(8)));

static inline lbn_v4d lbn_zero4(void)
{
    lbn_v4d z = {0, 0, 0, 0};
    return z;
}

static inline lbn_v4d lbn_load4_f32(const float* p)
{
#ifdef __AVX__
    /* GCC converts the generic vector in two halves (two loads, two
       conversions, a shuffle); the intrinsic is one instruction. */
    return (lbn_v4d)_mm256_cvtps_pd(_mm_loadu_ps(p));
#else
    return __builtin_convertvector(*(const lbn_v4f_u*)p, lbn_v4d);
#endif
}

static inline lbn_v4d lbn_load4_f64(const double* p)
{
    return *(const lbn_v4d_u*)p;
}

/* The sum of eight lanes, u's then v's, in a fixed order. */
static inline double lbn_hsum4x2(lbn_v4d u, lbn_v4d v)
{
    return ((u[0] + u[1]) + (u[2] + u[3])) + ((v[0] + v[1]) + (v[2] + v[3]));
}

/* One task of a split reduction or elementwise pass. */
typedef struct {
    int kind;            /* 0 moments, 1 grad sums, 2 affine, 3 grad pass */
    int type;            /* NPY_FLOAT32 or NPY_FLOAT64 */
    const void* x;
    const void* dy;
    void* out;
    npy_intp A, C, B;
    npy_intp lo, hi;     /* rows (outer index, or (a, c) rows for elementwise) */
    npy_intp c0, c1;     /* channels of a reduction (all but for inner == 1) */
    const double* center;
    double* s1;          /* this task's own partial sums (length C) */
    double* s2;
    const void* v0; const void* v1; const void* v2; const void* v3;  /* $W vectors */
    int stream;          /* affine pass: non-temporal stores (float32, AVX) */
} lbn_task;

/* The affine pass of lbn_affine_f32 (inner > 1) with the 32-byte-aligned
   middle of each row written by non-temporal stores, which do not read the
   output's lines from memory first (outputs from LBN_STREAM_BYTES, as the
   default mode's kernels: lasagne_bn/ops/numba/bn_kernels.py).  The same
   operations, so the same bits. */
static void lbn_affine_stream_f32(const float* __restrict__ x, npy_intp r0, npy_intp r1,
                                  npy_intp C, npy_intp B, const float* __restrict__ shift,
                                  const float* __restrict__ scale,
                                  const float* __restrict__ offset, float* __restrict__ out)
{
#ifdef __AVX__
    for (npy_intp r = r0; r < r1; ++r) {
        const npy_intp c = r - (r / C) * C;
        const float sh = shift[c], k = scale[c], o = offset[c];
        const float* __restrict__ xr = x + r * B;
        float* __restrict__ orow = out + r * B;
        npy_intp b = 0;
        for (; b < B && (((size_t)(orow + b)) & 31) != 0; ++b)
            orow[b] = (xr[b] - sh) * k + o;
        const __m256 vs = _mm256_set1_ps(sh), vk = _mm256_set1_ps(k), vo = _mm256_set1_ps(o);
        for (; b + 8 <= B; b += 8) {
            const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(xr + b), vs);
#ifdef __FMA__
            _mm256_stream_ps(orow + b, _mm256_fmadd_ps(d, vk, vo));
#else
            _mm256_stream_ps(orow + b, _mm256_add_ps(_mm256_mul_ps(d, vk), vo));
#endif
        }
        for (; b < B; ++b) orow[b] = (xr[b] - sh) * k + o;
    }
    _mm_sfence();
#endif
}

static void lbn_run_task(lbn_task* t)
{
    if (t->type == NPY_FLOAT32) lbn_task_f32(t);
    else lbn_task_f64(t);
}

/* A pass cut into n pieces of rows: piece i is rows [rows * i / n, rows * (i + 1) / n). */
typedef struct {
    lbn_task* tasks;     /* per piece (reductions: own partial sums), or NULL */
    const lbn_task* proto;
    npy_intp rows;
    int n;
} lbn_pass;

static void lbn_run_piece(void* pass, int i)
{
    const lbn_pass* p = (const lbn_pass*)pass;
    if (p->tasks != NULL) {
        lbn_run_task(p->tasks + i);
        return;
    }
    lbn_task t = *p->proto;
    t.lo = p->rows * i / p->n;
    t.hi = p->rows * (i + 1) / p->n;
    lbn_run_task(&t);
}

/* Run `proto` over rows [0, rows).  A reduction is cut into up to
   `max_threads` pieces (one per LBN_MIN_PER_THREAD elements), each with its
   own partial sums, added up in piece order: the pieces, and so the bits,
   depend on the size and `max_threads` only.  An elementwise pass that
   splits is cut into pieces of about LBN_CHUNK elements instead, so a helper
   that gets its core late still finds work (the results do not depend on
   the cut).  Returns -1 on no memory. */
static int lbn_run(const lbn_task* proto, npy_intp rows, npy_intp per_row, int max_threads,
                   double* s1, double* s2)
{
    const int reduce = proto->kind <= 1;
    npy_intp total = rows * per_row;
    int n = max_threads;
    if (n > 16) n = 16;
    if (total / LBN_MIN_PER_THREAD < n) n = (int)(total / LBN_MIN_PER_THREAD);
    if (n > rows) n = (int)rows;
    if (n < 1) n = 1;
    lbn_pass pass = {NULL, proto, rows, n};
    if (!reduce) {
        if (n > 1) {
            npy_intp pieces = total / LBN_CHUNK;
            if (pieces > LBN_MAX_PIECES) pieces = LBN_MAX_PIECES;
            if (pieces > rows) pieces = rows;
            if (pieces > n) pass.n = (int)pieces;
        }
        lbn_run_pieces(lbn_run_piece, &pass, pass.n);
        return 0;
    }
    lbn_task tasks[16];
    double* partial = NULL;
    const npy_intp C = proto->C;
    if (n > 1) {
        partial = (double*)calloc((size_t)(2 * (n - 1) * C + 1), sizeof(double));
        if (partial == NULL) n = 1;
    }
    for (int i = 0; i < n; ++i) {
        tasks[i] = *proto;
        tasks[i].lo = rows * i / n;
        tasks[i].hi = rows * (i + 1) / n;
        tasks[i].s1 = i == 0 ? s1 : partial + 2 * (i - 1) * C;
        tasks[i].s2 = i == 0 ? s2 : partial + (2 * (i - 1) + 1) * C;
    }
    pass.tasks = tasks;
    pass.n = n;
    lbn_run_pieces(lbn_run_piece, &pass, n);
    if (partial != NULL) {
        for (int i = 1; i < n; ++i)
            for (npy_intp c = 0; c < C; ++c) {
                s1[c] += tasks[i].s1[c];
                s2[c] += tasks[i].s2[c];
            }
        free(partial);
    }
    return 0;
}

/* A reduction of a 2-D (A, C) array, cut into blocks of LBN_COLUMN_BLOCK
   columns (wider where that would make over LBN_MAX_PIECES) over all rows:
   each column is summed by one piece, rows in order, so the bits do not
   depend on the cut, no partial sums are merged, and a block's sums
   (2 x 8 KiB) stay in L1 while its rows stream past.  Split
   over threads from 2 * LBN_MIN_PER_THREAD elements, like lbn_run. */
static void lbn_column_piece(void* pass, int i)
{
    const lbn_pass* p = (const lbn_pass*)pass;
    lbn_task t = *p->proto;
    t.c0 = (npy_intp)i * p->rows;  /* rows: here the columns per piece */
    t.c1 = t.c0 + p->rows < t.C ? t.c0 + p->rows : t.C;
    lbn_run_task(&t);
}

static void lbn_run_columns(lbn_task* proto, int max_threads, double* s1, double* s2)
{
    proto->lo = 0;
    proto->hi = proto->A;
    proto->s1 = s1;
    proto->s2 = s2;
    npy_intp width = (proto->C + LBN_MAX_PIECES - 1) / LBN_MAX_PIECES;
    if (width < LBN_COLUMN_BLOCK) width = LBN_COLUMN_BLOCK;
    lbn_pass pass = {NULL, proto, width, (int)((proto->C + width - 1) / width)};
    if (max_threads > 1 && pass.n > 1 && proto->A * proto->C >= 2 * LBN_MIN_PER_THREAD)
        lbn_run_pieces(lbn_column_piece, &pass, pass.n);
    else
        for (int i = 0; i < pass.n; ++i) lbn_column_piece(&pass, i);
}

/* Reductions over an (A, C, B) array: split over the outer rows (inner > 1)
   or the columns (inner == 1). */
static void lbn_reduce(int kind, int type, const void* x, const void* dy, npy_intp A,
                       npy_intp C, npy_intp B, const double* center, double* s1, double* s2,
                       int threads)
{
    lbn_task t;
    memset(&t, 0, sizeof(t));
    t.kind = kind; t.type = type; t.x = x; t.dy = dy; t.A = A; t.C = C; t.B = B;
    t.center = center;
    t.c0 = 0; t.c1 = C;
    for (npy_intp c = 0; c < C; ++c) { s1[c] = 0.0; s2[c] = 0.0; }
    if (A * C * B == 0) return;
    if (B == 1) lbn_run_columns(&t, threads, s1, s2);
    else lbn_run(&t, A, C * B, threads, s1, s2);
}

/* Elementwise passes: split over (a, c) rows of B elements (rows of C when B == 1). */
static void lbn_elementwise(int kind, int type, const void* x, const void* dy, void* out,
                            npy_intp A, npy_intp C, npy_intp B, const void* v0,
                            const void* v1, const void* v2, const void* v3, int threads)
{
    lbn_task t;
    memset(&t, 0, sizeof(t));
    t.kind = kind; t.type = type; t.x = x; t.dy = dy; t.out = out; t.A = A; t.C = C; t.B = B;
    t.v0 = v0; t.v1 = v1; t.v2 = v2; t.v3 = v3;
#ifdef __AVX__
    t.stream = kind == 2 && type == NPY_FLOAT32 && B > 1
               && A * C * B * (npy_intp)sizeof(float) >= LBN_STREAM_BYTES;
#endif
    if (A * C * B == 0) return;
    if (B == 1) lbn_run(&t, A, C, threads, NULL, NULL);
    else lbn_run(&t, A * C, B, threads, NULL, NULL);
}

/* Per channel of the (A, C, B) array `xd` (m = A * B values each): shift = its
   first value, s1 = mean - shift, s2 = the biased variance, mean; the sums are
   of x - shift in float64, which keeps them exact at large offsets.  An empty
   reduction gives NaN statistics, as perform does. */
static void lbn_moments(int type, const char* xd, npy_intp A, npy_intp C, npy_intp B,
                        double* shift, double* s1, double* s2, double* mean)
{
    const npy_intp m = A * B;
    if (m == 0) {
        for (npy_intp c = 0; c < C; ++c) shift[c] = s1[c] = s2[c] = mean[c] = NAN;
        return;
    }
    for (npy_intp c = 0; c < C; ++c)
        shift[c] = type == NPY_FLOAT32 ? (double)((const float*)xd)[c * B]
                                       : ((const double*)xd)[c * B];
    Py_BEGIN_ALLOW_THREADS
    lbn_reduce(0, type, xd, NULL, A, C, B, shift, s1, s2, lbn_max_threads());
    Py_END_ALLOW_THREADS
    for (npy_intp c = 0; c < C; ++c) {
        const double mu = s1[c] / (double)m;
        const double v = s2[c] / (double)m - mu * mu;
        s1[c] = mu;
        s2[c] = v < 0.0 ? 0.0 : v;
        mean[c] = shift[c] + mu;
    }
}

/* `n` doubles as vectors in the working precision of `type`, in `dst` (room
   for n doubles): float32 vectors are packed at its start. */
static const void* lbn_work_vector(int type, const double* src, double* dst, npy_intp n)
{
    if (type == NPY_FLOAT32) {
        float* f = (float*)dst;
        for (npy_intp i = 0; i < n; ++i) f[i] = (float)src[i];
        return f;
    }
    if (dst != src) memcpy(dst, src, (size_t)n * sizeof(double));
    return dst;
}

/* Copy a float array of n elements (any layout) into the doubles `dst`. */
static int lbn_read_vector(PyArrayObject* p, double* dst, npy_intp n)
{
    PyArrayObject* c = (PyArrayObject*)PyArray_FromAny(
        (PyObject*)p, PyArray_DescrFromType(NPY_FLOAT64), 0, 0,
        NPY_ARRAY_CARRAY_RO | NPY_ARRAY_FORCECAST, NULL);
    if (c == NULL) return -1;
    if (PyArray_SIZE(c) != n) {
        Py_DECREF(c);
        PyErr_SetString(PyExc_RuntimeError, "lasagne_bn C code: statistic of unexpected size");
        return -1;
    }
    memcpy(dst, PyArray_DATA(c), (size_t)n * sizeof(double));
    Py_DECREF(c);
    return 0;
}

/* Store n doubles into the C-contiguous float array `out`. */
static void lbn_write_vector(PyArrayObject* out, const double* src, npy_intp n)
{
    if (PyArray_TYPE(out) == NPY_FLOAT32) {
        float* f = (float*)PyArray_DATA(out);
        for (npy_intp i = 0; i < n; ++i) f[i] = (float)src[i];
    } else {
        memcpy(PyArray_DATA(out), src, (size_t)n * sizeof(double));
    }
}

/* The input as a C-contiguous array in the order `perm` (kept axes first when
   they are not adjacent); `perm` NULL: the input's own order. New reference. */
static PyArrayObject* lbn_contiguous(PyArrayObject* x, const int* perm, int nd)
{
    PyArrayObject* src = x;
    if (perm != NULL) {
        npy_intp p[NPY_MAXDIMS];
        PyArray_Dims d = {p, nd};
        for (int i = 0; i < nd; ++i) p[i] = perm[i];
        src = (PyArrayObject*)PyArray_Transpose(x, &d);
        if (src == NULL) return NULL;
    } else {
        Py_INCREF(src);
    }
    PyArrayObject* c = (PyArrayObject*)PyArray_FromAny(
        (PyObject*)src, NULL, 0, 0, NPY_ARRAY_CARRAY_RO, NULL);
    Py_DECREF(src);
    return c;
}

/* Copy the contiguous result `tmp`, in the order `perm`, into `out` (the input's
   layout), through the view of `out` in that order. */
static int lbn_unpermute(PyArrayObject* tmp, PyArrayObject* out, const int* perm, int nd)
{
    npy_intp p[NPY_MAXDIMS];
    PyArray_Dims d = {p, nd};
    for (int i = 0; i < nd; ++i) p[i] = perm[i];
    PyArrayObject* view = (PyArrayObject*)PyArray_Transpose(out, &d);
    if (view == NULL) return -1;
    int r = PyArray_CopyInto(view, tmp);
    Py_DECREF(view);
    return r;
}

/* Size 1 on the reduced axes (mask[i] != 0), the input's size elsewhere. */
static int lbn_stat_shape_ok(PyArrayObject* p, PyArrayObject* x, const int* mask)
{
    const int nd = PyArray_NDIM(x);
    if (PyArray_NDIM(p) != nd) return 0;
    for (int i = 0; i < nd; ++i) {
        const npy_intp want = mask[i] ? 1 : PyArray_DIMS(x)[i];
        if (PyArray_DIMS(p)[i] != want) return 0;
    }
    return 1;
}

static double lbn_scalar(PyArrayObject* s)
{
    return *(const double*)PyArray_DATA(s);
}
"""


def support_code() -> list[str]:
    """The C support code of the four Ops (PyTensor adds each block once per module)."""
    kernels = c_common.per_type(_KERNELS)
    common = _COMMON % {
        "min_per_thread": MIN_ELEMENTS_PER_THREAD,
        "stream_bytes": STREAM_BYTES,
    }
    # The kernels need lbn_task; lbn_run_task needs the kernels.
    head, tail = common.split("static void lbn_run_task", 1)
    own = head + kernels + "static void lbn_run_task" + tail
    return [c_common.OUTPUT_SUPPORT, c_common.THREADS_SUPPORT, own]


# --------------------------------------------------------------------------
# errors: the NumPy reference raises them


def raise_like_perform(kind: str, props: str, *inputs) -> None:
    """Run the NumPy reference of ``kind`` on ``inputs``, which raises its error.

    Called by the C code when it finds an invalid shape or scalar, so that
    the ``ValueError`` is the one ``perform`` raises, word for word;
    ``props`` is the Op's ``axes`` as a Python literal.
    """
    from lasagne_bn.ops import bn

    axes = ast.literal_eval(props)

    if kind == "train":
        bn.np_train_forward(*inputs[:4], axes)
        if len(inputs) > 4:
            bn.check_running(inputs[0], axes, *inputs[4:])
    elif kind == "train_grad":
        bn.np_train_backward(*inputs[:5], axes, *inputs[5:])
    elif kind == "inference":
        bn.np_inference(*inputs, axes)
    else:
        bn.np_apply(*inputs, np.result_type(*inputs))


# --------------------------------------------------------------------------
# per-node glue


def _dtype_code(dtype: str) -> str:
    # float16: CVM runs perform for this node instead.
    return c_common.dtype_code(dtype, "batch normalization")


class _Glue:
    """Static layout facts of one node, and the C snippets that use them."""

    def __init__(self, axes: tuple[int, ...], ndim: int):
        self.axes, self.ndim = axes, ndim
        block = channel_block(axes, ndim)
        if block is None:
            kept = kept_axes(axes, ndim)
            self.perm: tuple[int, ...] | None = kept + tuple(axes)
            self.k0, self.k1 = 0, len(kept)
        else:
            self.perm = None
            self.k0, self.k1 = block

    def decls(self) -> str:
        mask = ", ".join("1" if i in self.axes else "0" for i in range(self.ndim))
        lines = [f"const int lbn_mask[{self.ndim}] = {{{mask}}};"]
        if self.perm is not None:
            perm = ", ".join(map(str, self.perm))
            lines.append(f"const int lbn_perm[{self.ndim}] = {{{perm}}};")
        return "\n    ".join(lines)

    def contiguous(self, src: str) -> str:
        perm = "NULL" if self.perm is None else "lbn_perm"
        return f"lbn_contiguous({src}, {perm}, {self.ndim})"

    def m_expr(self, x: str) -> str:
        return " * ".join(f"(npy_intp)PyArray_DIMS({x})[{a}]" for a in self.axes)

    def view(self, xc: str) -> str:
        """``A``, ``C``, ``B`` of the contiguous (permuted) array ``xc``."""

        def prod(lo, hi):
            return " * ".join(f"PyArray_DIMS({xc})[{i}]" for i in range(lo, hi)) or "1"

        return (
            f"const npy_intp A = {prod(0, self.k0)};\n"
            f"        const npy_intp C = {prod(self.k0, self.k1)};\n"
            f"        const npy_intp B = {prod(self.k1, self.ndim)};"
        )

    def stat_dims(self, x: str) -> str:
        items = ["1" if i in self.axes else f"PyArray_DIMS({x})[{i}]" for i in range(self.ndim)]
        return f"npy_intp sdims[{self.ndim}] = {{{', '.join(items)}}};"

    def elementwise(self, kind: int, out: str, vectors: list[str], dy: str = "NULL") -> str:
        """C statements running the elementwise pass ``kind`` into ``out``.

        ``kind`` 2 is the affine pass over ``xd``, 3 the input gradient (of
        ``xd`` and ``dy``); the per-channel doubles ``vectors`` are first
        converted to the working precision.
        """
        work = ", ".join(f"lbn_work_vector(type, {v}, {v}, C)" for v in vectors)
        target = f"PyArray_DATA({out})" if self.perm is None else "PyArray_DATA(lbn_tmp)"
        run = f"""{{
            const void* w[4] = {{{work}}};
            void* od = {target};
            Py_BEGIN_ALLOW_THREADS
            lbn_elementwise({kind}, type, xd, {dy}, od, A, C, B, w[0], w[1], w[2], w[3],
                            lbn_max_threads());
            Py_END_ALLOW_THREADS
        }}"""
        if self.perm is None:
            return run
        # computed in the permuted order, then copied into the input's layout
        return f"""lbn_tmp = (PyArrayObject*)PyArray_EMPTY({self.ndim}, PyArray_DIMS(xc), type, 0);
        if (lbn_tmp == NULL) goto LBN_DONE;
        {run}
        if (lbn_unpermute(lbn_tmp, {out}, lbn_perm, {self.ndim})) goto LBN_DONE;"""

    def node_code(self, name, fail, x, vectors, body, head="", check=None, dy=None) -> str:
        """A node's C code: ``body`` run on ``x`` (and ``dy``) made contiguous.

        ``body`` sees ``m``, the ``(A, C, B)`` view, ``sdims`` (the
        statistics' shape), ``type``, ``xd`` (and ``dyd``), and a ``double*``
        of ``C`` values for each name in ``vectors``; ``head`` declares more.
        ``check`` is ``(condition, kind, inputs)``: where the condition holds,
        perform's error for ``kind`` is raised.
        """
        guard = get_dy = ""
        if check is not None:
            cond, kind, inputs = check
            raise_ = c_common.raise_code(__name__, kind, self.axes, inputs)
            guard = f"if ({cond}) {{\n        {raise_}\n        {fail}\n    }}"
        if dy is not None:
            get_dy = f"dyc = {self.contiguous(dy)};\n    if (dyc == NULL) goto LBN_DONE;"
        vecs = "\n        ".join(f"double* {v} = work + {i} * C;" for i, v in enumerate(vectors))
        code = f"""{self.decls()}
    const npy_intp m = {self.m_expr(x)};
    {head}
    PyArrayObject* xc = NULL;
    PyArrayObject* dyc = NULL;
    PyArrayObject* lbn_tmp = NULL;
    double* work = NULL;
    {guard}
    xc = {self.contiguous(x)};
    if (xc == NULL) goto LBN_DONE;
    {get_dy}
    {{
        {self.view("xc")}
        {self.stat_dims(x)}
        const int type = PyArray_TYPE(xc);
        const char* xd = (const char*)PyArray_DATA(xc);
        const char* dyd = dyc == NULL ? NULL : (const char*)PyArray_DATA(dyc);
        work = (double*)malloc((size_t)({len(vectors)} * C + 1) * sizeof(double));
        if (work == NULL) {{ PyErr_NoMemory(); goto LBN_DONE; }}
        {vecs}
        {body}
    }}"""
        release = ["Py_XDECREF(xc);", "Py_XDECREF(dyc);", "Py_XDECREF(lbn_tmp);", "free(work);"]
        return c_common.guarded(name, fail, code, release)


def _shape_checks(stats: list[str], x: str) -> str:
    return " || ".join(f"!lbn_stat_shape_ok({s}, {x}, lbn_mask)" for s in stats)


def train_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``BatchNormTrain.c_code``."""
    x_t = node.inputs[0].type
    tnum = _dtype_code(x_t.dtype)
    st_num = _dtype_code(node.outputs[1].type.dtype)
    g = _Glue(op.axes, x_t.ndim)
    nd = x_t.ndim
    x, gamma, beta, eps = inputs[:4]
    out, mean, invstd = outputs[:3]
    check = _shape_checks([gamma, beta], x) + f" || m < 1 || !{validation.EPSILON.c_source('eps')}"
    head = f"const double eps = lbn_scalar({eps});"
    vectors = ["shift", "s1", "s2", "inv", "mean_v", "scale", "offset"]
    run_read = run_write = ""
    if len(inputs) > 4:  # running averages
        factor, rmean, rvar = inputs[4:]
        new_rm, new_rv = outputs[3:]
        check += f" || !{validation.RUNNING_AVERAGE_FACTOR.c_source('f')} || " + _shape_checks(
            [rmean, rvar], x
        )
        head += f"\n    const double f = lbn_scalar({factor});"
        vectors += ["rm", "rv"]
        run_read = (
            f"if (lbn_read_vector({rmean}, rm, C) || lbn_read_vector({rvar}, rv, C)) "
            "goto LBN_DONE;"
        )
        run_write = f"""
        if (lbn_prepare_output(&{new_rm}, {nd}, sdims, {st_num})
            || lbn_prepare_output(&{new_rv}, {nd}, sdims, {st_num})) goto LBN_DONE;
        {{
            /* bn.running_average_update, written in C.
               m == 1: var * inf * f is NaN (0 * inf), as in perform. */
            const double unbias = m > 1 ? (double)m / (double)(m - 1) : INFINITY;
            for (npy_intp c = 0; c < C; ++c) {{
                rm[c] = rm[c] * (1.0 - f) + mean_v[c] * f;
                rv[c] = rv[c] * (1.0 - f) + s2[c] * unbias * f;
            }}
        }}
        lbn_write_vector({new_rm}, rm, C);
        lbn_write_vector({new_rv}, rv, C);"""
    body = f"""if (lbn_read_vector({gamma}, scale, C) || lbn_read_vector({beta}, offset, C))
            goto LBN_DONE;
        {run_read}
        if (lbn_prepare_output(&{out}, {nd}, PyArray_DIMS({x}), {tnum})
            || lbn_prepare_output(&{mean}, {nd}, sdims, {st_num})
            || lbn_prepare_output(&{invstd}, {nd}, sdims, {st_num})) goto LBN_DONE;
        lbn_moments(type, xd, A, C, B, shift, s1, s2, mean_v);
        for (npy_intp c = 0; c < C; ++c) {{
            inv[c] = 1.0 / sqrt(s2[c] + eps);
            scale[c] = scale[c] * inv[c];
            offset[c] = offset[c] - s1[c] * scale[c];
        }}
        lbn_write_vector({mean}, mean_v, C);
        lbn_write_vector({invstd}, inv, C);
        {g.elementwise(2, out, ["shift", "scale", "offset"])}
        {run_write}"""
    return g.node_code(name, sub["fail"], x, vectors, body, head, (check, "train", inputs))


def train_grad_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``BatchNormTrainGrad.c_code``."""
    x_t = node.inputs[0].type
    tnum = _dtype_code(x_t.dtype)
    st_num = _dtype_code(node.outputs[1].type.dtype)
    g = _Glue(op.axes, x_t.ndim)
    nd = x_t.ndim
    x, dy, gamma, mean, invstd = inputs[:5]
    dx, dgamma, dbeta = outputs
    check = _shape_checks(inputs[2:], x) + f" || m < 1 || !PyArray_SAMESHAPE({x}, {dy})"
    read_g = (
        f"if (lbn_read_vector({inputs[5]}, gm, C) || lbn_read_vector({inputs[6]}, gv, C)) "
        "goto LBN_DONE;"
        if len(inputs) > 5  # gradients reaching the statistics
        else "for (npy_intp c = 0; c < C; ++c) { gm[c] = 0.0; gv[c] = 0.0; }"
    )
    body = f"""if (lbn_read_vector({gamma}, gam, C) || lbn_read_vector({mean}, mu, C)
            || lbn_read_vector({invstd}, inv, C)) goto LBN_DONE;
        {read_g}
        if (lbn_prepare_output(&{dx}, {nd}, PyArray_DIMS({x}), {tnum})
            || lbn_prepare_output(&{dgamma}, {nd}, sdims, {st_num})
            || lbn_prepare_output(&{dbeta}, {nd}, sdims, {st_num})) goto LBN_DONE;
        Py_BEGIN_ALLOW_THREADS
        lbn_reduce(1, type, xd, dyd, A, C, B, mu, sy, syx, lbn_max_threads());
        Py_END_ALLOW_THREADS
        for (npy_intp c = 0; c < C; ++c) {{
            k1[c] = gam[c] * inv[c];
            k2[c] = (k1[c] * inv[c] * inv[c] * syx[c] - 2.0 * gv[c]) / (double)m;
            gm[c] = (k1[c] * sy[c] - gm[c]) / (double)m;  /* k3 */
            gam[c] = syx[c] * inv[c];  /* dgamma */
        }}
        lbn_write_vector({dgamma}, gam, C);
        lbn_write_vector({dbeta}, sy, C);
        {g.elementwise(3, dx, ["mu", "k1", "k2", "gm"], dy="dyd")}"""
    vectors = ["gam", "mu", "inv", "gm", "gv", "sy", "syx", "k1", "k2"]
    return g.node_code(
        name, sub["fail"], x, vectors, body, check=(check, "train_grad", inputs), dy=dy
    )


def inference_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``BatchNormInference.c_code``."""
    x_t = node.inputs[0].type
    tnum = _dtype_code(x_t.dtype)
    _dtype_code(node.inputs[1].type.dtype)
    g = _Glue(op.axes, x_t.ndim)
    x, gamma, beta, mean, var, eps = inputs
    (out,) = outputs
    check = (
        _shape_checks([gamma, beta, mean, var], x) + f" || !{validation.EPSILON.c_source('eps')}"
    )
    body = f"""if (lbn_read_vector({gamma}, scale, C) || lbn_read_vector({beta}, offset, C)
            || lbn_read_vector({mean}, mu, C) || lbn_read_vector({var}, v, C)) goto LBN_DONE;
        if (lbn_prepare_output(&{out}, {x_t.ndim}, PyArray_DIMS({x}), {tnum})) goto LBN_DONE;
        for (npy_intp c = 0; c < C; ++c) scale[c] = scale[c] / sqrt(v[c] + eps);
        {g.elementwise(2, out, ["mu", "scale", "offset"])}"""
    head = f"const double eps = lbn_scalar({eps});"
    check_ = (check, "inference", inputs)
    return g.node_code(name, sub["fail"], x, ["scale", "offset", "mu", "v"], body, head, check_)


def moments_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``Moments.c_code`` (:mod:`lasagne_bn.ops.statistics`): the statistics of ``train_code``."""
    x_t = node.inputs[0].type
    _dtype_code(x_t.dtype)
    st_num = _dtype_code(node.outputs[0].type.dtype)
    g = _Glue(op.axes, x_t.ndim)
    prepare = " || ".join(
        f"lbn_prepare_output(&{o}, {x_t.ndim}, sdims, {st_num})" for o in outputs
    )
    # outputs: mean, var, shift, shifted_mean
    write = (
        f"lbn_write_vector({o}, {v}, C);"
        for o, v in zip(outputs, ("mean_v", "s2", "shift", "s1"), strict=True)
    )
    body = f"""if ({prepare}) goto LBN_DONE;
        lbn_moments(type, xd, A, C, B, shift, s1, s2, mean_v);
        {" ".join(write)}"""
    return g.node_code(name, sub["fail"], inputs[0], ["shift", "s1", "s2", "mean_v"], body)


def apply_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``BatchNormApply.c_code``: one broadcasting pass with NumPy's iterator."""
    out_t = node.outputs[0].type
    tnum = _dtype_code(out_t.dtype)
    ctype = c_common.c_type(out_t.dtype)
    nd = out_t.ndim
    (out,) = outputs
    fail = sub["fail"]
    items = ", ".join(inputs)
    code = f"""
{{
    PyArrayObject* lbn_in[5] = {{{items}}};
    npy_intp dims[{max(nd, 1)}];
    int lbn_ok = 1;
    for (int i = 0; i < {nd}; ++i) {{
        npy_intp d = 1;
        for (int k = 0; k < 5; ++k) {{
            const npy_intp s = PyArray_DIMS(lbn_in[k])[i];
            if (s != 1) {{
                if (d != 1 && s != d) lbn_ok = 0;
                d = s;
            }}
        }}
        dims[i] = d;
    }}
    if (!lbn_ok) {{
        {c_common.raise_code(__name__, "apply", (), inputs)}
        {fail}
    }}
    if (lbn_prepare_output(&{out}, {nd}, dims, {tnum})) {{
        {fail}
    }}
    if (PyArray_SIZE({out}) > 0) {{
        PyArrayObject* ops[6] = {{{items}, {out}}};
        npy_uint32 flags[6] = {{NPY_ITER_READONLY, NPY_ITER_READONLY, NPY_ITER_READONLY,
                               NPY_ITER_READONLY, NPY_ITER_READONLY,
                               NPY_ITER_WRITEONLY | NPY_ITER_NO_BROADCAST}};
        PyArray_Descr* types[6];
        for (int k = 0; k < 6; ++k) types[k] = PyArray_DescrFromType({tnum});
        NpyIter* it = NpyIter_MultiNew(
            6, ops, NPY_ITER_EXTERNAL_LOOP | NPY_ITER_BUFFERED | NPY_ITER_GROWINNER,
            NPY_KEEPORDER, NPY_SAFE_CASTING, flags, types);
        for (int k = 0; k < 6; ++k) Py_DECREF(types[k]);
        if (it == NULL) {{
            {fail}
        }}
        NpyIter_IterNextFunc* next = NpyIter_GetIterNext(it, NULL);
        if (next == NULL) {{
            NpyIter_Deallocate(it);
            {fail}
        }}
        char** data = NpyIter_GetDataPtrArray(it);
        npy_intp* strides = NpyIter_GetInnerStrideArray(it);
        npy_intp* size = NpyIter_GetInnerLoopSizePtr(it);
        do {{
            const npy_intp n = *size;
            const npy_intp s0 = strides[0], s1 = strides[1], s2 = strides[2];
            const npy_intp s3 = strides[3], s4 = strides[4], s5 = strides[5];
            char* p0 = data[0]; char* p1 = data[1]; char* p2 = data[2];
            char* p3 = data[3]; char* p4 = data[4]; char* p5 = data[5];
            for (npy_intp i = 0; i < n; ++i) {{
                const {ctype} xv = *({ctype}*)(p0 + i * s0);
                const {ctype} gv = *({ctype}*)(p1 + i * s1);
                const {ctype} bv = *({ctype}*)(p2 + i * s2);
                const {ctype} mv = *({ctype}*)(p3 + i * s3);
                const {ctype} sv = *({ctype}*)(p4 + i * s4);
                *({ctype}*)(p5 + i * s5) = (xv - mv) * (gv / sv) + bv;
            }}
        }} while (next(it));
        if (!NpyIter_Deallocate(it)) {{
            {fail}
        }}
    }}
}}
"""
    return code


_HEADERS = ("<math.h>", "<pthread.h>", "<sched.h>")
for _op_class, _code in (
    (BatchNormTrain, train_code),
    (BatchNormTrainGrad, train_grad_code),
    (BatchNormInference, inference_code),
    (BatchNormApply, apply_code),
    (Moments, moments_code),
):
    register_c_code(_op_class, CCode(_code, support_code, C_CODE_VERSION, _HEADERS, ("pthread",)))
