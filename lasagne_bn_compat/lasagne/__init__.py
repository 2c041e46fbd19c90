"""``import lasagne``: Lasagne master's modules, mapped onto lasagne_bn.

``lasagne.init``, ``nonlinearities``, ``objectives``, ``regularization``,
``updates`` and ``random`` *are* lasagne_bn's modules; ``lasagne.layers``
and ``lasagne.utils`` are lasagne_bn's plus clear errors for the Lasagne
names lasagne_bn does not have (``lasagne.layers.dnn``, ``EmbeddingLayer``
...).  Networks built through these names are plain lasagne_bn networks.
"""

from __future__ import annotations

from lasagne_bn import (
    init,
    nonlinearities,
    objectives,
    random,
    regularization,
    updates,
)
from lasagne_bn_compat.lasagne import layers, utils

__version__ = "0.2.dev1+lasagnebn"

__all__ = [
    "init",
    "layers",
    "nonlinearities",
    "objectives",
    "random",
    "regularization",
    "updates",
    "utils",
]
