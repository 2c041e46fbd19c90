"""Fold inference batch norm into the convolution or dense product before it, in the graph.

:func:`lasagne_bn.layers.fold_batch_norm` folds a network's parameters once;
this rewrite does the same inside any compiled inference function, on every
backend, with the network left as it is: ``BatchNormApply(conv(x, W), g, b,
m, s)`` (what ``get_output(..., deterministic=True)`` gives after a
``batch_norm(Conv2DLayer(...))``) becomes ``conv(x, W * g/s) + (b - m g/s)``,
and likewise for ``dot(x, W)`` of a dense layer.  The scaled weights cost one
pass over the weights per call; the pass over the activations that batch
norm made is gone, and the added shift fuses with the nonlinearity after it.

The rewrite changes rounding (the scale is applied to the weights instead of
the products), so it is not on by default; ask for it with the tag:

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.layers import InputLayer, Conv2DLayer, batch_norm, get_output
>>> from lasagne_bn.ops.bn_fold_rewrite import folding
>>> x = pt.tensor4("x")
>>> net = batch_norm(Conv2DLayer(InputLayer((None, 3, 8, 8), x), 4, 3))
>>> y = get_output(net, deterministic=True)
>>> f = pytensor.function([x], y, mode=folding(None))
>>> any(type(n.op).__name__ == "BatchNormApply" for n in f.maker.fgraph.apply_nodes)
False
"""

from __future__ import annotations

import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.compile.mode import Mode, get_default_mode, get_mode
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.tensor.math import Dot

from lasagne_bn.ops.bn import BatchNormApply
from lasagne_bn.ops.conv import Conv
from lasagne_bn.ops.rewrites import define_group

__all__ = ["TAG", "folding", "local_fold_batch_norm"]

#: The rewrite's tag: ``mode.including(TAG)`` turns it on.
TAG = "fold_batch_norm"


def _per_channel(var, channel_axis: int) -> bool:
    """Whether ``var`` varies (at most) along ``channel_axis`` only."""
    return all(b for i, b in enumerate(var.type.broadcastable) if i != channel_axis)


@node_rewriter([BatchNormApply])
def local_fold_batch_norm(fgraph, node):
    """``BatchNormApply(conv(x, W) or dot(x, W), g, b, m, s)`` -> scaled weights + shift."""
    x, gamma, beta, mean, std = node.inputs
    producer = x.owner
    if producer is None or len(fgraph.clients[x]) != 1:
        return None  # the product is used elsewhere too: folding would compute it twice
    op = producer.op
    if isinstance(op, Conv):
        channel_axis, weight_shape = 1, (-1,) + (1,) * (op.convdim + 1)
    elif isinstance(op, Dot) and x.ndim == 2 and producer.inputs[1].ndim == 2:
        channel_axis, weight_shape = 1, (1, -1)
    else:
        return None
    if not all(_per_channel(p, channel_axis) for p in (gamma, beta, mean, std)):
        return None
    dtype = node.outputs[0].type.dtype
    scale = pt.cast(gamma / std, dtype)
    shift = pt.cast(beta - mean * scale, dtype)
    inputs, weights = producer.inputs
    folded = op(inputs, pt.cast(weights * scale.reshape(weight_shape), weights.type.dtype))
    out = pt.cast(folded + shift, dtype)
    old = node.outputs[0]
    if out.type != old.type:
        out = pt.specify_shape(out, old.type.shape)
    return [out]


def register() -> None:
    """Add the tagged, off-by-default rewrite to ``optdb`` (see :mod:`lasagne_bn.ops.rewrites`)."""
    # Before any other rewrite changes the product (BLAS rewrites come much later).
    optdb.register(
        "lasagne_bn_fold_batch_norm", dfs_rewriter(local_fold_batch_norm), TAG, position=0.09
    )


def folding(mode=None) -> Mode:
    """``mode`` (a ``pytensor.function`` mode argument; None: the default) with folding on."""
    if mode is None:
        base = get_default_mode()
    elif isinstance(mode, str):
        base = get_mode(mode)
    else:
        base = mode
    from lasagne_bn.ops.rewrites import ensure_registered

    ensure_registered("bn")
    return base.including(TAG)


define_group("bn", ("jax", "matmul"), register)
