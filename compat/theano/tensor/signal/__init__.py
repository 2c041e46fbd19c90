"""``theano.tensor.signal``: the pooling functions (``signal.pool``)."""

from __future__ import annotations

import importlib

from compat._names import missing_names

_MISSING = {
    "pool": "pooling needs lasagne_bn's pooling ops, which this lasagne_bn version lacks",
    "downsample": "use theano.tensor.signal.pool.pool_2d",
    "conv": "use theano.tensor.nnet.conv2d",
}


def _submodule(name: str):
    if name != "pool":
        raise KeyError(name)
    try:
        module = importlib.import_module("compat.theano.tensor.signal.pool")
    except ImportError:
        raise KeyError(name) from None
    globals()[name] = module
    return module


__getattr__ = missing_names("theano.tensor.signal", _MISSING, fallback=_submodule)
