"""JAX registration of :class:`lasagne_bn.ops.matmul.MatMul`: ``jnp.dot``."""

from __future__ import annotations

import jax.numpy as jnp
from pytensor.link.jax.dispatch import jax_funcify

from lasagne_bn.ops.matmul import MatMul


@jax_funcify.register(MatMul)
def jax_funcify_MatMul(op, node, **kwargs):
    def matmul(a, b):
        return jnp.dot(a, b)

    return matmul
