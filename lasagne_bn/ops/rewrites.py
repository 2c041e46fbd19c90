"""Graph rewrites for the batch-norm Ops.

- ``lasagne_bn_register_jax``: imports :mod:`lasagne_bn.ops.jax` (and so
  JAX) only when a function is first compiled in JAX mode.

The C backends (``C``, ``CVM``) need no rewrite: the Ops have C code
(:mod:`lasagne_bn.ops.bn_c`), compiled loops that make fewer passes over
the data than a graph of plain PyTensor Ops, and no full-size temporaries.
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
