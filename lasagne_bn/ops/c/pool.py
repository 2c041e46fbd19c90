"""C implementations of the pooling Ops (modes ``C`` and ``CVM``).

:class:`~lasagne_bn.ops.pool.Pool`, :class:`~lasagne_bn.ops.pool.MaxPoolGrad`,
:class:`~lasagne_bn.ops.pool.MaxPoolGradGrad` and
:class:`~lasagne_bn.ops.pool.AveragePoolGrad` delegate their ``c_code``
here, for up to three pooled axes (more: no C code, ``CVM`` runs
``perform``).  The leading axes are one batch of rows; each output is one
window, walked in row-major tap order, so the results are those of the
NumPy ``perform`` (:mod:`lasagne_bn.ops.pool`).  :class:`~lasagne_bn.ops.pool.DynamicPool`
(windows given as inputs) runs the same code with the windows read, and
checked, when it is called:

- max: padding never wins, a NaN in the window is the maximum;
- sum / averages: the sum of the window's input values, divided by the
  window's clipped size (``average_inc_pad``) or its number of input
  values (``average_exc_pad``);
- max gradients go to the *first* tap, in row-major order, equal to the
  window's maximum (a padding tap counts as ``-inf``).

Computation is in the input's precision; float16 has no C code.  Inputs
that are not C-contiguous are copied first.  Shapes that do not match are
refused by the NumPy code ``perform`` runs (:func:`raise_like_perform`), so
the message is the same in every mode.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops.pool import pool_2d
>>> x = pt.matrix("x")
>>> f = pytensor.function([x], pool_2d(x, (2, 2), ignore_border=False), mode="C")
>>> f(np.arange(9.0).reshape(3, 3))
array([[4., 5.],
       [7., 8.]])
"""

from __future__ import annotations

import ast

from lasagne_bn.ops.c import common as c_common
from lasagne_bn.ops.c_code import CCode, register_c_code
from lasagne_bn.ops.pool import AveragePoolGrad, DynamicPool, MaxPoolGrad, MaxPoolGradGrad, Pool

#: Keys PyTensor's on-disk cache of compiled modules (this file and the shared plumbing).
C_CODE_VERSION = c_common.code_version(__file__)

#: The most pooled axes the C code handles.
MAX_POOLED_AXES = 3

_COMMON = r"""
#include <math.h>
#include <string.h>

/* One pooling: R rows of (in0, in1, in2), pooled to (out0, out1, out2). */
typedef struct {
    npy_intp R;
    npy_intp in[3], out[3], ws[3], st[3], pad[3];
    int mode;  /* 0 max, 1 sum, 2 average_inc_pad, 3 average_exc_pad */
} lpl_geom;

/* Window (o0, o1, o2)'s divisor: its size clipped to the padded input
   (inc_pad) or its number of input values (exc_pad). */
static npy_intp lpl_divisor(const lpl_geom* g, const npy_intp* o)
{
    npy_intp d = 1;
    for (int i = 0; i < 3; ++i) {
        npy_intp a = o[i] * g->st[i];
        npy_intp b = a + g->ws[i];
        const npy_intp v = g->in[i] + 2 * g->pad[i];
        if (b > v) b = v;
        if (g->mode == 3) {
            if (a < g->pad[i]) a = g->pad[i];
            if (b > g->in[i] + g->pad[i]) b = g->in[i] + g->pad[i];
        }
        d *= b > a ? b - a : 0;
    }
    return d;
}
"""

