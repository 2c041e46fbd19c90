"""``theano.sandbox``: only ``rng_mrg`` survives; the GPU backends are gone."""

from __future__ import annotations

from lasagne_bn_compat._finder import GONE
from lasagne_bn_compat._names import lazy_submodules, missing_names

_MISSING = {
    "cuda": GONE["theano.sandbox.cuda"],
    "gpuarray": GONE["theano.sandbox.gpuarray"],
    "linalg": GONE["theano.sandbox.linalg"],
}


__getattr__ = missing_names(
    "theano.sandbox",
    _MISSING,
    fallback=lazy_submodules(globals(), {"rng_mrg": "lasagne_bn_compat.theano.sandbox.rng_mrg"}),
)
