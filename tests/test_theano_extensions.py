"""lasagne_bn.theano_extensions.conv: Lasagne's conv1d variants against Lasagne's outputs.

References: tests/data/misc_oracle.npz (Lasagne master on Theano 1.0.5, made
by tests/data/make_misc_oracle.py) and a NumPy correlation written from the
definition.  One function per mode computes every variant and case.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES_WITHOUT_C, mode_for, modes_c_tested_elsewhere

from lasagne_bn.theano_extensions import conv

ORACLE = np.load(Path(__file__).parent / "data" / "misc_oracle.npz")
ALL = ("conv1d_sc", "conv1d_mc0", "conv1d_mc1", "conv1d_unstrided", "conv1d_sd", "conv1d_md")
# the cases of tests/data/make_misc_oracle.py: variants, x shape, w shape, arguments
CASES = {
    "s1_flip": (ALL, (2, 3, 11), (4, 3, 4), dict(subsample=(1,), filter_flip=True)),
    "s1_noflip": (ALL, (2, 3, 11), (4, 3, 4), dict(subsample=(1,), filter_flip=False)),
    "s2_flip": (ALL, (2, 3, 11), (4, 3, 4), dict(subsample=(2,), filter_flip=True)),
    "s2_noflip": (ALL, (2, 3, 11), (4, 3, 4), dict(subsample=(2,), filter_flip=False)),
    "pad2": (("conv1d_mc0", "conv1d_mc1"), (2, 3, 9), (4, 3, 3), dict(border_mode=2)),
    "full": (("conv1d_mc0", "conv1d_mc1"), (2, 3, 9), (4, 3, 3), dict(border_mode="full")),
    "half_s2_noflip": (
        ("conv1d_mc0", "conv1d_mc1"),
        (2, 3, 9),
        (4, 3, 3),
        dict(border_mode="half", subsample=(2,), filter_flip=False),
    ),
    "groups": (("conv1d_mc0", "conv1d_mc1"), (2, 4, 9), (6, 2, 3), dict(num_groups=2)),
}


def correlate1d(x, w, stride=1, pad=(0, 0)):
    """out[b, f, t] = sum over c, k of x_padded[b, c, t * stride + k] * w[f, c, k]."""
    x = np.pad(x, [(0, 0), (0, 0), pad])
    length = (x.shape[2] - w.shape[2]) // stride + 1
    windows = np.stack([x[:, :, t * stride : t * stride + w.shape[2]] for t in range(length)])
    return np.einsum("tbck,fck->bft", windows, w)


# The variants lower to the 2-D convolution, whose C code test_conv_c.py checks.
@pytest.mark.parametrize("mode", modes_c_tested_elsewhere(MODE_NAMES_WITHOUT_C))
def test_every_variant_gives_lasagnes_values(mode):
    x, w = pt.tensor3("x"), pt.tensor3("w")
    outputs, wanted, givens = [], [], []
    for case, (names, x_shape, w_shape, kwargs) in CASES.items():
        xv, wv = pt.tensor3(), pt.tensor3()
        for name in names:
            key = f"conv/{name}/{case}"
            outputs.append(getattr(conv, name)(xv, wv, x_shape, w_shape, **kwargs))
            wanted.append(ORACLE[key + "/out"])
        givens += [(xv, ORACLE[key + "/x"]), (wv, ORACLE[key + "/w"])]
    del x, w
    f = pytensor.function([v for v, _ in givens], outputs, mode=mode_for(mode))
    for got, want in zip(f(*[value for _, value in givens]), wanted, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_oracle_matches_the_definition():
    for case in ("s1_flip", "s2_noflip"):
        _, _, _, kwargs = CASES[case]
        stride = kwargs["subsample"][0]
        for name in ("conv1d_mc0", "conv1d_sd", "conv1d_md", "conv1d_unstrided"):
            x, w = ORACLE[f"conv/{name}/{case}/x"], ORACLE[f"conv/{name}/{case}/w"]
            ws = w[:, :, ::-1] if kwargs["filter_flip"] else w
            if name == "conv1d_unstrided" and not kwargs["filter_flip"]:
                ws = ws[:, ::-1, :]  # through conv1d_sc (below), channels reversed
            want = correlate1d(x, ws, stride)
            np.testing.assert_allclose(ORACLE[f"conv/{name}/{case}/out"], want, atol=1e-12)
    # conv1d_sc without flipping pairs input channel c with filter channel C - 1 - c
    x, w = ORACLE["conv/conv1d_sc/s1_noflip/x"], ORACLE["conv/conv1d_sc/s1_noflip/w"]
    want = correlate1d(x, w[:, ::-1, :])
    np.testing.assert_allclose(ORACLE["conv/conv1d_sc/s1_noflip/out"], want, atol=1e-12)
    x, w = ORACLE["conv/conv1d_mc0/pad2/x"], ORACLE["conv/conv1d_mc0/pad2/w"]
    want = correlate1d(x, w[:, :, ::-1], pad=(2, 2))
    np.testing.assert_allclose(ORACLE["conv/conv1d_mc0/pad2/out"], want, atol=1e-12)


def test_shapes_may_be_unknown_for_the_2d_based_variants():
    x, w = pt.tensor3(), pt.tensor3()
    r = np.random.RandomState(0)
    xv, wv = r.randn(1, 2, 8), r.randn(3, 2, 3)
    for fn in (conv.conv1d_sc, conv.conv1d_mc0, conv.conv1d_mc1):
        got = fn(x, w, None, None).eval({x: xv, w: wv}, mode="FAST_COMPILE")
        np.testing.assert_allclose(got, correlate1d(xv, wv[:, :, ::-1]), atol=1e-12)
    got = conv.conv1d_mc0(x, w, border_mode=(1,), subsample=2).eval(
        {x: xv, w: wv}, mode="FAST_COMPILE"
    )
    np.testing.assert_allclose(got, correlate1d(xv, wv[:, :, ::-1], 2, (1, 1)), atol=1e-12)


@pytest.mark.parametrize("name", ALL)
def test_errors_as_lasagne(name):
    x, w = pt.tensor3(), pt.tensor3()
    fn = getattr(conv, name)
    if name in ("conv1d_mc0", "conv1d_mc1"):
        with pytest.raises(TypeError, match="border_mode=None"):
            fn(x, w, (1, 1, 10), (2, 1, 3), border_mode=None)
    else:
        with pytest.raises(RuntimeError, match=f"Unsupported border_mode for {name}: None"):
            fn(x, w, (1, 1, 10), (2, 1, 3), border_mode=None)
        with pytest.raises(RuntimeError, match="Unsupported border_mode"):
            fn(x, w, (1, 1, 10), (2, 1, 3), border_mode="full")
    if name in ("conv1d_unstrided", "conv1d_sd", "conv1d_md"):
        with pytest.raises(RuntimeError, match=r"Filter length \(3\) is not a multiple"):
            fn(x, w, (1, 1, 10), (2, 1, 3), subsample=(2,))
    with pytest.raises(TypeError, match="subsample"):
        fn(x, w, (1, 1, 10), (2, 1, 2), subsample=(1, 1))
