"""Loss functions and accuracy measures, with the names and formulas of ``lasagne.objectives``.

Losses are elementwise (or per example); :func:`aggregate` reduces them to
a scalar with the expression Lasagne built (``loss.mean()`` by default).
PyTensor 3.0.7's whole-graph C linker (mode ``'C'``) aborts the process on
a mean over all axes of a matrix; use ``'CVM'`` there (or ``mode='sum'``).

>>> import numpy as np, pytensor.tensor as pt
>>> from lasagne_bn.objectives import categorical_crossentropy, aggregate
>>> p = pt.as_tensor(np.array([[0.5, 0.5], [0.9, 0.1]]))
>>> t = pt.as_tensor(np.array([0, 0]))
>>> round(float(aggregate(categorical_crossentropy(p, t)).eval()), 4)
0.3993
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytensor.tensor as pt
from pytensor.tensor.variable import TensorVariable

from lasagne_bn.nonlinearities import rectify
from lasagne_bn.utils import as_theano_expression

if TYPE_CHECKING:
    from pytensor.graph.basic import Variable

    from lasagne_bn._typing import TensorLike

__all__ = [
    "aggregate",
    "binary_accuracy",
    "binary_crossentropy",
    "binary_hinge_loss",
    "categorical_accuracy",
    "categorical_crossentropy",
    "huber_loss",
    "multiclass_hinge_loss",
    "squared_error",
]

AGGREGATE_MODES = ("mean", "sum", "normalized_sum")


def align_targets(predictions, targets) -> tuple:
    """Make a vector of targets a column when predictions are a column ``(N, 1)``."""
    if getattr(predictions, "broadcastable", None) == (False, True) and (
        getattr(targets, "ndim", None) == 1
    ):
        targets = as_theano_expression(targets).dimshuffle(0, "x")
    return predictions, targets


def binary_crossentropy(predictions: Variable, targets: Variable) -> TensorVariable:
    """``-(t * log(p) + (1 - t) * log(1 - p))``, elementwise.

    Parameters
    ----------
    predictions : tensor
        Probabilities in (0, 1), e.g. a sigmoid output.
    targets : tensor
        Targets in [0, 1], same shape (a vector is aligned to an ``(N, 1)``
        prediction).

    Examples
    --------
    >>> import numpy as np
    >>> p, t = pt.as_tensor(np.array([0.9, 0.2])), pt.as_tensor(np.array([1.0, 0.0]))
    >>> binary_crossentropy(p, t).eval(mode="FAST_COMPILE").round(4).tolist()
    [0.1054, 0.2231]
    """
    predictions, targets = align_targets(predictions, targets)
    return -(targets * pt.log(predictions) + (1 - targets) * pt.log(1 - predictions))


def _one_hot_mask(predictions, targets):
    """``targets[..., None] == arange(K)``, with ``K`` static where it is known (JAX)."""
    num_cls = predictions.type.shape[-1]
    if num_cls is None:
        num_cls = predictions.shape[-1]
    return pt.eq(pt.arange(num_cls), pt.shape_padright(targets))


def categorical_crossentropy(predictions: Variable, targets: Variable) -> TensorVariable:
    """Cross-entropy between predicted distributions and targets, per example.

    Parameters
    ----------
    predictions : tensor
        Rows of probabilities (e.g. a softmax output), shape ``(N, K)``.
    targets : tensor
        Integer class indices of shape ``(N,)``, or distributions (one-hot)
        of the predictions' shape.

    Returns
    -------
    tensor of shape ``(N,)``

    Raises
    ------
    TypeError
        If ``targets`` has neither ``predictions.ndim`` nor one less dimensions.

    Examples
    --------
    >>> import numpy as np
    >>> p = pt.as_tensor(np.array([[0.5, 0.5], [0.1, 0.9]]))
    >>> categorical_crossentropy(p, np.array([0, 1])).eval(mode="FAST_COMPILE").round(4).tolist()
    [0.6931, 0.1054]
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if targets.ndim == predictions.ndim:
        return -pt.sum(targets * pt.log(predictions), axis=predictions.ndim - 1)
    if targets.ndim == predictions.ndim - 1:
        if not targets.dtype.startswith(("int", "uint")):
            raise TypeError(
                f"targets has dtype {targets.dtype} and ndim {targets.ndim}: class indices must "
                "be integers (or give one-hot targets of the predictions' shape)"
            )
        # The target's probability picked with a one-hot mask over the class
        # axis, not with ``arange(predictions.shape[0])``: JAX cannot build
        # that range (nor its gradient) when the batch size is computed.
        picked = pt.sum(pt.switch(_one_hot_mask(predictions, targets), predictions, 0), axis=-1)
        return -pt.log(picked)
    raise TypeError(
        f"rank mismatch between targets (ndim={targets.ndim}) and predictions "
        f"(ndim={predictions.ndim})"
    )


