"""Convolution Ops against float64 NumPy/SciPy references, in every mode.

Each mode compiles one function holding every case (forward and both
gradients), once per module: compiling is what costs time here.  The
reference is a direct definition (a loop over filter taps in float64),
written independently of the Ops' ``perform``; SciPy's ``convolve2d``
anchors ``filter_flip=True`` as a true convolution.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.signal
from compile_modes import MODE_NAMES_WITHOUT_C, mode_for, modes_c_tested_elsewhere
from pytensor.gradient import verify_grad
from pytensor.graph.traversal import applys_between

from lasagne_bn.ops.conv import (
    Conv2d,
    Conv2dGradInputs,
    Conv2dGradWeights,
    conv1d,
    conv2d,
    conv2d_grad_wrt_inputs,
    conv2d_grad_wrt_weights,
    get_conv_output_shape,
)

# name, input shape, filter shape, conv2d keyword arguments
CASES = [
    ("valid", (2, 3, 7, 8), (4, 3, 3, 2), {}),
    ("full-xcorr", (2, 3, 6, 5), (2, 3, 2, 3), dict(border_mode="full", filter_flip=False)),
    (
        "half-dilated",
        (1, 4, 9, 10),
        (5, 4, 3, 3),
        dict(border_mode="half", filter_dilation=(2, 1)),
    ),
    ("int-pad-stride", (2, 3, 9, 9), (4, 3, 3, 3), dict(border_mode=1, subsample=(2, 2))),
    (
        "asym-pad-groups-xcorr",
        (2, 4, 8, 9),
        (6, 2, 3, 3),
        dict(border_mode=((1, 2), (0, 1)), subsample=(1, 2), num_groups=2, filter_flip=False),
    ),
    (
        "pair-pad-stride-dilation",
        (1, 2, 10, 11),
        (3, 2, 2, 3),
        dict(border_mode=(2, 1), subsample=(2, 1), filter_dilation=(1, 2)),
    ),
    ("1x1", (2, 5, 4, 6), (3, 5, 1, 1), {}),
    # more than one micro-tile of rows and columns; groups of 9 channels
    ("wide-groups3", (1, 27, 5, 41), (21, 9, 3, 3), dict(border_mode="half", num_groups=3)),
    ("stride3-full", (2, 2, 7, 8), (3, 2, 3, 2), dict(border_mode="full", subsample=(3, 2))),
]
IDS = [c[0] for c in CASES]


# --------------------------------------------------------------------------
# float64 reference


def pads_for(kw, kshape):
    """Explicit ((top, bottom), (left, right)) pads for conv2d's border_mode."""
    bm = kw.get("border_mode", "valid")
    dil = kw.get("filter_dilation", (1, 1))
    dk = [(k - 1) * d + 1 for k, d in zip(kshape[2:], dil, strict=True)]
    if bm == "valid":
        return ((0, 0), (0, 0))
    if bm == "full":
        return tuple((d - 1, d - 1) for d in dk)
    if bm in ("half", "same"):
        return tuple((d // 2, d // 2) for d in dk)
    if isinstance(bm, int):
        return ((bm, bm), (bm, bm))
    return tuple(p if isinstance(p, tuple) else (p, p) for p in bm)


def ref_conv(x, w, kw):
    """Direct definition (float64): a sum over filter taps of strided input slices.

    ``out[n, f, y, x] = sum_{c,i,j} xpad[n, g*Cg + c, y*sh + i*dh, x*sw + j*dw] k[f, c, i, j]``
    """
    x, w = x.astype(np.float64), w.astype(np.float64)
    k = w[:, :, ::-1, ::-1] if kw.get("filter_flip", True) else w
    sh, sw = kw.get("subsample", (1, 1))
    dh, dw = kw.get("filter_dilation", (1, 1))
    g = kw.get("num_groups", 1)
    (pt_, pb), (pl, pr) = pads_for(kw, w.shape)
    n, c, h, wd = x.shape
    f, cg, kh, kwid = w.shape
    xp = np.zeros((n, c, h + pt_ + pb, wd + pl + pr))
    xp[:, :, pt_ : pt_ + h, pl : pl + wd] = x
    ho = (xp.shape[2] - (kh - 1) * dh - 1) // sh + 1
    wo = (xp.shape[3] - (kwid - 1) * dw - 1) // sw + 1
    out = np.zeros((n, f, ho, wo))
    fg = f // g
    for fi in range(f):
        gi = fi // fg
        for i in range(kh):
            for j in range(kwid):
                patch = xp[
                    :,
                    gi * cg : (gi + 1) * cg,
                    i * dh : i * dh + sh * (ho - 1) + 1 : sh,
                    j * dw : j * dw + sw * (wo - 1) + 1 : sw,
                ]
                out[:, fi] += np.einsum("nchw,c->nhw", patch, k[fi, :, i, j])
    return out


def ref_grads(x, w, r, kw):
    """Gradients of sum(conv(x, w) * r) w.r.t. x and w, by the same definition."""
    x, w, r = (a.astype(np.float64) for a in (x, w, r))
    k = w[:, :, ::-1, ::-1] if kw.get("filter_flip", True) else w
    sh, sw = kw.get("subsample", (1, 1))
    dh, dw = kw.get("filter_dilation", (1, 1))
    g = kw.get("num_groups", 1)
    (pt_, pb), (pl, pr) = pads_for(kw, w.shape)
    n, c, h, wd = x.shape
    f, cg, kh, kwid = w.shape
    ho, wo = r.shape[2:]
    xp = np.zeros((n, c, h + pt_ + pb, wd + pl + pr))
    xp[:, :, pt_ : pt_ + h, pl : pl + wd] = x
    gxp = np.zeros_like(xp)
    gk = np.zeros_like(k)
    fg = f // g
    for fi in range(f):
        gi = fi // fg
        chans = slice(gi * cg, (gi + 1) * cg)
        for i in range(kh):
            for j in range(kwid):
                rows = slice(i * dh, i * dh + sh * (ho - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (wo - 1) + 1, sw)
                gxp[:, chans, rows, cols] += np.einsum("nhw,c->nchw", r[:, fi], k[fi, :, i, j])
                gk[fi, :, i, j] = np.einsum("nhw,nchw->c", r[:, fi], xp[:, chans, rows, cols])
    gx = gxp[:, :, pt_ : pt_ + h, pl : pl + wd]
    gw = gk[:, :, ::-1, ::-1] if kw.get("filter_flip", True) else gk
    return gx, gw


# --------------------------------------------------------------------------
# one compiled function per mode, holding every case


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(42)
    out = {}
    for name, xs, ws, kw in CASES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        ys = ref_conv(x, w, kw).shape
        r = rng.standard_normal(ys).astype(np.float32)
        out[name] = (x, w, r)
    return out


@pytest.fixture(scope="module")
def references(data):
    out = {}
    for name, _, _, kw in CASES:
        x, w, r = data[name]
        out[name] = (ref_conv(x, w, kw), *ref_grads(x, w, r, kw))
    return out


_compiled = {}


def compiled(mode_name):
    if mode_name not in _compiled:
        inputs, outputs = [], []
        for name, _, ws, kw in CASES:
            x = pt.tensor4(f"x_{name}", dtype="float32")
            w = pt.tensor4(f"w_{name}", dtype="float32", shape=ws)  # static, as a layer's W
            r = pt.tensor4(f"r_{name}", dtype="float32")
            y = conv2d(x, w, **kw)
            gx, gw = pytensor.grad((y * r).sum(), [x, w])
            inputs += [x, w, r]
            outputs += [y, gx, gw]
        _compiled[mode_name] = pytensor.function(inputs, outputs, mode=mode_for(mode_name))
    return _compiled[mode_name]


@pytest.fixture(scope="module", params=modes_c_tested_elsewhere(MODE_NAMES_WITHOUT_C))
def results(request, data):
    if request.param == "jax":
        pytest.importorskip("jax")
    fn = compiled(request.param)
    values = fn(*[a for name in IDS for a in data[name]])
    return {name: values[3 * i : 3 * i + 3] for i, name in enumerate(IDS)}


@pytest.mark.parametrize("case", IDS)
def test_forward_and_gradients_match_reference(results, references, case):
    names = ("out", "d_input", "d_filters")
    for got, want, what in zip(results[case], references[case], names, strict=True):
        assert got.shape == want.shape, what
        scale = np.abs(want).max() + 1e-6
        np.testing.assert_allclose(got, want, atol=3e-6 * scale, rtol=0, err_msg=what)


# --------------------------------------------------------------------------
# semantics anchors


def test_filter_flip_true_is_scipy_convolution():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 6, 7))
    w = rng.standard_normal((1, 2, 3, 2))
    xv, wv = pt.tensor4(), pt.tensor4()
    mode = mode_for("py")
    for border in ("valid", "full"):
        fn = pytensor.function([xv, wv], conv2d(xv, wv, border_mode=border), mode=mode)
        want = sum(scipy.signal.convolve2d(x[0, c], w[0, c], mode=border) for c in range(2))
        np.testing.assert_allclose(fn(x, w)[0, 0], want, atol=1e-12)
        fn = pytensor.function(
            [xv, wv], conv2d(xv, wv, border_mode=border, filter_flip=False), mode=mode
        )
        want = sum(scipy.signal.correlate2d(x[0, c], w[0, c], mode=border) for c in range(2))
        np.testing.assert_allclose(fn(x, w)[0, 0], want, atol=1e-12)


def test_static_output_shape_and_printing():
    x = pt.tensor4(shape=(8, 3, 32, 30))
    w = pt.tensor4(shape=(16, 3, 5, 5))
    y = conv2d(x, w, border_mode="half", subsample=(2, 3))
    assert y.type.shape == (8, 16, 16, 10)
    assert get_conv_output_shape((8, 3, 32, 30), (16, 3, 5, 5), "half", (2, 3)) == (8, 16, 16, 10)
    assert get_conv_output_shape((None, 3, 32, None), (16, 3, 5, 5), "valid", (1, 1)) == (
        None,
        16,
        28,
        None,
    )
    assert str(y.owner.op).startswith("Conv2d{border_mode='half', subsample=(2, 3)")
    assert conv2d(x, w, border_mode=0).owner.op.border_mode == "valid"
    assert conv2d(x, w, border_mode="same").owner.op.border_mode == "half"


def test_transposed_convolution_functions_match_gradients():
    """conv2d_grad_wrt_inputs is the transposed convolution (Lasagne's deconvolution)."""
    rng = np.random.default_rng(3)
    kw = dict(border_mode=1, subsample=(2, 2), filter_flip=False)
    x = rng.standard_normal((2, 3, 9, 9))
    w = rng.standard_normal((4, 3, 3, 3))
    r = rng.standard_normal(ref_conv(x, w, kw).shape)
    gx, gw = ref_grads(x, w, r, kw)
    rv, wv, xv = pt.tensor4(), pt.tensor4(), pt.tensor4()
    up = conv2d_grad_wrt_inputs(rv, wv, (None, None, 9, 9), filter_shape=(4, 3, 3, 3), **kw)
    assert up.type.shape == (None, 3, 9, 9)
    dw = conv2d_grad_wrt_weights(xv, rv, (4, 3, 3, 3), **kw)
    assert dw.type.shape == (4, 3, 3, 3)
    fn = pytensor.function([rv, wv, xv], [up, dw])
    got_x, got_w = fn(r, w, x)
    np.testing.assert_allclose(got_x, gx, atol=1e-10)
    np.testing.assert_allclose(got_w, gw, atol=1e-10)
    with pytest.raises(
        TypeError, match=r"input_shape\[2:\]=\[None, 9\]: each size must be an int"
    ):
        conv2d_grad_wrt_inputs(rv, wv, (None, None, None, 9), **kw)
    # an input size that a stride cannot give is refused when it is known
    with pytest.raises(ValueError, match="output gradient has"):
        conv2d_grad_wrt_inputs(
            pt.tensor4(shape=(2, 4, 5, 5)), wv, (2, 3, 20, 20), filter_shape=(4, 3, 3, 3), **kw
        )


def test_conv1d_matches_reference():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 15))
    w = rng.standard_normal((6, 2, 3))
    xv, wv = pt.tensor3(), pt.tensor3()
    y = conv1d(xv, wv, border_mode=2, subsample=2, filter_dilation=2, num_groups=2)
    got = pytensor.function([xv, wv], y)(x, w)
    want = ref_conv(
        x[:, :, None, :],
        w[:, :, None, :],
        dict(border_mode=((0, 0), (2, 2)), subsample=(1, 2), filter_dilation=(1, 2), num_groups=2),
    )[:, :, 0, :]
    np.testing.assert_allclose(got, want, atol=1e-10)


