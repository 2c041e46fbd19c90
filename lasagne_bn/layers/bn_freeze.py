"""Freezing batch-norm layers for fine-tuning, apart from dropout's ``deterministic``.

A frozen :class:`~lasagne_bn.layers.BatchNormLayer` normalizes with its
stored averages and never updates them, also in training outputs
(``deterministic=False``: dropout stays on).  Optionally ``gamma`` and
``beta`` stop being trainable too, so ``get_all_params(net,
trainable=True)`` (what the updates are built from) leaves them out.

Without the helper, one ``get_output`` call does the same::

    get_output(net, deterministic=False,
               batch_norm_use_averages=True, batch_norm_update_averages=False)

(the explicit keywords win over the frozen flag either way).

>>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, get_all_params
>>> net = batch_norm(DenseLayer(InputLayer((None, 3)), 2, name='fc'))
>>> [layer.name for layer in freeze_batch_norm(net, params=True)]
['fc_bn']
>>> [p.name for p in get_all_params(net, trainable=True)]
['fc.W']
>>> _ = unfreeze_batch_norm(net)
>>> [p.name for p in get_all_params(net, trainable=True)]
['fc.W', 'fc_bn.beta', 'fc_bn.gamma']
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lasagne_bn.layers.bn_storage import _bn_layers

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lasagne_bn.layers.base import Layer

__all__ = ["freeze_batch_norm", "unfreeze_batch_norm"]


def _untrain(layer) -> None:
    """Take gamma and beta out of training, remembering which were trainable."""
    taken = getattr(layer, "_frozen_params", [])
    for param in (layer.beta, layer.gamma):
        tags = layer.params.get(param) if param is not None else None
        if tags is not None and "trainable" in tags:
            tags.discard("trainable")
            taken.append(param)
    layer._frozen_params = taken


def _retrain(layer) -> None:
    for param in getattr(layer, "_frozen_params", []):
        layer.params[param].add("trainable")
    layer._frozen_params = []


def freeze_batch_norm(network: Layer | Sequence[Layer], *, params: bool = False) -> list:
    """Freeze every batch-norm layer of ``network`` (statistics; ``params``: gamma/beta too).

    Compile functions after freezing: the flag is read when outputs are built.

    Returns
    -------
    list of BatchNormLayer
        The layers frozen.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 3)), 2, name='fc'))
    >>> [layer.name for layer in freeze_batch_norm(net)]
    ['fc_bn']
    >>> net.input_layer.frozen
    True
    """
    layers = _bn_layers(network)
    for layer in layers:
        layer.frozen = True
        if params:
            _untrain(layer)
    return layers


def unfreeze_batch_norm(network: Layer | Sequence[Layer]) -> list:
    """Undo :func:`freeze_batch_norm`: batch statistics and updates in training again.

    Only gamma and beta that freezing took out of training become trainable again.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, freeze_batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 3)), 2, name='fc'))
    >>> _ = freeze_batch_norm(net)
    >>> [layer.name for layer in unfreeze_batch_norm(net)], net.input_layer.frozen
    (['fc_bn'], False)
    """
    layers = _bn_layers(network)
    for layer in layers:
        layer.frozen = False
        _retrain(layer)
    return layers
