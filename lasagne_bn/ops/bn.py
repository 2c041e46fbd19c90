"""Batch-normalization Ops: graph nodes, NumPy reference kernels and gradients.

The Ops work on *full-layout* parameters: ``gamma``, ``beta`` and the
statistics have the input's ndim, with size 1 on the reduced axes.  The
public functions in :mod:`lasagne_bn.ops.api` convert Theano's reduced
layout to and from this one.

The ``perform`` methods are the NumPy reference every backend is tested
against, and what ``FAST_COMPILE`` and the python linker run, so they are
vectorised and keep temporaries in the input's precision (float32 at
least): the statistics are summed from data shifted by one sample per
channel and combined in float64, which keeps ``1e6 + N(0, 1)`` float32
input exact enough where ``E[x^2] - E[x]^2`` (or even an unshifted two-pass
variance with a rounded mean) would not be.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np
import pytensor
import pytensor.tensor as pt
from numba.extending import register_jitable
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.replace import graph_replace
from pytensor.scalar import upcast
from pytensor.tensor.extra_ops import broadcast_shape
from pytensor.tensor.shape import shape_i, specify_broadcastable
from pytensor.tensor.type import TensorType

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.c_code import RegisteredCCode
from lasagne_bn.ops.compiled_perform import compiled_perform
from lasagne_bn.ops.layout import kept_axes, reduced_size, stat_shape
from lasagne_bn.ops.rewrites import RegisteredOnUnpickle, ensure_registered
from lasagne_bn.ops.validation import (
    EPSILON,
    RUNNING_AVERAGE_FACTOR,
    check_float,
    scalar_input,
)

# --------------------------------------------------------------------------
# dtype and input validation shared by make_node and the public functions
# (the rules themselves are in lasagne_bn.ops.validation)


def bn_dtypes(x_dtype: str, *param_dtypes: str) -> tuple[str, str]:
    """``(output dtype, statistics dtype)`` for an input and its parameters.

    Like Theano, everything is upcast to a common dtype, except that float16
    input keeps float16 output and gets float32 (or wider) statistics.
    """
    if x_dtype == "float16":
        return "float16", upcast("float32", *param_dtypes)
    common = upcast(x_dtype, *param_dtypes)
    return common, common


def acc_dtype(dtype: str | np.dtype) -> np.dtype:
    """Precision of the temporaries: float64 for float64, else float32."""
    return np.dtype("float64") if np.dtype(dtype) == np.float64 else np.dtype("float32")


def check_param(
    param: Variable, name: str, x: Variable, axes: Sequence[int], dtype: str
) -> Variable:
    """Validate a full-layout parameter against ``x`` and cast it to ``dtype``.

    Reduced axes must be broadcastable: a static size other than 1 is a
    ``ValueError`` now, an unknown size is checked when the graph runs.
    """
    check_float(param, name)
    if param.ndim != x.ndim:
        raise ValueError(
            f"{name} has ndim={param.ndim}; expected ndim={x.ndim} (full layout) here"
        )
    for i, (ps, xs) in enumerate(zip(param.type.shape, x.type.shape, strict=True)):
        if i in axes:
            if ps is not None and ps != 1:
                raise ValueError(
                    f"{name} has size {ps} on axis {i}, which is normalized over; "
                    "expected size 1 (broadcastable)"
                )
        elif ps is not None and xs is not None and ps != xs:
            raise ValueError(
                f"{name} has shape {param.type.shape} but inputs has shape {x.type.shape}: "
                f"expected size {xs} on axis {i}"
            )
    unknown = [a for a in axes if param.type.shape[a] is None]
    if unknown:
        param = specify_broadcastable(param, *unknown)
    return pt.cast(param, dtype)


def check_static_m(x: Variable, axes: Sequence[int]) -> None:
    """A training statistic needs at least two values; say so when shapes are known."""
    sizes = [x.type.shape[a] for a in axes]
    if all(s is not None for s in sizes):
        m = int(np.prod(sizes))
        if m < 1:
            raise ValueError(
                f"inputs has shape {x.type.shape} and axes={tuple(axes)}: each statistic "
                f"would be computed from m={m} values; training needs m >= 1"
            )


def symbolic_m(x: Variable, axes: Sequence[int], dtype: str) -> Variable:
    """Number of values behind each statistic, as a graph (static when known)."""
    m = pt.as_tensor_variable(1, dtype="int64")
    for a in axes:
        m = m * shape_i(x, a)
    return pt.cast(m, dtype)


def is_disconnected(var: Variable) -> bool:
    return isinstance(var.type, DisconnectedType)


def graph_pullback(build, inputs, cotangents) -> list[Variable]:
    """Pullback of the plain graph ``build(*inputs)`` (its partial derivatives).

    The graph is built on fresh placeholders, differentiated, and the real
    inputs substituted afterwards: differentiating w.r.t. the real inputs
    would also follow paths between them (``mean`` depends on ``x`` through
    the forward Op), which PyTensor's outer ``grad`` already follows.
    """
    placeholders = [i.type() for i in inputs]
    outputs = build(*placeholders)
    known = {o: g for o, g in zip(outputs, cotangents, strict=True) if not is_disconnected(g)}
    if not known:
        return [disconnected_type() for _ in inputs]
    grads = pytensor.grad(
        None,
        placeholders,
        known_grads=known,
        disconnected_inputs="ignore",
        return_disconnected="disconnected",
    )
    connected = [i for i, g in enumerate(grads) if not is_disconnected(g)]
    replaced = graph_replace(
        [grads[i] for i in connected], dict(zip(placeholders, inputs, strict=True)), strict=False
    )
    for i, g in zip(connected, replaced, strict=True):
        grads[i] = g
    return grads


def stat_type(x: Variable, axes: Sequence[int], dtype: str, like: Variable) -> TensorType:
    """Type of a full-layout statistic, taking static sizes from ``x`` or ``like``."""
    shape = tuple(
        1 if i in axes else (xs if xs is not None else ls)
        for i, (xs, ls) in enumerate(zip(x.type.shape, like.type.shape, strict=True))
    )
    return TensorType(dtype, shape=shape)


# --------------------------------------------------------------------------
# NumPy reference kernels


def _check_runtime(x: np.ndarray, axes: Sequence[int], **params: np.ndarray) -> int:
    want = stat_shape(x.shape, axes)
    for name, value in params.items():
        if value.shape != want:
            raise ValueError(
                f"{name} has shape {value.shape} but inputs has shape {x.shape} with "
                f"axes={tuple(axes)}: expected {name} of shape {want}"
            )
    return reduced_size(x.shape, axes)


def unbiasing(m: int) -> float:
    """``m / (m - 1)``; infinite for ``m == 1``, so the running variance of a
    one-value batch becomes NaN (``0 * inf``), as Theano 1.0's did."""
    return m / (m - 1) if m > 1 else float("inf")


