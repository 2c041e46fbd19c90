"""C implementations of the convolution Ops (modes ``C`` and ``CVM``).

The Ops of :mod:`lasagne_bn.ops.conv` (forward, input gradient, filter
gradient; 2-D and 3-D) delegate their ``c_code`` here.  Each is an
*im2col* + GEMM per sample and group, in the correlation form of the module
docstring of :mod:`lasagne_bn.ops.conv` (2-D is 3-D with a depth of one):

- forward: ``col = im2col(x[n, group])`` (``(Cg * K, P)``, ``K`` taps,
  ``P`` output pixels), ``out[n, group] = W[group] @ col``;
- input gradient: ``dcol = W[group].T @ dy[n, group]``, then ``col2im``
  adds every column back to the pixel it was read from;
- filter gradient: ``dW[group] += dy[n, group] @ col.T`` over the batch.

A 1x1 filter with stride 1 and no padding uses the image itself as
``col``.  The filters are flipped (``filter_flip=True``) into a small
buffer first.  GEMM is SciPy's BLAS (:data:`lasagne_bn.ops.c.common.BLAS_SUPPORT`),
called on column blocks small enough that OpenBLAS runs them on the
calling thread (its own threads spin between calls and made a convolution
25x slower on a loaded machine); the batch is split into pieces run by the
caller and the shared helper threads, as in :mod:`lasagne_bn.ops.c.bn`
(``LASAGNE_BN_C_THREADS``).
Filters too large for such blocks go to OpenBLAS whole, on one thread of
ours.  Inputs that are not C-contiguous are copied
first.  Computation is in the input's precision, as ``perform``'s
``tensordot``; float16 has no C code (``CVM`` runs ``perform``).

Invalid runtime shapes are detected in C, and the error is then raised by
the NumPy code ``perform`` runs (:func:`raise_like_perform`), so the message
is the same in every mode.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops.conv import conv2d
>>> x, w = pt.tensor4("x"), pt.tensor4("w")
>>> f = pytensor.function([x, w], conv2d(x, w), mode="C")
>>> f(np.ones((1, 1, 3, 3)), np.ones((1, 1, 2, 2)))[0, 0]
array([[4., 4.],
       [4., 4.]])
"""

from __future__ import annotations

import ast

from lasagne_bn.ops.c import common as c_common
from lasagne_bn.ops.c_code import CCode, register_c_code
from lasagne_bn.ops.conv import Conv, ConvGradInputs, ConvGradWeights

#: Keys PyTensor's on-disk cache of compiled modules (this file and the shared plumbing).
C_CODE_VERSION = c_common.code_version(__file__)

