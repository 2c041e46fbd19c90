"""Pooling Ops against a float64 loop reference, in every mode.

The inputs are small integers, so windows have tied maxima: the tests pin
down that max-pooling gradients go to the *first* maximum of each window
(row-major) in every backend.  One function per mode holds every case.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES_WITHOUT_C, mode_for, modes_c_tested_elsewhere
from pytensor.gradient import verify_grad

from lasagne_bn.ops.pool import (
    AveragePool2dGrad,
    MaxPool2dGrad,
    MaxPool2dGradGrad,
    Pool2d,
    max_pool_2d_same_size,
    pool_2d,
    pool_output_length,
)

# name, input shape, pool_2d keyword arguments
CASES = [
    ("max-2x2", (2, 3, 7, 8), dict(ws=(2, 2), ignore_border=True)),
    ("max-keep-border", (2, 3, 7, 8), dict(ws=(2, 3), ignore_border=False)),
    (
        "max-overlap-pad",
        (2, 2, 7, 6),
        dict(ws=(3, 3), stride=(2, 1), pad=(1, 2), ignore_border=True),
    ),
    ("max-overlap-keep-border", (1, 2, 8, 7), dict(ws=(3, 2), stride=(2, 1), ignore_border=False)),
    ("sum-stride", (2, 2, 6, 7), dict(ws=(2, 3), stride=(1, 2), ignore_border=True, mode="sum")),
    (
        "avg-inc-pad",
        (2, 2, 7, 6),
        dict(ws=(3, 2), stride=(2, 2), pad=(1, 1), mode="average_inc_pad", ignore_border=True),
    ),
    (
        "avg-exc-pad",
        (2, 2, 7, 6),
        dict(ws=(3, 2), stride=(2, 2), pad=(1, 1), mode="average_exc_pad", ignore_border=True),
    ),
    (
        "avg-keep-border",
        (1, 3, 7, 5),
        dict(ws=(3, 2), mode="average_inc_pad", ignore_border=False),
    ),
    ("max-3d-input", (4, 9, 10), dict(ws=(2, 2), stride=(3, 3), ignore_border=False)),
]
IDS = [c[0] for c in CASES]


# --------------------------------------------------------------------------
# float64 loop reference (Theano's definition)


def windows(size, ws, st, pad, ignore_border):
    """Per output index: (start, end) in the input, and the padded-window size."""
    v = size + 2 * pad
    n = pool_output_length(size, ws, st, pad, ignore_border)
    out = []
    for o in range(n):
        s, e = o * st, min(o * st + ws, v)
        out.append((max(s, pad) - pad, min(e, size + pad) - pad, e - s))
    return out


def ref_pool(x, kw):
    ws, st = kw["ws"], kw.get("stride") or kw["ws"]
    pad, ib, mode = kw.get("pad", (0, 0)), kw["ignore_border"], kw.get("mode", "max")
    rows = windows(x.shape[-2], ws[0], st[0], pad[0], ib)
    cols = windows(x.shape[-1], ws[1], st[1], pad[1], ib)
    out = np.zeros(x.shape[:-2] + (len(rows), len(cols)))
    for i, (r0, r1, nr) in enumerate(rows):
        for j, (c0, c1, nc) in enumerate(cols):
            win = x[..., r0:r1, c0:c1].astype(np.float64)
            if mode == "max":
                out[..., i, j] = win.max(axis=(-2, -1))
            else:
                s = win.sum(axis=(-2, -1))
                div = {"sum": 1, "average_inc_pad": nr * nc}.get(mode, (r1 - r0) * (c1 - c0))
                out[..., i, j] = s / div
    return out


def ref_grad(x, r, kw):
    """Gradient of sum(pool(x) * r); max: to the first maximum of each window."""
    ws, st = kw["ws"], kw.get("stride") or kw["ws"]
    pad, ib, mode = kw.get("pad", (0, 0)), kw["ignore_border"], kw.get("mode", "max")
    rows = windows(x.shape[-2], ws[0], st[0], pad[0], ib)
    cols = windows(x.shape[-1], ws[1], st[1], pad[1], ib)
    g = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape[:-2]):
        for i, (r0, r1, nr) in enumerate(rows):
            for j, (c0, c1, nc) in enumerate(cols):
                win = x[idx][r0:r1, c0:c1]
                if mode == "max":
                    a, b = np.unravel_index(np.argmax(win), win.shape)  # first maximum
                    g[idx][r0 + a, c0 + b] += r[idx][i, j]
                else:
                    div = {"sum": 1, "average_inc_pad": nr * nc}.get(mode, (r1 - r0) * (c1 - c0))
                    g[idx][r0:r1, c0:c1] += r[idx][i, j] / div
    return g


def ref_grad_grad(x, gg, kw):
    """Gradient of sum(grad * gg) w.r.t. the output gradient: pool's linearisation of gg."""
    out = ref_pool(x, kw)
    basis = np.zeros(out.shape)
    res = np.zeros(out.shape)
    for idx in np.ndindex(*out.shape):
        basis[idx] = 1
        res[idx] = (ref_grad(x, basis, kw) * gg).sum()
        basis[idx] = 0
    return res


