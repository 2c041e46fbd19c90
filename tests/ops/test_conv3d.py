"""3-D convolution Ops against a float64 NumPy reference, in every mode.

As in test_conv.py, each mode compiles one function holding every case
(forward and both gradients) once per module.  The reference is a direct
definition (a loop over filter taps in float64, for any number of spatial
axes), written independently of the Ops' ``perform``; SciPy's ``convolve``
anchors ``filter_flip=True`` as a true 3-D convolution.
"""

from __future__ import annotations

import itertools

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
    Conv3d,
    Conv3dGradInputs,
    Conv3dGradWeights,
    conv2d,
    conv3d,
    conv3d_grad_wrt_inputs,
    conv3d_grad_wrt_weights,
    get_conv_output_shape,
)

# name, input shape, filter shape, conv3d keyword arguments
CASES = [
    ("valid", (2, 3, 5, 6, 4), (4, 3, 2, 3, 2), {}),
    (
        "half-stride-groups",
        (2, 4, 5, 6, 7),
        (4, 2, 3, 3, 3),
        dict(border_mode="half", subsample=(2, 1, 2), num_groups=2),
    ),
    (
        "pairs-dilated-xcorr",
        (1, 2, 6, 5, 7),
        (3, 2, 2, 2, 3),
        dict(border_mode=((1, 2), 0, (0, 1)), filter_dilation=(2, 1, 2), filter_flip=False),
    ),
    (
        "full-stride",
        (2, 2, 4, 5, 6),
        (3, 2, 3, 2, 2),
        dict(border_mode="full", subsample=(2, 2, 1)),
    ),
    ("int-pad-1x1x1", (1, 3, 3, 4, 5), (2, 3, 1, 1, 1), dict(border_mode=1)),
]
IDS = [c[0] for c in CASES]


# --------------------------------------------------------------------------
# float64 reference (any number of spatial axes)


def pads_for(kw, kshape):
    n = len(kshape) - 2
    bm = kw.get("border_mode", "valid")
    dil = kw.get("filter_dilation", (1,) * n)
    dk = [(k - 1) * d + 1 for k, d in zip(kshape[2:], dil, strict=True)]
    if bm == "valid":
        return ((0, 0),) * n
    if bm == "full":
        return tuple((d - 1, d - 1) for d in dk)
    if bm in ("half", "same"):
        return tuple((d // 2, d // 2) for d in dk)
    if isinstance(bm, int):
        return ((bm, bm),) * n
    return tuple(p if isinstance(p, tuple) else (p, p) for p in bm)


def _geometry(x, w, kw):
    n = x.ndim - 2
    stride = kw.get("subsample", (1,) * n)
    dil = kw.get("filter_dilation", (1,) * n)
    pads = pads_for(kw, w.shape)
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), *pads))
    out = tuple(
        (p - (k - 1) * d - 1) // s + 1
        for p, k, d, s in zip(xp.shape[2:], w.shape[2:], dil, stride, strict=True)
    )
    return stride, dil, pads, xp, out


def _tap_region(tap, dil, stride, out):
    return tuple(
        slice(t * d, t * d + s * (o - 1) + 1, s)
        for t, d, s, o in zip(tap, dil, stride, out, strict=True)
    )


