"""Folding batch normalization into the layer before it, for inference.

At test time a :class:`~lasagne_bn.layers.BatchNormLayer` is an affine map
per channel, ``y = x * s + t`` with ``s = gamma * inv_std`` and ``t = beta -
mean * s``.  When ``x`` is the output of a dense or convolution layer with a
linear output (what :func:`~lasagne_bn.layers.batch_norm` leaves), the map
folds into that layer's weights and bias: ``W' = W * s`` along the output
channels, ``b' = b * s + t``; the batch-norm layer disappears.

:func:`fold_batch_norm` does this on a copy of the network and returns the
copy's output layer; the original is untouched.  Layers it cannot fold (a
batch norm over other axes, after a layer with a nonlinearity, or after
something other than a dense or convolution layer) are left in place.

>>> import numpy as np, pytensor
>>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, get_output, get_all_layers
>>> l_in = InputLayer((None, 3))
>>> net = batch_norm(DenseLayer(l_in, 2, name='fc'))
>>> folded = fold_batch_norm(net)
>>> [type(layer).__name__ for layer in get_all_layers(folded)]
['InputLayer', 'DenseLayer', 'NonlinearityLayer']
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lasagne_bn.layers.base import Layer

__all__ = ["fold_batch_norm"]


def _channel_axis_of_weights(layer) -> int | None:
    """The axis of ``layer.W`` that indexes output channels; None for other layers."""
    from lasagne_bn.layers.conv import BaseConvLayer
    from lasagne_bn.layers.dense import DenseLayer

    if isinstance(layer, DenseLayer):
        return layer.W.get_value(borrow=True).ndim - 1
    if isinstance(layer, BaseConvLayer):
        # Convolutions store (out, in, ...); transposed and dilated ones,
        # which are weight gradients of a convolution, store (in, out, ...).
        return 0 if type(layer).get_W_shape is BaseConvLayer.get_W_shape else 1
    return None


def _channel_axis_of_output(layer) -> int:
    from lasagne_bn.layers.dense import DenseLayer

    return len(layer.output_shape) - 1 if isinstance(layer, DenseLayer) else 1


def _foldable(bn) -> bool:
    from lasagne_bn import nonlinearities
    from lasagne_bn.layers.base import Layer

    inner = getattr(bn, "input_layer", None)
    if not isinstance(inner, Layer) or _channel_axis_of_weights(inner) is None:
        return False
    if getattr(inner, "nonlinearity", None) not in (None, nonlinearities.identity):
        return False
    if not hasattr(inner.W, "get_value") or (
        inner.b is not None and not hasattr(inner.b, "get_value")
    ):
        return False
    kept = [a for a in range(len(bn.input_shape)) if a not in bn.axes]
    return kept == [_channel_axis_of_output(inner)]


def _scale_shift(bn) -> tuple[np.ndarray, np.ndarray]:
    """``s`` and ``t`` of ``y = x * s + t``, in float64, per channel."""
    from lasagne_bn.layers.bn_storage import layer_epsilon, var_to_inv_std

    mean = np.asarray(bn.mean.get_value(), np.float64)
    if bn.stat_storage == "var":
        inv_std = var_to_inv_std(np.asarray(bn.var.get_value(), np.float64), layer_epsilon(bn))
    else:
        inv_std = np.asarray(bn.inv_std.get_value(), np.float64)
    gamma = 1.0 if bn.gamma is None else np.asarray(bn.gamma.get_value(), np.float64)
    beta = 0.0 if bn.beta is None else np.asarray(bn.beta.get_value(), np.float64)
    scale = gamma * inv_std
    return scale, beta - mean * scale


def _fold(bn) -> None:
    inner = bn.input_layer
    scale, shift = _scale_shift(bn)
    w = inner.W.get_value()
    axis = _channel_axis_of_weights(inner)
    shape = [1] * w.ndim
    shape[axis] = -1
    inner.W.set_value((w * scale.reshape(shape)).astype(w.dtype))
    if inner.b is None:
        value = shift.astype(w.dtype)
        if getattr(inner, "untie_biases", False):  # one bias per output position
            spatial = tuple(inner.output_shape[2:])
            value = np.broadcast_to(
                value.reshape((-1,) + (1,) * len(spatial)), (len(value), *spatial)
            ).copy()
        inner.b = inner.add_param(value, value.shape, "b", regularizable=False)
    else:
        b = inner.b.get_value()
        # tied biases (channels,) or untied (channels, rows, cols ...)
        per = (-1,) + (1,) * (b.ndim - 1)
        inner.b.set_value((b * scale.reshape(per) + shift.reshape(per)).astype(b.dtype))


def fold_batch_norm(network: Layer | Sequence[Layer]) -> Layer | list[Layer]:
    """An inference copy of ``network`` with batch norms folded into the layers before them.

    Parameters
    ----------
    network : Layer or list of Layer
        The output layer(s).  Not changed.

    Returns
    -------
    Layer or list of Layer
        The copy's output layer(s).  Use it deterministically (dropout still
        sits where it was); its outputs equal the original's deterministic
        outputs to float rounding.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, get_all_layers
    >>> net = batch_norm(DenseLayer(InputLayer((None, 3)), 2, name='fc'))
    >>> [type(l).__name__ for l in get_all_layers(fold_batch_norm(net))]
    ['InputLayer', 'DenseLayer', 'NonlinearityLayer']
    >>> [type(l).__name__ for l in get_all_layers(net)]  # the original is unchanged
    ['InputLayer', 'DenseLayer', 'BatchNormLayer', 'NonlinearityLayer']
    """
    from lasagne_bn.layers.helper import get_all_layers
    from lasagne_bn.layers.normalization import BatchNormLayer

    outputs = network if isinstance(network, list | tuple) else [network]
    copied = copy.deepcopy(list(outputs))
    layers = get_all_layers(copied)
    for bn in [layer for layer in layers if isinstance(layer, BatchNormLayer)]:
        if not _foldable(bn):
            continue
        _fold(bn)
        inner = bn.input_layer
        for layer in layers:
            if getattr(layer, "input_layer", None) is bn:
                layer.input_layer = inner
            if isinstance(getattr(layer, "input_layers", None), list):
                layer.input_layers = [inner if i is bn else i for i in layer.input_layers]
        copied = [inner if out is bn else out for out in copied]
    return copied if isinstance(network, list | tuple) else copied[0]
