"""Theano 1.0's batch-normalization functions, on the Ops of :mod:`.bn`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pytensor.tensor as pt
from pytensor.graph.basic import Variable
from pytensor.scalar import upcast

from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    std_apply_graph,
)
from lasagne_bn.ops.layout import broadcast_pattern, kept_axes
from lasagne_bn.ops.statistics import Moments
from lasagne_bn.ops.validation import check_float, normalize_axes

if TYPE_CHECKING:
    from lasagne_bn._typing import TensorLike

Axes = str | Sequence[int]


class _Layout:
    """Converts parameters between Theano's two layouts and the Ops' full one."""

    def __init__(self, x: Variable, axes: tuple[int, ...], gamma: Variable):
        self.ndim = x.ndim
        self.axes = axes
        self.kept = kept_axes(axes, x.ndim)
        if gamma.ndim == x.ndim:
            self.reduced = False
        elif gamma.ndim == len(self.kept):
            self.reduced = True
        else:
            raise ValueError(
                f"gamma has ndim={gamma.ndim}; with inputs of ndim={x.ndim} and "
                f"axes={axes} it must have ndim={len(self.kept)} (normalized axes left out) "
                f"or ndim={x.ndim} (normalized axes of size 1)"
            )
        self.param_ndim = gamma.ndim

    def to_full(self, param, name: str) -> Variable:
        param = pt.as_tensor_variable(param)
        check_float(param, name)
        if param.ndim != self.param_ndim:
            raise ValueError(
                f"{name} has ndim={param.ndim}; expected ndim={self.param_ndim} like gamma"
            )
        if self.reduced:
            return param.dimshuffle(broadcast_pattern(self.axes, self.ndim))
        return param

    def from_full(self, stat: Variable) -> Variable:
        return stat.dimshuffle(self.kept) if self.reduced else stat


def _prepare(inputs, gamma, axes: Axes) -> tuple[Variable, tuple[int, ...], _Layout, Variable]:
    x = pt.as_tensor_variable(inputs)
    check_float(x, "inputs")
    gamma = pt.as_tensor_variable(gamma)
    check_float(gamma, "gamma")
    axes = normalize_axes(axes, x.ndim)
    layout = _Layout(x, axes, gamma)
    return x, axes, layout, layout.to_full(gamma, "gamma")


def batch_normalization_train(
    inputs: TensorLike,
    gamma: TensorLike,
    beta: TensorLike,
    axes: Axes = "per-activation",
    epsilon: float | Variable = 1e-4,
    running_average_factor: float | Variable = 0.1,
    running_mean: TensorLike | None = None,
    running_var: TensorLike | None = None,
) -> tuple[Variable, ...]:
    """Batch normalization with mini-batch statistics (training mode).

    Same signature, defaults and results as Theano 1.0's
    ``theano.tensor.nnet.bn.batch_normalization_train``.

    Parameters
    ----------
    inputs : tensor
        Activations to normalize (float16, float32 or float64).
    gamma, beta : tensor
        Scale and shift.  Either ``inputs.ndim - len(axes)`` dimensions (the
        normalized axes left out) or ``inputs.ndim`` dimensions with size 1
        on the normalized axes.
    axes : 'per-activation', 'spatial' or tuple of int
        Axes to normalize over: ``'per-activation'`` is ``(0,)`` (also for
        convolutional input), ``'spatial'`` is ``(0, 2, 3, ...)``.
    epsilon : float or scalar tensor
        Added to the variance before the square root; must be > 0.
    running_average_factor : float or scalar tensor
        Weight of this batch in the running averages, in ``[0, 1]``.
    running_mean, running_var : tensor, optional
        Running averages to update (both or neither), in ``gamma``'s layout.

    Returns
    -------
    out : tensor
        ``(inputs - mean) * gamma * invstd + beta``.
    mean, invstd : tensor
        Batch mean and ``1 / sqrt(var + epsilon)`` (biased variance), in
        ``gamma``'s layout.
    new_running_mean, new_running_var : tensor
        Only if running averages were given:
        ``running_mean * (1 - f) + mean * f`` and
        ``running_var * (1 - f) + var * m / (m - 1) * f``, where ``m`` is the
        number of values behind each statistic.

    Examples
    --------
    >>> import numpy as np, pytensor, pytensor.tensor as pt
    >>> from lasagne_bn.ops import batch_normalization_train
    >>> x = pt.tensor4('x')
    >>> g, b = pt.vector('g'), pt.vector('b')
    >>> out, mean, invstd = batch_normalization_train(x, g, b, axes='spatial')
    >>> f = pytensor.function([x, g, b], out)
    >>> y = f(np.random.randn(8, 3, 4, 4), np.ones(3), np.zeros(3))
    >>> bool(abs(y.mean(axis=(0, 2, 3))).max() < 1e-6)
    True
    """
    x, axes, layout, gamma = _prepare(inputs, gamma, axes)
    beta = layout.to_full(beta, "beta")
    if (running_mean is None) != (running_var is None):
        given = "running_mean" if running_var is None else "running_var"
        raise ValueError(
            f"only {given} was given: running_mean and running_var must be given "
            "together, or neither"
        )
    op = BatchNormTrain(axes)
    if running_mean is None:
        results = op(x, gamma, beta, epsilon)
    else:
        results = op(
            x,
            gamma,
            beta,
            epsilon,
            running_average_factor,
            layout.to_full(running_mean, "running_mean"),
            layout.to_full(running_var, "running_var"),
        )
    return (results[0], *(layout.from_full(r) for r in results[1:]))


def batch_normalization_test(
    inputs: TensorLike,
    gamma: TensorLike,
    beta: TensorLike,
    mean: TensorLike,
    var: TensorLike,
    axes: Axes = "per-activation",
    epsilon: float | Variable = 1e-4,
) -> Variable:
    """Batch normalization with given statistics (inference mode).

    Same signature and result as Theano 1.0's
    ``theano.tensor.nnet.bn.batch_normalization_test``:
    ``(inputs - mean) * gamma / sqrt(var + epsilon) + beta``.

    Parameters
    ----------
    inputs : tensor
        Activations to normalize.
    gamma, beta, mean, var : tensor
        Scale, shift and the statistics to use, all in one layout (see
        :func:`batch_normalization_train`).
    axes : 'per-activation', 'spatial' or tuple of int
        The normalized axes: they decide the parameter layout.
    epsilon : float or scalar tensor
        Added to ``var`` before the square root; must be > 0.

    Examples
    --------
    >>> import numpy as np, pytensor, pytensor.tensor as pt
    >>> from lasagne_bn.ops import batch_normalization_test
    >>> x = pt.matrix('x')
    >>> g, b, m, v = (pt.vector(n) for n in 'gbmv')
    >>> f = pytensor.function([x, g, b, m, v], batch_normalization_test(x, g, b, m, v))
    >>> f(np.ones((2, 3)), np.ones(3), np.zeros(3), np.ones(3), np.full(3, 4.0)).round(3)
    array([[0., 0., 0.],
           [0., 0., 0.]])
    """
    x, axes, layout, gamma = _prepare(inputs, gamma, axes)
    params = [layout.to_full(p, n) for p, n in ((beta, "beta"), (mean, "mean"), (var, "var"))]
    return BatchNormInference(axes)(x, gamma, *params, epsilon)


BN_MODES = ("low_mem", "high_mem")


def batch_normalization(
    inputs: TensorLike,
    gamma: TensorLike,
    beta: TensorLike,
    mean: TensorLike,
    std: TensorLike,
    mode: str = "low_mem",
) -> Variable:
    """Normalize with a given mean and standard deviation (no epsilon).

    Theano 1.0's ``theano.tensor.nnet.bn.batch_normalization``:
    ``(inputs - mean) * (gamma / std) + beta``, all arguments broadcasting
    elementwise.  ``mode='low_mem'`` runs one fused Op that makes a single
    pass and no temporaries; ``'high_mem'`` builds the plain elementwise
    graph.  Both give the same values.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> from lasagne_bn.ops import batch_normalization
    >>> x = pt.as_tensor(np.array([[1.0, 3.0]]))
    >>> batch_normalization(x, 1.0, 0.0, 2.0, 0.5).eval()
    array([[-2.,  2.]])
    """
    if mode not in BN_MODES:
        raise ValueError(f"mode={mode!r} is not known: expected 'low_mem' or 'high_mem'")
    args = [pt.as_tensor_variable(v) for v in (inputs, gamma, beta, mean, std)]
    if mode == "low_mem":
        return BatchNormApply()(*args)
    for v, name in zip(args, ("inputs", "gamma", "beta", "mean", "std"), strict=True):
        check_float(v, name)
    return std_apply_graph(*args, upcast(*(v.type.dtype for v in args)))


def moments(x: TensorLike, axes: Axes, keepdims: bool = False) -> tuple[Variable, Variable]:
    """Mean and biased variance of ``x`` over ``axes``, computed stably.

    The results of :class:`lasagne_bn.ops.statistics.Moments`, the statistics
    core batch norm shares: sums of ``x`` shifted by each statistic's first
    sample, accumulated in float64 (float32 or wider under JAX), never
    ``E[x**2] - E[x]**2`` on raw data.  float16 input gives float32
    statistics.

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> from lasagne_bn.ops import moments
    >>> m, v = moments(pt.as_tensor(np.array([[1e6 + 1.0], [1e6 - 1.0]])), axes=(0,))
    >>> float(m.eval()[0]), float(v.eval()[0])
    (1000000.0, 1.0)
    """
    x = pt.as_tensor_variable(x)
    check_float(x, "x")
    axes = normalize_axes(axes, x.ndim)
    mean, var, _, _ = Moments(axes)(x)
    if not keepdims:
        kept = kept_axes(axes, x.ndim)
        mean, var = mean.dimshuffle(kept), var.dimshuffle(kept)
    return mean, var
