"""Graph rewrites for the convolution and pooling Ops.

- ``lasagne_bn_conv_jax_static_shapes`` (JAX mode only): the gradient Ops
  take the spatial shape they produce as a vector input; in JAX a
  ``MakeVector`` of ``Shape_i`` values would be traced, so it is replaced by
  PyTensor's ``JAXShapeTuple`` (a tuple of the concrete sizes), as PyTensor
  does for ``Reshape``.

Registered the first time a convolution Op builds a node
(:func:`lasagne_bn.ops.rewrites.ensure_registered`), not at import.
"""

from __future__ import annotations

from pytensor.compile import optdb
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.tensor.basic import MakeVector

from lasagne_bn.ops.conv import ConvGradInputs, ConvGradWeights
from lasagne_bn.ops.rewrites import define_group


@node_rewriter([ConvGradInputs, ConvGradWeights])
def local_conv_shape_as_tuple(fgraph, node):
    from pytensor.link.jax.dispatch.shape import JAXShapeTuple

    shape = node.inputs[2]
    owner = shape.owner
    if owner is None or not isinstance(owner.op, MakeVector):
        return None
    new_inputs = list(node.inputs)
    new_inputs[2] = JAXShapeTuple()(*owner.inputs)
    return node.clone_with_new_inputs(new_inputs).outputs


def register() -> None:
    """Add the rewrite to ``optdb`` (see :mod:`lasagne_bn.ops.rewrites`)."""
    optdb.register(
        "lasagne_bn_conv_jax_static_shapes",
        dfs_rewriter(local_conv_shape_as_tuple),
        "jax",
        position=100,
    )


define_group("conv", ("jax", "matmul"), register)
