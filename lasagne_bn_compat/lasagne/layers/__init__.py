"""``lasagne.layers``: lasagne_bn's layers under Lasagne's names.

Every layer, helper and submodule (``lasagne.layers.helper``,
``lasagne.layers.normalization`` ...) is lasagne_bn's own object.  Names
lasagne_bn lacks raise an ``ImportError`` / ``AttributeError`` that says
what to use instead.
"""

from __future__ import annotations

import importlib
import importlib.util

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
    recurrent,
    shape,
    special,
)
from lasagne_bn_compat._names import missing_names
from lasagne_bn_compat.theano._config import cudnn_refusal

__all__ = list(_layers.__all__)

_MISSING: dict[str, str] = {}


def _submodule(name: str):
    """``lasagne.layers.<name>``: a submodule of lasagne_bn.layers (conv, pool ...) or a shim.

    The shims are the GPU-era modules (``dnn``, ``corrmm``, ``cuda_convnet``).
    """
    module_name = f"lasagne_bn.layers.{name}"
    if not name.isidentifier():
        raise KeyError(name)
    if importlib.util.find_spec(module_name) is None:
        if name == "dnn" and cudnn_refusal() is not None:
            raise KeyError(name)  # Theano without cuDNN had no lasagne.layers.dnn
        module_name = f"lasagne_bn_compat.lasagne.layers.{name}"
        if name.startswith("_") or importlib.util.find_spec(module_name) is None:
            raise KeyError(name)
    module = importlib.import_module(module_name)
    globals()[name] = module
    return module


__getattr__ = missing_names("lasagne.layers", _MISSING, fallback=_submodule)
