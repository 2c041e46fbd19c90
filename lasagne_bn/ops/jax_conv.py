"""JAX registrations for the convolution and pooling Ops (XLA convolutions).

The forward convolution is ``lax.conv_general_dilated`` (a cross-correlation,
so flipped filters give Theano's true convolution); both gradients are its
exact linear transposes (``jax.linear_transpose``), which XLA lowers to the
same transposed convolutions its own autodiff would use.  float32 products
use ``Precision.HIGHEST`` so that accelerators (TF32 on recent GPUs) agree
with the other backends to float32 rounding.

Shapes must be static under ``jax.jit``: the spatial shape the gradient Ops
produce comes from the node's static type, a constant, or (in JAX mode,
see :mod:`lasagne_bn.ops.conv_rewrites`) a tuple of ``Shape_i`` values.

This module imports JAX; :mod:`lasagne_bn.ops.rewrites` imports it the first
time a graph is compiled in JAX mode.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from pytensor.link.jax.dispatch import jax_funcify

from lasagne_bn.ops.conv import Conv, ConvGradInputs, ConvGradWeights, resolve_pads
from lasagne_bn.ops.pool import (
    AveragePool2dGrad,
    MaxPool2dGrad,
    MaxPool2dGradGrad,
    Pool2d,
    pool_divisor,
    pool_extent,
    pool_output_shape,
)

_SPATIAL = {1: "W", 2: "HW", 3: "DHW"}


def _conv(op, x, k):
    """Theano's convolution of ``x`` (NC + spatial) with ``k`` (OI + spatial), as XLA sees it."""
    n = op.convdim
    pads = [
        tuple(int(v) for v in p)
        for p in resolve_pads(op.border_mode, k.shape[2:], op.filter_dilation)
    ]
    if op.filter_flip:
        k = k[(slice(None), slice(None)) + (slice(None, None, -1),) * n]
    precision = lax.Precision.HIGHEST if x.dtype != np.float16 else None
    sp = _SPATIAL[n]
    return lax.conv_general_dilated(
        x,
        k,
        window_strides=op.subsample,
        padding=pads,
        rhs_dilation=op.filter_dilation,
        dimension_numbers=("NC" + sp, "OI" + sp, "NC" + sp),
        feature_group_count=op.num_groups,
        precision=precision,
    )


def static_hw(node, out_index: int, value, what: str) -> tuple[int, ...]:
    """The spatial shape a gradient Op produces, as Python ints."""
    static = node.outputs[out_index].type.shape[2:]
    if all(s is not None for s in static):
        return tuple(int(s) for s in static)
    if isinstance(value, tuple | list):
        try:
            return tuple(int(v) for v in value)
        except TypeError:
            pass
    try:
        return tuple(int(v) for v in np.asarray(value))
    except Exception as err:  # a tracer: the value is only known at run time
        raise NotImplementedError(
            f"{node.op}: JAX needs the {what} as static ints, but it is computed inside the "
            "jitted function; give the tensor a static shape (e.g. pt.tensor4(shape=...)) or "
            "pass ints"
        ) from err


@jax_funcify.register(Conv)
def jax_funcify_Conv(op, node, **kwargs):
    def conv(x, k):
        return _conv(op, x, k)

    return conv


@jax_funcify.register(ConvGradInputs)
def jax_funcify_ConvGradInputs(op, node, **kwargs):
    def conv_grad_inputs(k, dy, shape):
        spatial = static_hw(node, 0, shape, "input shape")
        x_shape = (dy.shape[0], k.shape[1] * op.num_groups, *spatial)
        transpose = jax.linear_transpose(
            lambda x: _conv(op, x, k), jax.ShapeDtypeStruct(x_shape, dy.dtype)
        )
        return transpose(dy)[0]

    return conv_grad_inputs


