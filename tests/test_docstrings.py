"""The examples in the docstrings of the package modules run."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "lasagne_bn.ops",
    "lasagne_bn.ops.api",
    "lasagne_bn.ops.host_memory",
    "lasagne_bn.ops.layout",
    "lasagne_bn.ops.validation",
    "lasagne_bn.ops.c.bn",
    "lasagne_bn.ops.c.common",
    "lasagne_bn.ops.c.conv",
    "lasagne_bn.ops.c.pool",
    "lasagne_bn.ops.c.gemm",
    "lasagne_bn.ops.numba.jit",
    "lasagne_bn.ops.conv",
    "lasagne_bn.layers.conv",
    "lasagne_bn.layers.pool",
    "lasagne_bn_compat",
    "lasagne_bn.utils",
    "lasagne_bn.random",
    "lasagne_bn.init",
    "lasagne_bn.nonlinearities",
    "lasagne_bn.objectives",
    "lasagne_bn.regularization",
    "lasagne_bn.updates",
    "lasagne_bn.layers",
    "lasagne_bn.layers.base",
    "lasagne_bn.layers.helper",
    "lasagne_bn.demo.network",
    "lasagne_bn.layers.input",
    "lasagne_bn.layers.dense",
    "lasagne_bn.layers.special",
    "lasagne_bn.layers.shape",
    "lasagne_bn.layers.merge",
    "lasagne_bn.layers.noise",
    "lasagne_bn.layers.normalization",
    "lasagne_bn.layers.bn_storage",
    "lasagne_bn.export",
    "lasagne_bn.lint",
    "lasagne_bn.layers.bn_recompute",
    "lasagne_bn.layers.bn_freeze",
    "lasagne_bn.layers.bn_fold",
    "lasagne_bn._files",
    "lasagne_bn._signals",
    "lasagne_bn_compat.theano._pickled",
    "lasagne_bn_compat.theano.gof.graph",
    "lasagne_bn_compat.theano.gpuarray.dnn",
    "lasagne_bn.layers.embedding",
    "lasagne_bn.layers.local",
    "lasagne_bn.theano_extensions.conv",
    "lasagne_bn.theano_extensions.padding",
    "lasagne_bn._compat_pytensor",
    "lasagne_bn_compat.theano.ifelse",
    "lasagne_bn_compat.theano.tensor.nlinalg",
    "lasagne_bn_compat.theano.tensor.slinalg",
    "lasagne_bn_compat.theano.tensor.subtensor",
    "lasagne_bn.ops.statistics",
    "lasagne_bn.ops.rewrites",
    "lasagne_bn.ops.numba.float16",
    "lasagne_bn.ops.bn",
    "lasagne_bn.ops.pool",
    "lasagne_bn.ops.numba.threads",
    "lasagne_bn.nan_guard",
    "lasagne_bn._typing",
    "lasagne_bn_compat.io",
    "lasagne_bn_compat.compare",
    "lasagne_bn_compat.theano.tensor.nnet._bilinear",
    "lasagne_bn_compat._pickle",
    "lasagne_bn.layers.recurrent",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
