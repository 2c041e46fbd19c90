"""A linter for batch-norm networks: the mistakes that train and run, but wrongly.

:func:`lint` looks at a network (and, when given, the compiled training
function, the training batch size and a checkpoint) and returns one
:class:`LintMessage` per problem:

``bias-before-bn``
    A dense or convolution layer keeps its bias right before a batch norm,
    which subtracts it again (``beta`` does its job): wasted parameters, and
    legacy files with five same-shape arrays in a row.
``bn-after-nonlinearity``
    A batch norm directly after a layer that applies its own nonlinearity;
    :func:`~lasagne_bn.layers.batch_norm` moves it behind the normalization.
``stats-at-init``
    Running statistics still at their initial values (mean 0, inv_std or
    var 1): the network was never trained with updates, or loaded none.
``stats-never-updated``
    A compiled training function that normalizes with batch statistics but
    does not update the stored averages (updates from
    ``get_output(..., return_updates=True)`` left out of ``updates=``).
``batch-of-one``
    Training with one value per statistic: the batch variance is 0.
``epsilon-mismatch``
    A checkpoint's ``inv_std`` above ``1 / sqrt(epsilon)`` for the layer's
    epsilon: it was saved with a smaller epsilon (or holds another statistic).

>>> from lasagne_bn.layers import InputLayer, DenseLayer, BatchNormLayer
>>> net = BatchNormLayer(DenseLayer(InputLayer((None, 4)), 3, name='fc'), name='bn')
>>> [m.code for m in lint(net)]
['bias-before-bn', 'bn-after-nonlinearity', 'stats-at-init']
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from pytensor.compile import Function

    from lasagne_bn.layers.base import Layer

__all__ = ["LintMessage", "lint"]


@dataclass(frozen=True)
class LintMessage:
    """One finding: which layer, a stable code, and what to do.

    Examples
    --------
    >>> m = LintMessage('bn', 'batch-of-one', 'train with batches of two or more')
    >>> m.layer, m.code
    ('bn', 'batch-of-one')
    """

    layer: str
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.layer}: {self.code}: {self.message}"


def _name(layer) -> str:
    return layer.name if getattr(layer, "name", None) else type(layer).__name__


def _shares_storage(a, b) -> bool:
    if a is b:
        return True
    ca, cb = getattr(a, "container", None), getattr(b, "container", None)
    return ca is not None and cb is not None and ca.storage is cb.storage


def _updated_variables(train_fn) -> list:
    maker = getattr(train_fn, "maker", None)
    if maker is None:
        raise TypeError(
            f"train_fn={train_fn!r} must be a compiled pytensor.function (it has no .maker)"
        )
    return [i.variable for i in maker.inputs if i.update is not None]


def _uses_batch_statistics(train_fn) -> bool:
    from lasagne_bn.ops.bn import BatchNormTrain

    return any(isinstance(node.op, BatchNormTrain) for node in train_fn.maker.fgraph.apply_nodes)


def lint(
    network: Layer | Sequence[Layer],
    *,
    train_fn: Function | None = None,
    batch_size: int | None = None,
    checkpoint: Any = None,
) -> list[LintMessage]:
    """Problems of the batch-norm layers in ``network`` (see the module docstring).

    Parameters
    ----------
    network : Layer or list of Layer
    train_fn : pytensor function, optional
        The compiled training step: is every running average updated?
    batch_size : int, optional
        The training batch size: is there more than one value per statistic?
    checkpoint : path, file or lasagne_bn_compat.io.Checkpoint-like, optional
        Values in ``get_all_params`` order (an object with ``.values``, or a
        list of arrays): does each ``inv_std`` fit the layer's epsilon?

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 4)), 3, name='fc'))
    >>> [m.code for m in lint(net, batch_size=1)]
    ['stats-at-init', 'batch-of-one']
    >>> lint(net, batch_size=1)[0].layer
    'fc_bn'
    """
    from lasagne_bn import nonlinearities
    from lasagne_bn.layers.bn_storage import _bn_layers, bn_stat_indices, layer_epsilon

    messages: list[LintMessage] = []
    bns = _bn_layers(network)
    updated = _updated_variables(train_fn) if train_fn is not None else None
    for bn in bns:
        name, below = _name(bn), getattr(bn, "input_layer", None)
        if getattr(below, "b", None) is not None and hasattr(below, "W"):
            messages.append(LintMessage(name, "bias-before-bn", (
                f"{_name(below)} keeps its bias b before this batch norm, which subtracts it "
                "again; build it with b=None (batch_norm() does)"
            )))  # fmt: skip
        nonlin = getattr(below, "nonlinearity", None)
        if nonlin is not None and nonlin is not nonlinearities.identity:
            what = getattr(nonlin, "__name__", type(nonlin).__name__)
            messages.append(LintMessage(name, "bn-after-nonlinearity", (
                f"follows {_name(below)}'s own nonlinearity ({what}); batch_norm(layer) puts "
                "the nonlinearity after the normalization"
            )))  # fmt: skip
        stat2 = bn._stat2
        if hasattr(bn.mean, "get_value") and hasattr(stat2, "get_value"):
            if not np.any(bn.mean.get_value()) and np.all(stat2.get_value() == 1):
                messages.append(LintMessage(name, "stats-at-init", (
                    f"mean and {bn.stat_storage} are still their initial 0 and 1: the running "
                    "averages were never updated or loaded"
                )))  # fmt: skip
        if updated is not None and _uses_batch_statistics(train_fn):
            stats = (bn.mean, stat2)
            if not all(any(_shares_storage(s, u) for u in updated) for s in stats):
                messages.append(LintMessage(name, "stats-never-updated", (
                    "the training function normalizes with batch statistics but does not "
                    "update the running averages: pass the updates of get_output(..., "
                    "return_updates=True) to pytensor.function(updates=...)"
                )))  # fmt: skip
        if batch_size is not None:
            sizes = [batch_size if axis == 0 else bn.input_shape[axis] for axis in bn.axes]
            if None not in sizes and math.prod(sizes) < 2:
                messages.append(LintMessage(name, "batch-of-one", (
                    f"batch size {batch_size} gives one value per statistic: the batch "
                    "variance is 0 and training normalizes to beta"
                )))  # fmt: skip
    if checkpoint is not None:
        values = _checkpoint_values(checkpoint)
        for index, bn in bn_stat_indices(network):
            if bn.stat_storage != "inv_std" or index >= len(values):
                continue
            try:
                eps = layer_epsilon(bn)
            except ValueError:
                continue
            top = float(np.max(values[index]))
            if top > (1 + 1e-3) / np.sqrt(eps):
                messages.append(LintMessage(_name(bn), "epsilon-mismatch", (
                    f"the checkpoint's inv_std reaches {top:.6g}, above 1/sqrt(epsilon) = "
                    f"{1 / np.sqrt(eps):.6g} for this layer's epsilon {eps:g}: it was saved "
                    "with a smaller epsilon, or holds another statistic"
                )))  # fmt: skip
    return messages


def _checkpoint_values(checkpoint) -> list:
    if hasattr(checkpoint, "values") and not isinstance(checkpoint, dict):
        return [np.asarray(v) for v in checkpoint.values]
    if isinstance(checkpoint, list | tuple):
        return [np.asarray(v) for v in checkpoint]
    raise TypeError(
        f"checkpoint={checkpoint!r}: expected lasagne_bn_compat.io.read_checkpoint's result "
        "or a list "
        "of arrays in get_all_params order"
    )
