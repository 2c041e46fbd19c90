"""JAX registrations for the batch-norm Ops (GPU, TPU and multi-device via XLA).

The kernels are written so that XLA fuses them into the same passes as the
Numba ones: the statistics are sums of the data shifted by each channel's
first sample (in float32 or wider), the output one fused elementwise pass;
the backward pass is the sums of ``dy`` and ``dy * (x - mean)`` and one
elementwise pass.  No full-size intermediate reaches memory: every
full-size expression that two reductions, or a reduction and an
elementwise pass, would share is written as distinct expressions
(:func:`_copies`), because XLA's CPU reduction fusions do not take in a
producer with a second consumer; they would write it out and read it back
(``tests/ops/test_jax_traffic.py`` checks the bytes XLA moves).  A GPU
fuses sibling reductions either way.  Shapes are static under ``jax.jit``,
so nothing depends on a dynamic batch size.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from pytensor.graph.basic import Constant
from pytensor.link.jax.dispatch import jax_funcify

from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
    running_average_update,
)
from lasagne_bn.ops.jax.linker import raised_on_host
from lasagne_bn.ops.layout import reduced_size, stat_shape
from lasagne_bn.ops.validation import EPSILON, RUNNING_AVERAGE_FACTOR, Range, RangeCheck

#: The mapped axis (``shard_map`` / ``pmap``) whose shards make up one batch,
#: read when a graph is lowered (see :func:`mapped_axis`).
_AXIS_NAME: ContextVar[str | None] = ContextVar("lasagne_bn_bn_axis_name", default=None)


@contextmanager
def mapped_axis(axis_name: str):
    """Lower the training batch-norm Ops inside the block with statistics over ``axis_name``.

    The kernels then sum over the devices of that mapped axis (``lax.psum``),
    so every statistic, and every gradient, is the whole batch's, as if one
    device held it (:func:`lasagne_bn.export.export` uses this).
    """
    token = _AXIS_NAME.set(axis_name)
    try:
        yield
    finally:
        _AXIS_NAME.reset(token)


def _total(value, axis_name):
    return value if axis_name is None else lax.psum(value, axis_name)


def _work_dtype(dtype) -> jnp.dtype:
    return jnp.float64 if jnp.dtype(dtype) == jnp.float64 else jnp.float32


def _first_sample(x, axes):
    index = tuple(slice(0, 1) if i in axes else slice(None) for i in range(x.ndim))
    return x[index]


def _copies(value, n: int):
    """``n`` copies of a small ``value`` that XLA will not merge back into one.

    An ``optimization_barrier`` of a tuple of per-channel values: free, and
    each ``x - copy`` is then a full-size expression of its own that one
    fusion takes in, instead of one ``x - value`` shared by several
    consumers, which XLA's CPU reduction fusions would have written to
    memory and read back (see the module docstring).
    """
    return lax.optimization_barrier((value,) * n)


def shifted_moments(x, axes, axis_name=None):
    """The statistics pass of batch, layer, instance and group norm under JAX.

    Returns ``(x - shift, shift, shifted mean, biased var)`` (keepdims) in the
    work dtype (float32 for float16/float32 input, float64 for float64):
    ``shift`` is the first sample per statistic and the mean is
    ``shift + shifted mean``.  Each sum reads ``x`` itself (see the module
    docstring), so XLA makes one pass over ``x`` per sum on a CPU and one
    multi-output pass on a GPU.
    """
    work = _work_dtype(x.dtype)
    xw = x.astype(work)
    shift = _first_sample(xw, axes)
    if axis_name is not None:  # one shift for every shard
        shift = lax.pmean(shift, axis_name)
    for_sum, for_sq, for_d = _copies(shift, 3)
    m = _total(reduced_size(x.shape, axes), axis_name)
    mu = _total(jnp.sum(xw - for_sum, axis=axes, keepdims=True), axis_name) / m
    d_sq = xw - for_sq
    sq = _total(jnp.sum(d_sq * d_sq, axis=axes, keepdims=True), axis_name) / m
    var = jnp.maximum(sq - mu * mu, 0)
    return xw - for_d, shift, mu, var


def train_forward(x, gamma, beta, epsilon, axes, axis_name=None):
    """Returns ``(out, mean, invstd, var)``; statistics in the work dtype.

    With ``axis_name``, ``x`` is one shard of a batch mapped over that axis
    and the statistics are the whole batch's.
    """
    work = _work_dtype(x.dtype)
    d, shift, mu, var = shifted_moments(x, axes, axis_name)
    invstd = 1 / jnp.sqrt(var + jnp.asarray(epsilon, work))
    scale = gamma.astype(work) * invstd
    out = (d - mu) * scale + beta.astype(work)
    return out.astype(x.dtype), shift + mu, invstd, var


def train_backward(x, dy, gamma, mean, invstd, axes, g_mean=None, g_var=None, axis_name=None):
    """Returns ``(dx, dgamma, dbeta)``; see ``BatchNormTrainGrad`` for g_mean/g_var.

    With ``axis_name`` the cotangents are each shard's, as JAX's autodiff
    under ``shard_map`` gives them: the statistics are the mapped batch's, so
    the gradients reaching them are summed over the axis before ``dx``;
    ``dgamma`` and ``dbeta`` stay this shard's (the caller averages or sums
    parameter gradients over the axis, as for any other parameter).
    """
    work = _work_dtype(x.dtype)
    m = _total(reduced_size(x.shape, axes), axis_name)
    mean_sum, mean_dx = _copies(mean.astype(work), 2)
    centred = x.astype(work) - mean_sum
    dyw = dy.astype(work)
    dbeta = jnp.sum(dyw, axis=axes, keepdims=True)
    dot = jnp.sum(dyw * centred, axis=axes, keepdims=True)
    inv = invstd.astype(work)
    k_dy = gamma.astype(work) * inv
    k_x = k_dy * inv * inv * _total(dot, axis_name) / m
    k_0 = k_dy * _total(dbeta, axis_name) / m
    if g_mean is not None:
        k_x = k_x - 2 * _total(g_var.astype(work), axis_name) / m
        k_0 = k_0 - _total(g_mean.astype(work), axis_name) / m
    dx = dyw * k_dy - (x.astype(work) - mean_dx) * k_x - k_0
    return dx.astype(x.dtype), dot * inv, dbeta


def _check_shapes(op, x, names, params):
    """Shapes are static under jit: check them while tracing, like the other backends."""
    want = stat_shape(x.shape, op.axes)
    for name, value in zip(names, params, strict=True):
        if tuple(value.shape) != want:
            raise ValueError(
                f"{op}: {name} has shape {tuple(value.shape)} but inputs has shape "
                f"{tuple(x.shape)}: expected {want}"
            )


def _check_m(op, x):
    m = reduced_size(x.shape, op.axes)
    if m < 1:
        raise ValueError(
            f"{op}: inputs of shape {x.shape} gives m={m} value(s) per statistic; "
            "training needs m >= 1"
        )


def _scalar_check(node, index: int, rule: Range):
    """The run-time check of scalar input ``index`` against ``rule``, as in every backend.

    A constant is checked now, when the graph is lowered, and costs nothing
    per call.  A symbolic value is tested in the traced graph
    (:meth:`Range.holds`) and, only when it is out of range, sent to the
    host (``jax.pure_callback``, a branch of ``lax.cond``) where
    :meth:`Range.check` raises, since JAX cannot raise on a traced value.
    The error reaches the caller inside JAX's ``JaxRuntimeError``, whose
    message contains ours (``"epsilon=-1.0 is out of range: ..."``), or,
    under :func:`lasagne_bn.ops.jax.linker.jax_mode`, as itself.

    Returns a function of the traced value that returns it, to be used in
    its place (so the check stays in the computation), or None.
    """

    def check(value):
        rule.check(value)  # the message of every other mode, word for word
        return value

    def check_on_host(value):
        try:
            return np.asarray(check(value), value.dtype)
        except ValueError as error:  # raised again as itself by linker.JAXLinker
            raise raised_on_host(error) from None

    variable = node.inputs[index]
    if isinstance(variable, Constant):
        check(np.asarray(variable.data))
        return None

    def on_host(value):
        result = jax.ShapeDtypeStruct(value.shape, value.dtype)
        return jax.pure_callback(check_on_host, result, value, vmap_method="sequential")

    def traced_check(value):
        # a callback on every call would cost about a millisecond on CPU
        value = jnp.asarray(value)
        return lax.cond(rule.holds(value, jnp), lambda v: v, on_host, value)

    return traced_check


def _apply_check(check, value):
    return value if check is None else check(value)


@jax_funcify.register(BatchNormTrain)
def jax_funcify_BatchNormTrain(op, node, **kwargs):
    axes = op.axes
    st = np.dtype(node.outputs[1].type.dtype)
    axis_name = _AXIS_NAME.get()
    check_epsilon = _scalar_check(node, 3, EPSILON)
    check_factor = None
    if len(node.inputs) > 4:
        check_factor = _scalar_check(node, 4, RUNNING_AVERAGE_FACTOR)

    def batch_norm_train(x, gamma, beta, epsilon, *running):
        _check_m(op, x)
        epsilon = _apply_check(check_epsilon, epsilon)
        if running:
            running = (_apply_check(check_factor, running[0]), *running[1:])
        params = (gamma, beta, *running[1:])
        names = ("gamma", "beta", "running_mean", "running_var")
        _check_shapes(op, x, names[: len(params)], params)
        out, mean, invstd, var = train_forward(x, gamma, beta, epsilon, axes, axis_name)
        results = (out, mean.astype(st), invstd.astype(st))
        if running:
            factor, rmean, rvar = running
            m = _total(reduced_size(x.shape, axes), axis_name)
            new_mean = running_average_update(rmean, mean, factor)
            unbiased = var * (m / (m - 1) if m > 1 else np.inf)
            new_var = running_average_update(rvar, unbiased, factor)
            results += (new_mean.astype(st), new_var.astype(st))
        return results

    return batch_norm_train


@jax_funcify.register(BatchNormTrainGrad)
def jax_funcify_BatchNormTrainGrad(op, node, **kwargs):
    axes = op.axes
    st = np.dtype(node.outputs[1].type.dtype)
    axis_name = _AXIS_NAME.get()

    def batch_norm_train_grad(x, dy, gamma, mean, invstd, *stat_grads):
        _check_m(op, x)
        names = ("gamma", "mean", "invstd", "g_mean", "g_var")
        _check_shapes(op, x, names[: 3 + len(stat_grads)], (gamma, mean, invstd, *stat_grads))
        g_mean, g_var = stat_grads if stat_grads else (None, None)
        dx, dgamma, dbeta = train_backward(
            x, dy, gamma, mean, invstd, axes, g_mean, g_var, axis_name=axis_name
        )
        return dx, dgamma.astype(st), dbeta.astype(st)

    return batch_norm_train_grad


@jax_funcify.register(BatchNormInference)
def jax_funcify_BatchNormInference(op, node, **kwargs):
    check_epsilon = _scalar_check(node, 5, EPSILON)

    def batch_norm_inference(x, gamma, beta, mean, var, epsilon):
        epsilon = _apply_check(check_epsilon, epsilon)
        _check_shapes(op, x, ("gamma", "beta", "mean", "var"), (gamma, beta, mean, var))
        work = _work_dtype(x.dtype)
        scale = gamma.astype(work) / jnp.sqrt(var.astype(work) + jnp.asarray(epsilon, work))
        out = (x.astype(work) - mean.astype(work)) * scale + beta.astype(work)
        return out.astype(x.dtype)

    return batch_norm_inference


@jax_funcify.register(BatchNormApply)
def jax_funcify_BatchNormApply(op, node, **kwargs):
    dtype = np.dtype(node.outputs[0].type.dtype)

    def batch_norm_apply(x, gamma, beta, mean, std):
        return ((x - mean) * (gamma / std) + beta).astype(dtype)

    return batch_norm_apply


@jax_funcify.register(RangeCheck)
def jax_funcify_RangeCheck(op, node, **kwargs):
    check = _scalar_check(node, 0, op.rule)

    def range_check(value):
        return _apply_check(check, value)

    return range_check
