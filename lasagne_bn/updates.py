"""Update rules (optimizers), with the names, signatures and defaults of ``lasagne.updates``.

Each rule takes a loss (or a list of gradients) and a list of shared
parameters and returns an ``OrderedDict`` mapping each shared variable
(parameters and the rule's own state) to its new value, for
``pytensor.function(..., updates=...)``.  The rules' state variables are
made with :func:`lasagne_bn.utils.portable_shared`, so a training function
may be compiled for any backend.  Update expressions are cast to the
parameter's dtype, as PyTensor requires (Theano did it through
``floatX='float32'``).

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.utils import portable_shared
>>> from lasagne_bn.updates import sgd
>>> w = portable_shared(np.array([1.0, 2.0]), name='w')
>>> f = pytensor.function([], updates=sgd(pt.sum(w ** 2), [w], learning_rate=0.25))
>>> _ = f()
>>> w.get_value().tolist()
[0.5, 1.0]
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.tensor.variable import TensorVariable

from lasagne_bn import utils

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from pytensor.graph.basic import Variable

__all__ = [
    "adadelta",
    "adagrad",
    "adam",
    "adamax",
    "amsgrad",
    "apply_momentum",
    "apply_nesterov_momentum",
    "get_or_compute_grads",
    "momentum",
    "nesterov_momentum",
    "norm_constraint",
    "rmsprop",
    "sgd",
    "total_norm_constraint",
]


def get_or_compute_grads(
    loss_or_grads: Variable | Sequence[Variable], params: Sequence[SharedVariable]
) -> list:
    """Gradients of a loss w.r.t. ``params``, or the given list of gradients (checked).

    Raises
    ------
    ValueError
        If a parameter is not a shared variable, or the number of given
        gradients differs from the number of parameters.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> [g] = get_or_compute_grads((w ** 2).sum(), [w])
    >>> g.eval(mode="FAST_COMPILE").tolist()
    [2.0, 4.0]
    >>> get_or_compute_grads([g], [w])[0] is g
    True
    """
    params = list(params)
    for i, p in enumerate(params):
        if not isinstance(p, SharedVariable):
            raise ValueError(
                f"params must contain shared variables only; params[{i}]={p!r} is a "
                f"{type(p).__name__}. If it contains arbitrary parameter expressions, then "
                "lasagne_bn.utils.collect_shared_vars() may help you."
            )
    if isinstance(loss_or_grads, list):
        if len(loss_or_grads) != len(params):
            raise ValueError(
                f"Got {len(loss_or_grads)} gradient expressions for {len(params)} parameters"
            )
        return loss_or_grads
    return pytensor.grad(loss_or_grads, params)


def _state_like(param, name: str):
    """A zero-filled state variable shaped and typed like ``param``."""
    value = param.get_value(borrow=True)
    label = f"{param.name}.{name}" if param.name else name
    return utils.portable_shared(
        np.zeros(value.shape, dtype=value.dtype), name=label, shape=param.type.shape
    )


def _as_update(var, expr):
    """``expr`` cast to ``var``'s dtype (PyTensor requires the exact dtype)."""
    expr = pt.as_tensor_variable(expr)
    return pt.cast(expr, var.dtype) if expr.dtype != var.dtype else expr


def sgd(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable,
) -> OrderedDict:
    """Stochastic gradient descent: ``param - learning_rate * grad``.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = sgd((w ** 2).sum(), [w], learning_rate=0.1)
    >>> list(updates) == [w]
    True
    >>> updates[w].eval(mode="FAST_COMPILE").round(4).tolist()
    [0.8, 1.6]
    """
    params = list(params)
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    for param, grad in zip(params, grads, strict=True):
        updates[param] = _as_update(param, param - learning_rate * grad)
    return updates


