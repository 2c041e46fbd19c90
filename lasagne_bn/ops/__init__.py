"""Batch-normalization ops with Theano 1.0's API, for every PyTensor backend.

>>> import pytensor.tensor as pt
>>> from lasagne_bn.ops import batch_normalization_train
>>> out, mean, invstd = batch_normalization_train(pt.tensor4(), pt.vector(), pt.vector(),
...                                               axes='spatial')
>>> out.owner.op
BatchNormTrain(axes=(0, 2, 3))

Importing this package registers the Numba kernels (the default backend),
the C-backend lowering, and a hook that registers the JAX kernels the first
time a function is compiled in JAX mode (so importing costs no JAX import).
It also keeps large freed host buffers for reuse (see
:mod:`lasagne_bn.ops.host_memory`; ``LASAGNE_BN_RECYCLE_MEMORY=0`` opts out).
The parallel kernels pick their thread count per call (see
:mod:`lasagne_bn.ops.numba_threads`; :func:`set_kernel_threads` or
``LASAGNE_BN_THREADS=<n>`` fixes it).
"""

from lasagne_bn.ops import bn_fold_rewrite as _bn_fold_rewrite  # noqa: F401
from lasagne_bn.ops import c_gemm as _c_gemm  # noqa: F401
from lasagne_bn.ops import conv_rewrites as _conv_rewrites  # noqa: F401
from lasagne_bn.ops import host_memory as _host_memory
from lasagne_bn.ops import numba as _numba_registrations  # noqa: F401
from lasagne_bn.ops import numba_conv as _numba_conv_registrations  # noqa: F401
from lasagne_bn.ops import numba_pool as _numba_pool_registrations  # noqa: F401
from lasagne_bn.ops import pool_rewrites as _pool_rewrites  # noqa: F401
from lasagne_bn.ops import rewrites as _rewrites  # noqa: F401
from lasagne_bn.ops import static_shapes as _static_shapes  # noqa: F401
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
from lasagne_bn.ops.numba_threads import get_kernel_threads, kernel_threads, set_kernel_threads

_host_memory.apply_default()

__all__ = [
    "BatchNormApply",
    "BatchNormInference",
    "BatchNormTrain",
    "BatchNormTrainGrad",
    "batch_normalization",
    "batch_normalization_test",
    "batch_normalization_train",
    "get_kernel_threads",
    "kernel_threads",
    "moments",
    "set_kernel_threads",
]
