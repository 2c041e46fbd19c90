"""JAX registration of :class:`lasagne_bn.ops.statistics.Moments`.

The statistics are :func:`lasagne_bn.ops.jax.bn.shifted_moments`, the same
shifted, multi-output reduction the batch-norm training kernel uses
(float32 accumulation for float16/float32 input, float64 for float64).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from pytensor.link.jax.dispatch import jax_funcify

from lasagne_bn.ops.jax.bn import shifted_moments
from lasagne_bn.ops.layout import reduced_size
from lasagne_bn.ops.statistics import Moments


@jax_funcify.register(Moments)
def jax_funcify_Moments(op, node, **kwargs):
    axes = op.axes
    st = np.dtype(node.outputs[0].type.dtype)

    def moments(x):
        if reduced_size(x.shape, axes) == 0:  # static under jit
            shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape))
            nan = jnp.full(shape, jnp.nan, dtype=st)
            return nan, nan, nan, nan
        _, shift, mu, var = shifted_moments(x, axes)
        return (shift + mu).astype(st), var.astype(st), shift.astype(st), mu.astype(st)

    return moments