# --------------------------------------------------------------------------
# one compiled function per mode


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    out = {}
    for name, shape, kw in CASES:
        x = rng.integers(-3, 3, size=shape).astype(np.float32)  # ties
        r = rng.standard_normal(ref_pool(x, kw).shape).astype(np.float32)
        gg = rng.standard_normal(shape).astype(np.float32)
        out[name] = (x, r, gg)
    return out


@pytest.fixture(scope="module")
def references(data):
    out = {}
    for name, _, kw in CASES:
        x, r, gg = data[name]
        out[name] = (ref_pool(x, kw), ref_grad(x, r, kw), ref_grad_grad(x, gg, kw))
    return out


_compiled = {}


def compiled(mode_name):
    if mode_name not in _compiled:
        inputs, outputs = [], []
        for name, shape, kw in CASES:
            x = pt.tensor(f"x_{name}", dtype="float32", shape=(None,) * len(shape))
            r = pt.tensor(f"r_{name}", dtype="float32", shape=(None,) * len(shape))
            gg = pt.tensor(f"gg_{name}", dtype="float32", shape=(None,) * len(shape))
            y = pool_2d(x, **kw)
            gx = pytensor.grad((y * r).sum(), x)
            ggr = pytensor.grad((gx * gg).sum(), r)
            inputs += [x, r, gg]
            outputs += [y, gx, ggr]
        _compiled[mode_name] = pytensor.function(inputs, outputs, mode=mode_for(mode_name))
    return _compiled[mode_name]


@pytest.fixture(scope="module", params=modes_c_tested_elsewhere(MODE_NAMES_WITHOUT_C))
def results(request, data):
    if request.param == "jax":
        pytest.importorskip("jax")
    values = compiled(request.param)(*[a for name in IDS for a in data[name]])
    return {name: values[3 * i : 3 * i + 3] for i, name in enumerate(IDS)}


@pytest.mark.parametrize("case", IDS)
def test_pool_gradient_and_second_order_match_reference(results, references, case):
    names = ("out", "d_input", "d_output_grad")
    for got, want, what in zip(results[case], references[case], names, strict=True):
        assert got.shape == want.shape, what
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-6, err_msg=what)


# --------------------------------------------------------------------------
# shapes, gradients, semantics


@pytest.mark.parametrize(
    "size, ws, st, pad, ib, want",
    [
        (7, 2, 2, 0, True, 3),
        (7, 2, 2, 0, False, 4),
        (8, 3, 1, 0, False, 6),  # stride < ws: windows start while inside the input
        (7, 3, 2, 1, True, 4),
        (2, 3, 1, 0, True, 0),
        (2, 3, 1, 0, False, 1),
    ],
)
def test_theano_output_length(size, ws, st, pad, ib, want):
    assert pool_output_length(size, ws, st, pad, ib) == want
    x = pt.tensor4(shape=(1, 1, size, size))
    y = pool_2d(x, (ws, ws), ignore_border=ib, stride=(st, st), pad=(pad, pad))
    assert y.type.shape == (1, 1, want, want)