# One copy per element type ($T, suffix $S).  Geometry is always 3-D.
_KERNELS = r"""
/* Between x (Cg, in0, in1, in2) of one sample and group and col (Cg*K rows
   of P): back == 0, col = im2col(x); back == 1, x += every column of col at
   the pixel it was read from (col2im).  One walk: each row of col, output row
   by output row, against the input row it reads. */
static void lcv_cols_$S($T* x, const lcv_geom* g, npy_intp Cg, $T* col, int back)
{
    const npy_intp P = g->out[0] * g->out[1] * g->out[2];
    const npy_intp o1n = g->out[1], o2n = g->out[2], s = g->st[2];
    for (npy_intp c = 0; c < Cg; ++c)
    for (npy_intp k0 = 0; k0 < g->k[0]; ++k0)
    for (npy_intp k1 = 0; k1 < g->k[1]; ++k1)
    for (npy_intp k2 = 0; k2 < g->k[2]; ++k2) {
        $T* row = col + (((c * g->k[0] + k0) * g->k[1] + k1) * g->k[2] + k2) * P;
        npy_intp lo, hi;
        const npy_intp off2 = k2 * g->dil[2] - g->pad[2];
        lcv_valid_range(off2, s, g->in[2], o2n, &lo, &hi);
        for (npy_intp o0 = 0; o0 < g->out[0]; ++o0) {
            const npy_intp i0 = o0 * g->st[0] + k0 * g->dil[0] - g->pad[0];
            for (npy_intp o1 = 0; o1 < o1n; ++o1, row += o2n) {
                const npy_intp i1 = o1 * g->st[1] + k1 * g->dil[1] - g->pad[1];
                if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1]) {
                    if (!back) memset(row, 0, (size_t)o2n * sizeof($T));
                    continue;
                }
                $T* xr = x + ((c * g->in[0] + i0) * g->in[1] + i1) * g->in[2] + off2;
                if (back) {
                    for (npy_intp o2 = lo; o2 < hi; ++o2) xr[o2 * s] += row[o2];
                    continue;
                }
                npy_intp o2 = 0;
                for (; o2 < lo; ++o2) row[o2] = 0;
                if (s == 1) {
                    if (hi > lo) memcpy(row + lo, xr + lo, (size_t)(hi - lo) * sizeof($T));
                    o2 = hi > lo ? hi : lo;
                } else {
                    for (; o2 < hi; ++o2) row[o2] = xr[o2 * s];
                }
                for (; o2 < o2n; ++o2) row[o2] = 0;
            }
        }
    }
}

/* wo (F, Cg, K0, K1, K2) = w with its taps reversed on every axis when flip. */
static void lcv_orient_$S(const $T* w, const lcv_geom* g, npy_intp rows, int flip, $T* wo)
{
    const npy_intp K = g->k[0] * g->k[1] * g->k[2];
    if (!flip) {
        memcpy(wo, w, (size_t)(rows * K) * sizeof($T));
        return;
    }
    for (npy_intp r = 0; r < rows; ++r)
        for (npy_intp t = 0; t < K; ++t) wo[r * K + t] = w[r * K + (K - 1 - t)];
}

/* Samples [t->n0, t->n1) of lcv_run's work, with this task's own buffers. */
static void lcv_task_$S(lcv_task* t)
{
    const lcv_geom* g = t->g;
    const int kind = t->kind;
    const npy_intp G = g->G, Cg = g->C / G, Fg = g->F / G;
    const npy_intp K = g->k[0] * g->k[1] * g->k[2];
    const npy_intp CK = Cg * K;
    const npy_intp P = g->out[0] * g->out[1] * g->out[2];
    const npy_intp I = g->in[0] * g->in[1] * g->in[2];
    const npy_intp nc = t->nc;
    $T* x = ($T*)t->x;
    $T* y = ($T*)t->y;
    $T* w = ($T*)(kind == 2 ? t->dw : t->w);
    $T* col = NULL;
    if (!t->direct) {
        col = ($T*)malloc((size_t)(CK * P + 1) * sizeof($T));
        if (col == NULL) { t->err = 1; return; }
    }
    if (kind == 2) memset(w, 0, (size_t)(g->F * CK) * sizeof($T));
    for (npy_intp n = t->n0; n < t->n1; ++n)
        for (npy_intp gi = 0; gi < G; ++gi) {
            $T* xs = x + (n * g->C + gi * Cg) * I;
            $T* ys = y + (n * g->F + gi * Fg) * P;
            $T* ws = w + gi * Fg * CK;
            $T* c = t->direct ? xs : col;
            if (kind != 1 && !t->direct) lcv_cols_$S(xs, g, Cg, col, 0);
            for (npy_intp p0 = 0; p0 < P; p0 += nc) {
                const npy_intp pc = P - p0 < nc ? P - p0 : nc;
                if (kind == 0)
                    lbn_gemm_$S('N', 'N', Fg, pc, CK, 1, ws, CK, c + p0, P, 0, ys + p0, P);
                else if (kind == 1)  /* direct: x has col's layout and is written at once */
                    lbn_gemm_$S('T', 'N', CK, pc, Fg, 1, ws, CK, ys + p0, P, 0, c + p0, P);
                else
                    lbn_gemm_$S('N', 'T', Fg, CK, pc, 1, ys + p0, P, c + p0, P, 1, ws, CK);
            }
            if (kind == 1 && !t->direct) lcv_cols_$S(xs, g, Cg, col, 1);
        }
    free(col);
}

static void lcv_piece_$S(void* tasks, int i)
{
    lcv_task_$S((lcv_task*)tasks + i);
}

/* kind 0: out = conv(x, w); 1: x = grad wrt inputs of (w, y); 2: w = grad wrt
   filters of (x, y).  Arrays are C-contiguous; w is already oriented for 0/1
   and receives the oriented gradient for 2.  The batch is split into up to
   lbn_max_threads() pieces, run by lbn_run_pieces, when OpenBLAS runs every
   GEMM call on its caller's thread (see lbn_gemm_cols_single); else one
   thread makes whole GEMM calls and OpenBLAS splits them.  Returns -1 on
   no memory. */
static int lcv_run_$S(int kind, const lcv_geom* g, $T* x, $T* w, $T* y)
{
    const npy_intp Cg = g->C / g->G, Fg = g->F / g->G;
    const npy_intp K = g->k[0] * g->k[1] * g->k[2];
    const npy_intp P = g->out[0] * g->out[1] * g->out[2];
    const npy_intp I = g->in[0] * g->in[1] * g->in[2];
    const npy_intp W = g->F * Cg * K;
    npy_intp nc = lbn_gemm_cols_single(Fg, Cg * K);
    int n = nc > 0 ? lbn_max_threads() : 1;
    if (nc == 0) nc = P > 0 ? P : 1;
    if (n > 16) n = 16;
    if (n > g->N) n = (int)g->N;
    if ((double)g->N * (double)P * (double)W < (double)LCV_MIN_MACS_PER_THREAD * n)
        n = (int)((double)g->N * (double)P * (double)W / LCV_MIN_MACS_PER_THREAD);
    if (n < 1) n = 1;
    lcv_task tasks[16];
    $T* partial = NULL;
    if (kind == 2 && n > 1) {
        partial = ($T*)malloc((size_t)((n - 1) * W + 1) * sizeof($T));
        if (partial == NULL) n = 1;
    }
    if (kind == 1) memset(x, 0, (size_t)(g->N * g->C * I) * sizeof($T));
    for (int i = 0; i < n; ++i) {
        lcv_task* t = &tasks[i];
        t->kind = kind; t->g = g; t->x = x; t->w = w; t->y = y; t->nc = nc; t->err = 0;
        t->direct = K == 1 && g->st[0] == 1 && g->st[1] == 1 && g->st[2] == 1
                    && g->pad[0] == 0 && g->pad[1] == 0 && g->pad[2] == 0;
        t->n0 = g->N * i / n;
        t->n1 = g->N * (i + 1) / n;
        t->dw = i == 0 ? (void*)w : (void*)(partial + (i - 1) * W);
    }
    lbn_run_pieces(lcv_piece_$S, tasks, n);
    int err = 0;
    for (int i = 0; i < n; ++i) err |= tasks[i].err;
    if (partial != NULL) {
        for (int i = 1; i < n; ++i) {
            const $T* p = partial + (i - 1) * W;
            for (npy_intp j = 0; j < W; ++j) w[j] += p[j];
        }
        free(partial);
    }
    return err ? -1 : 0;
}
"""