def squared_error(a: TensorLike, b: TensorLike) -> TensorVariable:
    """``(a - b) ** 2``, elementwise.

    Examples
    --------
    >>> import numpy as np
    >>> error = squared_error(np.array([1.0, 2.0]), np.array([3.0, 2.0]))
    >>> error.eval(mode="FAST_COMPILE").tolist()
    [4.0, 0.0]
    """
    a, b = align_targets(a, b)
    return pt.square(a - b)


def aggregate(
    loss: Variable, weights: TensorLike | None = None, mode: str = "mean"
) -> TensorVariable:
    """Reduce an elementwise loss to a scalar.

    Parameters
    ----------
    loss : tensor
        Elementwise (or per-example) loss.
    weights : tensor, optional
        Weights multiplied in first (broadcasting against ``loss``).
    mode : 'mean', 'sum' or 'normalized_sum'
        ``'normalized_sum'`` divides the weighted sum by ``weights.sum()``
        and requires ``weights``.

    Raises
    ------
    ValueError
        For another mode, or ``'normalized_sum'`` without weights.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> float(aggregate(pt.as_tensor(np.array([1.0, 3.0]))).eval())
    2.0
    """
    if mode not in AGGREGATE_MODES:
        raise ValueError(f"mode must be 'mean', 'sum' or 'normalized_sum', got {mode!r}")
    if mode == "normalized_sum" and weights is None:
        raise ValueError("require weights for mode='normalized_sum'")
    # Lasagne's expressions, node for node (legacy code and tests compare
    # graphs); NumPy arrays in give NumPy values out, as in Lasagne.
    if weights is not None:
        loss = loss * weights
    if mode == "mean":
        return loss.mean()
    if mode == "sum":
        return loss.sum()
    return loss.sum() / weights.sum()


def binary_hinge_loss(
    predictions: Variable,
    targets: Variable,
    delta: float = 1,
    log_odds: bool | None = None,
    binary: bool = True,
) -> TensorVariable:
    """Hinge loss ``max(0, delta - p * t)`` for binary classification.

    Parameters
    ----------
    predictions : tensor
        Log-odds (``log_odds=True``) or probabilities (``log_odds=False``,
        converted to log-odds first).
    targets : tensor
        Labels in {0, 1} (``binary=True``, mapped to {-1, 1}) or in {-1, 1}.
    delta : float
        Margin.
    log_odds : bool
        Required (Lasagne made leaving it out an error, as its default was
        to change).
    binary : bool
        Whether targets are 0/1.

    Examples
    --------
    >>> import numpy as np
    >>> log_odds = pt.as_tensor(np.array([2.0, -0.5]))
    >>> loss = binary_hinge_loss(log_odds, np.array([1, 1]), log_odds=True)
    >>> loss.eval(mode="FAST_COMPILE").tolist()
    [0.0, 1.5]
    """
    if log_odds is None:
        raise FutureWarning(
            "The `log_odds` argument to `binary_hinge_loss` will change its default to `False` "
            "in a future version. Explicitly give `log_odds=True` to retain current behavior "
            "in your code, but also check the documentation if this is what you want."
        )
    if not log_odds:
        predictions = pt.log(predictions / (1 - predictions))
    if binary:
        targets = 2 * targets - 1
    predictions, targets = align_targets(predictions, targets)
    return rectify(delta - predictions * targets)