def apply_momentum(
    updates: Mapping[SharedVariable, Variable],
    params: Sequence[SharedVariable] | None = None,
    momentum: float | Variable = 0.9,
) -> OrderedDict:
    """Add classical momentum to existing updates.

    ``velocity = momentum * velocity + (update - param)``; ``param + velocity``.
    ``params`` defaults to all keys of ``updates``.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = apply_momentum(sgd((w ** 2).sum(), [w], 0.1), momentum=0.9)
    >>> len(updates), w in updates
    (2, True)
    """
    if params is None:
        params = updates.keys()
    updates = OrderedDict(updates)
    for param in list(params):
        velocity = _state_like(param, "velocity")
        x = momentum * velocity + updates[param]
        updates[velocity] = _as_update(velocity, x - param)
        updates[param] = _as_update(param, x)
    return updates


def momentum(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable,
    momentum: float | Variable = 0.9,
) -> OrderedDict:
    """SGD with classical momentum.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = momentum((w ** 2).sum(), [w], learning_rate=0.1, momentum=0.9)
    >>> len(updates)  # w and its velocity
    2
    >>> updates[w].eval(mode="FAST_COMPILE").round(4).tolist()  # the velocity starts at 0
    [0.8, 1.6]
    """
    updates = sgd(loss_or_grads, params, learning_rate)
    return apply_momentum(updates, momentum=momentum)


def apply_nesterov_momentum(
    updates: Mapping[SharedVariable, Variable],
    params: Sequence[SharedVariable] | None = None,
    momentum: float | Variable = 0.9,
) -> OrderedDict:
    """Add Nesterov momentum to existing updates (Lasagne's formulation).

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = apply_nesterov_momentum(sgd((w ** 2).sum(), [w], 0.1), momentum=0.9)
    >>> len(updates), w in updates
    (2, True)
    """
    if params is None:
        params = updates.keys()
    updates = OrderedDict(updates)
    for param in list(params):
        velocity = _state_like(param, "velocity")
        x = momentum * velocity + updates[param] - param
        updates[velocity] = _as_update(velocity, x)
        updates[param] = _as_update(param, momentum * x + updates[param])
    return updates


def nesterov_momentum(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable,
    momentum: float | Variable = 0.9,
) -> OrderedDict:
    """SGD with Nesterov momentum.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = nesterov_momentum((w ** 2).sum(), [w], learning_rate=0.1, momentum=0.9)
    >>> len(updates)  # w and its velocity
    2
    >>> updates[w].eval(mode="FAST_COMPILE").round(4).tolist()
    [0.62, 1.24]
    """
    updates = sgd(loss_or_grads, params, learning_rate)
    return apply_nesterov_momentum(updates, momentum=momentum)


def adagrad(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable = 1.0,
    epsilon: float = 1e-6,
) -> OrderedDict:
    """Adagrad: steps scaled by the root of the accumulated squared gradients.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = adagrad((w ** 2).sum(), [w], learning_rate=0.1)
    >>> len(updates)  # w and its sum of squared gradients
    2
    """
    params = list(params)
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    for param, grad in zip(params, grads, strict=True):
        accu = _state_like(param, "accu")
        accu_new = accu + grad**2
        updates[accu] = _as_update(accu, accu_new)
        updates[param] = _as_update(
            param, param - (learning_rate * grad / pt.sqrt(accu_new + epsilon))
        )
    return updates


def rmsprop(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable = 1.0,
    rho: float | Variable = 0.9,
    epsilon: float = 1e-6,
) -> OrderedDict:
    """RMSProp: steps scaled by a moving root mean square of the gradients.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = rmsprop((w ** 2).sum(), [w], learning_rate=0.01)
    >>> len(updates)  # w and its moving mean of squared gradients
    2
    """
    params = list(params)
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    one = pt.constant(1)
    for param, grad in zip(params, grads, strict=True):
        accu = _state_like(param, "accu")
        accu_new = rho * accu + (one - rho) * grad**2
        updates[accu] = _as_update(accu, accu_new)
        updates[param] = _as_update(
            param, param - (learning_rate * grad / pt.sqrt(accu_new + epsilon))
        )
    return updates


