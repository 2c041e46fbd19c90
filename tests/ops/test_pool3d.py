"""3-D pooling (``pool_3d``) and pooling with symbolic windows, in every mode.

A float64 loop reference over windows of any number of axes pins the
forward pass, the gradient (to the *first* maximum of each window, in
row-major order) and the second-order gradient.  Inputs are small integers,
so windows have tied maxima.  One compiled function per mode holds every
case.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES_WITHOUT_C, mode_for
from pytensor.gradient import verify_grad

from lasagne_bn.ops.pool import (
    AveragePoolGrad,
    DynamicPool,
    MaxPoolGrad,
    MaxPoolGradGrad,
    Pool,
    pool_2d,
    pool_3d,
    pool_output_length,
)

# name, input shape, pool_3d keyword arguments
CASES_3D = [
    ("max-2x2x2", (2, 2, 5, 4, 5), dict(ws=(2, 2, 2), ignore_border=True)),
    ("max-keep-border", (1, 2, 5, 4, 3), dict(ws=(2, 3, 2), ignore_border=False)),
    (
        "max-overlap-pad",
        (1, 2, 4, 5, 4),
        dict(ws=(3, 2, 3), stride=(2, 1, 2), pad=(1, 1, 2), ignore_border=True),
    ),
    (
        "max-overlap-keep-border",
        (2, 4, 5, 6),
        dict(ws=(2, 3, 2), stride=(1, 2, 1), ignore_border=False),
    ),
    ("sum", (1, 2, 4, 5, 4), dict(ws=(2, 2, 3), stride=(2, 1, 1), ignore_border=True, mode="sum")),
    (
        "avg-inc-pad",
        (1, 2, 5, 4, 5),
        dict(ws=(3, 2, 2), pad=(1, 1, 0), mode="average_inc_pad", ignore_border=True),
    ),
    (
        "avg-exc-pad",
        (1, 2, 5, 4, 5),
        dict(ws=(3, 2, 2), pad=(1, 1, 0), mode="average_exc_pad", ignore_border=True),
    ),
    (
        "avg-keep-border",
        (1, 1, 5, 3, 4),
        dict(ws=(2, 2, 3), mode="average_exc_pad", ignore_border=False),
    ),
]

# 2-D pooling whose windows are symbolic int vectors (inputs of the function)
CASES_DYNAMIC = [
    ("dyn-max", (2, 2, 7, 6), dict(ws=(3, 2), stride=(2, 2), pad=(1, 0), ignore_border=True)),
    (
        "dyn-avg",
        (1, 2, 7, 5),
        dict(ws=(3, 2), stride=(2, 1), pad=(0, 0), mode="average_exc_pad", ignore_border=False),
    ),
]
CASES = CASES_3D + CASES_DYNAMIC
IDS = [c[0] for c in CASES]


# --------------------------------------------------------------------------
# float64 loop reference (Theano's definition, any number of pooled axes)


def windows(size, ws, st, pad, ignore_border):
    """Per output index: (start, end) in the input, and the padded-window size."""
    v = size + 2 * pad
    return [
        (
            max(o * st, pad) - pad,
            min(o * st + ws, v, size + pad) - pad,
            min(o * st + ws, v) - o * st,
        )
        for o in range(pool_output_length(size, ws, st, pad, ignore_border))
    ]


def _axes(x_shape, kw):
    ws = kw["ws"]
    nd = len(ws)
    st = kw.get("stride") or ws
    pad = kw.get("pad") or (0,) * nd
    return [
        windows(x_shape[-nd + i], ws[i], st[i], pad[i], kw["ignore_border"]) for i in range(nd)
    ]


def _divisor(wins, mode):
    if mode == "sum":
        return 1
    if mode == "average_inc_pad":
        return np.prod([n for _, _, n in wins])
    return np.prod([e - s for s, e, _ in wins])


def ref_pool(x, kw):
    axes, mode = _axes(x.shape, kw), kw.get("mode", "max")
    nd = len(axes)
    out = np.zeros(x.shape[:-nd] + tuple(len(a) for a in axes))
    for o in itertools.product(*(range(len(a)) for a in axes)):
        wins = [axes[i][o[i]] for i in range(nd)]
        win = x[(Ellipsis, *(slice(s, e) for s, e, _ in wins))].astype(np.float64)
        flat = win.reshape(win.shape[:-nd] + (-1,))
        if mode == "max":
            out[(Ellipsis, *o)] = flat.max(-1)
        else:
            out[(Ellipsis, *o)] = flat.sum(-1) / _divisor(wins, mode)
    return out


def ref_grad(x, r, kw):
    """Gradient of sum(pool(x) * r); max: to the first maximum of each window."""
    axes, mode = _axes(x.shape, kw), kw.get("mode", "max")
    nd = len(axes)
    g = np.zeros(x.shape)
    for idx in np.ndindex(*x.shape[:-nd]):
        for o in itertools.product(*(range(len(a)) for a in axes)):
            wins = [axes[i][o[i]] for i in range(nd)]
            region = tuple(slice(s, e) for s, e, _ in wins)
            if mode == "max":
                win = x[idx][region]
                at = np.unravel_index(np.argmax(win), win.shape)  # first maximum
                g[idx][tuple(s + a for (s, _, _), a in zip(wins, at, strict=True))] += r[idx][o]
            else:
                g[idx][region] += r[idx][o] / _divisor(wins, mode)
    return g


def ref_grad_grad(x, gg, kw):
    """Gradient of sum(grad * gg) w.r.t. the output gradient: pool's linearisation of gg."""
    out = ref_pool(x, kw)
    basis, res = np.zeros(out.shape), np.zeros(out.shape)
    for idx in np.ndindex(*out.shape):
        basis[idx] = 1
        res[idx] = (ref_grad(x, basis, kw) * gg).sum()
        basis[idx] = 0
    return res