_COMMON = r"""
#include <stdlib.h>
#include <string.h>

/* Sizes of one convolution, always with three spatial axes (2-D: depth 1). */
typedef struct {
    npy_intp N, C, F, G;           /* batch, image channels, filters, groups */
    npy_intp in[3], k[3], out[3];  /* image, filter and output spatial sizes */
    npy_intp st[3], dil[3], pad[3];  /* strides, dilations, padding before */
} lcv_geom;

/* Multiply-adds below which one more thread does not pay. */
#define LCV_MIN_MACS_PER_THREAD (1 << 22)

/* One thread's share of a convolution (samples [n0, n1)). */
typedef struct {
    int kind, direct, err;
    const lcv_geom* g;
    void* x;
    void* w;
    void* y;
    void* dw;       /* kind 2: this task's filter-gradient sums */
    npy_intp n0, n1;
    npy_intp nc;    /* columns per GEMM call */
} lcv_task;

/* Output positions o in [lo, hi) of [0, n) read o * st + off inside [0, size). */
static void lcv_valid_range(npy_intp off, npy_intp st, npy_intp size, npy_intp n,
                            npy_intp* lo, npy_intp* hi)
{
    npy_intp a = off >= 0 ? 0 : (-off + st - 1) / st;
    npy_intp b = size - off <= 0 ? 0 : (size - off - 1) / st + 1;
    if (b > n) b = n;
    if (a > b) a = b;
    *lo = a;
    *hi = b;
}
"""


def support_code() -> list[str]:
    """The C support code of the convolution Ops (one block per concern)."""
    return [
        c_common.OUTPUT_SUPPORT,
        c_common.THREADS_SUPPORT,
        c_common.BLAS_SUPPORT,
        _COMMON + c_common.per_type(_KERNELS),
    ]


# --------------------------------------------------------------------------
# errors: the NumPy reference raises them


def _params(props: str, convdim: int):
    from lasagne_bn.ops.conv import ConvParams

    return ConvParams(**ast.literal_eval(props), convdim=convdim)


def raise_like_perform(kind: str, props: str, *inputs) -> None:
    """Run the NumPy reference of ``kind`` on ``inputs``, which raises its error.

    ``kind`` is ``'forward'``, ``'grad_inputs'`` or ``'grad_weights'``;
    ``props`` the Op's parameters as a Python literal.
    """
    from lasagne_bn.ops import conv

    p = _params(props, inputs[0].ndim - 2)
    fn = {
        "forward": conv.np_conv,
        "grad_inputs": conv.np_conv_grad_inputs,
        "grad_weights": conv.np_conv_grad_weights,
    }[kind]
    fn(*inputs, p)


