"""``theano.tensor.signal.downsample`` (Theano <= 0.8): ``max_pool_2d`` on ``pool_2d``."""

from __future__ import annotations

from lasagne_bn_compat.theano.tensor.signal.pool import pool_2d

__all__ = ["max_pool_2d"]


def max_pool_2d(input, ds, ignore_border=None, st=None, padding=(0, 0), mode="max"):
    """Theano 0.8's ``max_pool_2d``: ``pool_2d(input, ds, ignore_border, st, padding, mode)``."""
    return pool_2d(input, ws=ds, ignore_border=ignore_border, stride=st, pad=padding, mode=mode)