@jax_funcify.register(ConvGradWeights)
def jax_funcify_ConvGradWeights(op, node, **kwargs):
    def conv_grad_weights(x, dy, shape):
        kernel = static_hw(node, 0, shape, "filter shape")
        k_shape = (dy.shape[1], x.shape[1] // op.num_groups, *kernel)
        transpose = jax.linear_transpose(
            lambda k: _conv(op, x, k), jax.ShapeDtypeStruct(k_shape, x.dtype)
        )
        return transpose(dy)[0]

    return conv_grad_weights


# --------------------------------------------------------------------------
# pooling


def _pool(op, x):
    """Theano's pooling of the last two axes with ``lax.reduce_window``."""
    p = op.params
    size = x.shape[-2:]
    out_hw = pool_output_shape(x.shape, p.ws, p.stride, p.pad, p.ignore_border)[-2:]
    ext = pool_extent(x.shape, p, out_hw)
    lead = x.ndim - 2
    padding = ((0, 0),) * lead + tuple((p.pad[i], ext[i] - size[i] - p.pad[i]) for i in range(2))
    window = (1,) * lead + p.ws
    strides = (1,) * lead + p.stride
    if p.mode == "max":
        init = np.array(-np.inf, dtype=x.dtype)
        out = lax.reduce_window(x, init, lax.max, window, strides, padding)
    else:
        work = np.float32 if x.dtype == np.float16 else x.dtype
        out = lax.reduce_window(
            x.astype(work), np.array(0, dtype=work), lax.add, window, strides, padding
        )
        if p.mode != "sum":
            out = out / pool_divisor(x.shape, p, out_hw).astype(work)
        out = out.astype(x.dtype)
    return out[..., : out_hw[0], : out_hw[1]]


@jax_funcify.register(Pool2d)
def jax_funcify_Pool2d(op, node, **kwargs):
    def pool_2d(x):
        return _pool(op, x)

    return pool_2d


def _padded(op, x, fill):
    """``x`` padded like :func:`lasagne_bn.ops.pool._padded` (covers every window)."""
    p = op.params
    out_hw = pool_output_shape(x.shape, p.ws, p.stride, p.pad, p.ignore_border)[-2:]
    ext = pool_extent(x.shape, p, out_hw)
    cfg = [(0, 0, 0)] * (x.ndim - 2) + [
        (p.pad[i], ext[i] - x.shape[-2 + i] - p.pad[i], 0) for i in range(2)
    ]
    return lax.pad(x, np.array(fill, dtype=x.dtype), cfg), out_hw, ext


def _tap(xp, a, b, p, out_hw):
    lead = xp.ndim - 2
    start = (0,) * lead + (a, b)
    limit = xp.shape[:lead] + (
        a + p.stride[0] * (out_hw[0] - 1) + 1,
        b + p.stride[1] * (out_hw[1] - 1) + 1,
    )
    return lax.slice(xp, start, limit, (1,) * lead + p.stride)


def _first_max_masks(op, x, maxout):
    """``(a, b, mask)`` per tap: windows whose first maximum (row-major) is at the tap.

    Explicit, so that ties go to the same element as in the other backends
    (XLA's select-and-gather breaks ties by the tangent's value).
    """
    p = op.params
    xp, out_hw, _ = _padded(op, x, -np.inf)
    nan_max = jnp.isnan(maxout)
    taken = jnp.zeros(maxout.shape, dtype=bool)
    masks = []
    for a in range(p.ws[0]):
        for b in range(p.ws[1]):
            t = _tap(xp, a, b, p, out_hw)
            hit = ((t == maxout) | (nan_max & jnp.isnan(t))) & ~taken
            taken = taken | hit
            masks.append((a, b, hit))
    return masks, out_hw


@jax_funcify.register(MaxPool2dGrad)
def jax_funcify_MaxPool2dGrad(op, node, **kwargs):
    p = op.params

    def max_pool_2d_grad(x, maxout, gz):
        masks, out_hw = _first_max_masks(op, x, maxout)
        ext = pool_extent(x.shape, p, out_hw)
        lead = x.ndim - 2
        zero = np.array(0, dtype=x.dtype)
        gp = jnp.zeros(x.shape[:lead] + ext, dtype=x.dtype)
        for a, b, hit in masks:
            # scatter onto the strided grid of this tap: interior padding
            cfg = [(0, 0, 0)] * lead + [
                (a, ext[0] - a - p.stride[0] * (out_hw[0] - 1) - 1, p.stride[0] - 1),
                (b, ext[1] - b - p.stride[1] * (out_hw[1] - 1) - 1, p.stride[1] - 1),
            ]
            gp = gp + lax.pad(jnp.where(hit, gz, zero), zero, cfg)
        return gp[..., p.pad[0] : p.pad[0] + x.shape[-2], p.pad[1] : p.pad[1] + x.shape[-1]]

    return max_pool_2d_grad


@jax_funcify.register(MaxPool2dGradGrad)
def jax_funcify_MaxPool2dGradGrad(op, node, **kwargs):
    p = op.params

    def max_pool_2d_grad_grad(x, maxout, ggx):
        masks, out_hw = _first_max_masks(op, x, maxout)
        gp, _, _ = _padded(op, ggx, 0)
        zero = np.array(0, dtype=x.dtype)
        out = jnp.zeros(maxout.shape, dtype=x.dtype)
        for a, b, hit in masks:
            out = out + jnp.where(hit, _tap(gp, a, b, p, out_hw), zero)
        return out

    return max_pool_2d_grad_grad


@jax_funcify.register(AveragePool2dGrad)
def jax_funcify_AveragePool2dGrad(op, node, **kwargs):
    def average_pool_2d_grad(x, gz):
        transpose = jax.linear_transpose(
            lambda v: _pool(op, v), jax.ShapeDtypeStruct(x.shape, x.dtype)
        )
        return transpose(gz)[0]

    return average_pool_2d_grad
