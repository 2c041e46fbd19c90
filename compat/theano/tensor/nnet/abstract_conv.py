"""``theano.tensor.nnet.abstract_conv``: Theano 1.0's 2-D convolutions on lasagne_bn's ops.

``conv2d`` (``T.nnet.conv2d``), ``conv2d_grad_wrt_inputs``,
``conv2d_grad_wrt_weights``, ``conv2d_transpose`` and
``get_conv_output_shape``, with Theano's signatures and semantics (filters
flipped unless ``filter_flip=False``; ``border_mode`` 'valid', 'full',
'half', ints or pairs).
"""

from __future__ import annotations

from compat.theano._conv import conv_ops
from compat.theano._pickled import inert_op

_conv = conv_ops()

__all__ = [
    "conv2d",
    "conv2d_grad_wrt_inputs",
    "conv2d_grad_wrt_weights",
    "conv2d_transpose",
    "get_conv_output_shape",
]

get_conv_output_shape = _conv.get_conv_output_shape
conv2d_grad_wrt_inputs = _conv.conv2d_grad_wrt_inputs
conv2d_grad_wrt_weights = _conv.conv2d_grad_wrt_weights


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


# Theano's convolution Ops: they only load from pickled graphs (the
# updates of a pickled training graph); build graphs with conv2d and its grads.
AbstractConv2d = inert_op("theano.tensor.nnet.abstract_conv.AbstractConv2d", "use conv2d")
AbstractConv2d_gradWeights = inert_op(
    "theano.tensor.nnet.abstract_conv.AbstractConv2d_gradWeights", "use conv2d_grad_wrt_weights"
)
AbstractConv2d_gradInputs = inert_op(
    "theano.tensor.nnet.abstract_conv.AbstractConv2d_gradInputs", "use conv2d_grad_wrt_inputs"
)
