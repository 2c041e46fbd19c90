"""Lasagne's 3-D, feature and pyramid pooling layers against the real Theano + Lasagne.

tests/data/pool_oracle.npz holds their outputs and input gradients (of
``sum(y ** 2)``), written by tests/data/make_pool_oracle.py with the same
layer arguments.  One function per mode holds every case.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_for

from lasagne_bn.layers import (
    FeaturePoolLayer,
    FeatureWTALayer,
    GlobalPoolLayer,
    InputLayer,
    MaxPool3DLayer,
    Pool3DLayer,
    SpatialPyramidPoolingLayer,
    Upscale3DLayer,
    get_output,
)
from lasagne_bn.ops.pool import pool_3d

ORACLE = np.load(Path(__file__).parent.parent / "data" / "pool_oracle.npz")

CASES = {
    "spp_fast_7x5": lambda l: SpatialPyramidPoolingLayer(l, [1, 2, 4]),
    "spp_fast_avg": lambda l: SpatialPyramidPoolingLayer(l, [1, 3], mode="average_exc_pad"),
    "spp_fast_incpad": lambda l: SpatialPyramidPoolingLayer(l, [2, 3], mode="average_inc_pad"),
    "spp_kaiming": lambda l: SpatialPyramidPoolingLayer(l, [1, 2, 4], implementation="kaiming"),
    "wta_ties": lambda l: FeatureWTALayer(l, 3),
    "featurepool_ties": lambda l: FeaturePoolLayer(l, 2, axis=2),
    "pool3d_avg_inc_pad": lambda l: Pool3DLayer(l, 3, stride=2, pad=1, mode="average_inc_pad"),
    "pool3d_avg_exc_pad": lambda l: Pool3DLayer(
        l, 3, stride=(2, 1, 2), pad=(1, 1, 2), mode="average_exc_pad"
    ),
    "pool3d_max_keep": lambda l: MaxPool3DLayer(l, (2, 3, 2), ignore_border=False),
    "pool3d_sum": lambda l: Pool3DLayer(l, 2, stride=1, mode="sum"),
    "up3d_dilate": lambda l: Upscale3DLayer(l, (2, 3, 1), mode="dilate"),
    "up3d_repeat": lambda l: Upscale3DLayer(l, (1, 2, 3)),
    "global_max_5d": lambda l: GlobalPoolLayer(l, pool_function=pt.max),
}

_compiled = {}


def compiled(mode_name):
    if mode_name not in _compiled:
        ins, outs = [], []
        for name, build in CASES.items():
            l_in = InputLayer(ORACLE[name + "/x"].shape)
            y = get_output(build(l_in))
            ins.append(l_in.input_var)
            outs += [y, pytensor.grad((y**2).sum(), l_in.input_var)]
        x = pt.tensor4()
        ins.append(x)
        outs.append(pool_3d(x, (2, 2, 2), ignore_border=False, stride=(1, 2, 1)))
        _compiled[mode_name] = pytensor.function(ins, outs, mode=mode_for(mode_name))
    return _compiled[mode_name]


@pytest.fixture(scope="module", params=[pytest.param("default", marks=pytest.mark.slow), "py"])
def results(request):
    args = [ORACLE[name + "/x"] for name in CASES] + [ORACLE["pool_3d_4d/x"]]
    values = compiled(request.param)(*args)
    out = {name: values[2 * i : 2 * i + 2] for i, name in enumerate(CASES)}
    out["pool_3d_4d"] = [values[-1]]
    return out


@pytest.mark.parametrize("name", [*CASES, "pool_3d_4d"])
def test_matches_theano_and_lasagne(results, name):
    got = results[name]
    want = ORACLE[name + "/y"]
    assert got[0].shape == want.shape  # 'fast' SPP on 7 x 5 too: 29 bins, not 21
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
    if name + "/g" in ORACLE:
        np.testing.assert_allclose(got[1], ORACLE[name + "/g"], rtol=1e-5, atol=1e-5)
