"""``theano.gpuarray.dnn`` as Theano 1.0 reported it without a GPU: cuDNN absent."""

from __future__ import annotations

__all__ = ["dnn_available", "dnn_present"]

_WHY = "PyTensor 3 has no cuDNN backend; compile with mode='JAX' to run on a GPU"


def dnn_present() -> bool:
    """Whether cuDNN can be used: never (Theano answered False without a GPU too)."""
    return False


def dnn_available(context_name: object = None) -> bool:
    """Whether cuDNN is usable for ``context_name``: never; ``dnn_available.msg`` says why."""
    return False


dnn_available.msg = _WHY
dnn_present.msg = _WHY
