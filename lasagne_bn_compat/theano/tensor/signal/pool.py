"""``theano.tensor.signal.pool``: Theano 1.0's pooling on lasagne_bn's ops.

``pool_2d`` and ``pool_3d`` take Theano 1.0's arguments and the older names
Theano still accepted (``ds``, ``st``, ``padding``); windows may be symbolic
ints.  ``Pool(ignore_border, mode, ndim)(x, ws, stride, pad)`` builds the
same graph as the functions, and ``Pool.out_shape`` is Theano's shape rule.
"""

from __future__ import annotations

from lasagne_bn_compat._names import missing_names
from lasagne_bn_compat.theano._conv import pool_ops
from lasagne_bn_compat.theano._pickled import inert_op

_pool = pool_ops()

__all__ = ["Pool", "max_pool_2d_same_size", "pool_2d", "pool_3d"]

max_pool_2d_same_size = _pool.max_pool_2d_same_size

#: Theano's pooling gradient Ops: they only load from pickled graphs.
MaxPoolGrad = inert_op("theano.tensor.signal.pool.MaxPoolGrad", "differentiate pool_2d")
AveragePoolGrad = inert_op("theano.tensor.signal.pool.AveragePoolGrad", "differentiate pool_2d")


def _renamed(fname, new, old, new_name, old_name, unset=None):
    if old is None:
        return new
    if not _is_unset(new, unset):
        raise ValueError(f"{fname}: give {new_name} or its old name {old_name}, not both")
    return old


def _is_unset(value, unset) -> bool:
    if value is None:
        return True
    if unset is None or not isinstance(value, list | tuple):
        return False
    return tuple(value) == unset


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
    ws = _renamed("pool_2d", ws, ds, "ws", "ds")
    stride = _renamed("pool_2d", stride, st, "stride", "st")
    pad = _renamed("pool_2d", pad, padding, "pad", "padding", unset=(0, 0))
    return _pool.pool_2d(
        input, ws=ws, ignore_border=ignore_border, stride=stride, pad=pad, mode=mode
    )


def pool_3d(
    input,
    ws=None,
    ignore_border=None,
    stride=None,
    pad=(0, 0, 0),
    mode="max",
    ds=None,
    st=None,
    padding=None,
):
    """Theano's ``pool_3d`` (``ds``, ``st``, ``padding``: old names of ws, stride, pad)."""
    ws = _renamed("pool_3d", ws, ds, "ws", "ds")
    stride = _renamed("pool_3d", stride, st, "stride", "st")
    pad = _renamed("pool_3d", pad, padding, "pad", "padding", unset=(0, 0, 0))
    return _pool.pool_3d(
        input, ws=ws, ignore_border=ignore_border, stride=stride, pad=pad, mode=mode
    )


class Pool:
    """Theano's pooling Op interface: ``Pool(ignore_border, mode, ndim)(x, ws, stride, pad)``.

    Calling it builds lasagne_bn's pooling graph (the Op of :func:`pool_2d`
    or :func:`pool_3d`); ``openmp`` is accepted and ignored.
    """

    def __init__(self, ignore_border=False, mode="max", ndim=2, openmp=None):
        if ndim not in (2, 3):
            raise ValueError(f"ndim={ndim!r}: lasagne_bn pools 2 or 3 axes")
        self.ignore_border = ignore_border
        self.mode = mode
        self.ndim = ndim

    def __call__(self, x, ws, stride=None, pad=None):
        fn = _pool.pool_2d if self.ndim == 2 else _pool.pool_3d
        return fn(
            x, ws=ws, ignore_border=self.ignore_border, stride=stride, pad=pad, mode=self.mode
        )

    @staticmethod
    def out_shape(
        imgshape,
        ws=None,
        ignore_border=False,
        stride=None,
        pad=None,
        ndim=2,
        ds=None,
        st=None,
        padding=None,
    ):
        """Theano's output shape of pooling ``imgshape`` (ints; ``None`` stays unknown)."""
        ws = ws if ws is not None else ds
        stride = stride if stride is not None else (st if st is not None else ws)
        pad = pad if pad is not None else (padding if padding is not None else (0,) * ndim)
        return list(
            _pool.pool_output_shape(
                tuple(imgshape), tuple(ws), tuple(stride), tuple(pad), ignore_border
            )
        )


__getattr__ = missing_names(
    "theano.tensor.signal.pool",
    {
        name: "lasagne_bn's pooling gradients come from theano.grad of pool_2d / pool_3d"
        for name in (
            "PoolGrad",
            "MaxPoolGrad",
            "AveragePoolGrad",
            "DownsampleFactorMaxGradGrad",
            "MaxPoolRop",
        )
    },
)
