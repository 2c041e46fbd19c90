"""Access to lasagne_bn's convolution and pooling ops for the Theano shims.

The shims of ``theano.tensor.nnet.conv2d`` and ``theano.tensor.signal.pool``
import them through here, so a lasagne_bn without those ops gives one clear
``ImportError`` instead of a missing module.
"""

from __future__ import annotations

import importlib

from lasagne_bn_compat._names import GUIDE


def conv_ops():
    """:mod:`lasagne_bn.ops.conv`, or an ImportError that says what is missing."""
    return _ops("conv", "convolution")


def pool_ops():
    """:mod:`lasagne_bn.ops.pool`, or an ImportError that says what is missing."""
    return _ops("pool", "pooling")


def _ops(name: str, what: str):
    try:
        return importlib.import_module(f"lasagne_bn.ops.{name}")
    except ModuleNotFoundError as exc:
        if exc.name != f"lasagne_bn.ops.{name}":
            raise
        raise ImportError(
            f"this lasagne_bn has no {what} ops (lasagne_bn.ops.{name}); Theano's {what} "
            f"functions need them ({GUIDE})",
            name=f"lasagne_bn.ops.{name}",
        ) from None