def multiclass_hinge_loss(
    predictions: Variable, targets: Variable, delta: float = 1
) -> TensorVariable:
    """Multi-class hinge loss ``max(0, max_{j != t} p_j - p_t + delta)``, per example.

    Parameters
    ----------
    predictions : tensor ``(N, K)``
    targets : integer vector ``(N,)`` or one-hot matrix ``(N, K)``
    delta : float
        Margin.

    Written with masks rather than Theano's ``nonzero`` + reshape, which
    give the same values but have data-dependent shapes that JAX cannot
    compile.

    Examples
    --------
    >>> import numpy as np
    >>> p = pt.as_tensor(np.array([[3.0, 1.0, 0.0], [0.0, 0.5, 1.0]]))
    >>> multiclass_hinge_loss(p, np.array([0, 0])).eval(mode="FAST_COMPILE").tolist()
    [0.0, 2.0]
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if targets.ndim == predictions.ndim - 1:
        onehot = _one_hot_mask(predictions, targets)
    elif targets.ndim == predictions.ndim:
        onehot = pt.neq(targets, 0)
    else:
        raise TypeError("rank mismatch between targets and predictions")
    corrects = pt.sum(pt.switch(onehot, predictions, 0), axis=1)
    lowest = pt.constant(-float("inf"), dtype=predictions.dtype)
    rest = pt.max(pt.switch(onehot, lowest, predictions), axis=1)
    return rectify(rest - corrects + delta)


def huber_loss(predictions: Variable, targets: Variable, delta: float = 1) -> TensorVariable:
    """Huber loss: squared error below ``delta``, linear above, elementwise.

    Examples
    --------
    >>> import numpy as np
    >>> p, t = pt.as_tensor(np.array([0.5, 3.0])), pt.as_tensor(np.zeros(2))
    >>> huber_loss(p, t, delta=1).eval(mode="FAST_COMPILE").tolist()
    [0.125, 2.5]
    """
    predictions, targets = align_targets(predictions, targets)
    abs_diff = abs(targets - predictions)
    ift = 0.5 * squared_error(targets, predictions)
    iff = delta * (abs_diff - delta / 2.0)
    return pt.switch(abs_diff <= delta, ift, iff)


def binary_accuracy(
    predictions: Variable, targets: Variable, threshold: float = 0.5
) -> TensorVariable:
    """True where ``predictions >= threshold`` equals the 0/1 target, else False (a bool tensor).

    Examples
    --------
    >>> import numpy as np
    >>> p = pt.as_tensor(np.array([0.7, 0.2, 0.6]))
    >>> binary_accuracy(p, np.array([1, 0, 0])).eval(mode="FAST_COMPILE").tolist()
    [True, True, False]
    """
    predictions, targets = align_targets(predictions, targets)
    return pt.eq(pt.ge(predictions, threshold), targets)


def categorical_accuracy(
    predictions: Variable, targets: Variable, top_k: int = 1
) -> TensorVariable:
    """True where the target class is among the ``top_k`` highest predictions (a bool tensor).

    ``targets`` are class indices, or distributions (their argmax is used).

    Examples
    --------
    >>> import numpy as np
    >>> p = pt.as_tensor(np.array([[0.2, 0.8], [0.6, 0.4]]))
    >>> categorical_accuracy(p, np.array([1, 1])).eval(mode="FAST_COMPILE").tolist()
    [True, False]
    >>> categorical_accuracy(p, np.array([1, 1]), top_k=2).eval(mode="FAST_COMPILE").tolist()
    [True, True]
    """
    predictions = pt.as_tensor_variable(predictions)
    targets = pt.as_tensor_variable(targets)
    if targets.ndim == predictions.ndim:
        targets = pt.argmax(targets, axis=-1)
    elif targets.ndim != predictions.ndim - 1:
        raise TypeError("rank mismatch between targets and predictions")
    if top_k == 1:
        return pt.eq(pt.argmax(predictions, axis=-1), targets)
    top = pt.argsort(predictions, axis=-1)
    top = top[(slice(None),) * (top.ndim - 1) + (slice(-top_k, None),)]
    targets = pt.shape_padaxis(targets, axis=-1)
    return pt.any(pt.eq(top, targets), axis=-1)
