"""Graph rewrite for the pooling Ops: constant windows become static Ops.

:class:`lasagne_bn.ops.pool.DynamicPool` takes its windows as symbolic
inputs (``pool_2d`` with ``ws`` computed from a shape, as Lasagne's
``SpatialPyramidPoolingLayer`` does).  When those inputs fold to constants
(the shapes are static), the node is replaced by the equivalent
:class:`~lasagne_bn.ops.pool.Pool` (or gradient) Op, which has the fast
Numba and JAX kernels.  Windows the constants make invalid are left alone:
the NumPy code raises its error when the function runs.

Registered the first time a pooling Op builds a node
(:func:`lasagne_bn.ops.rewrites.ensure_registered`), not at import.
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Constant
from pytensor.graph.rewriting.basic import node_rewriter
from pytensor.tensor.rewriting.basic import register_canonicalize, register_specialize

from lasagne_bn.ops.pool import _KINDS, DynamicPool
from lasagne_bn.ops.rewrites import define_group


@node_rewriter([DynamicPool])
def local_static_pool_windows(fgraph, node):
    """``DynamicPool`` with constant ``ws``, ``stride``, ``pad`` -> the static Op."""
    op = node.op
    n = _KINDS[op.kind]
    windows = node.inputs[n:]
    if not all(isinstance(v, Constant) for v in windows):
        return None
    values = [np.asarray(v.data).ravel() for v in windows]
    if any(v.size != op.nd for v in values):
        return None
    try:
        static = op.static_op(*values)
    except (TypeError, ValueError):
        return None
    out = static(*node.inputs[:n])
    if out.type != node.outputs[0].type:
        out = node.outputs[0].type.filter_variable(out, allow_convert=True)
    return [out]


def register() -> None:
    """Add the rewrite to canonicalize and specialize (see :mod:`lasagne_bn.ops.rewrites`)."""
    register_canonicalize(local_static_pool_windows)
    register_specialize(local_static_pool_windows)


define_group("pool", ("jax", "matmul"), register)
