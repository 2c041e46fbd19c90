"""``theano.tensor.nnet`` (``T.nnet``): activations, losses and batch normalization.

PyTensor dropped this module.  Here are Theano 1.0's functions with their
semantics, written on PyTensor ops:

- ``sigmoid``, ``softplus``: PyTensor's; ``ultra_fast_sigmoid`` and
  ``hard_sigmoid`` are the exact sigmoid and Theano's piecewise-linear
  formula; ``relu(x, alpha=0)``, ``elu``, ``selu``, ``softsign``;
- ``softmax`` and ``logsoftmax`` normalize over the **last** axis, as
  Theano's did (PyTensor's ``softmax`` normalizes over all axes unless told);
- ``categorical_crossentropy``, ``binary_crossentropy``,
  ``sigmoid_binary_crossentropy``, ``crossentropy_categorical_1hot``;
- ``bn``: Theano's batch normalization (:mod:`lasagne_bn_compat.theano.tensor.nnet.bn`).

``conv2d`` (Theano 1.0's), ``conv2d_transpose``, ``conv2d_grad_wrt_inputs``,
``conv3d``, ``abstract_conv`` and the old ``conv`` module run on
lasagne_bn's convolution ops.
"""

from __future__ import annotations

import importlib

import pytensor.tensor as _pt
from pytensor.tensor.special import log_softmax as _log_softmax
from pytensor.tensor.special import softmax as _softmax

from lasagne_bn_compat._names import missing_names
from lasagne_bn_compat.theano.tensor.nnet import bn  # noqa: F401

__all__ = [
    "binary_crossentropy",
    "bn",
    "categorical_crossentropy",
    "crossentropy_categorical_1hot",
    "elu",
    "hard_sigmoid",
    "logsoftmax",
    "relu",
    "selu",
    "sigmoid",
    "sigmoid_binary_crossentropy",
    "softmax",
    "softplus",
    "softsign",
    "ultra_fast_sigmoid",
]

sigmoid = _pt.sigmoid
softplus = _pt.softplus


def _const(value, x):
    return _pt.constant(value, dtype=x.dtype)


def ultra_fast_sigmoid(x):
    """Theano's fast sigmoid approximation; here the exact sigmoid (at most 2e-2 apart)."""
    return _pt.sigmoid(x)


def hard_sigmoid(x):
    """``clip(0.2 * x + 0.5, 0, 1)``, as Theano computed it."""
    x = _pt.as_tensor_variable(x)
    return _pt.clip(_const(0.2, x) * x + _const(0.5, x), _const(0, x), _const(1, x))


def relu(x, alpha=0):
    """Rectifier ``max(x, 0)``, or leaky ``x if x > 0 else alpha * x``.

    Written ``0.5 * (x + |x|)`` (and its leaky form), as Theano did: same
    values, and gradient 0.5 at exactly 0.
    """
    x = _pt.as_tensor_variable(x)
    if isinstance(alpha, int | float) and alpha == 0:
        return _const(0.5, x) * (x + abs(x))
    if isinstance(alpha, int | float):
        f1, f2 = _const(0.5 * (1 + alpha), x), _const(0.5 * (1 - alpha), x)
    else:
        alpha = _pt.as_tensor_variable(alpha)
        f1, f2 = 0.5 * (1 + alpha), 0.5 * (1 - alpha)
    return f1 * x + f2 * abs(x)


def elu(x, alpha=1):
    """Exponential linear unit: ``x if x > 0 else alpha * (exp(x) - 1)``."""
    x = _pt.as_tensor_variable(x)
    return _pt.switch(x > 0, x, alpha * _pt.expm1(x))


def selu(x):
    """Scaled exponential linear unit (Klambauer et al., 2017)."""
    x = _pt.as_tensor_variable(x)
    scale, alpha = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
    return _const(scale, x) * elu(x, _const(alpha, x))


def softsign(x):
    """``x / (1 + |x|)``."""
    x = _pt.as_tensor_variable(x)
    return x / (_const(1, x) + abs(x))


def softmax(c):
    """Softmax over the last axis (each row of a matrix), as Theano's ``softmax``."""
    return _softmax(c, axis=-1)


def logsoftmax(c):
    """Log-softmax over the last axis, as Theano's ``logsoftmax``."""
    return _log_softmax(c, axis=-1)


