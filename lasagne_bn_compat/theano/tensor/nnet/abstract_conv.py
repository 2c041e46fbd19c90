"""``theano.tensor.nnet.abstract_conv``: Theano 1.0's 2-D and 3-D convolutions on lasagne_bn's ops.

``conv2d`` (``T.nnet.conv2d``), ``conv2d_grad_wrt_inputs``,
``conv2d_grad_wrt_weights``, ``conv2d_transpose``, ``conv3d``
(``T.nnet.conv3d``), ``conv3d_grad_wrt_inputs``, ``conv3d_grad_wrt_weights``,
``get_conv_output_shape`` and the bilinear upsampling functions, with
Theano's signatures and semantics (filters flipped unless
``filter_flip=False``; ``border_mode`` 'valid', 'full', 'half', ints or pairs).

The Op classes that legacy layers build directly, ``AbstractConv2d``,
``AbstractConv2d_gradInputs``, ``AbstractConv2d_gradWeights`` and their
``3d`` versions, take Theano's constructor arguments (``imshp`` and
``kshp`` are hints and are kept only as attributes) and are called as
Theano's were: ``AbstractConv2d(...)(img, kern)``,
``AbstractConv2d_gradInputs(...)(kern, topgrad, spatial_shape)``,
``AbstractConv2d_gradWeights(...)(img, topgrad, spatial_shape)``.  They are
lasagne_bn's convolution Ops (:mod:`lasagne_bn.ops.conv`) under Theano's
names, so every backend runs them.
"""

from __future__ import annotations

from lasagne_bn_compat.theano._conv import conv_ops
from lasagne_bn_compat.theano.tensor.nnet._bilinear import (
    bilinear_kernel_1D,
    bilinear_kernel_2D,
    bilinear_upsampling,
    frac_bilinear_upsampling,
)

_conv = conv_ops()

__all__ = [
    "AbstractConv2d",
    "AbstractConv2d_gradInputs",
    "AbstractConv2d_gradWeights",
    "AbstractConv3d",
    "AbstractConv3d_gradInputs",
    "AbstractConv3d_gradWeights",
    "bilinear_kernel_1D",
    "bilinear_kernel_2D",
    "bilinear_upsampling",
    "conv2d",
    "conv2d_grad_wrt_inputs",
    "conv2d_grad_wrt_weights",
    "conv2d_transpose",
    "conv3d",
    "conv3d_grad_wrt_inputs",
    "conv3d_grad_wrt_weights",
    "frac_bilinear_upsampling",
    "get_conv_output_shape",
]

get_conv_output_shape = _conv.get_conv_output_shape
conv2d_grad_wrt_inputs = _conv.conv2d_grad_wrt_inputs
conv2d_grad_wrt_weights = _conv.conv2d_grad_wrt_weights
conv3d = _conv.conv3d
conv3d_grad_wrt_inputs = _conv.conv3d_grad_wrt_inputs
conv3d_grad_wrt_weights = _conv.conv3d_grad_wrt_weights


def conv2d(
    input,
    filters,
    input_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1, 1),
    filter_flip=True,
    image_shape=None,
    filter_dilation=(1, 1),
    num_groups=1,
    unshared=False,
    **kwargs,
):
    """Theano's ``T.nnet.conv2d``: lasagne_bn's ``conv2d``.

    ``image_shape`` (Theano's old name for ``input_shape``) is accepted;
    ``unshared=True`` (locally connected filters) is not supported.
    """
    if unshared:
        raise ValueError(
            "conv2d(unshared=True): unshared (locally connected) convolutions are not "
            "supported by lasagne_bn"
        )
    if kwargs:
        raise TypeError(f"conv2d() got unexpected keyword arguments {sorted(kwargs)}")
    if image_shape is not None:
        if input_shape is not None:
            raise ValueError("conv2d: give input_shape or its old name image_shape, not both")
        input_shape = image_shape
    return _conv.conv2d(
        input,
        filters,
        input_shape=input_shape,
        filter_shape=filter_shape,
        border_mode=border_mode,
        subsample=subsample,
        filter_flip=filter_flip,
        filter_dilation=filter_dilation,
        num_groups=num_groups,
    )


def conv2d_transpose(
    input,
    filters,
    output_shape,
    filter_shape=None,
    border_mode="valid",
    input_dilation=(1, 1),
    filter_flip=True,
    filter_dilation=(1, 1),
    num_groups=1,
    unshared=False,
):
    """Theano's ``conv2d_transpose``: the gradient of ``conv2d`` w.r.t. its input."""
    if unshared:
        raise ValueError("conv2d_transpose(unshared=True) is not supported by lasagne_bn")
    return _conv.conv2d_grad_wrt_inputs(
        input,
        filters,
        input_shape=output_shape,
        filter_shape=filter_shape,
        border_mode=border_mode,
        subsample=input_dilation,
        filter_flip=filter_flip,
        filter_dilation=filter_dilation,
        num_groups=num_groups,
    )


# --------------------------------------------------------------------------
# Theano's Op classes


def _abstract(base, convdim: int, doc: str):
    """A subclass of lasagne_bn Op ``base`` with Theano's constructor signature."""

    def __init__(
        self,
        imshp=None,
        kshp=None,
        border_mode="valid",
        subsample=(1,) * convdim,
        filter_flip=True,
        filter_dilation=(1,) * convdim,
        num_groups=1,
        unshared=False,
    ):
        if unshared:
            raise ValueError(
                f"{type(self).__name__}(unshared=True): unshared (locally connected) "
                "convolutions are not supported by lasagne_bn"
            )
        base.__init__(self, border_mode, subsample, filter_flip, filter_dilation, num_groups)
        # Theano's shape hints: kept for code that reads them, not imposed
        self.imshp = tuple(imshp) if imshp is not None else (None,) * (convdim + 2)
        self.kshp = tuple(kshp) if kshp is not None else (None,) * (convdim + 2)
        self.unshared = False

    name = base.__name__.replace("Conv", "AbstractConv").replace("Grad", "_grad")
    cls = type(name, (base,), {"__init__": __init__, "__doc__": doc, "__module__": __name__})
    return cls


AbstractConv2d = _abstract(
    _conv.Conv2d, 2, "Theano's ``AbstractConv2d``: ``op(img, kern)`` is ``conv2d``."
)
AbstractConv2d_gradInputs = _abstract(
    _conv.Conv2dGradInputs,
    2,
    "Theano's ``AbstractConv2d_gradInputs``: ``op(kern, topgrad, (rows, cols))``, the "
    "transposed convolution.",
)
AbstractConv2d_gradWeights = _abstract(
    _conv.Conv2dGradWeights,
    2,
    "Theano's ``AbstractConv2d_gradWeights``: ``op(img, topgrad, (rows, cols))``.",
)
AbstractConv3d = _abstract(
    _conv.Conv3d, 3, "Theano's ``AbstractConv3d``: ``op(img, kern)`` is ``conv3d``."
)
AbstractConv3d_gradInputs = _abstract(
    _conv.Conv3dGradInputs,
    3,
    "Theano's ``AbstractConv3d_gradInputs``: ``op(kern, topgrad, (depth, rows, cols))``, "
    "the transposed 3-D convolution.",
)
AbstractConv3d_gradWeights = _abstract(
    _conv.Conv3dGradWeights,
    3,
    "Theano's ``AbstractConv3d_gradWeights``: ``op(img, topgrad, (depth, rows, cols))``.",
)
