"""Numba registration of :class:`lasagne_bn.ops.statistics.Moments` (the default backend).

The generated wrapper views the input as ``(outer, channels, inner)`` like
the batch-norm wrappers of :mod:`lasagne_bn.ops.numba.bn` and calls the
statistics pass of the batch-norm training kernel
(:func:`lasagne_bn.ops.numba.bn_kernels.channel_moments`) through its
C-callable entry point.
"""

from __future__ import annotations

from pathlib import Path

from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

from lasagne_bn.ops.numba._codegen import node_key, source_version
from lasagne_bn.ops.numba.bn import (
    KERNEL_VERSION,
    _compile,
    _dtype,
    _prepare,
    _ptr,
    _stat_shape_expr,
    _views,
)
from lasagne_bn.ops.statistics import Moments

_VERSION = KERNEL_VERSION + source_version(Path(__file__))


@register_funcify_and_cache_key(Moments)
def numba_funcify_Moments(op, node, **kwargs):
    axes, ndim = op.axes, node.inputs[0].ndim
    dtype = _prepare(node)
    st = _dtype(node.outputs[0])
    body = _views(str(op), ndim, axes, ["x"])
    body += [
        f"st_shape = {_stat_shape_expr(ndim, axes, 'x')}",
        "stats = np.empty((4, C))",
        "if A * B == 0:",
        "        stats[:] = np.nan",  # an empty reduction: NaN, as perform gives
        "else:",
        f"        moments_fn({_ptr('x3', dtype)}, A, C, B, stats.ctypes)",
    ]
    # The kept axes are stats' C axis in the input's order (the wrapper's
    # transpose puts them first, in order), so a reshape restores them.
    outputs = [f"stats[{row}].astype({st}).reshape(st_shape)" for row in range(4)]
    body.append(f"return {', '.join(outputs)}")
    return _compile("moments", body, ["x"], ("moments",), dtype), node_key(
        op, node, _VERSION, body
    )