# --------------------------------------------------------------------------
# gradients: finite differences (float64), second order


VERIFY = [
    ((2, 2, 5, 6), (3, 2, 3, 2), dict(border_mode="full", subsample=(2, 1))),
    ((1, 4, 6, 5), (4, 2, 2, 3), dict(border_mode=((1, 0), 2), num_groups=2, filter_flip=False)),
    ((1, 2, 7, 7), (2, 2, 2, 2), dict(border_mode="half", filter_dilation=(2, 3))),
]


@pytest.mark.parametrize("mode_name", ["py", "default"])
@pytest.mark.parametrize("xs, ws, kw", VERIFY)
def test_verify_grad(xs, ws, kw, mode_name):
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    verify_grad(lambda a, b: conv2d(a, b, **kw), [x, w], rng=rng, mode=mode_for(mode_name))


@pytest.mark.parametrize("xs, ws, kw", VERIFY[:2])
def test_second_order_gradients(xs, ws, kw):
    """The gradient Ops are convolutions too: their gradients check out."""
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    r = rng.standard_normal(ref_conv(x, w, kw).shape)

    def grad_norm(a, b):
        gx, gw = pytensor.grad((conv2d(a, b, **kw) * r).sum(), [a, b])
        return (gx**2).sum() * (gw**2).sum() + (gx * a).sum()

    verify_grad(grad_norm, [x, w], rng=rng, mode=mode_for("py"))