def ref_conv(x, w, kw):
    """``out[n, f, o] = sum_{c, t} xpad[n, g*Cg + c, o*s + t*d] * k[f, c, t]`` in float64."""
    n = x.ndim - 2
    w = w.astype(np.float64)
    k = (
        w[(slice(None), slice(None)) + (slice(None, None, -1),) * n]
        if kw.get("filter_flip", True)
        else w
    )
    stride, dil, _, xp, out_sp = _geometry(x, w, kw)
    g = kw.get("num_groups", 1)
    f, cg = w.shape[:2]
    fg = f // g
    out = np.zeros((x.shape[0], f, *out_sp))
    for fi in range(f):
        chans = slice(fi // fg * cg, (fi // fg + 1) * cg)
        for tap in itertools.product(*(range(s) for s in w.shape[2:])):
            patch = xp[(slice(None), chans, *_tap_region(tap, dil, stride, out_sp))]
            out[:, fi] += np.tensordot(patch, k[(fi, slice(None), *tap)], axes=([1], [0]))
    return out


def ref_grads(x, w, r, kw):
    """Gradients of ``sum(conv(x, w) * r)`` w.r.t. ``x`` and ``w``, by the same definition."""
    n = x.ndim - 2
    flip = (slice(None), slice(None)) + (slice(None, None, -1),) * n
    w, r = w.astype(np.float64), r.astype(np.float64)
    k = w[flip] if kw.get("filter_flip", True) else w
    stride, dil, pads, xp, out_sp = _geometry(x, w, kw)
    g = kw.get("num_groups", 1)
    f, cg = w.shape[:2]
    fg = f // g
    gxp = np.zeros_like(xp)
    gk = np.zeros_like(k)
    for fi in range(f):
        chans = slice(fi // fg * cg, (fi // fg + 1) * cg)
        for tap in itertools.product(*(range(s) for s in w.shape[2:])):
            region = (slice(None), chans, *_tap_region(tap, dil, stride, out_sp))
            gxp[region] += np.multiply.outer(r[:, fi], k[(fi, slice(None), *tap)]).transpose(
                0, n + 1, *range(1, n + 1)
            )
            gk[(fi, slice(None), *tap)] = np.tensordot(
                xp[region], r[:, fi], axes=([0, *range(2, n + 2)], [0, *range(1, n + 1)])
            )
    inner = tuple(slice(lo, lo + s) for (lo, _), s in zip(pads, x.shape[2:], strict=True))
    gx = gxp[(slice(None), slice(None), *inner)]
    gw = gk[flip] if kw.get("filter_flip", True) else gk
    return gx, gw


def test_reference_is_scipy_convolution():
    """The reference itself: filter_flip=True is SciPy's N-d convolution."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 4, 5, 3))
    w = rng.standard_normal((1, 2, 2, 3, 2))
    for border in ("valid", "full"):
        want = sum(scipy.signal.convolve(x[0, c], w[0, c], mode=border) for c in range(2))
        np.testing.assert_allclose(ref_conv(x, w, dict(border_mode=border))[0, 0], want)
        want = sum(scipy.signal.correlate(x[0, c], w[0, c], mode=border) for c in range(2))
        got = ref_conv(x, w, dict(border_mode=border, filter_flip=False))[0, 0]
        np.testing.assert_allclose(got, want)


# --------------------------------------------------------------------------
# one compiled function per mode, holding every case


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    out = {}
    for name, xs, ws, kw in CASES:
        x = rng.standard_normal(xs).astype(np.float32)
        w = rng.standard_normal(ws).astype(np.float32)
        r = rng.standard_normal(ref_conv(x, w, kw).shape).astype(np.float32)
        out[name] = (x, w, r)
    return out


@pytest.fixture(scope="module")
def references(data):
    return {
        name: (ref_conv(*data[name][:2], kw), *ref_grads(*data[name], kw))
        for name, _, _, kw in CASES
    }


_compiled = {}


def compiled(mode_name):
    if mode_name not in _compiled:
        inputs, outputs = [], []
        for name, _, ws, kw in CASES:
            x = pt.tensor5(f"x_{name}", dtype="float32")
            w = pt.tensor5(f"w_{name}", dtype="float32", shape=ws)
            r = pt.tensor5(f"r_{name}", dtype="float32")
            y = conv3d(x, w, **kw)
            gx, gw = pytensor.grad((y * r).sum(), [x, w])
            inputs += [x, w, r]
            outputs += [y, gx, gw]
        _compiled[mode_name] = pytensor.function(inputs, outputs, mode=mode_for(mode_name))
    return _compiled[mode_name]


@pytest.fixture(scope="module", params=modes_c_tested_elsewhere(MODE_NAMES_WITHOUT_C))
def results(request, data):
    if request.param == "jax":
        pytest.importorskip("jax")
    values = compiled(request.param)(*[a for name in IDS for a in data[name]])
    return {name: values[3 * i : 3 * i + 3] for i, name in enumerate(IDS)}


@pytest.mark.parametrize("case", IDS)
def test_forward_and_gradients_match_reference(results, references, case):
    for got, want, what in zip(
        results[case], references[case], ("out", "d_input", "d_filters"), strict=True
    ):
        assert got.shape == want.shape, what
        scale = np.abs(want).max() + 1e-6
        np.testing.assert_allclose(got, want, atol=3e-6 * scale, rtol=0, err_msg=what)


# --------------------------------------------------------------------------
# shapes, printing, the transposed convolution


def test_static_output_shape_and_printing():
    x = pt.tensor5(shape=(2, 3, 9, 32, 30))
    w = pt.tensor5(shape=(16, 3, 3, 5, 5))
    y = conv3d(x, w, border_mode="half", subsample=(1, 2, 3))
    assert y.type.shape == (2, 16, 9, 16, 10)
    assert get_conv_output_shape(x.type.shape, w.type.shape, "half", (1, 2, 3)) == y.type.shape
    assert str(y.owner.op).startswith("Conv3d{border_mode='half', subsample=(1, 2, 3)")
    assert isinstance(y.owner.op, Conv3d) and not isinstance(y.owner.op, Conv2d)
    assert conv3d(x, w, border_mode=(0, 0, 0)).owner.op.border_mode == "valid"
    assert conv3d(x, w, border_mode=1).owner.op.border_mode == ((1, 1),) * 3


def test_transposed_convolution_functions_match_gradients():
    rng = np.random.default_rng(3)
    kw = dict(border_mode=(1, 0, 1), subsample=(2, 1, 2), filter_flip=False)
    x = rng.standard_normal((2, 3, 5, 4, 5))
    w = rng.standard_normal((4, 3, 3, 2, 3))
    r = rng.standard_normal(ref_conv(x, w, kw).shape)
    gx, gw = ref_grads(x, w, r, kw)
    rv, wv, xv = pt.tensor5(), pt.tensor5(), pt.tensor5()
    up = conv3d_grad_wrt_inputs(rv, wv, (None, None, 5, 4, 5), filter_shape=w.shape, **kw)
    assert up.type.shape == (None, 3, 5, 4, 5)
    dw = conv3d_grad_wrt_weights(xv, rv, w.shape, **kw)
    assert dw.type.shape == w.shape
    got_x, got_w = pytensor.function([rv, wv, xv], [up, dw], mode=mode_for("py"))(r, w, x)
    np.testing.assert_allclose(got_x, gx, atol=1e-10)
    np.testing.assert_allclose(got_w, gw, atol=1e-10)


# --------------------------------------------------------------------------
# gradients: finite differences (float64), second order


VERIFY = [
    ((1, 2, 3, 4, 3), (2, 2, 2, 2, 2), dict(border_mode="full", subsample=(2, 1, 1))),
    ((1, 4, 3, 3, 4), (2, 2, 2, 1, 2), dict(border_mode=(1, 0, 0), num_groups=2)),
]


@pytest.mark.parametrize("xs, ws, kw", VERIFY)
def test_verify_grad(xs, ws, kw):
    rng = np.random.default_rng(11)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    verify_grad(lambda a, b: conv3d(a, b, **kw), [x, w], rng=rng, mode=mode_for("py"))


def test_second_order_gradients():
    xs, ws, kw = VERIFY[0]
    rng = np.random.default_rng(12)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    r = rng.standard_normal(ref_conv(x, w, kw).shape)

    def grad_norm(a, b):
        gx, gw = pytensor.grad((conv3d(a, b, **kw) * r).sum(), [a, b])
        return (gx**2).sum() * (gw**2).sum() + (gx * a).sum()

    verify_grad(grad_norm, [x, w], rng=rng, mode=mode_for("py"))


@pytest.mark.parametrize("mode_name", ["default", "jax"])
def test_second_order_gradient_matches_python(mode_name):
    if mode_name == "jax":
        pytest.importorskip("jax")
    x = pt.tensor5(shape=(1, 2, 4, 5, 5))
    w = pt.tensor5(shape=(3, 2, 2, 3, 3))
    y = conv3d(x, w, border_mode="half", subsample=(2, 2, 1))
    gx = pytensor.grad((y**2).sum(), x)
    hess = pytensor.grad((gx**2).sum(), [x, w])
    ops = {type(n.op) for n in applys_between([x, w], hess)}
    assert {Conv3d, Conv3dGradInputs, Conv3dGradWeights} <= ops
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((1, 2, 4, 5, 5)), rng.standard_normal((3, 2, 2, 3, 3))
    fast = pytensor.function([x, w], hess, mode=mode_for(mode_name))(xv, wv)
    slow = pytensor.function([x, w], hess, mode=mode_for("py"))(xv, wv)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


# --------------------------------------------------------------------------
# errors


def test_bad_arguments_are_named():
    x = pt.tensor5(shape=(2, 4, 6, 8, 8))
    w = pt.tensor5(shape=(6, 2, 3, 3, 3))
    with pytest.raises(TypeError, match=r"input has ndim=4; expected a 5-d tensor"):
        conv3d(pt.tensor4(), w)
    with pytest.raises(TypeError, match=r"filters has ndim=4; expected a 5-d tensor"):
        conv3d(x, pt.tensor4())
    with pytest.raises(ValueError, match=r"input has 4 channels but filters of shape .* expect 2"):
        conv3d(x, w)
    with pytest.raises(TypeError, match=r"border_mode=\(1, 2\)"):
        conv3d(x, w, border_mode=(1, 2), num_groups=2)
    with pytest.raises(TypeError, match=r"subsample=\(1, 2\): expected an int or a tuple of 3"):
        conv3d(x, w, subsample=(1, 2), num_groups=2)
    with pytest.raises(ValueError, match=r"filter_dilation=\(1, 0, 1\): expected values >= 1"):
        conv3d(x, w, filter_dilation=(1, 0, 1), num_groups=2)
    with pytest.raises(ValueError, match=r"too small for filters .*axis 2 would have size 0"):
        conv3d(pt.tensor5(shape=(1, 2, 2, 8, 8)), pt.tensor5(shape=(1, 2, 3, 3, 3)))
    with pytest.raises(TypeError, match=r"input_shape\[2:\]=\[None, 9, 9\]: each size"):
        conv3d_grad_wrt_inputs(x, w, (None, None, None, 9, 9))
    with pytest.raises(ValueError, match=r"input_shape=\(1, 2, 3\): expected 5 entries"):
        conv3d_grad_wrt_inputs(x, w, (1, 2, 3))


@pytest.mark.parametrize("mode_name", ["default", "py"])
def test_bad_shapes_at_run_time(mode_name):
    x, w = pt.tensor5(), pt.tensor5()
    fn = pytensor.function([x, w], conv3d(x, w), mode=mode_for(mode_name))
    assert fn(np.zeros((1, 2, 3, 4, 4)), np.zeros((2, 2, 3, 3, 3))).shape == (1, 2, 1, 2, 2)
    with pytest.raises(ValueError, match="channels"):
        fn(np.zeros((1, 4, 3, 4, 4)), np.zeros((2, 3, 3, 3, 3)))
    with pytest.raises(ValueError, match="(too small|smaller than the dilated filters)"):
        fn(np.zeros((1, 2, 2, 4, 4)), np.zeros((2, 2, 3, 3, 3)))


def test_conv2d_still_accepts_positional_op_arguments():
    """Conv2d keeps its 2-D constructor (border_mode, subsample, filter_flip, ...)."""
    op = Conv2d("half", (2, 1), False, (1, 2), 1)
    assert (op.subsample, op.filter_flip, op.filter_dilation) == ((2, 1), False, (1, 2))
    assert Conv3d().subsample == (1, 1, 1)
    y = op(pt.tensor4(shape=(1, 2, 6, 6)), pt.tensor4(shape=(3, 2, 3, 3)))
    assert y.type.shape == (1, 3, 3, 6)
    assert conv2d(pt.tensor4(), pt.tensor4()).owner.op == Conv2d()
