"""Converting batch-norm statistics between the ``inv_std`` and ``var`` storages.

A :class:`~lasagne_bn.layers.BatchNormLayer` stores, besides the mean,
either Lasagne's ``inv_std = 1 / sqrt(var + epsilon)`` (``stat_storage=
'inv_std'``, what every legacy Lasagne checkpoint holds) or the variance
itself (``stat_storage='var'``, Theano's ``batch_normalization_test``
convention).  The two describe the same test-time normalization::

    var     = 1 / inv_std**2 - epsilon
    inv_std = 1 / sqrt(var + epsilon)

This module converts

- arrays: :func:`inv_std_to_var`, :func:`var_to_inv_std`;
- layers and whole networks, in place: :func:`convert_stat_storage` (each
  layer through :meth:`BatchNormLayer.set_stat_storage`);
- flat lists of parameter values (the order of
  :func:`~lasagne_bn.layers.get_all_params`, what ``np.savez(f,
  *get_all_param_values(net))`` files hold): :func:`convert_param_values`,
  with :func:`bn_stat_indices` telling where the statistics sit
  (:func:`collect_params`: the parameters and those places from one walk),
  and :func:`convert_statistic` for one value.

It does no file I/O (:mod:`lasagne_bn_compat.io` reads and writes legacy files on top
of it).

>>> import numpy as np
>>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, get_all_param_values
>>> net = batch_norm(DenseLayer(InputLayer((None, 4)), 3, name='fc'))
>>> [layer.name for layer in convert_stat_storage(net, 'var')]
['fc_bn']
>>> net.input_layer.stat_storage, [p.name for p in net.input_layer.get_params()]
('var', ['fc_bn.beta', 'fc_bn.gamma', 'fc_bn.mean', 'fc_bn.var'])
>>> net.input_layer.var.get_value().round(6).tolist()   # from the initial inv_std = 1
[0.9999, 0.9999, 0.9999]
>>> values = convert_param_values(net, get_all_param_values(net), to_storage='inv_std')
>>> np.allclose(values[-1], 1.0)
True
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable

from lasagne_bn.layers.bn_statistics import (
    _check_storage,
    _to_storage,
    check_statistic,
    converted_statistic,
    inv_std_to_var,
    layer_epsilon,
    var_to_inv_std,
)
from lasagne_bn.layers.helper import get_all_layers, get_all_params
from lasagne_bn.layers.normalization import BatchNormLayer

__all__ = [
    "bn_stat_indices",
    "check_statistic",
    "collect_params",
    "convert_param_values",
    "convert_statistic",
    "convert_stat_storage",
    "converted_statistic",
    "inv_std_to_var",
    "layer_epsilon",
    "var_to_inv_std",
]


def _all_layers(layer_or_network) -> list:
    if isinstance(layer_or_network, BatchNormLayer):
        return [layer_or_network]
    try:
        layers = get_all_layers(layer_or_network)
    except Exception as exc:
        raise TypeError(
            f"layer_or_network={layer_or_network!r} must be a layer or a list of layers ({exc})"
        ) from exc
    if not all(hasattr(layer, "output_shape") for layer in layers):
        raise TypeError(
            f"layer_or_network={layer_or_network!r} must be a layer or a list of layers"
        )
    return layers


def _bn_layers(layer_or_network) -> list[BatchNormLayer]:
    return [layer for layer in _all_layers(layer_or_network) if isinstance(layer, BatchNormLayer)]


def convert_stat_storage(
    layer_or_network, to: str, *, epsilon: float | None = None
) -> list[BatchNormLayer]:
    """Switch batch-norm layers to another statistic storage, in place.

    Every :class:`BatchNormLayer` in ``layer_or_network`` (a layer, a list of
    output layers, or one BatchNormLayer) whose ``stat_storage`` is not
    ``to`` is switched with :meth:`BatchNormLayer.set_stat_storage`: a new
    shared variable for its second statistic, holding the converted values,
    in the place of the old one (same position in ``layer.params``, so
    :func:`~lasagne_bn.layers.get_all_params` keeps its order and length,
    same tags, name ending in ``to``).  Deterministic outputs stay the same
    up to rounding.

    Functions compiled before the conversion keep using the old variable;
    compile again afterwards.  Training after a conversion averages the new
    statistic (``var`` averages the unbiased batch variance, ``inv_std`` the
    batch ``inv_std``), so continued training differs slightly between the
    storages.

    Parameters
    ----------
    layer_or_network : Layer or list of Layer
    to : 'inv_std' or 'var'
    epsilon : float, optional
        Use this epsilon instead of each layer's own.

    Returns
    -------
    list of BatchNormLayer
        The layers that were converted (in network order).

    Raises
    ------
    ValueError
        For an unknown ``to``, a statistic that is an expression rather than
        a shared variable, or values that cannot be converted (then no
        layer is changed).
    """
    _check_storage(to, "to")
    todo = [layer for layer in _bn_layers(layer_or_network) if layer.stat_storage != to]
    # Every new value first: a failure leaves all layers as they were.
    prepared = []
    for layer in todo:
        try:
            prepared.append((layer, converted_statistic(layer, to, epsilon)))
        except ValueError as exc:
            raise ValueError(f"{exc}; no layer was changed") from exc
    for layer, value in prepared:
        layer.set_stat_storage(to, value=value)
    return [layer for layer, _ in prepared]


def collect_params(network, **tags) -> tuple[list, list[tuple[int, BatchNormLayer]]]:
    """``get_all_params(network, **tags)`` and where the batch-norm statistics sit in it.

    One walk over the network for both: the parameters, and ``(index,
    layer)`` pairs, in parameter order, for each :class:`BatchNormLayer`
    whose second statistic (``inv_std`` or ``var``) is among them.

    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 4)), 3, name='fc'))
    >>> params, stats = collect_params(net)
    >>> len(params), [(i, layer.name) for i, layer in stats]
    (5, [(4, 'fc_bn')])
    """
    layers = _all_layers(network)
    params = get_all_params(layers, **tags)
    position = {id(p): i for i, p in enumerate(params)}
    stats = []
    for layer in layers:
        if isinstance(layer, BatchNormLayer):
            stat = getattr(layer, layer.stat_storage)
            if isinstance(stat, SharedVariable) and id(stat) in position:
                stats.append((position[id(stat)], layer))
    return params, sorted(stats, key=lambda pair: pair[0])


def bn_stat_indices(network, **tags) -> list[tuple[int, BatchNormLayer]]:
    """Where each batch-norm layer's second statistic sits in ``get_all_params(network)``.

    Returns ``(index, layer)`` pairs, in parameter order; layers whose
    statistic is not among the (tag-filtered) parameters are left out.

    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 4)), 3, name='fc'))
    >>> [(i, layer.name) for i, layer in bn_stat_indices(net)]
    [(4, 'fc_bn')]
    """
    return collect_params(network, **tags)[1]


def convert_statistic(
    value,
    layer: BatchNormLayer,
    *,
    from_storage: str,
    to_storage: str,
    epsilon: float | None = None,
    name: str = "statistic",
) -> np.ndarray:
    """Check a statistic of ``layer`` as ``from_storage`` and express it as ``to_storage``.

    Checked on every path (also when nothing is converted): a statistic no
    layer could hold (:func:`check_statistic`) is refused.  Returns
    ``value`` itself when the storages agree.

    Raises
    ------
    ValueError
        Values that are not a valid statistic or cannot be converted; the
        message names ``name``.
    """
    check_statistic(value, from_storage, name)
    if from_storage == to_storage:
        return value
    try:
        return _to_storage(value, to_storage, layer_epsilon(layer, epsilon))
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc


def convert_param_values(
    network,
    values: Sequence,
    *,
    from_storage: str | None = None,
    to_storage: str | None = None,
    epsilon: float | None = None,
    **tags,
) -> list[np.ndarray]:
    """Express the batch-norm statistics in a list of parameter values in another storage.

    ``values`` are in the order of ``get_all_params(network, **tags)`` (what
    ``get_all_param_values`` returns and legacy ``.npz`` files hold).  Each
    batch-norm layer's second statistic is read as ``from_storage`` and
    returned as ``to_storage``; ``None`` means "as that layer stores it".
    Other values are returned as they are (the same objects).  Nothing in
    the network changes.

    Typical uses::

        # save in Lasagne's format, whatever the layers store
        values = convert_param_values(net, get_all_param_values(net), to_storage='inv_std')
        # load a legacy (inv_std) file into a network of any storage
        set_all_param_values(net, convert_param_values(net, legacy, from_storage='inv_std'))

    Raises
    ------
    ValueError
        If the number of values differs from the number of parameters, a
        statistic has the wrong shape, or holds values that cannot be
        converted; the message names the parameter.
    """
    _check_storage(from_storage, "from_storage", allow_none=True)
    _check_storage(to_storage, "to_storage", allow_none=True)
    params, stats = collect_params(network, **tags)
    values = list(values)
    if len(values) != len(params):
        raise ValueError(f"got {len(values)} values for a network with {len(params)} parameters")
    result = list(values)
    for index, layer in stats:
        array = np.asarray(values[index])
        name = f"value {index} ({params[index].name})"
        if array.shape != layer.param_shape:
            raise ValueError(f"{name} has shape {array.shape}; expected {layer.param_shape}")
        converted = convert_statistic(
            array,
            layer,
            from_storage=from_storage or layer.stat_storage,
            to_storage=to_storage or layer.stat_storage,
            epsilon=epsilon,
            name=name,
        )
        if converted is not array:
            result[index] = converted
    return result