_KERNELS = r"""
/* The flat input index of window o's first tap equal to maxv (NaN matches
   NaN); -1 when that tap is padding (or none matches). */
static npy_intp lpl_argmax_$S(const $T* x, const lpl_geom* g, const npy_intp* o, $T maxv)
{
    const int nan_max = maxv != maxv;
    for (npy_intp t0 = 0; t0 < g->ws[0]; ++t0) {
        const npy_intp i0 = o[0] * g->st[0] + t0 - g->pad[0];
        const int ok0 = i0 >= 0 && i0 < g->in[0];
        for (npy_intp t1 = 0; t1 < g->ws[1]; ++t1) {
            const npy_intp i1 = o[1] * g->st[1] + t1 - g->pad[1];
            const int ok1 = ok0 && i1 >= 0 && i1 < g->in[1];
            for (npy_intp t2 = 0; t2 < g->ws[2]; ++t2) {
                const npy_intp i2 = o[2] * g->st[2] + t2 - g->pad[2];
                const int ok = ok1 && i2 >= 0 && i2 < g->in[2];
                const npy_intp at = ok ? (i0 * g->in[1] + i1) * g->in[2] + i2 : -1;
                const $T v = ok ? x[at] : -($T)INFINITY;
                if (v == maxv || (nan_max && v != v)) return at;
            }
        }
    }
    return -1;
}

/* kind 0: y = pool(x); 1: gx = max grad (x, maxv, gy); 2: gy = max grad grad
   (x, maxv, gx); 3: gx = sum/average grad (gy). */
static void lpl_run_$S(int kind, const lpl_geom* g, const $T* x, const $T* maxv, $T* gx, $T* y)
{
    const npy_intp I = g->in[0] * g->in[1] * g->in[2];
    const npy_intp O = g->out[0] * g->out[1] * g->out[2];
    if (kind == 1 || kind == 3) memset(gx, 0, (size_t)(g->R * I) * sizeof($T));
    for (npy_intp r = 0; r < g->R; ++r) {
        const $T* xr = x ? x + r * I : NULL;
        $T* gr = gx ? gx + r * I : NULL;
        npy_intp o[3];
        npy_intp k = r * O;
        for (o[0] = 0; o[0] < g->out[0]; ++o[0])
        for (o[1] = 0; o[1] < g->out[1]; ++o[1])
        for (o[2] = 0; o[2] < g->out[2]; ++o[2], ++k) {
            if (kind == 1 || kind == 2) {
                const npy_intp at = lpl_argmax_$S(xr, g, o, maxv[k]);
                if (kind == 1) {
                    if (at >= 0) gr[at] += y[k];
                } else {
                    y[k] = at >= 0 ? gr[at] : 0;
                }
                continue;
            }
            $T acc = kind == 0 && g->mode == 0 ? -($T)INFINITY : 0;
            $T share = 0;
            if (kind == 3)
                share = g->mode == 1 ? y[k] : y[k] / ($T)lpl_divisor(g, o);
            for (npy_intp t0 = 0; t0 < g->ws[0]; ++t0) {
                const npy_intp i0 = o[0] * g->st[0] + t0 - g->pad[0];
                if (i0 < 0 || i0 >= g->in[0]) continue;
                for (npy_intp t1 = 0; t1 < g->ws[1]; ++t1) {
                    const npy_intp i1 = o[1] * g->st[1] + t1 - g->pad[1];
                    if (i1 < 0 || i1 >= g->in[1]) continue;
                    const npy_intp base = (i0 * g->in[1] + i1) * g->in[2];
                    for (npy_intp t2 = 0; t2 < g->ws[2]; ++t2) {
                        const npy_intp i2 = o[2] * g->st[2] + t2 - g->pad[2];
                        if (i2 < 0 || i2 >= g->in[2]) continue;
                        if (kind == 3) {
                            gr[base + i2] += share;
                        } else if (g->mode == 0) {
                            const $T v = xr[base + i2];
                            if (v > acc || v != v) acc = v;
                        } else {
                            acc += xr[base + i2];
                        }
                    }
                }
            }
            if (kind == 0)
                y[k] = g->mode >= 2 ? acc / ($T)lpl_divisor(g, o) : acc;
        }
    }
}
"""


def support_code() -> list[str]:
    """The C support code of the pooling Ops (one block per concern)."""
    return [c_common.OUTPUT_SUPPORT, _COMMON + c_common.per_type(_KERNELS)]


# --------------------------------------------------------------------------
# errors: the NumPy reference raises them


def raise_like_perform(kind: str, props: str, *inputs) -> None:
    """Run the NumPy reference of ``kind`` on ``inputs``, which raises its error.

    ``kind`` is ``'max_grad'``, ``'max_grad_grad'`` or ``'average_grad'``;
    ``props`` the Op's parameters as a Python literal.
    """
    from lasagne_bn.ops import pool

    if kind == "dynamic":  # DynamicPool: windows (checked here) and arrays
        pool.DynamicPool(**ast.literal_eval(props)).perform(None, list(inputs), [[None]])
        return
    p = pool.PoolParams(**ast.literal_eval(props))
    if kind == "max_grad":
        pool.np_max_pool_grad(*inputs, p)
    elif kind == "max_grad_grad":
        pool.np_max_pool_grad_grad(*inputs, p)
    else:
        pool.np_average_pool_grad(inputs[0].shape, inputs[1], p, inputs[0].dtype)


