"""``lasagne.layers.dnn``: Lasagne's cuDNN layers on lasagne_bn's portable layers.

The classes keep the legacy constructors, defaults (``flip_filters=False``
for the convolutions), attributes, parameter shapes and order, so a model
written for a 2016 GPU builds the same network and its checkpoints load;
the outputs are computed by lasagne_bn's Ops (any mode; ``mode='JAX'`` for a
GPU).  What cuDNN refused stays refused (``ignore_border=False`` pooling,
batch norm over other axes).

With ``device=cpu`` or ``dnn.enabled=False`` in ``THEANO_FLAGS`` (or set on
``theano.config`` first), ``import lasagne.layers.dnn`` raises ``ImportError``
as Lasagne did without a cuDNN GPU, so ``try: ... except ImportError:``
fallbacks to ``Conv2DLayer`` take the branch they took on a CPU
(:func:`lasagne_bn_compat.theano._config.cudnn_refusal`).

The 3-D layers and ``SpatialPyramidPoolingDNNLayer`` are built on
lasagne_bn's ``Conv3DLayer``, ``Pool3DLayer`` / ``MaxPool3DLayer`` and
``SpatialPyramidPoolingLayer``; without them they raise an ``ImportError``
that says so.

>>> import lasagne_bn_compat; lasagne_bn_compat.install()
>>> from lasagne.layers import InputLayer
>>> from lasagne.layers.dnn import Conv2DDNNLayer, MaxPool2DDNNLayer
>>> l = MaxPool2DDNNLayer(Conv2DDNNLayer(InputLayer((None, 3, 8, 8)), 4, 3, pad='same'), 2)
>>> l.output_shape, l.input_layer.flip_filters
((None, 4, 4, 4), False)
"""

from __future__ import annotations

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers.normalization import (
    BatchNormLayer,
    _derived_name,
    _take_bias_and_nonlinearity,
)
from lasagne_bn.layers.pool import Pool2DLayer
from lasagne_bn_compat._names import missing_names
from lasagne_bn_compat.lasagne.layers._gpu import (
    GPUConv2DBase,
    missing_base_message,
    portable_layer,
)

__all__ = [
    "BatchNormDNNLayer",
    "Conv2DDNNLayer",
    "MaxPool2DDNNLayer",
    "Pool2DDNNLayer",
    "batch_norm_dnn",
]


def _refuse_partial_windows(layer: str, ignore_border) -> None:
    if not ignore_border:
        raise NotImplementedError(
            f"{layer} does not support ignore_border=False. (cuDNN pools whole windows "
            "only; lasagne.layers.Pool2DLayer / Pool3DLayer take ignore_border=False)"
        )


class Pool2DDNNLayer(Pool2DLayer):
    """cuDNN 2-D pooling: :class:`~lasagne_bn.layers.Pool2DLayer` with whole windows only.

    Parameters as ``Pool2DLayer``; ``ignore_border`` must stay True and
    ``mode`` is ``'max'``, ``'average_inc_pad'`` or ``'average_exc_pad'``.
    """

    def __init__(
        self,
        incoming,
        pool_size,
        stride=None,
        pad=(0, 0),
        ignore_border=True,
        mode="max",
        **kwargs,
    ):
        super().__init__(incoming, pool_size, stride, pad, True, mode, **kwargs)
        _refuse_partial_windows("Pool2DDNNLayer", ignore_border)


class MaxPool2DDNNLayer(Pool2DDNNLayer):
    """cuDNN 2-D max pooling (:class:`Pool2DDNNLayer` with ``mode='max'``)."""

    def __init__(self, incoming, pool_size, stride=None, pad=(0, 0), ignore_border=True, **kwargs):
        super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)


class Conv2DDNNLayer(GPUConv2DBase):
    """cuDNN 2-D convolution: a ``Conv2DLayer`` that correlates by default.

    Parameters are ``Conv2DLayer``'s (``W`` is ``(num_filters, channels //
    num_groups, rows, cols)``), except that ``flip_filters`` defaults to
    False, as cuDNN layers were trained with.
    """

    def __init__(
        self,
        incoming,
        num_filters,
        filter_size,
        stride=(1, 1),
        pad=0,
        untie_biases=False,
        W=init.GlorotUniform(),
        b=init.Constant(0.0),
        nonlinearity=nonlinearities.rectify,
        flip_filters=False,
        num_groups=1,
        **kwargs,
    ):
        super().__init__(
            incoming,
            num_filters,
            filter_size,
            stride,
            pad,
            untie_biases,
            W,
            b,
            nonlinearity,
            flip_filters,
            num_groups,
            n=2,
            **kwargs,
        )