@register_jitable
def running_average_update(average, batch_value, factor, keep=None):
    """The new running average: ``average * (1 - factor) + batch_value * factor``.

    The one formula behind every running average (the layers' updates of
    both storages, and the training Op in NumPy, Numba and JAX; the C code
    writes the same expression).  It works on NumPy and JAX arrays, PyTensor
    graphs, and in Numba nopython code.  ``keep`` is ``1 - factor`` when the
    caller has it already (a constant rounded once, as Lasagne did).

    >>> running_average_update(np.array([1.0, 2.0]), np.array([3.0, 0.0]), 0.5)
    array([2., 1.])
    """
    if keep is None:
        keep = 1.0 - factor
    return average * keep + batch_value * factor


def _check_m(m: int, x: np.ndarray, axes: Sequence[int]) -> None:
    if m < 1:
        raise ValueError(
            f"inputs of shape {x.shape} with axes={tuple(axes)} gives m={m} values per "
            "statistic; training needs m >= 1"
        )


@functools.cache
def _einsum_subscripts(axes: tuple[int, ...], ndim: int, operands: int) -> str:
    """``einsum`` subscripts summing over ``axes``, e.g. 'abcd,abcd->b'."""
    letters = "abcdefghijklmnopqrstuvwxyz"[:ndim]
    kept = "".join(letters[i] for i in range(ndim) if i not in axes)
    return ",".join([letters] * operands) + "->" + kept


