"""``lasagne.layers``: lasagne_bn's layers under Lasagne's names.

Every layer, helper and submodule (``lasagne.layers.helper``,
``lasagne.layers.normalization`` ...) is lasagne_bn's own object.  Names
lasagne_bn lacks raise an ``ImportError`` / ``AttributeError`` that says
what to use instead.
"""

from __future__ import annotations

import importlib
import importlib.util

from compat._finder import GONE
from compat._names import missing_names
from lasagne_bn import layers as _layers
from lasagne_bn.layers import *  # noqa: F403
from lasagne_bn.layers import (  # noqa: F401
    base,
    dense,
    helper,
    input,
    merge,
    noise,
    normalization,
    shape,
    special,
)

__all__ = list(_layers.__all__)

_RECURRENT = GONE["lasagne.layers.recurrent"]

_MISSING = {
    "dnn": GONE["lasagne.layers.dnn"],
    "cuda_convnet": GONE["lasagne.layers.cuda_convnet"],
    "corrmm": GONE["lasagne.layers.corrmm"],
    "recurrent": _RECURRENT,
    "CustomRecurrentLayer": _RECURRENT,
    "RecurrentLayer": _RECURRENT,
    "LSTMLayer": _RECURRENT,
    "GRULayer": _RECURRENT,
    "Gate": _RECURRENT,
    "embedding": GONE["lasagne.layers.embedding"],
    "EmbeddingLayer": GONE["lasagne.layers.embedding"],
    "local": GONE["lasagne.layers.local"],
    "LocallyConnected2DLayer": GONE["lasagne.layers.local"],
    "TransformerLayer": "lasagne_bn has no spatial transformer layers",
    "TPSTransformerLayer": "lasagne_bn has no spatial transformer layers",
    "RandomizedRectifierLayer": "use ParametricRectifierLayer or a LeakyRectify nonlinearity",
    "rrelu": "use prelu or a LeakyRectify nonlinearity",
    **{
        name: "3-D convolution, pooling and upscaling layers are not in lasagne_bn"
        for name in (
            "Conv3DLayer",
            "TransposedConv3DLayer",
            "Deconv3DLayer",
        )
    },
}


def _submodule(name: str):
    """``lasagne.layers.<name>`` for any submodule lasagne_bn.layers has (conv, pool ...)."""
    module_name = f"lasagne_bn.layers.{name}"
    if not name.isidentifier() or importlib.util.find_spec(module_name) is None:
        raise KeyError(name)
    module = importlib.import_module(module_name)
    globals()[name] = module
    return module


__getattr__ = missing_names("lasagne.layers", _MISSING, fallback=_submodule)
