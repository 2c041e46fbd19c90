"""The one statistics core under batch, layer, instance and group norm.

:class:`Moments` computes the mean and the biased variance of a tensor over
some axes with the same shifted sums as the batch-norm Op
(:class:`lasagne_bn.ops.bn.BatchNormTrain`): each statistic's first sample
is subtracted before summing, and the sums are accumulated in float64 (NumPy,
Numba and C; float32 or wider under JAX), so ``1e6 + N(0, 1)`` float32 data
keeps its variance.  The implementations share the batch-norm code rather
than copy it:

- NumPy ``perform``: :func:`lasagne_bn.ops.bn.shifted_moments`;
- Numba: :func:`lasagne_bn.ops.numba.bn_kernels.channel_moments`, the
  statistics pass of the batch-norm training kernel
  (:mod:`lasagne_bn.ops.numba.moments` registers it);
- C (``CVM``, ``C``): the batch-norm C reduction (:mod:`lasagne_bn.ops.c.bn`);
- JAX: :func:`lasagne_bn.ops.jax.bn.shifted_moments` (:mod:`lasagne_bn.ops.jax.moments`).

Besides ``mean`` and ``var`` the Op returns the ``shift`` and the
``shifted_mean`` (``mean == shift + shifted_mean``): :func:`normalize`
subtracts them one after the other, so ``x - mean`` stays exact where the
mean rounded to float32 (a spacing of 0.06 at 1e6) would not be.

:func:`normalize` is the one normalize step,
``(x - mean) * (gamma * invstd) + beta`` with ``invstd = 1 / sqrt(var + eps)``,
used by :class:`~lasagne_bn.layers.StandardizationLayer` (layer and instance
norm) and :class:`~lasagne_bn.layers.GroupNormLayer`; the batch-norm Op's
fused kernels compute the same formula in one pass, as
``(x - shift) * scale + (beta - shifted_mean * scale)``.

>>> import numpy as np, pytensor.tensor as pt
>>> from lasagne_bn.ops.moments import Moments
>>> x = pt.as_tensor(np.array([[1e6 + 1.0, 3.0], [1e6 - 1.0, 5.0]], dtype="float32"))
>>> mean, var, shift, shifted_mean = Moments((0,))(x)
>>> mean.eval(), var.eval()
(array([[1.e+06, 4.e+00]], dtype=float32), array([[1., 1.]], dtype=float32))
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply, Variable

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.bn import (
    BatchNormCOp,
    bn_dtypes,
    is_disconnected,
    shifted_moments,
    stat_type,
    symbolic_m,
)
from lasagne_bn.ops.c import bn as bn_c
from lasagne_bn.ops.compiled_perform import compiled_perform
from lasagne_bn.ops.layout import reduced_size, stat_shape
from lasagne_bn.ops.rewrites import ensure_registered
from lasagne_bn.ops.validation import check_float, normalize_axes

__all__ = ["Moments", "normalize", "np_moments"]

#: Keys the C code cache with this file as well as bn_c.py.
MOMENTS_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def np_moments(x: np.ndarray, axes: Sequence[int]):
    """float64 ``(mean, var, shift, shifted_mean)`` of ``x`` over ``axes`` (keepdims).

    The NumPy reference of :class:`Moments`.  An empty reduction gives NaN
    statistics, as ``numpy.mean`` does (without its warning).
    """
    axes = tuple(axes)
    m = reduced_size(x.shape, axes)
    if m == 0:
        nan = np.full(stat_shape(x.shape, axes), np.nan)
        return nan, nan, nan, nan
    shift, _, shifted_mean, var = shifted_moments(x, axes, m)
    return shift + shifted_mean, var, shift, shifted_mean


class Moments(BatchNormCOp):
    """Mean and biased variance of ``x`` over ``axes``, from shifted sums.

    Outputs (all with ``x``'s ndim, size 1 on ``axes``, in the statistics
    dtype of the batch-norm Ops: ``x``'s, float32 for float16 input):
    ``mean``, ``var``, ``shift`` (the first sample of each statistic) and
    ``shifted_mean`` (``mean - shift``, computed before rounding).

    The gradient treats ``shift`` as a constant (any shift gives the same
    mean and variance): ``d mean / dx = 1 / m``,
    ``d var / dx = 2 (x - mean) / m``, ``d shifted_mean / dx = 1 / m``.  It
    is a plain graph, so it is differentiable again.
    """

    __props__ = ("axes",)

    def __init__(self, axes: Sequence[int]):
        # Checked against the input's ndim in make_node, by the one axes rule;
        # negative axes would need that ndim to mean anything.
        self.axes = tuple(sorted(int(a) for a in axes))
        if not self.axes:
            normalize_axes(self.axes, 1)  # raises the one rule's error for ()
        if self.axes[0] < 0:
            raise ValueError(
                f"axes={tuple(axes)!r}: Moments takes non-negative axes "
                "(ops.validation.normalize_axes resolves negative ones for an ndim)"
            )

    def __str__(self):
        return f"Moments{{axes={self.axes}}}"

    def make_node(self, x):
        ensure_registered("jax")  # the JAX kernels, once per process
        x = pt.as_tensor_variable(x)
        check_float(x, "x")
        if normalize_axes(self.axes, x.ndim) != self.axes:  # raises for bad axes
            raise ValueError(f"axes={self.axes}: repeated axes")
        st = stat_type(x, self.axes, bn_dtypes(x.type.dtype)[1], x)
        return Apply(self, [x], [st(), st(), st(), st()])

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        dtype = node.outputs[0].type.dtype
        for storage, value in zip(output_storage, np_moments(inputs[0], self.axes), strict=True):
            storage[0] = value.astype(dtype)

    def c_code(self, node, name, inputs, outputs, sub):
        return moments_code(self, node, name, inputs, outputs, sub)

    def c_code_cache_version(self):
        return (bn_c.C_CODE_VERSION, MOMENTS_VERSION)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        xs = shapes[0]
        st = tuple(1 if i in self.axes else xs[i] for i in range(len(xs)))
        return [st, st, st, st]

    def connection_pattern(self, node):
        # outputs: mean, var, shift, shifted_mean; the shift is a constant
        return [[True, True, False, True]]

    def pullback(self, inputs, outputs, cotangents):
        (x,) = inputs
        _, _, shift, shifted_mean = outputs
        g_mean, g_var, _, g_shifted = cotangents
        work = shift.type.dtype
        m = symbolic_m(x, self.axes, work)
        g_means = [g for g in (g_mean, g_shifted) if g is not None and not is_disconnected(g)]
        terms = []
        if g_means:
            terms.append(pt.add(*g_means) / m)
        if g_var is not None and not is_disconnected(g_var):
            # x - mean as (x - shift) - shifted_mean: exact at large offsets
            centred = (pt.cast(x, work) - shift) - shifted_mean
            terms.append(centred * (2 * g_var / m))
        if not terms:
            return [disconnected_type()]
        # g_mean / m alone has the statistics' shape: broadcast it to x's.
        terms.append(pt.zeros_like(x, dtype=work))
        return [pt.cast(pt.add(*terms), x.type.dtype)]


def moments_code(op, node, name: str, inputs: list[str], outputs: list[str], sub: dict) -> str:
    """``Moments.c_code``: the batch-norm C reduction (float32/float64 input)."""
    x_t = node.inputs[0].type
    bn_c._dtype_code(x_t.dtype)  # float16: NotImplementedError, CVM runs perform
    st_num = bn_c._dtype_code(node.outputs[0].type.dtype)
    g = bn_c._Glue(op.axes, x_t.ndim)
    nd = x_t.ndim
    (x,) = inputs
    mean, var, shift_o, shifted_o = outputs
    fail = sub["fail"]
    code = f"""
{{
    {g.decls()}
    const npy_intp m = {g.m_expr(x)};
    int lbn_ok = 0;
    PyArrayObject* xc = NULL;
    double* work = NULL;
    xc = {g.contiguous(x)};
    if (xc == NULL) goto LBN_DONE;
    {{
        {g.view("xc")}
        {g.stat_dims(x)}
        const int type = PyArray_TYPE(xc);
        const char* xd = (const char*)PyArray_DATA(xc);
        work = (double*)malloc((size_t)(4 * C + 1) * sizeof(double));
        if (work == NULL) {{ PyErr_NoMemory(); goto LBN_DONE; }}
        double* shift = work;
        double* s1 = work + C;
        double* s2 = work + 2 * C;
        double* mean_v = work + 3 * C;
        if (lbn_prepare_output(&{mean}, {nd}, sdims, {st_num})
            || lbn_prepare_output(&{var}, {nd}, sdims, {st_num})
            || lbn_prepare_output(&{shift_o}, {nd}, sdims, {st_num})
            || lbn_prepare_output(&{shifted_o}, {nd}, sdims, {st_num})) goto LBN_DONE;
        if (m == 0) {{
            /* an empty reduction: NaN statistics, as perform gives */
            for (npy_intp c = 0; c < C; ++c) {{
                shift[c] = NAN; s1[c] = NAN; s2[c] = NAN; mean_v[c] = NAN;
            }}
        }} else {{
            /* The shift: each statistic's first sample keeps the sums exact. */
            for (npy_intp c = 0; c < C; ++c)
                shift[c] = type == NPY_FLOAT32 ? (double)((const float*)xd)[c * B]
                                               : ((const double*)xd)[c * B];
            Py_BEGIN_ALLOW_THREADS
            lbn_reduce(0, type, xd, NULL, A, C, B, shift, s1, s2, lbn_max_threads());
            Py_END_ALLOW_THREADS
            for (npy_intp c = 0; c < C; ++c) {{
                const double mu = s1[c] / (double)m;
                double v = s2[c] / (double)m - mu * mu;
                s1[c] = mu;
                s2[c] = v < 0.0 ? 0.0 : v;
                mean_v[c] = shift[c] + mu;
            }}
        }}
        lbn_write_vector({mean}, mean_v, C);
        lbn_write_vector({var}, s2, C);
        lbn_write_vector({shift_o}, shift, C);
        lbn_write_vector({shifted_o}, s1, C);
    }}
    lbn_ok = 1;
LBN_DONE:
    Py_XDECREF(xc);
    free(work);
    if (!lbn_ok) {{
        {fail}
    }}
}}
"""
    return code.replace("LBN_DONE", f"lbn_done_{name}")


def normalize(
    x: Variable,
    stats: Sequence[Variable],
    epsilon,
    gamma: Variable | None = None,
    beta: Variable | None = None,
) -> Variable:
    """The normalize step: ``(x - mean) * (gamma * invstd) + beta``, in ``x``'s dtype.

    Computed as ``(x - shift) * scale + (beta - shifted_mean * scale)`` with
    ``scale = gamma * invstd``, the formula of the batch-norm kernels.
    ``stats`` are the four outputs of :class:`Moments` on ``x`` (keepdims);
    ``invstd = 1 / sqrt(var + epsilon)``; ``gamma``/``beta`` (``None``: left
    out) broadcast against ``x``.  It computes in the statistics' dtype
    (float32 for float16 input) and subtracts ``shift`` then
    ``shifted_mean``, so ``x - mean`` does not lose the data's spread to a
    rounded mean at large offsets.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> from lasagne_bn.ops.moments import Moments, normalize
    >>> x = pt.as_tensor(np.array([[1.0, 3.0, 5.0]]))
    >>> normalize(x, Moments((1,))(x), epsilon=0.0).eval().round(4)
    array([[-1.2247,  0.    ,  1.2247]])
    """
    _, var, shift, shifted_mean = stats
    work = var.type.dtype
    invstd = pt.reciprocal(pt.sqrt(var + pt.cast(pt.as_tensor_variable(epsilon), work)))
    scale = invstd if gamma is None else pt.cast(gamma, work) * invstd
    # The batch-norm kernels' form: the large offset goes in x - shift (exact),
    # the rest is folded into a per-statistic offset.  Written as
    # (x - shift) - shifted_mean, Numba's fastmath reassociated it into
    # x - (shift + shifted_mean) and rounded the mean again.
    offset = -(shifted_mean * scale)
    if beta is not None:
        offset = offset + pt.cast(beta, work)
    return pt.cast((pt.cast(x, work) - shift) * scale + offset, x.type.dtype)