@pytest.mark.default_mode
def test_second_order_gradient_runs_in_default_mode():
    x, w = pt.tensor4(), pt.tensor4()
    y = conv2d(x, w, border_mode="half", subsample=(2, 2))
    gx = pytensor.grad((y**2).sum(), x)
    hess = pytensor.grad((gx**2).sum(), [x, w])
    ops = {type(n.op) for n in applys_between([x, w], hess)}
    assert {Conv2d, Conv2dGradInputs, Conv2dGradWeights} <= ops
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((1, 2, 6, 6)), rng.standard_normal((3, 2, 3, 3))
    fast = pytensor.function([x, w], hess)(xv, wv)
    slow = pytensor.function([x, w], hess, mode=mode_for("py"))(xv, wv)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------
# errors


def test_bad_arguments_are_named():
    x = pt.tensor4(shape=(2, 4, 8, 8))
    w = pt.tensor4(shape=(6, 2, 3, 3))
    with pytest.raises(TypeError, match=r"input has ndim=3; expected a 4-d tensor"):
        conv2d(pt.tensor3(), w)
    with pytest.raises(TypeError, match="filters has ndim=2"):
        conv2d(x, pt.matrix())
    with pytest.raises(TypeError, match="input has dtype int32; expected a float dtype"):
        conv2d(pt.tensor4(dtype="int32"), w)
    with pytest.raises(ValueError, match=r"input has 4 channels but filters of shape .* expect 2"):
        conv2d(x, w)
    with pytest.raises(ValueError, match="num_groups=3 does not divide"):
        conv2d(x, pt.tensor4(shape=(6, 1, 3, 3)), num_groups=3)
    with pytest.raises(ValueError, match=r"filters have 6 output channels .* num_groups=4"):
        conv2d(x, pt.tensor4(shape=(6, 1, 3, 3)), num_groups=4)
    with pytest.raises(ValueError, match="border_mode='sme': expected 'valid', 'full', 'half'"):
        conv2d(x, w, border_mode="sme", num_groups=2)
    with pytest.raises(ValueError, match=r"border_mode=-1: padding must be >= 0"):
        conv2d(x, w, border_mode=-1, num_groups=2)
    with pytest.raises(TypeError, match=r"border_mode=\(1, 2, 3\)"):
        conv2d(x, w, border_mode=(1, 2, 3), num_groups=2)
    with pytest.raises(ValueError, match=r"subsample=\(0, 1\): expected values >= 1"):
        conv2d(x, w, subsample=(0, 1), num_groups=2)
    with pytest.raises(TypeError, match="subsample=1.5"):
        conv2d(x, w, subsample=1.5, num_groups=2)
    with pytest.raises(ValueError, match="filter_dilation=-2"):
        conv2d(x, w, filter_dilation=-2, num_groups=2)
    with pytest.raises(ValueError, match="num_groups=0: expected a positive int"):
        conv2d(x, w, num_groups=0)
    with pytest.raises(TypeError, match="filter_flip='yes'"):
        conv2d(x, w, filter_flip="yes", num_groups=2)
    with pytest.raises(ValueError, match="too small for filters"):
        conv2d(pt.tensor4(shape=(1, 2, 2, 8)), pt.tensor4(shape=(1, 2, 3, 3)))
    with pytest.raises(ValueError, match=r"input_shape=\(2, 4, 9, 8\) does not match"):
        conv2d(x, w, input_shape=(2, 4, 9, 8), num_groups=2)


