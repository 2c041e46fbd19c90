"""``theano.tensor.signal``: the pooling functions (``signal.pool``)."""

from __future__ import annotations

import importlib

from lasagne_bn_compat._names import missing_names

_NO_POOL = "this lasagne_bn has no pooling ops (lasagne_bn.ops.pool)"
_MISSING = {"pool": _NO_POOL, "downsample": _NO_POOL, "conv": "use theano.tensor.nnet.conv2d"}


def _submodule(name: str):
    if name not in ("pool", "downsample"):
        raise KeyError(name)
    try:
        module = importlib.import_module(f"lasagne_bn_compat.theano.tensor.signal.{name}")
    except ImportError as exc:
        if "no pooling ops" not in str(exc):
            raise
        raise KeyError(name) from None
    globals()[name] = module
    return module


__getattr__ = missing_names("theano.tensor.signal", _MISSING, fallback=_submodule)