def adadelta(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable = 1.0,
    rho: float | Variable = 0.95,
    epsilon: float = 1e-6,
) -> OrderedDict:
    """Adadelta: RMSProp with steps scaled by a moving RMS of past steps.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = adadelta((w ** 2).sum(), [w])
    >>> len(updates)  # w, its squared-gradient and its squared-step averages
    3
    """
    params = list(params)
    grads = get_or_compute_grads(loss_or_grads, params)
    updates = OrderedDict()
    one = pt.constant(1)
    for param, grad in zip(params, grads, strict=True):
        accu = _state_like(param, "accu")
        delta_accu = _state_like(param, "delta_accu")
        accu_new = rho * accu + (one - rho) * grad**2
        updates[accu] = _as_update(accu, accu_new)
        update = grad * pt.sqrt(delta_accu + epsilon) / pt.sqrt(accu_new + epsilon)
        updates[param] = _as_update(param, param - learning_rate * update)
        delta_accu_new = rho * delta_accu + (one - rho) * update**2
        updates[delta_accu] = _as_update(delta_accu, delta_accu_new)
    return updates


def _step_counter():
    return utils.portable_shared(utils.floatX(0.0), name="t")


def adam(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable = 0.001,
    beta1: float | Variable = 0.9,
    beta2: float | Variable = 0.999,
    epsilon: float = 1e-8,
) -> OrderedDict:
    """Adam (Kingma & Ba), with the bias correction folded into the step size.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = adam((w ** 2).sum(), [w], learning_rate=0.1)
    >>> len(updates)  # w, its two moment estimates and the step count
    4
    >>> updates[w].eval(mode="FAST_COMPILE").round(4).tolist()  # the first step is ~learning_rate
    [0.9, 1.9]
    """
    params = list(params)
    all_grads = get_or_compute_grads(loss_or_grads, params)
    t_prev = _step_counter()
    updates = OrderedDict()
    one = pt.constant(1)
    t = t_prev + 1
    a_t = learning_rate * pt.sqrt(one - beta2**t) / (one - beta1**t)
    for param, g_t in zip(params, all_grads, strict=True):
        m_prev = _state_like(param, "m")
        v_prev = _state_like(param, "v")
        m_t = beta1 * m_prev + (one - beta1) * g_t
        v_t = beta2 * v_prev + (one - beta2) * g_t**2
        step = a_t * m_t / (pt.sqrt(v_t) + epsilon)
        updates[m_prev] = _as_update(m_prev, m_t)
        updates[v_prev] = _as_update(v_prev, v_t)
        updates[param] = _as_update(param, param - step)
    updates[t_prev] = _as_update(t_prev, t)
    return updates


def adamax(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable = 0.002,
    beta1: float | Variable = 0.9,
    beta2: float | Variable = 0.999,
    epsilon: float = 1e-8,
) -> OrderedDict:
    """Adamax: Adam with the infinity norm.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = adamax((w ** 2).sum(), [w])
    >>> len(updates)  # w, its moment and norm estimates and the step count
    4
    """
    params = list(params)
    all_grads = get_or_compute_grads(loss_or_grads, params)
    t_prev = _step_counter()
    updates = OrderedDict()
    one = pt.constant(1)
    t = t_prev + 1
    a_t = learning_rate / (one - beta1**t)
    for param, g_t in zip(params, all_grads, strict=True):
        m_prev = _state_like(param, "m")
        u_prev = _state_like(param, "u")
        m_t = beta1 * m_prev + (one - beta1) * g_t
        u_t = pt.maximum(beta2 * u_prev, abs(g_t))
        step = a_t * m_t / (u_t + epsilon)
        updates[m_prev] = _as_update(m_prev, m_t)
        updates[u_prev] = _as_update(u_prev, u_t)
        updates[param] = _as_update(param, param - step)
    updates[t_prev] = _as_update(t_prev, t)
    return updates