def categorical_crossentropy(coding_dist, true_dist):
    """Theano's ``categorical_crossentropy``: per-row ``-sum(true * log(coding))``.

    ``true_dist`` is either distributions of ``coding_dist``'s shape or a
    vector of integer class indices (then ``-log(coding_dist[i, true_dist[i]])``).
    """
    coding_dist = _pt.as_tensor_variable(coding_dist)
    true_dist = _pt.as_tensor_variable(true_dist)
    if true_dist.ndim == coding_dist.ndim:
        return -_pt.sum(true_dist * _pt.log(coding_dist), axis=coding_dist.ndim - 1)
    if true_dist.ndim == coding_dist.ndim - 1:
        return crossentropy_categorical_1hot(coding_dist, true_dist)
    raise TypeError(
        f"true_dist has ndim {true_dist.ndim}; expected {coding_dist.ndim} (distributions) "
        f"or {coding_dist.ndim - 1} (class indices) for coding_dist of ndim {coding_dist.ndim}"
    )


def crossentropy_categorical_1hot(coding_dist, true_one_of_n):
    """``-log(coding_dist[i, true_one_of_n[i]])`` for each row ``i``."""
    coding_dist = _pt.as_tensor_variable(coding_dist)
    true_one_of_n = _pt.as_tensor_variable(true_one_of_n)
    if coding_dist.ndim != 2 or true_one_of_n.ndim != 1:
        raise TypeError(
            "crossentropy_categorical_1hot needs a matrix coding_dist and a vector of class "
            f"indices; got ndim {coding_dist.ndim} and {true_one_of_n.ndim}"
        )
    if not true_one_of_n.dtype.startswith(("int", "uint")):
        raise TypeError(f"class indices must be integers, not {true_one_of_n.dtype}")
    return -_pt.log(coding_dist[_pt.arange(coding_dist.shape[0]), true_one_of_n])


def binary_crossentropy(output, target):
    """``-(target * log(output) + (1 - target) * log(1 - output))``, elementwise."""
    output = _pt.as_tensor_variable(output)
    return -(target * _pt.log(output) + (1.0 - target) * _pt.log(1.0 - output))


def sigmoid_binary_crossentropy(output, target):
    """``binary_crossentropy(sigmoid(output), target)`` computed stably from the logits."""
    output = _pt.as_tensor_variable(output)
    return target * _pt.softplus(-output) + (1.0 - target) * _pt.softplus(output)


_NO_CONV = "this lasagne_bn has no convolution ops (lasagne_bn.ops.conv)"

#: Names provided by submodules that need lasagne_bn's convolution ops.
_LAZY = {
    "conv2d": ("lasagne_bn_compat.theano.tensor.nnet.abstract_conv", "conv2d"),
    "conv2d_transpose": ("lasagne_bn_compat.theano.tensor.nnet.abstract_conv", "conv2d_transpose"),
    "conv2d_grad_wrt_inputs": (
        "lasagne_bn_compat.theano.tensor.nnet.abstract_conv",
        "conv2d_grad_wrt_inputs",
    ),
    "conv3d": ("lasagne_bn_compat.theano.tensor.nnet.abstract_conv", "conv3d"),
    "abstract_conv": ("lasagne_bn_compat.theano.tensor.nnet.abstract_conv", None),
    "conv": ("lasagne_bn_compat.theano.tensor.nnet.conv", None),
}


def _lazy(name: str):
    module_name, attr = _LAZY[name]  # KeyError: not one of these
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        if "no convolution ops" not in str(exc):
            raise
        raise KeyError(name) from None
    value = module if attr is None else getattr(module, attr)
    globals()[name] = value
    return value


_MISSING = {
    "conv2d": _NO_CONV,
    "conv2d_transpose": _NO_CONV,
    "abstract_conv": _NO_CONV,
    "conv": _NO_CONV,
    "conv2d_grad_wrt_inputs": _NO_CONV,
    "conv3d": _NO_CONV,
    "separable_conv2d": "write it as two conv2d calls (depthwise with num_groups, then 1x1)",
    "h_softmax": "write the two-level softmax with T.dot and softmax",
    "confusion_matrix": "compute it with NumPy (sklearn.metrics.confusion_matrix) on predictions",
    "softmax_with_bias": "use softmax(x + b)",
    "crossentropy_softmax_1hot": "use categorical_crossentropy(softmax(x), y)",
    "crossentropy_softmax_argmax_1hot_with_bias": (
        "use categorical_crossentropy(softmax(x + b), y) and T.argmax"
    ),
    "SoftmaxGrad": "PyTensor differentiates softmax itself",
    "blocksparse": "block-sparse ops are gone",
    "neighbours": "images2neibs is gone; use T.reshape / slicing",
}

__getattr__ = missing_names("theano.tensor.nnet", _MISSING, fallback=_lazy)
