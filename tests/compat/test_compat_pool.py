"""Theano's pool_3d / Pool and Lasagne's 3-D, feature and pyramid pooling via lasagne_bn_compat."""

from __future__ import annotations

import numpy as np
import pytensor
import pytest
from legacy_helpers import QUIET, legacy  # noqa: F401

import lasagne_bn.layers
from lasagne_bn.ops.pool import DynamicPool, Pool

pytestmark = QUIET

NEW_LAYERS = (
    "Pool3DLayer",
    "MaxPool3DLayer",
    "Upscale3DLayer",
    "FeaturePoolLayer",
    "FeatureWTALayer",
    "SpatialPyramidPoolingLayer",
)


@pytest.mark.usefixtures("legacy")
class TestPoolingNames:
    def test_layers_are_lasagne_bn_layers(self):
        import lasagne
        import lasagne.layers.pool as lasagne_pool

        for name in NEW_LAYERS:
            assert getattr(lasagne.layers, name) is getattr(lasagne_bn.layers, name)
            assert getattr(lasagne_pool, name) is getattr(lasagne_bn.layers, name)
        # Lasagne's module-level helpers of lasagne.layers.pool
        assert callable(lasagne_pool.pool_2d) and callable(lasagne_pool.pool_2d_nxn_regions)

    def test_pool_3d_old_and_new_argument_names(self):
        import theano.tensor as T
        from theano.tensor.signal.pool import Pool as TheanoPool
        from theano.tensor.signal.pool import pool_3d

        x = T.tensor5()
        a = pool_3d(x, ws=(2, 2, 2), ignore_border=True, stride=(1, 2, 1), pad=(1, 0, 0))
        b = pool_3d(x, ds=(2, 2, 2), ignore_border=True, st=(1, 2, 1), padding=(1, 0, 0))
        c = TheanoPool(ignore_border=True, ndim=3)(x, (2, 2, 2), (1, 2, 1), (1, 0, 0))
        assert a.owner.op == b.owner.op == c.owner.op
        assert isinstance(a.owner.op, Pool)
        assert TheanoPool.out_shape((1, 2, 5, 6, 7), (2, 2, 2), True, (1, 2, 1), ndim=3) == [
            1, 2, 4, 3, 6,
        ]  # fmt: skip
        with pytest.raises(ValueError, match="give pad or its old name padding, not both"):
            pool_3d(x, (2, 2, 2), ignore_border=True, pad=(1, 1, 1), padding=(1, 1, 1))

    def test_symbolic_windows_as_lasagne_spp_checks_them(self):
        """Lasagne's SPP probes pool_2d with int vectors and pad=None; it must build a graph."""
        import theano.tensor as T
        from lasagne.layers.pool import pool_2d

        y = pool_2d(T.tensor4(), ws=T.ivector(), stride=T.ivector(), ignore_border=True, pad=None)
        assert isinstance(y.owner.op, DynamicPool)
        x = T.tensor4()
        ws = T.ivector()
        fn = pytensor.function([x, ws], pool_2d(x, ws=ws, ignore_border=True, pad=None))
        xv = np.arange(16, dtype=pytensor.config.floatX).reshape(1, 1, 4, 4)
        np.testing.assert_array_equal(fn(xv, [2, 2]), [[[[5, 7], [13, 15]]]])

    def test_missing_theano_pool_ops_explain(self):
        from theano.tensor.signal import pool

        with pytest.raises(AttributeError, match="theano.grad of pool_2d / pool_3d"):
            pool.DownsampleFactorMaxGradGrad  # noqa: B018
