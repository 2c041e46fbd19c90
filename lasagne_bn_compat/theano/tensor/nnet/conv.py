"""``theano.tensor.nnet.conv``: Theano's old ``conv2d`` interface (``image_shape=``).

The old function always convolved (flipped the filters); it is
:func:`lasagne_bn_compat.theano.tensor.nnet.abstract_conv.conv2d` with ``image_shape``
as the input shape.
"""

from __future__ import annotations

from lasagne_bn_compat.theano.tensor.nnet.abstract_conv import conv2d as _conv2d

__all__ = ["conv2d"]


_OLD_TUNING = frozenset(
    {
        "unroll_batch",
        "unroll_kern",
        "unroll_patch",
        "openmp",
        "imshp_logical",
        "kshp_logical",
        "kshp_logical_top_aligned",
        "verbose",
        "version",
        "direction_hint",
    }
)


def conv2d(
    input,
    filters,
    image_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1, 1),
    **kargs,
):
    """Theano's legacy ``theano.tensor.nnet.conv.conv2d`` (its tuning arguments are ignored)."""
    unknown = set(kargs) - _OLD_TUNING
    if unknown:
        raise TypeError(f"conv2d() got unexpected keyword arguments {sorted(unknown)}")
    return _conv2d(
        input,
        filters,
        input_shape=image_shape,
        filter_shape=filter_shape,
        border_mode=border_mode,
        subsample=subsample,
    )