@pytest.mark.parametrize("mode_name", ["default", "py"])
def test_bad_shapes_at_run_time(mode_name):
    x, w = pt.tensor4(), pt.tensor4()
    fn = pytensor.function([x, w], conv2d(x, w, num_groups=2), mode=mode_for(mode_name))
    fn(np.zeros((1, 4, 5, 5)), np.zeros((2, 2, 3, 3)))
    with pytest.raises(ValueError, match="channels"):
        fn(np.zeros((1, 4, 5, 5)), np.zeros((2, 3, 3, 3)))
    with pytest.raises(ValueError, match="(too small|smaller than the dilated filters)"):
        fn(np.zeros((1, 4, 2, 5)), np.zeros((2, 2, 3, 3)))


@pytest.mark.parametrize("mode_name", ["default", "fast_compile"])
def test_input_gradient_without_filters_is_zero(mode_name):
    """No filters: nothing reaches the input, and its gradient is zeros (the default
    mode's kernel, which overwrites its result, is not called at all here)."""
    dy, w = pt.tensor4(), pt.tensor4()
    fn = pytensor.function(
        [dy, w], conv2d_grad_wrt_inputs(dy, w, (2, 3, 4, 4)), mode=mode_for(mode_name)
    )
    for _ in range(3):  # fresh results may reuse freed, dirty memory
        got = fn(np.zeros((2, 0, 3, 3)), np.zeros((0, 3, 2, 2)))
        assert got.shape == (2, 3, 4, 4)
        assert not got.any()
        fn(np.ones((2, 1, 3, 3)), np.ones((1, 3, 2, 2)))  # leaves non-zero buffers behind


