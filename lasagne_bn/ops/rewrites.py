"""Graph rewrites for the batch-norm Ops.

- ``lasagne_bn_lower_c``: on the C backends (``C``, ``CVM``) the Ops have no
  C code, so they are lowered to plain PyTensor graphs that the elementwise
  fusion turns into few loops.  The training statistics are computed in
  float64 from the float64-cast input (one fused reduction each), which
  keeps the variance of ``1e6 + N(0, 1)`` float32 data exact.  Means are
  sums divided by a product of ``Shape_i``, never ``pt.mean``: PyTensor
  3.0.7's ``mean`` indexes a cast shape vector, and its whole-graph C linker
  aborts (C assert) on a ``Subtensor`` of an intermediate.
- ``lasagne_bn_register_jax``: imports :mod:`lasagne_bn.ops.jax` (and so
  JAX) only when a function is first compiled in JAX mode.
"""

from __future__ import annotations

import importlib

import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.graph.rewriting.basic import GraphRewriter, dfs_rewriter, node_rewriter
from pytensor.raise_op import CheckAndRaise

from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
    inference_graph,
    std_apply_graph,
    symbolic_m,
    train_grad_graph,
)


def checked(x, op, *conditions):
    """``x``, with the runtime checks the other backends make (ValueError)."""
    messages = {
        "m": f"{op}: training needs at least 1 value per statistic (m >= 1)",
        "epsilon": f"{op}: epsilon must be > 0",
        "factor": f"{op}: running_average_factor must be in [0, 1]",
    }
    for kind, condition in conditions:
        x = CheckAndRaise(ValueError, messages[kind])(x, condition)
    return x


def lower_train(op: BatchNormTrain, inputs):
    """``BatchNormTrain`` as a plain graph with float64 statistics."""
    x, gamma, beta, epsilon = inputs[:4]
    axes = op.axes
    st_dtype = gamma.type.dtype
    m = symbolic_m(x, axes, "float64")
    conditions = [("m", pt.ge(m, 1)), ("epsilon", pt.gt(epsilon, 0))]
    if len(inputs) > 4:
        conditions.append(("factor", pt.and_(pt.ge(inputs[4], 0), pt.le(inputs[4], 1))))
    x = checked(x, op, *conditions)
    x64 = pt.cast(x, "float64")
    mean = x64.sum(axis=axes, keepdims=True) / m
    centred = x64 - mean
    var = pt.sqr(centred).sum(axis=axes, keepdims=True) / m
    invstd = 1.0 / pt.sqrt(var + epsilon)
    out = pt.cast(centred * (gamma * invstd) + beta, x.type.dtype)
    results = [out, pt.cast(mean, st_dtype), pt.cast(invstd, st_dtype)]
    if len(inputs) > 4:
        factor, rmean, rvar = inputs[4:]
        results.append(pt.cast(rmean * (1.0 - factor) + mean * factor, st_dtype))
        results.append(
            pt.cast(
                rvar * (1.0 - factor) + var * (m / pt.maximum(m - 1.0, 0.0)) * factor, st_dtype
            )
        )
    return results


@node_rewriter([BatchNormTrain, BatchNormTrainGrad, BatchNormInference, BatchNormApply])
def local_lower_batch_norm(fgraph, node):
    op = node.op
    if isinstance(op, BatchNormTrain):
        results = lower_train(op, node.inputs)
    elif isinstance(op, BatchNormTrainGrad):
        x, *rest = node.inputs
        x = checked(x, op, ("m", pt.ge(symbolic_m(x, op.axes, "float64"), 1)))
        results = list(train_grad_graph(op.axes, x, *rest))
    elif isinstance(op, BatchNormInference):
        x, *rest = node.inputs
        x = checked(x, op, ("epsilon", pt.gt(rest[-1], 0)))
        results = [inference_graph(x, *rest)]
    else:
        results = [std_apply_graph(*node.inputs, node.outputs[0].type.dtype)]
    # Keep the exact output types (static shapes) the Op promised.
    return [
        pt.specify_shape(r, o.type.shape) if r.type != o.type else r
        for r, o in zip(results, node.outputs, strict=True)
    ]


optdb.register(
    "lasagne_bn_lower_c",
    dfs_rewriter(local_lower_batch_norm),
    "fast_run",
    "minimum_compile",
    "cxx_only",
    position=0.1,
)


class RegisterJaxKernels(GraphRewriter):
    """Leaves the graph alone; makes sure the JAX kernels are registered."""

    def apply(self, fgraph):
        importlib.import_module("lasagne_bn.ops.jax")
        importlib.import_module("lasagne_bn.ops.jax_conv")
        importlib.import_module("lasagne_bn.ops.jax_pool")


optdb.register("lasagne_bn_register_jax", RegisterJaxKernels(), "jax", position=0.05)
