"""``theano.sandbox``: only ``rng_mrg`` survives; the GPU backends are gone."""

from __future__ import annotations

import importlib

from compat._finder import GONE
from compat._names import missing_names

_MISSING = {
    "cuda": GONE["theano.sandbox.cuda"],
    "gpuarray": GONE["theano.sandbox.gpuarray"],
    "linalg": GONE["theano.sandbox.linalg"],
}


def _submodule(name: str):
    if name != "rng_mrg":
        raise KeyError(name)
    module = importlib.import_module("compat.theano.sandbox.rng_mrg")
    globals()[name] = module
    return module


__getattr__ = missing_names("theano.sandbox", _MISSING, fallback=_submodule)
