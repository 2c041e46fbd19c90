"""``lasagne.layers.corrmm``: Lasagne's ``Conv2DMMLayer`` (GpuCorrMM) on lasagne_bn.

The layer keeps its legacy constructor: ``Conv2DLayer``'s parameters with
``flip_filters=False`` by default, the same ``W`` and ``b`` shapes and
order; the convolution is lasagne_bn's portable one (any mode,
``mode='JAX'`` for a GPU).

>>> import lasagne_bn_compat; lasagne_bn_compat.install()
>>> from lasagne.layers import InputLayer
>>> from lasagne.layers.corrmm import Conv2DMMLayer
>>> l = Conv2DMMLayer(InputLayer((None, 3, 8, 8)), 4, 3)
>>> l.output_shape, l.W.get_value().shape, l.flip_filters
((None, 4, 6, 6), (4, 3, 3, 3), False)
"""

from __future__ import annotations

from lasagne_bn import init, nonlinearities
from lasagne_bn_compat.lasagne.layers._gpu import GPUConv2DBase

__all__ = ["Conv2DMMLayer"]


class Conv2DMMLayer(GPUConv2DBase):
    """GpuCorrMM 2-D convolution: a ``Conv2DLayer`` that correlates by default.

    Parameters are ``Conv2DLayer``'s, except that ``flip_filters`` defaults
    to False, as CorrMM layers were trained with.
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
