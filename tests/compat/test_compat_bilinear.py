"""``theano.tensor.nnet.abstract_conv.bilinear_upsampling`` against Theano 1.0.5.

Keras 2's Theano backend calls it for ``resize_images(..., 'bilinear')``.
``tests/data/bilinear_oracle.npz`` (made by ``tests/data/make_bilinear_oracle.py``
on Theano 1.0.5, float64) holds its outputs for integer ratios with the 1-D and
the 2-D kernel and for fractional ratios, and the kernels.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params
from data.bilinear_cases import CASES
from legacy_helpers import DATA, QUIET
from legacy_helpers import legacy as legacy  # the fixture

pytestmark = QUIET
ORACLE = np.load(DATA / "bilinear_oracle.npz")


# The Numba mode compiles the whole graph at once, and each case's convolutions are
# its own kernels: three cases (both kernels, shape hints, a fractional ratio) in the
# default tier, every case in the full tier.  The other modes run every case.
NUMBA_DEFAULT_TIER = ["r3_2d", "r2_1d_sizes", "frac_mixed"]


def _mode_cases():
    for param in mode_params():
        (mode,) = param.values
        if param.id == "numba":
            yield pytest.param(mode, NUMBA_DEFAULT_TIER, id="numba")
            yield pytest.param(mode, list(CASES), id="numba-every-case", marks=pytest.mark.slow)
        else:
            yield pytest.param(mode, list(CASES), id=param.id)


@pytest.mark.parametrize("mode, cases", list(_mode_cases()))
def test_every_case_matches_theano(legacy, mode, cases):
    from theano.tensor.nnet.abstract_conv import bilinear_upsampling

    x = pt.tensor4("x", dtype="float64")
    outs = [bilinear_upsampling(x, **CASES[name]) for name in cases]
    got = pytensor.function([x], outs, mode=mode)(ORACLE["x"])
    for name, value in zip(cases, got, strict=True):
        np.testing.assert_allclose(value, ORACLE[f"up/{name}"], rtol=1e-12, atol=1e-12,
                                   err_msg=name)  # fmt: skip


def test_kernels_match_theano(legacy):
    import theano
    from theano.tensor.nnet.abstract_conv import bilinear_kernel_1D, bilinear_kernel_2D

    with theano.config.change_flags(floatX="float64"):
        for r in (1, 2, 3):
            np.testing.assert_allclose(bilinear_kernel_1D(r).eval(), ORACLE[f"k1/{r}"])
            np.testing.assert_allclose(bilinear_kernel_2D(r).eval(), ORACLE[f"k2/{r}"])
        np.testing.assert_allclose(bilinear_kernel_2D((2, 3)).eval(), ORACLE["k2/2x3"])
        raw = bilinear_kernel_1D(3, normalize=False).eval()
        np.testing.assert_allclose(raw, ORACLE["k1/3/raw"])


def test_keras_resize_images_call(legacy):
    """What Keras 2.2.4's ``resize_images`` does for 'bilinear': a ratio of 2, a gradient."""
    import theano
    import theano.tensor as T

    x = T.tensor4("x", dtype="float64")
    up = T.nnet.abstract_conv.bilinear_upsampling(x, ratio=2)
    g = theano.grad(up.sum(), x)
    value, grad = theano.function([x], [up, g])(ORACLE["x"])
    np.testing.assert_allclose(value, ORACLE["up/r2_1d"], rtol=1e-12, atol=1e-12)
    # each output is a convex combination of the inputs (the repeated edges are inputs
    # too), so the gradient of the sum has one unit per output, all of it on the inputs
    assert grad.shape == ORACLE["x"].shape and np.all(grad > 0)
    np.testing.assert_allclose(grad.sum(), value.size, rtol=1e-12)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(ratio=2, frac_ratio=(3, 2)), "expected one of them, not both"),
        (dict(), "ratio and frac_ratio are both None"),
        (dict(frac_ratio=(3, 2)), "need use_1D_kernel=False"),
        (dict(frac_ratio=3, use_1D_kernel=False), r"frac_ratio=3: expected a tuple"),
    ],
)
def test_bad_arguments_are_refused_as_theano_did(legacy, kwargs, message):
    from theano.tensor.nnet.abstract_conv import bilinear_upsampling

    with pytest.raises(ValueError, match=message):
        bilinear_upsampling(pt.tensor4("x"), **kwargs)