class BatchNormDNNLayer(BatchNormLayer):
    """cuDNN batch normalization: a :class:`~lasagne_bn.layers.BatchNormLayer`.

    cuDNN normalized over the first axis (``axes=0``) or over all but the
    second (``'auto'`` for convolutions); other ``axes`` raise a
    ``ValueError``.  Parameters, their order and the outputs are
    ``BatchNormLayer``'s.
    """

    def __init__(
        self,
        incoming,
        axes="auto",
        epsilon=1e-4,
        alpha=0.1,
        beta=init.Constant(0),
        gamma=init.Constant(1),
        mean=init.Constant(0),
        inv_std=init.Constant(1),
        **kwargs,
    ):
        super().__init__(incoming, axes, epsilon, alpha, beta, gamma, mean, inv_std, **kwargs)
        ndim = len(self.input_shape)
        if self.axes not in ((0,), (0, *range(2, ndim))):
            raise ValueError(
                "BatchNormDNNLayer only supports normalization across the first axis, or "
                f"across all but the second axis, got axes={axes!r} (lasagne.layers."
                "BatchNormLayer takes any axes)"
            )


def batch_norm_dnn(layer, **kwargs):
    """:func:`~lasagne_bn.layers.batch_norm` with a :class:`BatchNormDNNLayer`.

    Takes ``layer``'s bias and nonlinearity as ``batch_norm`` does;
    ``kwargs`` go to ``BatchNormDNNLayer`` (``name`` names it).
    """
    from lasagne_bn.layers.special import NonlinearityLayer

    bn_name = _derived_name(layer, kwargs, "_bn")
    normalized = BatchNormDNNLayer(layer, name=bn_name, **kwargs)
    nonlinearity = _take_bias_and_nonlinearity(layer)
    if nonlinearity is not None:
        nonlin_name = bn_name and bn_name + "_nonlin"
        normalized = NonlinearityLayer(normalized, nonlinearity, name=nonlin_name)
    return normalized


# ---------------------------------------------------------------------------
# layers on portable layers this lasagne_bn may not have

_MISSING: dict[str, str] = {}

_Conv3DLayer = portable_layer("Conv3DLayer")
if _Conv3DLayer is None:
    _MISSING["Conv3DDNNLayer"] = missing_base_message("Conv3DDNNLayer", "Conv3DLayer")
else:

    class Conv3DDNNLayer(_Conv3DLayer):
        """cuDNN 3-D convolution: ``Conv3DLayer`` that correlates (``flip_filters=False``)."""

        def __init__(
            self,
            incoming,
            num_filters,
            filter_size,
            stride=(1, 1, 1),
            pad=0,
            untie_biases=False,
            W=init.GlorotUniform(),
            b=init.Constant(0.0),
            nonlinearity=nonlinearities.rectify,
            flip_filters=False,
            num_groups=1,
            **kwargs,
        ):
            super().__init__(
                incoming,
                num_filters,
                filter_size,
                stride,
                pad,
                untie_biases,
                W,
                b,
                nonlinearity,
                flip_filters,
                num_groups=num_groups,
                **kwargs,
            )

    __all__.append("Conv3DDNNLayer")

_Pool3DLayer = portable_layer("Pool3DLayer")
if _Pool3DLayer is None:
    for _name in ("Pool3DDNNLayer", "MaxPool3DDNNLayer"):
        _MISSING[_name] = missing_base_message(_name, "Pool3DLayer")
else:

    class Pool3DDNNLayer(_Pool3DLayer):
        """cuDNN 3-D pooling: ``Pool3DLayer`` with whole windows only (``ignore_border=True``)."""

        def __init__(
            self,
            incoming,
            pool_size,
            stride=None,
            pad=(0, 0, 0),
            ignore_border=True,
            mode="max",
            **kwargs,
        ):
            super().__init__(incoming, pool_size, stride, pad, True, mode, **kwargs)
            _refuse_partial_windows("Pool3DDNNLayer", ignore_border)

    class MaxPool3DDNNLayer(Pool3DDNNLayer):
        """cuDNN 3-D max pooling (:class:`Pool3DDNNLayer` with ``mode='max'``)."""

        def __init__(
            self, incoming, pool_size, stride=None, pad=(0, 0, 0), ignore_border=True, **kwargs
        ):
            super().__init__(incoming, pool_size, stride, pad, ignore_border, mode="max", **kwargs)

    __all__ += ["MaxPool3DDNNLayer", "Pool3DDNNLayer"]

_SPPLayer = portable_layer("SpatialPyramidPoolingLayer")
if _SPPLayer is None:
    _MISSING["SpatialPyramidPoolingDNNLayer"] = missing_base_message(
        "SpatialPyramidPoolingDNNLayer", "SpatialPyramidPoolingLayer"
    )
else:

    class SpatialPyramidPoolingDNNLayer(_SPPLayer):
        """cuDNN spatial pyramid pooling: ``SpatialPyramidPoolingLayer`` (its fast path).

        ``pool_dims`` (default ``[4, 2, 1]``) and ``mode`` as Lasagne's; the
        output is ``(batch, channels, sum(p * p for p in pool_dims))``.
        """

        def __init__(self, incoming, pool_dims=[4, 2, 1], mode="max", **kwargs):  # noqa: B006
            super().__init__(incoming, pool_dims=pool_dims, mode=mode, **kwargs)

    __all__.append("SpatialPyramidPoolingDNNLayer")


__getattr__ = missing_names("lasagne.layers.dnn", _MISSING)