def amsgrad(
    loss_or_grads: Variable | Sequence[Variable],
    params: Sequence[SharedVariable],
    learning_rate: float | Variable = 0.001,
    beta1: float | Variable = 0.9,
    beta2: float | Variable = 0.999,
    epsilon: float = 1e-8,
) -> OrderedDict:
    """AMSGrad: Adam with a non-decreasing second-moment estimate.

    Examples
    --------
    >>> w = pytensor.shared(np.array([1.0, 2.0]), name='w')
    >>> updates = amsgrad((w ** 2).sum(), [w])
    >>> len(updates)  # w, three moment estimates and the step count
    5
    """
    params = list(params)
    all_grads = get_or_compute_grads(loss_or_grads, params)
    t_prev = _step_counter()
    updates = OrderedDict()
    one = pt.constant(1)
    t = t_prev + 1
    a_t = learning_rate * pt.sqrt(one - beta2**t) / (one - beta1**t)
    for param, g_t in zip(params, all_grads, strict=True):
        m_prev = _state_like(param, "m")
        v_prev = _state_like(param, "v")
        v_hat_prev = _state_like(param, "v_hat")
        m_t = beta1 * m_prev + (one - beta1) * g_t
        v_t = beta2 * v_prev + (one - beta2) * g_t**2
        v_hat_t = pt.maximum(v_hat_prev, v_t)
        step = a_t * m_t / (pt.sqrt(v_hat_t) + epsilon)
        updates[m_prev] = _as_update(m_prev, m_t)
        updates[v_prev] = _as_update(v_prev, v_t)
        updates[v_hat_prev] = _as_update(v_hat_prev, v_hat_t)
        updates[param] = _as_update(param, param - step)
    updates[t_prev] = _as_update(t_prev, t)
    return updates


def norm_constraint(
    tensor_var: Variable,
    max_norm: float | Variable,
    norm_axes: Sequence[int] | None = None,
    epsilon: float = 1e-7,
) -> TensorVariable:
    """Rescale slices of ``tensor_var`` whose norm exceeds ``max_norm``.

    Parameters
    ----------
    tensor_var : tensor
        Typically an updated weight (``updates[W]``).
    max_norm : float
        Largest allowed norm.
    norm_axes : tuple of int, optional
        Axes the norm runs over; by default axis 0 for 2-d weights and all
        but axis 0 for 3- to 5-d (convolution) weights.
    epsilon : float
        Guards the division.

    Raises
    ------
    ValueError
        For other ndims without ``norm_axes``.

    Examples
    --------
    >>> W = pt.as_tensor(np.array([[3.0, 0.3], [4.0, 0.4]]))  # column norms 5 and 0.5
    >>> norm_constraint(W, max_norm=1.0).eval(mode="FAST_COMPILE").round(4).tolist()
    [[0.6, 0.3], [0.8, 0.4]]
    """
    ndim = tensor_var.ndim
    if norm_axes is not None:
        sum_over = tuple(norm_axes)
    elif ndim == 2:
        sum_over = (0,)
    elif ndim in (3, 4, 5):
        sum_over = tuple(range(1, ndim))
    else:
        raise ValueError(f"Unsupported tensor dimensionality {ndim}. Must specify `norm_axes`")
    dtype = np.dtype(pytensor.config.floatX).type
    norms = pt.sqrt(pt.sum(pt.sqr(tensor_var), axis=sum_over, keepdims=True))
    target_norms = pt.clip(norms, 0, dtype(max_norm))
    return tensor_var * (target_norms / (dtype(epsilon) + norms))


def total_norm_constraint(
    tensor_vars: Sequence[Variable],
    max_norm: float | Variable,
    epsilon: float = 1e-7,
    return_norm: bool = False,
) -> list | tuple:
    """Rescale a list of tensors (e.g. gradients) so their joint norm is at most ``max_norm``.

    Returns the rescaled tensors, and the norm before rescaling if
    ``return_norm``.

    Examples
    --------
    >>> a, b = pt.as_tensor(np.array([3.0])), pt.as_tensor(np.array([4.0]))
    >>> scaled, norm = total_norm_constraint([a, b], max_norm=1.0, return_norm=True)
    >>> f = pytensor.function([], [*scaled, norm], mode="FAST_COMPILE")
    >>> [np.round(v, 4).tolist() for v in f()]
    [[0.6], [0.8], 5.0]
    """
    norm = pt.sqrt(utils.sum_terms(pt.sum(tensor**2) for tensor in tensor_vars))
    dtype = np.dtype(pytensor.config.floatX).type
    target_norm = pt.clip(norm, 0, dtype(max_norm))
    multiplier = target_norm / (dtype(epsilon) + norm)
    scaled = [step * multiplier for step in tensor_vars]
    if return_norm:
        return scaled, norm
    return scaled