# --------------------------------------------------------------------------
# per-node glue


def _pad_code(op) -> str:
    """C statements setting ``g.pad`` (the kernel sizes ``g.k`` are set)."""
    n = op.convdim
    off = 3 - n
    lines = []
    for i in range(n):
        j = i + off
        dk = f"((g.k[{j}] - 1) * g.dil[{j}] + 1)"
        if op.border_mode == "valid":
            lo = hi = "0"
        elif op.border_mode == "full":
            lo = hi = f"({dk} - 1)"
        elif op.border_mode == "half":
            lo = hi = f"({dk} / 2)"
        else:
            lo, hi = (str(v) for v in op.border_mode[i])
        lines.append(f"g.pad[{j}] = {lo}; lcv_hi[{j}] = {hi};")
    return "\n        ".join(lines)


def conv_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``c_code`` of the three convolution Ops (``op.kind`` 0, 1, 2)."""
    dtype = node.outputs[0].type.dtype
    tnum = c_common.dtype_code(dtype, "convolution")
    sfx = "f32" if dtype == "float32" else "f64"
    ctype = c_common.c_type(dtype)
    n = op.convdim
    nd = n + 2
    off = 3 - n
    fail = sub["fail"]
    kind = op.kind
    kind_name = ("forward", "grad_inputs", "grad_weights")[kind]
    st = ", ".join(["1"] * off + [str(s) for s in op.subsample])
    dil = ", ".join(["1"] * off + [str(d) for d in op.filter_dilation])
    (out,) = outputs
    if kind == 0:
        x, w = inputs
    elif kind == 1:
        w, y, shape = inputs
    else:
        x, y, shape = inputs

    # Sizes from the inputs; the spatial sizes of the computed array from `shape`.
    if kind == 0:
        sizes = f"""
        g.N = PyArray_DIMS({x})[0]; g.C = PyArray_DIMS({x})[1]; g.F = PyArray_DIMS({w})[0];
        lcv_cg = PyArray_DIMS({w})[1];
        for (int i = 0; i < {n}; ++i) {{
            g.in[i + {off}] = PyArray_DIMS({x})[2 + i];
            g.k[i + {off}] = PyArray_DIMS({w})[2 + i];
        }}"""
    elif kind == 1:
        sizes = f"""
        g.N = PyArray_DIMS({y})[0]; g.F = PyArray_DIMS({y})[1];
        lcv_cg = PyArray_DIMS({w})[1]; g.C = lcv_cg * g.G;
        lcv_fw = PyArray_DIMS({w})[0];
        for (int i = 0; i < {n}; ++i) {{
            g.in[i + {off}] = PyArray_SIZE({shape}) > i
                ? (npy_intp)*(npy_int64*)PyArray_GETPTR1({shape}, i) : 1;
            g.k[i + {off}] = PyArray_DIMS({w})[2 + i];
            lcv_top[i + {off}] = PyArray_DIMS({y})[2 + i];
        }}"""
    else:
        sizes = f"""
        g.N = PyArray_DIMS({x})[0]; g.C = PyArray_DIMS({x})[1]; g.F = PyArray_DIMS({y})[1];
        lcv_cg = g.C / g.G;
        lcv_ny = PyArray_DIMS({y})[0];
        for (int i = 0; i < {n}; ++i) {{
            g.in[i + {off}] = PyArray_DIMS({x})[2 + i];
            g.k[i + {off}] = PyArray_SIZE({shape}) > i
                ? (npy_intp)*(npy_int64*)PyArray_GETPTR1({shape}, i) : 1;
            lcv_top[i + {off}] = PyArray_DIMS({y})[2 + i];
        }}"""
    checks = ["g.C % g.G != 0", "g.F % g.G != 0", "g.C != lcv_cg * g.G"]
    if kind == 1:
        checks += ["lcv_fw != g.F", "PyArray_SIZE(" + shape + ") != " + str(n)]
    if kind == 2:
        checks += ["lcv_ny != g.N", "PyArray_SIZE(" + shape + ") != " + str(n)]
    if kind != 0:
        checks += [f"g.out[{i}] != lcv_top[{i}]" for i in range(off, 3)]
    check = " || ".join(checks)

    # The computed array's sizes, and which arrays are the kernel's x and y
    # (lcv_a, lcv_b: the first two inputs, made contiguous).
    lead, field, px, py = {
        0: ("g.N, g.F", "out", "lcv_a", out),
        1: ("g.N, g.C", "in", out, "lcv_b"),
        2: ("g.F, lcv_cg", "k", "lcv_a", "lcv_b"),
    }[kind]
    dims = ", ".join([lead] + [f"g.{field}[{i}]" for i in range(off, 3)])

    def data(v):
        return f"({ctype}*)PyArray_DATA({v})"

    def orient(src, dst):  # the filters (flipped or not), between the Op's and the kernel's
        return f"lcv_orient_{sfx}({src}, &g, g.F * lcv_cg, {int(op.filter_flip)}, {dst});"

    # forward and input gradient take oriented filters, the filter gradient gives them
    pre = orient(data({0: "lcv_b", 1: "lcv_a"}[kind]), "lcv_w") if kind != 2 else ""
    post = orient("lcv_w", data(out)) if kind == 2 else ""
    code = f"""lcv_geom g;
    npy_intp lcv_hi[3] = {{0, 0, 0}};
    npy_intp lcv_top[3] = {{1, 1, 1}};
    npy_intp lcv_cg = 0, lcv_fw = 0, lcv_ny = 0;
    PyArrayObject* lcv_a = NULL;
    PyArrayObject* lcv_b = NULL;
    {ctype}* lcv_w = NULL;
    int lcv_bad = 0, lcv_rc = 0;
    (void)lcv_fw; (void)lcv_ny; (void)lcv_hi; (void)lcv_top;
    memset(&g, 0, sizeof(g));
    {{
        const npy_intp st[3] = {{{st}}};
        const npy_intp dil[3] = {{{dil}}};
        for (int i = 0; i < 3; ++i) {{
            g.st[i] = st[i]; g.dil[i] = dil[i]; g.in[i] = 1; g.k[i] = 1; g.out[i] = 1;
        }}
    }}
    g.G = {op.num_groups};
    {sizes}
    {{
        {_pad_code(op)}
        for (int i = {off}; i < 3; ++i) {{
            const npy_intp num = g.in[i] + g.pad[i] + lcv_hi[i] - ((g.k[i] - 1) * g.dil[i] + 1);
            if (num < 0 || g.in[i] < 1 || g.k[i] < 1) lcv_bad = 1;
            g.out[i] = num < 0 ? 0 : num / g.st[i] + 1;
        }}
    }}
    if (lcv_bad || {check}) {{
        {c_common.raise_code(__name__, kind_name, op._props_dict(), inputs)}
        {fail}
    }}
    if (lbn_blas_init()) {{
        {fail}
    }}
    {{
        const npy_intp K = g.k[0] * g.k[1] * g.k[2];
        const npy_intp P = g.out[0] * g.out[1] * g.out[2];
        if (!lbn_blas_fits(lcv_cg * K, P, g.F)) goto LBN_DONE;
        lcv_a = (PyArrayObject*)PyArray_GETCONTIGUOUS({inputs[0]});
        lcv_b = (PyArrayObject*)PyArray_GETCONTIGUOUS({inputs[1]});
        if (lcv_a == NULL || lcv_b == NULL) goto LBN_DONE;
        {{
            npy_intp dims[{nd}] = {{{dims}}};
            if (lbn_prepare_output(&{out}, {nd}, dims, {tnum})) goto LBN_DONE;
        }}
        lcv_w = ({ctype}*)malloc((size_t)(g.F * lcv_cg * K + 1) * sizeof({ctype}));
        if (lcv_w == NULL) {{ PyErr_NoMemory(); goto LBN_DONE; }}
        {pre}
        {ctype}* lcv_px = {data(px)};
        {ctype}* lcv_py = {data(py)};
        Py_BEGIN_ALLOW_THREADS
        lcv_rc = lcv_run_{sfx}({kind}, &g, lcv_px, lcv_w, lcv_py);
        Py_END_ALLOW_THREADS
        if (lcv_rc) {{
            PyErr_NoMemory();
            goto LBN_DONE;
        }}
        {post}
    }}"""
    release = ["Py_XDECREF(lcv_a);", "Py_XDECREF(lcv_b);", "free(lcv_w);"]
    return c_common.guarded(name, fail, code, release)


_HEADERS = ("<stdlib.h>", "<string.h>", "<limits.h>", "<pthread.h>", "<sched.h>")
for _op_class in (Conv, ConvGradInputs, ConvGradWeights):
    register_c_code(
        _op_class, CCode(conv_code, support_code, C_CODE_VERSION, _HEADERS, ("pthread",))
    )
