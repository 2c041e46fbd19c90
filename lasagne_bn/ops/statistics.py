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
  (:mod:`lasagne_bn.ops.numba.statistics` registers it);
- C (``CVM``, ``C``): ``lbn_moments``, the statistics pass of the batch-norm
  training C code (:func:`lasagne_bn.ops.c.bn.moments_code`);
- JAX: :func:`lasagne_bn.ops.jax.bn.shifted_moments` (:mod:`lasagne_bn.ops.jax.statistics`).

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
>>> from lasagne_bn.ops.statistics import Moments
>>> x = pt.as_tensor(np.array([[1e6 + 1.0, 3.0], [1e6 - 1.0, 5.0]], dtype="float32"))
>>> mean, var, shift, shifted_mean = Moments((0,))(x)
>>> mean.eval(), var.eval()
(array([[1.e+06, 4.e+00]], dtype=float32), array([[1., 1.]], dtype=float32))
"""

from __future__ import annotations

from collections.abc import Sequence

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
from lasagne_bn.ops.compiled_perform import compiled_perform
from lasagne_bn.ops.layout import reduced_size, stat_shape
from lasagne_bn.ops.rewrites import ensure_registered
from lasagne_bn.ops.validation import check_float, normalize_axes

__all__ = ["Moments", "normalize", "np_moments"]


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

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> mean, var, shift, shifted_mean = Moments((1,))(pt.matrix('x'))
    >>> [v.type.shape for v in (mean, var, shift, shifted_mean)]
    [(None, 1), (None, 1), (None, 1), (None, 1)]
    """

    __props__ = ("axes",)

    def __init__(self, axes: Sequence[int]) -> None:
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

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [stat_shape(shapes[0], self.axes)] * 4

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


def normalize(
    x: Variable,
    stats: Sequence[Variable],
    epsilon: float | Variable,
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
    >>> from lasagne_bn.ops.statistics import Moments, normalize
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