@pytest.mark.filterwarnings("ignore:Numba will use object mode:UserWarning")
@pytest.mark.parametrize("mode_name", ["default", "jax", "fast_compile"])
def test_float16_runs_and_agrees_with_float32(mode_name):
    """float16 in, float16 out (Numba runs the NumPy perform; work is in float32)."""
    if mode_name == "jax":
        pytest.importorskip("jax")
    rng = np.random.default_rng(4)
    xv = rng.standard_normal((2, 3, 6, 7)).astype(np.float16)
    wv = rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
    x, w = pt.tensor4(dtype="float16"), pt.tensor4(dtype="float16")
    y = conv2d(x, w, border_mode="half", subsample=(1, 2))
    gx, gw = pytensor.grad(y.astype("float32").sum(), [x, w])
    fn = pytensor.function([x, w], [y, gx, gw], mode=mode_for(mode_name))
    got = fn(xv, wv)
    assert [g.dtype for g in got] == ["float16"] * 3
    kw = dict(border_mode="half", subsample=(1, 2))
    want_y = ref_conv(xv, wv, kw)
    want_gx, want_gw = ref_grads(xv, wv, np.ones(want_y.shape), kw)
    for g, want in zip(got, (want_y, want_gx, want_gw), strict=True):
        np.testing.assert_allclose(
            g.astype(np.float64), want, rtol=0, atol=1e-2 * np.abs(want).max()
        )
