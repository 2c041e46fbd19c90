"""Graph rewrites for the batch-norm Ops.

- ``lasagne_bn_register_jax``: imports :mod:`lasagne_bn.ops.jax` (and so
  JAX) only when a function is first compiled in JAX mode.

The C backends (``C``, ``CVM``) need no rewrite: the Ops have C code
(:mod:`lasagne_bn.ops.bn_c`).  Until it existed, they were lowered to plain
PyTensor graphs here, which made a training step 20x slower than the
default mode's.
"""

from __future__ import annotations

import importlib

from pytensor.compile import optdb
from pytensor.graph.rewriting.basic import GraphRewriter


class RegisterJaxKernels(GraphRewriter):
    """Leaves the graph alone; makes sure the JAX kernels are registered."""

    def apply(self, fgraph):
        importlib.import_module("lasagne_bn.ops.jax")
        importlib.import_module("lasagne_bn.ops.jax_conv")
        importlib.import_module("lasagne_bn.ops.jax_moments")
        importlib.import_module("lasagne_bn.ops.jax_pool")


optdb.register("lasagne_bn_register_jax", RegisterJaxKernels(), "jax", position=0.05)
