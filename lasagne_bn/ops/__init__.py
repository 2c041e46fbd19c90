"""Batch-normalization ops with Theano 1.0's API, for every PyTensor backend.

>>> import pytensor.tensor as pt
>>> from lasagne_bn.ops import batch_normalization_train
>>> out, mean, invstd = batch_normalization_train(pt.tensor4(), pt.vector(), pt.vector(),
...                                               axes='spatial')
>>> out.owner.op
BatchNormTrain(axes=(0, 2, 3))

Importing this package changes nothing outside it.  It tells PyTensor's
Numba backend how to compile our Op classes (dispatch on our own classes);
the rest happens when it is needed, once per process:

- our graph rewrites (the JAX-kernel hook, JAX static shapes, pooling
  windows, batch-norm folding, aliased running averages) are registered in
  PyTensor's rewrite database the first time one of our Ops builds a node
  (see :mod:`lasagne_bn.ops.rewrites`; :func:`register_rewrites` does it now);
- the Numba kernels, their thread-policy symbols and Numba's thread pool
  are set up when a kernel is first compiled (:mod:`lasagne_bn.ops.numba.threads`);
- Numba learns float16 (LLVM ``half``) when one of our float16 nodes is first
  compiled in the default mode (:func:`enable_numba_float16`);
- the host allocator is tuned only by an explicit call,
  :func:`recycle_host_memory` (:mod:`lasagne_bn.ops.host_memory`).

The parallel kernels pick their thread count per call (see
:mod:`lasagne_bn.ops.numba.threads`; :func:`set_kernel_threads` or
``LASAGNE_BN_THREADS=<n>`` fixes it).
"""

# This package assembles the graph level and the backends: the backends
# register their implementations of the Ops (the Op modules never import a
# backend; the JAX one is a hook that imports JAX on first use), and the
# modules that own a rewrite group define it (see lasagne_bn.ops.rewrites).
from lasagne_bn import _aliasing  # noqa: F401
from lasagne_bn.ops import bn_fold_rewrite, conv_rewrites, matmul, pool_rewrites  # noqa: F401
from lasagne_bn.ops import c as _c_registrations  # noqa: F401
from lasagne_bn.ops import jax as _jax_hook  # noqa: F401
from lasagne_bn.ops import numba as _numba_registrations  # noqa: F401
from lasagne_bn.ops.api import (
    batch_normalization,
    batch_normalization_test,
    batch_normalization_train,
    moments,
)
from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
)
from lasagne_bn.ops.host_memory import recycle_host_memory
from lasagne_bn.ops.numba.float16 import enable_numba_float16
from lasagne_bn.ops.numba.threads import get_kernel_threads, kernel_threads, set_kernel_threads
from lasagne_bn.ops.rewrites import register_rewrites
from lasagne_bn.ops.statistics import Moments, normalize

__all__ = [
    "BatchNormApply",
    "BatchNormInference",
    "BatchNormTrain",
    "BatchNormTrainGrad",
    "Moments",
    "batch_normalization",
    "batch_normalization_test",
    "batch_normalization_train",
    "enable_numba_float16",
    "get_kernel_threads",
    "kernel_threads",
    "moments",
    "normalize",
    "recycle_host_memory",
    "register_rewrites",
    "set_kernel_threads",
]
