"""``theano.gpuarray.dnn`` as Theano 1.0 reported it without a GPU: cuDNN absent.

``dnn_present()`` / ``dnn_available()`` answer False, so legacy code that
checks them takes its CPU path.  Code that calls the cuDNN functions
regardless gets their portable counterparts, with Theano's signatures:
``dnn_conv``, ``dnn_pool``, ``dnn_batch_normalization_train`` /
``_test``.  Arguments that only steered cuDNN (``algo``, ``workmem``,
``direction_hint``, ``precision``) are accepted and ignored, with one
warning.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> x = pt.tensor4('x')
>>> y = dnn_pool(x, (2, 2), stride=(2, 2))
>>> pytensor.function([x], y)(np.arange(16.0).reshape(1, 1, 4, 4))[0, 0]
array([[ 5.,  7.],
       [13., 15.]])
"""

from __future__ import annotations

import warnings

__all__ = [
    "dnn_available",
    "dnn_batch_normalization_test",
    "dnn_batch_normalization_train",
    "dnn_conv",
    "dnn_pool",
    "dnn_present",
]

_WHY = "PyTensor 3 has no cuDNN backend; compile with mode='JAX' to run on a GPU"

_WARNED: set[str] = set()


def dnn_present() -> bool:
    """Whether cuDNN can be used: never (Theano answered False without a GPU too)."""
    return False


def dnn_available(context_name: object = None) -> bool:
    """Whether cuDNN is usable for ``context_name``: never; ``dnn_available.msg`` says why."""
    return False


dnn_available.msg = _WHY
dnn_present.msg = _WHY


def _ignore(function: str, **options) -> None:
    given = {k: v for k, v in options.items() if v is not None}
    if given and function not in _WARNED:
        _WARNED.add(function)
        warnings.warn(
            f"{function}: {', '.join(f'{k}={v!r}' for k, v in given.items())} only tuned "
            "cuDNN and is ignored; the result is the same",
            UserWarning,
            stacklevel=3,
        )


def dnn_conv(
    img,
    kerns,
    border_mode="valid",
    subsample=(1, 1),
    dilation=(1, 1),
    conv_mode="conv",
    direction_hint=None,
    workmem=None,
    algo=None,
    precision=None,
    num_groups=1,
):
    """cuDNN's 2-D convolution: ``conv2d``; ``conv_mode='cross'`` does not flip the filters."""
    from lasagne_bn.ops.conv import conv2d

    if conv_mode not in ("conv", "cross"):
        raise ValueError(f"conv_mode={conv_mode!r}: expected 'conv' or 'cross'")
    _ignore(
        "dnn_conv", direction_hint=direction_hint, workmem=workmem, algo=algo, precision=precision
    )
    return conv2d(
        img,
        kerns,
        border_mode=border_mode,
        subsample=subsample,
        filter_flip=conv_mode == "conv",
        filter_dilation=dilation,
        num_groups=num_groups,
    )


def dnn_pool(img, ws, stride=None, mode="max", pad=None):
    """cuDNN's 2-D pooling: ``pool_2d`` over whole windows (stride 1 and no padding by default)."""
    from lasagne_bn.ops.pool import pool_2d

    if len(ws) != 2:
        raise ValueError(f"ws={ws!r}: only 2-D pooling is available here")
    stride = (1, 1) if stride is None else stride
    pad = (0, 0) if pad is None else pad
    mode = "max" if mode == "max_deterministic" else mode
    return pool_2d(img, ws=ws, ignore_border=True, stride=stride, pad=pad, mode=mode)


def dnn_batch_normalization_train(
    inputs,
    gamma,
    beta,
    mode="per-activation",
    epsilon=1e-4,
    running_average_factor=0.1,
    running_mean=None,
    running_var=None,
):
    """cuDNN's training batch norm: ``batch_normalization_train`` with ``axes=mode``."""
    from lasagne_bn.ops import batch_normalization_train

    return batch_normalization_train(
        inputs,
        gamma,
        beta,
        axes=mode,
        epsilon=epsilon,
        running_average_factor=running_average_factor,
        running_mean=running_mean,
        running_var=running_var,
    )


def dnn_batch_normalization_test(
    inputs, gamma, beta, mean, var, mode="per-activation", epsilon=1e-4
):
    """cuDNN's inference batch norm: ``batch_normalization_test`` with ``axes=mode``."""
    from lasagne_bn.ops import batch_normalization_test

    return batch_normalization_test(inputs, gamma, beta, mean, var, axes=mode, epsilon=epsilon)
