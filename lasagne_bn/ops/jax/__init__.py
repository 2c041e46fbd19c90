"""The JAX backend: the Ops' implementations for PyTensor's JAX linker.

One module per Op family (``bn``, ``conv``, ``matmul``, ``pool``,
``statistics``), each registering its Ops with PyTensor's ``jax_funcify``.
Those modules import JAX, so this package itself imports none of them:
it defines the rewrite group ``"jax"`` (:mod:`lasagne_bn.ops.rewrites`),
whose registration adds :class:`RegisterJaxKernels` to PyTensor's JAX
rewrites (it imports the modules the first time a graph is compiled for
JAX) and the static-shape rewrites of :mod:`lasagne_bn.ops.static_shapes`.
"""

from __future__ import annotations

from pytensor.graph.rewriting.basic import GraphRewriter

from lasagne_bn.ops import static_shapes
from lasagne_bn.ops.rewrites import define_group


class RegisterJaxKernels(GraphRewriter):
    """Leaves the graph alone; makes sure the JAX kernels are registered."""

    def apply(self, fgraph):
        from lasagne_bn.ops.jax import bn, conv, matmul, pool, statistics  # noqa: F401


def register() -> None:
    """Add the JAX-kernel hook and the static-shape rewrites to PyTensor's ``optdb``."""
    from pytensor.compile import optdb

    optdb.register("lasagne_bn_register_jax", RegisterJaxKernels(), "jax", position=0.05)
    static_shapes.register()


define_group("jax", (), register)