# --------------------------------------------------------------------------
# per-node glue

_DYNAMIC_KINDS = {"pool": 0, "max_grad": 1, "max_grad_grad": 2, "average_grad": 3}

_MODES = {"max": 0, "sum": 1, "average_inc_pad": 2, "average_exc_pad": 3}


def pool_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``c_code`` of the pooling Ops (``op.c_kind``: 0 pool, 1/2 max grads, 3 average grad)."""
    dtype = node.inputs[0].type.dtype
    tnum = c_common.dtype_code(dtype, "pooling")
    dynamic = isinstance(getattr(op, "kind", None), str)  # DynamicPool: windows are inputs
    if dynamic:
        nd = op.nd
        kind = _DYNAMIC_KINDS[op.kind]
        windows = inputs[-3:]
        all_inputs, inputs = inputs, inputs[:-3]
    else:
        nd = len(op.ws)
        kind = op.c_kind
        all_inputs = inputs
    if nd > MAX_POOLED_AXES:
        raise NotImplementedError(f"lasagne_bn has no C code for pooling over {nd} axes")
    sfx = "f32" if dtype == "float32" else "f64"
    ctype = c_common.c_type(dtype)
    ndim = node.inputs[0].type.ndim
    lead = ndim - nd
    off = 3 - nd
    fail = sub["fail"]
    (out,) = outputs
    x = inputs[0]

    def fill(values, lead_value):
        return ", ".join([lead_value] * off + [str(v) for v in values])

    # Which inputs must have the pooled shape, and which x's shape.
    pooled = {0: [], 1: inputs[1:3], 2: inputs[1:2], 3: inputs[1:2]}[kind]
    same = inputs[2:3] if kind == 2 else []
    checks = []
    for v in pooled:
        checks.append(f"PyArray_NDIM({v}) != {ndim}")
        checks += [f"PyArray_DIMS({v})[{i}] != PyArray_DIMS({x})[{i}]" for i in range(lead)]
        checks += [f"PyArray_DIMS({v})[{lead + i}] != g.out[{off + i}]" for i in range(nd)]
    for v in same:
        checks.append(f"!PyArray_SAMESHAPE({v}, {x})")
    check = " || ".join(checks) or "0"
    kind_name = {1: "max_grad", 2: "max_grad_grad", 3: "average_grad"}.get(kind, "pool")
    if dynamic:
        kind_name = "dynamic"
    if dynamic:
        ws_v, st_v, pad_v = windows
        window_code = f"""
    if (PyArray_SIZE({ws_v}) != {nd} || PyArray_SIZE({st_v}) != {nd}
        || PyArray_SIZE({pad_v}) != {nd}) {{
        lpl_bad = 1;
    }} else {{
        for (int i = 0; i < {nd}; ++i) {{
            g.ws[{off} + i] = (npy_intp)*(npy_int64*)PyArray_GETPTR1({ws_v}, i);
            g.st[{off} + i] = (npy_intp)*(npy_int64*)PyArray_GETPTR1({st_v}, i);
            g.pad[{off} + i] = (npy_intp)*(npy_int64*)PyArray_GETPTR1({pad_v}, i);
            if (g.ws[{off} + i] < 1 || g.st[{off} + i] < 1 || g.pad[{off} + i] < 0
                || g.pad[{off} + i] >= g.ws[{off} + i]
                || ({int(not op.ignore_border)} && g.pad[{off} + i] != 0))
                lpl_bad = 1;
        }}
    }}"""
    else:
        window_code = ""

    if kind == 0:
        out_dims = "lpl_odims"
        args = "lpl_px, NULL, NULL, lpl_py"
    elif kind == 1:
        out_dims = f"PyArray_DIMS({x})"
        args = "lpl_px, lpl_pm, lpl_po, lpl_pg"
    elif kind == 2:
        out_dims = "lpl_odims"
        args = "lpl_px, lpl_pm, lpl_pg, lpl_po"
    else:
        out_dims = f"PyArray_DIMS({x})"
        args = "NULL, NULL, lpl_po, lpl_pg"
    # contiguous copies: a = x, b = maxout, c = the gradient input
    grad_in = None if kind == 0 else inputs[1] if kind == 3 else inputs[2]
    code = f"""lpl_geom g;
    npy_intp lpl_odims[{ndim}];
    PyArrayObject* lpl_a = NULL;
    PyArrayObject* lpl_b = NULL;
    PyArrayObject* lpl_c = NULL;
    int lpl_bad = 0;
    memset(&g, 0, sizeof(g));
    {{
        const npy_intp ws[3] = {{{fill((1,) * nd if dynamic else op.ws, "1")}}};
        const npy_intp st[3] = {{{fill((1,) * nd if dynamic else op.stride, "1")}}};
        const npy_intp pad[3] = {{{fill((0,) * nd if dynamic else op.pad, "0")}}};
        for (int i = 0; i < 3; ++i) {{
            g.ws[i] = ws[i]; g.st[i] = st[i]; g.pad[i] = pad[i]; g.in[i] = 1; g.out[i] = 1;
        }}
    }}
    {window_code}
    g.mode = {_MODES[op.mode]};
    g.R = 1;
    for (int i = 0; i < {lead}; ++i) {{
        g.R *= PyArray_DIMS({x})[i];
        lpl_odims[i] = PyArray_DIMS({x})[i];
    }}
    for (int i = {off}; i < 3 && !lpl_bad; ++i) {{
        const npy_intp v = PyArray_DIMS({x})[{lead - off} + i] + 2 * g.pad[i];
        npy_intp n;
        g.in[i] = PyArray_DIMS({x})[{lead - off} + i];
        if ({int(op.ignore_border)}) {{
            n = v >= g.ws[i] ? (v - g.ws[i]) / g.st[i] + 1 : 0;
        }} else if (g.st[i] >= g.ws[i]) {{
            n = v >= 1 ? (v - 1) / g.st[i] + 1 : 0;
        }} else {{
            const npy_intp m = v - 1 - g.ws[i] + g.st[i];
            n = (m > 0 ? m / g.st[i] : 0) + 1;
        }}
        g.out[i] = n;
        lpl_odims[{lead - off} + i] = n;
    }}
    if (lpl_bad || {check}) {{
        {c_common.raise_code(__name__, kind_name, op._props_dict(), all_inputs)}
        {fail}
    }}
    lpl_a = (PyArrayObject*)PyArray_GETCONTIGUOUS({x});
    if (lpl_a == NULL) goto LBN_DONE;
    {"" if kind in (0, 3) else f"lpl_b = (PyArrayObject*)PyArray_GETCONTIGUOUS({inputs[1]});"}
    {"" if kind in (0, 3) else "if (lpl_b == NULL) goto LBN_DONE;"}
    {"" if grad_in is None else f"lpl_c = (PyArrayObject*)PyArray_GETCONTIGUOUS({grad_in});"}
    {"" if grad_in is None else "if (lpl_c == NULL) goto LBN_DONE;"}
    if (lbn_prepare_output(&{out}, {ndim}, {out_dims}, {tnum})) goto LBN_DONE;
    {{
        const {ctype}* lpl_px = (const {ctype}*)PyArray_DATA(lpl_a);
        const {ctype}* lpl_pm = lpl_b ? (const {ctype}*)PyArray_DATA(lpl_b) : NULL;
        {ctype}* lpl_pg = lpl_c ? ({ctype}*)PyArray_DATA(lpl_c) : NULL;
        {ctype}* lpl_po = ({ctype}*)PyArray_DATA({out});
        {ctype}* lpl_py = lpl_po;
        (void)lpl_pm; (void)lpl_pg; (void)lpl_py;
        if (PyArray_SIZE({out}) > 0) {{
            Py_BEGIN_ALLOW_THREADS
            lpl_run_{sfx}({kind}, &g, {args});
            Py_END_ALLOW_THREADS
        }}
    }}"""
    release = ["Py_XDECREF(lpl_a);", "Py_XDECREF(lpl_b);", "Py_XDECREF(lpl_c);"]
    return c_common.guarded(name, fail, code, release)


for _op_class in (Pool, MaxPoolGrad, MaxPoolGradGrad, AveragePoolGrad, DynamicPool):
    register_c_code(
        _op_class, CCode(pool_code, support_code, C_CODE_VERSION, ("<math.h>", "<string.h>"))
    )
