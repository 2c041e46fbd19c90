"""``theano.tensor.shared_randomstreams``: ``RandomStreams`` on PyTensor's generators."""

from __future__ import annotations

from lasagne_bn_compat.theano._random import RandomStreams

__all__ = ["RandomStreams"]