@pytest.mark.parametrize(
    "kw",
    [
        dict(ws=(2, 2), ignore_border=True, mode="average_exc_pad", pad=(1, 0), stride=(1, 2)),
        dict(ws=(3, 2), ignore_border=False, mode="average_inc_pad"),
        dict(ws=(2, 3), stride=(1, 1), ignore_border=True, mode="max"),
    ],
)
@pytest.mark.parametrize("mode_name", ["py", "default"])
def test_verify_grad(kw, mode_name):
    rng = np.random.default_rng(3)
    x = rng.permutation(60).reshape(1, 2, 5, 6) / 7.0  # distinct values: max is smooth
    verify_grad(lambda a: pool_2d(a, **kw), [x], rng=rng, mode=mode_for(mode_name))


def test_grad_of_grad_ops_and_third_order():
    x = pt.tensor4()
    y = pool_2d(x, (2, 2), ignore_border=True)
    gx = pytensor.grad((y**2).sum(), x)
    ggx = pytensor.grad((gx**2).sum(), x)
    g3 = pytensor.grad((pytensor.grad((gx * x).sum(), x) ** 2).sum(), x)
    fn = pytensor.function([x], [gx, ggx, g3])
    assert {MaxPool2dGrad, MaxPool2dGradGrad} <= {type(n.op) for n in fn.maker.fgraph.apply_nodes}
    xv = np.random.default_rng(0).standard_normal((1, 1, 4, 4))
    gxv, ggxv, _ = fn(xv)
    pooled = xv.reshape(1, 1, 2, 2, 2, 2).max(axis=(3, 5))
    assert np.isclose(np.abs(gxv).sum(), 2 * np.abs(pooled).sum())
    ya = pool_2d(x, (2, 2), ignore_border=True, mode="average_exc_pad")
    assert isinstance(pytensor.grad(ya.sum(), x).owner.op, AveragePool2dGrad)


def test_max_pool_2d_same_size_keeps_first_maximum():
    x = pt.tensor4()
    fn = pytensor.function([x], max_pool_2d_same_size(x, (2, 2)))
    xv = np.array([[[[1, 3, 3, 0], [2, 3, 0, 0]]]], dtype=float)
    np.testing.assert_array_equal(fn(xv), [[[[0, 3, 3, 0], [0, 0, 0, 0]]]])


def test_pool_ops_print_their_parameters():
    y = pool_2d(pt.tensor4(), (3, 3), ignore_border=True, stride=(2, 2), pad=(1, 1))
    assert str(y.owner.op) == (
        "Pool2d{ws=(3, 3), stride=(2, 2), pad=(1, 1), ignore_border=True, mode='max'}"
    )
    with pytest.warns(UserWarning, match="ignore_border was not given"):
        assert not pool_2d(pt.tensor4(), (2, 2)).owner.op.ignore_border


def test_bad_arguments_are_named():
    x = pt.tensor4()
    with pytest.raises(ValueError, match=r"pad=\(1, 1\) with ignore_border=False"):
        pool_2d(x, (2, 2), ignore_border=False, pad=(1, 1))
    with pytest.raises(ValueError, match=r"pad=\(2, 0\) must be smaller than the pooling window"):
        pool_2d(x, (2, 2), ignore_border=True, pad=(2, 0))
    with pytest.raises(ValueError, match="mode='mean': expected one of 'max'"):
        pool_2d(x, (2, 2), ignore_border=True, mode="mean")
    with pytest.raises(ValueError, match=r"ws=\(0, 2\): expected values >= 1"):
        pool_2d(x, (0, 2), ignore_border=True)
    with pytest.raises(ValueError, match=r"stride=\(1, -1\): expected values >= 1"):
        pool_2d(x, (2, 2), ignore_border=True, stride=(1, -1))
    with pytest.raises(TypeError, match=r"ws=\(2, 2, 2\): expected an int or a tuple of 2 ints"):
        pool_2d(x, (2, 2, 2), ignore_border=True)
    with pytest.raises(TypeError, match="input has dtype int64; expected a float dtype"):
        pool_2d(pt.tensor4(dtype="int64"), (2, 2), ignore_border=True)
    with pytest.raises(TypeError, match="input has ndim=1; pooling needs at least 2"):
        pool_2d(pt.vector(), (2, 2), ignore_border=True)
    with pytest.raises(ValueError, match="ws=None"):
        pool_2d(x, None, ignore_border=True)
    assert isinstance(pool_2d(x, 2, ignore_border=True).owner.op, Pool2d)
