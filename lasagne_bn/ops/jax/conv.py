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
"""

from __future__ import annotations

import jax
import numpy as np
from jax import lax
from pytensor.link.jax.dispatch import jax_funcify

from lasagne_bn.ops.conv import Conv, ConvGradInputs, ConvGradWeights, resolve_pads

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
