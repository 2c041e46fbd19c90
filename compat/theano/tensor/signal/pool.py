"""``theano.tensor.signal.pool``: Theano 1.0's pooling on lasagne_bn's ops.

``pool_2d`` takes Theano 1.0's arguments and the older names Theano still
accepted (``ds``, ``st``, ``padding``).
"""

from __future__ import annotations

from compat._names import missing_names
from compat.theano._conv import pool_ops
from compat.theano._pickled import inert_op

_pool = pool_ops()

__all__ = ["max_pool_2d_same_size", "pool_2d"]

max_pool_2d_same_size = _pool.max_pool_2d_same_size

#: Theano's pooling Op: only loads from pickled graphs; build with pool_2d.
Pool = inert_op("theano.tensor.signal.pool.Pool", "use pool_2d")
MaxPoolGrad = inert_op("theano.tensor.signal.pool.MaxPoolGrad", "differentiate pool_2d")
AveragePoolGrad = inert_op("theano.tensor.signal.pool.AveragePoolGrad", "differentiate pool_2d")


def _renamed(new, old, new_name, old_name):
    if old is None:
        return new
    if new is not None:
        raise ValueError(f"pool_2d: give {new_name} or its old name {old_name}, not both")
    return old


def pool_2d(
    input,
    ws=None,
    ignore_border=None,
    stride=None,
    pad=(0, 0),
    mode="max",
    ds=None,
    st=None,
    padding=None,
):
    """Theano's ``pool_2d`` (``ds``, ``st``, ``padding``: old names of ws, stride, pad)."""
    ws = _renamed(ws, ds, "ws", "ds")
    stride = _renamed(stride, st, "stride", "st")
    if padding is not None:
        if tuple(pad) != (0, 0):
            raise ValueError("pool_2d: give pad or its old name padding, not both")
        pad = padding
    return _pool.pool_2d(
        input, ws=ws, ignore_border=ignore_border, stride=stride, pad=pad, mode=mode
    )


__getattr__ = missing_names(
    "theano.tensor.signal.pool",
    {"pool_3d": "3-D pooling is not in lasagne_bn"},
)