def _per_channel_sum(*arrays: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """Sum over ``axes`` of one array, or of the product of two, as float64 (keepdims).

    ``einsum`` makes it one pass with no full-size temporary (the product
    of two arrays is never stored), and sums the contiguous inner run with
    SIMD partial sums.
    """
    first = arrays[0]
    subscripts = _einsum_subscripts(axes, first.ndim, len(arrays))
    total = np.einsum(subscripts, *arrays)
    return np.asarray(total, dtype=np.float64).reshape(stat_shape(first.shape, axes))


def _row(stat: np.ndarray, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A per-channel value laid out over all of ``shape`` but its first axis.

    NumPy pays a fixed cost per inner loop: broadcasting a ``(1, C, 1, 1)``
    value against NCHW data runs ``N * C`` loops of ``H * W``, against the
    ``(1, C, H, W)`` row only ``N`` loops of ``C * H * W``.  The row costs
    ``1/N`` of a pass to build, so it is built only when the batch is not
    tiny (and is the value itself when nothing is broadcast but the batch).
    """
    stat = stat.astype(dtype, copy=False)
    if stat.shape[0] != 1 or shape[0] < 4:
        return stat
    return np.ascontiguousarray(np.broadcast_to(stat, (1, *shape[1:])))


def shifted_moments(x, axes: tuple[int, ...], m: int):
    """The statistics pass of the NumPy reference (batch, layer, instance, group norm).

    Returns float64 ``(shift, x - shift, shifted mean, biased var)`` (keepdims):
    ``shift`` is the first sample per statistic, the mean ``shift + shifted
    mean``; ``x - shift`` is in the working precision (the caller may reuse it).
    """
    work = acc_dtype(x.dtype)
    first = tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))
    shift = x[first].astype(np.float64)
    buf = np.subtract(x, _row(shift, x.shape, work), dtype=work)
    mean_shifted = _per_channel_sum(buf, axes=axes) / m
    # Shifted two-moment variance: both terms are of the data's spread, not
    # of its offset from zero, so nothing large cancels.
    var = np.maximum(_per_channel_sum(buf, buf, axes=axes) / m - mean_shifted**2, 0.0)
    return shift, buf, mean_shifted, var


def np_train_forward(x, gamma, beta, epsilon, axes):
    """Training forward pass: ``(out, mean, invstd, biased var)``.

    Works in one output-sized buffer: shifted data, then the output, in
    place; the sums come from ``einsum`` (no temporaries) and are combined
    in float64.  Five passes over the data in all.
    """
    axes = tuple(axes)
    m = _check_runtime(x, axes, gamma=gamma, beta=beta)
    _check_m(m, x, axes)
    EPSILON.check(epsilon)
    work = acc_dtype(x.dtype)
    shift, buf, mean_shifted, var = shifted_moments(x, axes, m)
    invstd = 1.0 / np.sqrt(var + float(epsilon))
    scale = gamma * invstd
    buf *= _row(scale, x.shape, work)
    buf += _row(beta - mean_shifted * scale, x.shape, work)
    return buf.astype(x.dtype, copy=False), shift + mean_shifted, invstd, var


def np_train_backward(x, dy, gamma, mean, invstd, axes, g_mean=None, g_var=None):
    """Gradient of the training output w.r.t. ``x``, ``gamma`` and ``beta``.

    ``mean`` and ``invstd`` are the statistics the forward pass returned;
    ``g_mean``/``g_var`` (optional) are gradients that reached the batch mean
    and biased variance.
    """
    axes = tuple(axes)
    extra = {} if g_mean is None else {"g_mean": g_mean, "g_var": g_var}
    m = _check_runtime(x, axes, gamma=gamma, mean=mean, invstd=invstd, **extra)
    _check_m(m, x, axes)
    if dy.shape != x.shape:
        raise ValueError(f"output gradient has shape {dy.shape}; expected {x.shape}")
    work = acc_dtype(x.dtype)
    dyw = dy.astype(work, copy=False)
    buf = np.subtract(x, _row(mean, x.shape, work), dtype=work)
    dbeta = _per_channel_sum(dyw, axes=axes)
    dot = _per_channel_sum(dyw, buf, axes=axes)
    invstd64 = invstd.astype(np.float64)
    k1 = gamma * invstd64
    k2 = k1 * invstd64 * invstd64 * dot / m
    k3 = k1 * dbeta / m
    if g_mean is not None:
        k2 = k2 - 2.0 * g_var / m
        k3 = k3 - g_mean / m
    # dx = k1 * dy - k2 * (x - mean) - k3 on the centred data: expanding
    # k2 * (x - mean) would round k2 * x at the data's offset, not its spread.
    buf *= _row(-k2, x.shape, work)
    buf -= _row(k3, x.shape, work)
    dx = np.multiply(dyw, _row(k1, x.shape, work))
    dx += buf
    return dx.astype(x.dtype, copy=False), dot * invstd64, dbeta


def np_inference(x, gamma, beta, mean, var, epsilon, axes):
    """Inference: normalize ``x`` with given statistics."""
    _check_runtime(x, axes, gamma=gamma, beta=beta, mean=mean, var=var)
    EPSILON.check(epsilon)
    work = acc_dtype(x.dtype)
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + float(epsilon))
    out = np.subtract(x, _row(mean, x.shape, work), dtype=work)
    out *= _row(scale, x.shape, work)
    out += _row(beta, x.shape, work)
    return out.astype(x.dtype, copy=False)


def check_running(x, axes, factor, rmean, rvar) -> None:
    """The runtime checks of the running-average inputs of a training step."""
    RUNNING_AVERAGE_FACTOR.check(factor)
    _check_runtime(x, axes, running_mean=rmean, running_var=rvar)


def np_apply(x, gamma, beta, mean, std, dtype):
    """``(x - mean) * (gamma / std) + beta`` in ``dtype`` (all broadcast)."""
    out = np.subtract(x, mean, dtype=dtype)
    out *= np.divide(gamma, std, dtype=dtype)
    out += beta
    return out


class BatchNormCOp(RegisteredOnUnpickle, RegisteredCCode):
    """Shared C plumbing of the batch-norm Ops (code in :mod:`lasagne_bn.ops.c.bn`).

    float16 nodes have no C code (``NotImplementedError``): ``CVM`` runs
    their ``perform``.
    """

    rewrite_group = "bn"


# --------------------------------------------------------------------------
# Ops


class BatchNormTrain(BatchNormCOp):
    """Training-mode batch normalization over ``axes`` (full-layout params).

    Inputs: ``x, gamma, beta, epsilon`` and optionally
    ``running_average_factor, running_mean, running_var``.
    Outputs: ``out, mean, invstd`` and, with running statistics,
    ``new_running_mean, new_running_var`` (unbiased variance).

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> x, gamma, beta = pt.matrix('x'), pt.row('gamma'), pt.row('beta')
    >>> out, mean, invstd = BatchNormTrain((0,))(x, gamma, beta, 1e-4)
    >>> out.type.shape, mean.type.shape, invstd.type.shape
    ((None, None), (1, None), (1, None))
    """

    __props__ = ("axes",)

    def __init__(self, axes: Sequence[int]) -> None:
        self.axes = tuple(int(a) for a in axes)

    def make_node(self, x, gamma, beta, epsilon, *running):
        ensure_registered("bn")  # our rewrites, once per process
        x = pt.as_tensor_variable(x)
        check_float(x, "inputs")
        gamma, beta = pt.as_tensor_variable(gamma), pt.as_tensor_variable(beta)
        if len(running) not in (0, 3):
            raise TypeError(
                "BatchNormTrain takes either no running statistics or all of "
                "running_average_factor, running_mean and running_var"
            )
        running = [pt.as_tensor_variable(r) for r in running]
        params = [gamma, beta, *running[1:]]
        for p, name in zip(params, ("gamma", "beta", "running_mean", "running_var"), strict=False):
            check_float(p, name)
        out_dtype, st_dtype = bn_dtypes(x.type.dtype, *(p.type.dtype for p in params))
        x = pt.cast(x, out_dtype)
        check_static_m(x, self.axes)
        gamma = check_param(gamma, "gamma", x, self.axes, st_dtype)
        beta = check_param(beta, "beta", x, self.axes, st_dtype)
        epsilon = scalar_input(epsilon, EPSILON)
        inputs = [x, gamma, beta, epsilon]
        st = stat_type(x, self.axes, st_dtype, gamma)
        outputs = [x.type(), st(), st()]
        if running:
            factor = scalar_input(running[0], RUNNING_AVERAGE_FACTOR)
            rmean = check_param(running[1], "running_mean", x, self.axes, st_dtype)
            rvar = check_param(running[2], "running_var", x, self.axes, st_dtype)
            inputs += [factor, rmean, rvar]
            outputs += [rmean.type(), rvar.type()]
        return Apply(self, inputs, outputs)

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        x, gamma, beta, epsilon = inputs[:4]
        out, mean, invstd, var = np_train_forward(x, gamma, beta, epsilon, self.axes)
        st_dtype = node.outputs[1].type.dtype
        output_storage[0][0] = out
        output_storage[1][0] = mean.astype(st_dtype)
        output_storage[2][0] = invstd.astype(st_dtype)
        if len(inputs) > 4:
            factor, rmean, rvar = inputs[4:]
            check_running(x, self.axes, factor, rmean, rvar)
            m = reduced_size(x.shape, self.axes)
            f = float(factor)
            new_var = running_average_update(rvar, var * unbiasing(m), f)
            output_storage[3][0] = running_average_update(rmean, mean, f).astype(st_dtype)
            output_storage[4][0] = new_var.astype(st_dtype)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        xs = shapes[0]
        st = tuple(1 if i in self.axes else xs[i] for i in range(len(xs)))
        result = [xs, st, st]
        if len(node.inputs) > 4:
            result += [shapes[5], shapes[6]]
        return result

    def connection_pattern(self, node):
        # outputs: out, mean, invstd[, new_running_mean, new_running_var]
        pattern = [
            [True, True, True, True, True],  # x
            [True, False, False, False, False],  # gamma
            [True, False, False, False, False],  # beta
            [True, False, True, False, False],  # epsilon
            [False, False, False, True, True],  # running_average_factor
            [False, False, False, True, False],  # running_mean
            [False, False, False, False, True],  # running_var
        ]
        n_out = len(node.outputs)
        return [row[:n_out] for row in pattern[: len(node.inputs)]]

    def pullback(self, inputs, outputs, cotangents):
        x, gamma, beta, epsilon = inputs[:4]
        _, mean, invstd = outputs[:3]
        g_out, g_mean, g_invstd = cotangents[:3]
        g_rmean, g_rvar = cotangents[3:] if len(cotangents) > 3 else (None, None)
        work = mean.type.dtype
        m = symbolic_m(x, self.axes, work)

        def connected(g):
            return g is not None and not is_disconnected(g)

        grads: list[Variable] = [disconnected_type() for _ in inputs]
        # Gradients reaching the statistics enter dx through d(mean)/dx = 1/m
        # and d(var)/dx = 2 (x - mean) / m; collect them per channel.
        g_mean_total = g_mean if connected(g_mean) else None
        g_var_total = g_invstd * (-0.5) * invstd**3 if connected(g_invstd) else None
        if len(inputs) > 4:
            f = pt.cast(inputs[4], work)
            if connected(g_rmean):
                term = g_rmean * f
                g_mean_total = term if g_mean_total is None else g_mean_total + term
            if connected(g_rvar):
                term = g_rvar * f * m / (m - 1)
                g_var_total = term if g_var_total is None else g_var_total + term
        if connected(g_out):
            extra = []
            if g_mean_total is not None or g_var_total is not None:
                zero = pt.zeros_like(mean)
                extra = [
                    zero if g_mean_total is None else g_mean_total,
                    zero if g_var_total is None else g_var_total,
                ]
            # One fused kernel: the statistics' gradients cost no extra pass.
            grads[0], grads[1], grads[2] = BatchNormTrainGrad(self.axes)(
                x, g_out, gamma, mean, invstd, *extra
            )
        elif g_mean_total is not None or g_var_total is not None:
            terms = []
            if g_mean_total is not None:
                terms.append(g_mean_total / m)
            if g_var_total is not None:
                terms.append(g_var_total * 2 * (pt.cast(x, work) - mean) / m)
            # g_mean / m alone has the statistics' shape: broadcast it to x's.
            terms.append(pt.zeros_like(x, dtype=work))
            grads[0] = pt.cast(pt.add(*terms), x.type.dtype)
        # epsilon enters through invstd = (var + eps) ** -0.5.
        g_invstd_eps = None
        if connected(g_out):
            g_invstd_eps = grads[1] * gamma / invstd
        if connected(g_invstd):
            g_invstd_eps = g_invstd if g_invstd_eps is None else g_invstd_eps + g_invstd
        if g_invstd_eps is not None:
            grads[3] = pt.cast((g_invstd_eps * (-0.5) * invstd**3).sum(), epsilon.type.dtype)
        if len(inputs) > 4:
            factor, rmean, rvar = inputs[4:]
            f = pt.cast(factor, work)
            df = []
            if connected(g_rmean):
                grads[5] = g_rmean * (1 - f)
                df.append((g_rmean * (mean - rmean)).sum())
            if connected(g_rvar):
                grads[6] = g_rvar * (1 - f)
                var = 1 / invstd**2 - pt.cast(epsilon, work)
                df.append((g_rvar * (var * m / (m - 1) - rvar)).sum())
            if df:
                grads[4] = pt.cast(pt.add(*df) if len(df) > 1 else df[0], factor.type.dtype)
        return grads


def train_grad_graph(axes, x, dy, gamma, mean, invstd, g_mean=None, g_var=None):
    """The training gradient as a plain PyTensor graph (mean/invstd taken as given).

    ``g_mean``/``g_var`` are gradients that reached the batch mean and the
    biased variance; they add ``g_mean / m + g_var * 2 (x - mean) / m`` to dx.
    Used for second-order gradients and for lowering on the C backend.
    """
    work = mean.type.dtype
    m = symbolic_m(x, axes, work)
    centred = pt.cast(x, work) - mean
    xhat = centred * invstd
    dyw = pt.cast(dy, work)

    def sums():
        return dyw.sum(axis=axes, keepdims=True), (dyw * xhat).sum(axis=axes, keepdims=True)

    # dx gets its own copy of the sums: pytensor.grad's known_grads takes a
    # known gradient as the whole gradient of its variable, so an output must
    # not also be an intermediate of another output (the compiled graph
    # merges the copies again).
    dbeta_in, dgamma_in = sums()
    dx = (gamma * invstd) * (dyw - dbeta_in / m - xhat * (dgamma_in / m))
    if g_mean is not None:
        dx = dx + g_mean / m + centred * (2 * g_var / m)
    dbeta, dgamma = sums()
    return pt.cast(dx, x.type.dtype), dgamma, dbeta


class BatchNormTrainGrad(BatchNormCOp):
    """Gradient of :class:`BatchNormTrain` w.r.t. ``x``, ``gamma``, ``beta``.

    Inputs: ``x, dy, gamma, mean, invstd`` (the forward statistics) and,
    optionally, ``g_mean, g_var``: gradients that reached the batch mean and
    the biased variance, folded into ``dx`` in the same pass.  It is
    differentiable itself, so second-order gradients work.

    Examples
    --------
    >>> import pytensor
    >>> import pytensor.tensor as pt
    >>> x, gamma, beta = pt.matrix('x'), pt.row('gamma'), pt.row('beta')
    >>> out = BatchNormTrain((0,))(x, gamma, beta, 1e-4)[0]
    >>> dx = pytensor.grad(out.sum(), x)
    >>> type(dx.owner.op).__name__, dx.type.shape
    ('BatchNormTrainGrad', (None, None))
    """

    __props__ = ("axes",)

    def __init__(self, axes: Sequence[int]) -> None:
        self.axes = tuple(int(a) for a in axes)

    def make_node(self, x, dy, gamma, mean, invstd, *stat_grads):
        ensure_registered("bn")  # our rewrites, once per process
        x = pt.as_tensor_variable(x)
        check_float(x, "inputs")
        dy = pt.cast(pt.as_tensor_variable(dy), x.type.dtype)
        if dy.ndim != x.ndim:
            raise ValueError(f"output gradient has ndim={dy.ndim}; expected {x.ndim}")
        if len(stat_grads) not in (0, 2):
            raise TypeError("BatchNormTrainGrad takes both g_mean and g_var, or neither")
        gamma = pt.as_tensor_variable(gamma)
        st_dtype = bn_dtypes(x.type.dtype, gamma.type.dtype)[1]
        params = [gamma, mean, invstd, *stat_grads]
        names = ["gamma", "mean", "invstd", "g_mean", "g_var"]
        params = [
            check_param(pt.as_tensor_variable(p), n, x, self.axes, st_dtype)
            for p, n in zip(params, names, strict=False)
        ]
        return Apply(self, [x, dy, *params], [x.type(), params[0].type(), params[0].type()])

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        dx, dgamma, dbeta = np_train_backward(*inputs[:5], self.axes, *inputs[5:])
        st_dtype = node.outputs[1].type.dtype
        output_storage[0][0] = dx
        output_storage[1][0] = dgamma.astype(st_dtype)
        output_storage[2][0] = dbeta.astype(st_dtype)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [shapes[0], shapes[2], shapes[2]]

    def connection_pattern(self, node):
        # outputs: dx, dgamma, dbeta
        pattern = [
            [True, True, False],  # x
            [True, True, True],  # dy
            [True, False, False],  # gamma
            [True, True, False],  # mean
            [True, True, False],  # invstd
            [True, False, False],  # g_mean
            [True, False, False],  # g_var
        ]
        return pattern[: len(node.inputs)]

    def pullback(self, inputs, outputs, cotangents):
        return graph_pullback(lambda *args: train_grad_graph(self.axes, *args), inputs, cotangents)


def inference_graph(x, gamma, beta, mean, var, epsilon):
    """Inference as a plain PyTensor graph (for gradients and C lowering)."""
    work = gamma.type.dtype
    scale = gamma / pt.sqrt(var + pt.cast(epsilon, work))
    out = (pt.cast(x, work) - mean) * scale + beta
    return pt.cast(out, x.type.dtype)


class BatchNormInference(BatchNormCOp):
    """Inference-mode batch normalization with given ``mean`` and ``var``.

    Inputs: ``x, gamma, beta, mean, var, epsilon`` (full-layout params).

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> x = pt.tensor4('x')
    >>> gamma, beta, mean, var = (pt.tensor4(shape=(1, None, 1, 1)) for _ in range(4))
    >>> out = BatchNormInference((0, 2, 3))(x, gamma, beta, mean, var, 1e-4)
    >>> out.ndim, out.owner.op.axes
    (4, (0, 2, 3))
    """

    __props__ = ("axes",)

    def __init__(self, axes: Sequence[int]) -> None:
        self.axes = tuple(int(a) for a in axes)

    def make_node(self, x, gamma, beta, mean, var, epsilon):
        ensure_registered("bn")  # our rewrites, once per process
        x = pt.as_tensor_variable(x)
        check_float(x, "inputs")
        params = [pt.as_tensor_variable(p) for p in (gamma, beta, mean, var)]
        names = ("gamma", "beta", "mean", "var")
        for p, name in zip(params, names, strict=True):
            check_float(p, name)
        out_dtype, st_dtype = bn_dtypes(x.type.dtype, *(p.type.dtype for p in params))
        x = pt.cast(x, out_dtype)
        params = [
            check_param(p, name, x, self.axes, st_dtype)
            for p, name in zip(params, names, strict=True)
        ]
        epsilon = scalar_input(epsilon, EPSILON)
        return Apply(self, [x, *params, epsilon], [x.type()])

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        output_storage[0][0] = np_inference(*inputs, self.axes)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [shapes[0]]

    def pullback(self, inputs, outputs, cotangents):
        return graph_pullback(lambda *args: [inference_graph(*args)], inputs, cotangents)


def std_apply_graph(x, gamma, beta, mean, std, dtype):
    """``(x - mean) * (gamma / std) + beta`` as a plain elementwise graph."""
    return pt.cast((x - mean) * (gamma / std) + beta, dtype)


class BatchNormApply(BatchNormCOp):
    """Elementwise ``(x - mean) * (gamma / std) + beta`` in one pass (``'low_mem'``).

    All inputs broadcast against each other, as in Theano's
    ``batch_normalization``.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> x, gamma, beta, mean, std = pt.matrix('x'), pt.row(), pt.row(), pt.row(), pt.row()
    >>> out = BatchNormApply()(x, gamma, beta, mean, std)
    >>> out.ndim, out.dtype == x.dtype
    (2, True)
    """

    __props__ = ()

    def make_node(self, x, gamma, beta, mean, std):
        ensure_registered("bn")  # our rewrites, once per process
        inputs = [pt.as_tensor_variable(v) for v in (x, gamma, beta, mean, std)]
        for v, name in zip(inputs, ("inputs", "gamma", "beta", "mean", "std"), strict=True):
            check_float(v, name)
        dtype = upcast(*(v.type.dtype for v in inputs))
        ndim = max(v.ndim for v in inputs)
        padded = [(1,) * (ndim - v.ndim) + tuple(v.type.shape) for v in inputs]
        shape: list[int | None] = []
        for i, sizes in enumerate(zip(*padded, strict=True)):
            known = {s for s in sizes if s is not None and s != 1}
            if len(known) > 1:
                raise ValueError(
                    f"batch_normalization inputs do not broadcast on axis {i}: sizes {sizes}"
                )
            if known:
                shape.append(known.pop())
            elif all(s == 1 for s in sizes):
                shape.append(1)
            else:
                shape.append(None)
        padded_inputs = [
            v if v.ndim == ndim else pt.shape_padleft(v, ndim - v.ndim) for v in inputs
        ]
        return Apply(self, padded_inputs, [TensorType(dtype, shape=tuple(shape))()])

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        output_storage[0][0] = np_apply(*inputs, node.outputs[0].type.dtype)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [broadcast_shape(*shapes, arrays_are_shapes=True)]

    def pullback(self, inputs, outputs, cotangents):
        dtype = outputs[0].type.dtype
        return graph_pullback(lambda *args: [std_apply_graph(*args, dtype)], inputs, cotangents)


__all__ = [
    "BatchNormApply",
    "BatchNormInference",
    "BatchNormTrain",
    "BatchNormTrainGrad",
    "kept_axes",
    "np_inference",
    "np_train_backward",
    "np_train_forward",
    "running_average_update",
]
