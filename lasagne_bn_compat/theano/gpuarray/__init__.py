"""``theano.gpuarray`` as Theano 1.0 had it on a machine without a GPU.

Theano 1.0 always shipped this package; without pygpu it imported fine and
reported ``pygpu_activated = False``, and legacy code (Lasagne's own tests,
scripts choosing a backend) reads that flag to pick the CPU path.  There is
no GPU backend here (run on a GPU with ``mode='JAX'``), so the flag is False
and cuDNN reports itself absent.
"""

from __future__ import annotations

from lasagne_bn_compat.theano.gpuarray import dnn

__all__ = ["dnn", "pygpu_activated"]

#: Whether a pygpu GPU context is active: never, on PyTensor 3.
pygpu_activated = False