# --------------------------------------------------------------------------
# one compiled function per mode


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
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


def _graph(name, shape, kw, dynamic):
    x = pt.tensor(f"x_{name}", dtype="float32", shape=(None,) * len(shape))
    r = pt.tensor(f"r_{name}", dtype="float32", shape=(None,) * len(shape))
    gg = pt.tensor(f"gg_{name}", dtype="float32", shape=(None,) * len(shape))
    windows_in = []
    if dynamic:
        ws, st, pad = (pt.lvector(f"{k}_{name}") for k in ("ws", "stride", "pad"))
        windows_in = [ws, st, pad]
        y = pool_2d(x, ws=ws, stride=st, pad=pad, **_without(kw, "ws", "stride", "pad"))
        assert isinstance(y.owner.op, DynamicPool)
    else:
        y = pool_3d(x, **kw)
        assert isinstance(y.owner.op, Pool)
    gx = pytensor.grad((y * r).sum(), x)
    ggr = pytensor.grad((gx * gg).sum(), r)
    return [x, r, gg, *windows_in], [y, gx, ggr]


def _without(kw, *keys):
    return {k: v for k, v in kw.items() if k not in keys}


_compiled = {}


def compiled(mode_name):
    if mode_name not in _compiled:
        inputs, outputs = [], []
        for name, shape, kw in CASES:
            if mode_name == "jax" and name.startswith("dyn"):
                continue  # JAX needs static windows (tested below)
            i, o = _graph(name, shape, kw, name.startswith("dyn"))
            inputs += i
            outputs += o
        _compiled[mode_name] = pytensor.function(inputs, outputs, mode=mode_for(mode_name))
    return _compiled[mode_name]


# Numba and JAX compile the whole set for minutes on a loaded machine; the C
# code of every 3-D case kind is checked in test_pool_c.py.
SLOW_MODES = ("default", "jax", "cvm")


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(m, marks=pytest.mark.slow) if m in SLOW_MODES else m
        for m in MODE_NAMES_WITHOUT_C
    ],
)
def results(request, data):
    if request.param == "jax":
        pytest.importorskip("jax")
    ids = [n for n in IDS if not (request.param == "jax" and n.startswith("dyn"))]
    args = []
    for name, _, kw in CASES:
        if name not in ids:
            continue
        args += list(data[name])
        if name.startswith("dyn"):
            ws = kw["ws"]
            args += [np.array(ws), np.array(kw.get("stride") or ws), np.array(kw["pad"])]
    values = compiled(request.param)(*args)
    return {name: values[3 * i : 3 * i + 3] for i, name in enumerate(ids)}


@pytest.mark.parametrize("case", IDS)
def test_pool_gradient_and_second_order_match_reference(results, references, case):
    if case not in results:
        pytest.skip("symbolic windows do not compile under JAX (see the error test)")
    names = ("out", "d_input", "d_output_grad")
    for got, want, what in zip(results[case], references[case], names, strict=True):
        assert got.shape == want.shape, what
        np.testing.assert_allclose(got, want, atol=2e-6, rtol=1e-6, err_msg=what)


# --------------------------------------------------------------------------
# shapes, names, gradients, rewrites, errors


def test_static_shapes_and_printed_names():
    x = pt.tensor5(shape=(2, 3, 7, 6, 5))
    y = pool_3d(x, (2, 3, 2), ignore_border=False, stride=(2, 2, 1))
    assert y.type.shape == (2, 3, 4, 3, 4)
    assert str(y.owner.op) == (
        "Pool3d{ws=(2, 3, 2), stride=(2, 2, 1), pad=(0, 0, 0), ignore_border=False, mode='max'}"
    )
    g = pytensor.grad(y.sum(), x)
    assert str(g.owner.op).startswith("MaxPool3dGrad{ws=(2, 3, 2)")
    assert str(pool_2d(pt.tensor4(), 2, ignore_border=True).owner.op).startswith(
        "Pool2d{ws=(2, 2)"
    )
    # the leading axes are kept, whatever their number
    assert pool_3d(pt.tensor3(), 2, ignore_border=True).type.ndim == 3
    assert pool_3d(pt.tensor(shape=(None,) * 6), 2, ignore_border=True).type.ndim == 6


@pytest.mark.parametrize("mode_name", ["py", "default"])
def test_verify_grad_3d(mode_name):
    rng = np.random.default_rng(5)
    x = rng.permutation(90).reshape(1, 2, 3, 5, 3) / 7.0  # distinct values: max is smooth
    for kw in (
        dict(ws=(2, 2, 2), stride=(1, 2, 1), ignore_border=True),
        dict(ws=(2, 3, 2), pad=(1, 1, 0), mode="average_exc_pad", ignore_border=True),
    ):
        verify_grad(lambda a, kw=kw: pool_3d(a, **kw), [x], rng=rng, mode=mode_for(mode_name))


def test_grad_of_grad_ops_3d():
    x = pt.tensor5()
    gx = pytensor.grad((pool_3d(x, 2, ignore_border=True) ** 2).sum(), x)
    ggx = pytensor.grad((gx**2).sum(), x)
    ops = {type(n.op) for n in pytensor.graph.traversal.io_toposort([x], [ggx])}
    assert {MaxPoolGrad, MaxPoolGradGrad} <= ops
    ya = pool_3d(x, 2, ignore_border=True, mode="average_inc_pad")
    assert isinstance(pytensor.grad(ya.sum(), x).owner.op, AveragePoolGrad)


def test_constant_windows_become_the_static_op():
    x = pt.tensor4()
    h = pt.constant(7, dtype="int64")
    y = pool_2d(x, ws=(h // 2, 2), stride=(h // 3, 2), ignore_border=True, pad=None)
    assert isinstance(y.owner.op, DynamicPool)
    fn = pytensor.function([x], [y, pytensor.grad(y.sum(), x)])
    ops = {type(n.op) for n in fn.maker.fgraph.apply_nodes}
    assert Pool in ops and MaxPoolGrad in ops and DynamicPool not in ops
    xv = np.arange(2 * 7 * 6, dtype=pytensor.config.floatX).reshape(1, 2, 7, 6)
    np.testing.assert_allclose(
        fn(xv)[0], ref_pool(xv, dict(ws=(3, 2), stride=(2, 2), ignore_border=True))
    )


def test_symbolic_windows_from_the_input_shape():
    """Lasagne's SPP 'fast' pools with windows computed from the (unknown) input size."""
    x = pt.tensor4()
    h, w = x.shape[2], x.shape[3]
    y = pool_2d(
        x,
        ws=((h + 1) // 2, (w + 1) // 2),
        stride=(h // 2, w // 2),
        ignore_border=True,
        pad=None,
        mode="average_exc_pad",
    )
    fn = pytensor.function([x], y)
    xv = np.random.default_rng(0).standard_normal((2, 3, 9, 6)).astype(pytensor.config.floatX)
    want = ref_pool(xv, dict(ws=(5, 3), stride=(4, 3), ignore_border=True, mode="average_exc_pad"))
    np.testing.assert_allclose(fn(xv), want, rtol=1e-5)


def test_dynamic_window_errors():
    x = pt.tensor4()
    ws = pt.lvector()
    fn = pytensor.function([x, ws], pool_2d(x, ws=ws, ignore_border=True), mode=mode_for("py"))
    xv = np.zeros((1, 1, 4, 4), dtype=pytensor.config.floatX)
    with pytest.raises(ValueError, match=r"ws=\(0, 2\): expected values >= 1"):
        fn(xv, [0, 2])
    with pytest.raises(ValueError, match="ws has 3 entries; expected 2"):
        pool_2d(
            x, ws=pt.constant(np.array([2, 2, 2])) + pt.lvector(shape=(3,)), ignore_border=True
        )
    with pytest.raises(TypeError, match="expected an int or a vector of 2 ints"):
        pool_2d(x, ws=pt.vector(), ignore_border=True)
    pytest.importorskip("jax")
    with pytest.raises(NotImplementedError, match="JAX needs pooling windows known"):
        pytensor.function([x, ws], pool_2d(x, ws=ws, ignore_border=True), mode="JAX")(xv, [2, 2])


def test_bad_3d_arguments_are_named():
    x = pt.tensor5()
    with pytest.raises(TypeError, match=r"ws=\(2, 2\): expected an int or a tuple of 3 ints"):
        pool_3d(x, (2, 2), ignore_border=True)
    with pytest.raises(ValueError, match="padding requires ignore_border=True"):
        pool_3d(x, 2, ignore_border=False, pad=(1, 0, 0))
    with pytest.raises(ValueError, match="must be smaller than the pooling window"):
        pool_3d(x, 2, ignore_border=True, pad=(0, 2, 0))
    with pytest.raises(TypeError, match="pooling needs at least 3 dimensions"):
        pool_3d(pt.matrix(), 2, ignore_border=True)
    with pytest.warns(UserWarning, match="pool_3d: ignore_border was not given"):
        assert not pool_3d(x, 2).owner.op.ignore_border
