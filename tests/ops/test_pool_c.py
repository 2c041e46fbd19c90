"""The pooling Ops' C code (modes ``C`` and ``CVM``) against their NumPy reference.

Each case compiles one function holding, for every pooling mode, the
forward Op and its gradient Ops (max: ``MaxPoolGrad`` and
``MaxPoolGradGrad``; the others: ``AveragePoolGrad``), runs it on a
C-ordered and a Fortran-ordered (non-contiguous) input with tied maxima,
and compares with the NumPy functions ``perform`` falls back to.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.ops import pool
from lasagne_bn.ops.pool import AveragePoolGrad, MaxPoolGrad, MaxPoolGradGrad, Pool

MODES = ("max", "sum", "average_inc_pad", "average_exc_pad")

CASES = {
    # name: (shape, ws, stride, pad, ignore_border, dtype, compile modes)
    "2d_pad_f64": ((2, 3, 7, 6), (2, 3), (1, 2), (1, 1), True, "float64", ("c", "cvm")),
    "2d_partial_f32": ((2, 3, 7, 6), (3, 2), None, (0, 0), False, "float32", ("c",)),
    "2d_overlap_partial_f32": ((3, 5, 6), (3, 3), (2, 1), (0, 0), False, "float32", ("c",)),
    "3d_pad_f32": ((3, 7, 5, 6), (2, 3, 2), (1, 2, 3), (1, 0, 1), True, "float32", ("c",)),
    "3d_partial_f64": ((1, 2, 7, 5, 6), (3, 2, 2), (2, 1, 3), (0, 0, 0), False, "float64", ("c",)),
}

PARAMS = [(name, m) for name, case in CASES.items() for m in case[-1]]


def compiled(name, mode):
    shape, ws, st, pad, ib, dtype, _ = CASES[name]
    x = pt.tensor("x", dtype=dtype, shape=(None,) * len(shape))
    outs = []
    for m in MODES:
        y = Pool(ws, st, pad, ib, m)(x)
        gz = pt.sin(y)
        if m == "max":
            outs += [
                y,
                MaxPoolGrad(ws, st, pad, ib, m)(x, y, gz),
                MaxPoolGradGrad(ws, st, pad, ib, m)(x, y, pt.cos(x)),
            ]
        else:
            outs += [y, AveragePoolGrad(ws, st, pad, ib, m)(x, gz)]
    return pytensor.function([x], outs, mode=mode.upper())


def references(name, x):
    shape, ws, st, pad, ib, dtype, _ = CASES[name]
    refs = []
    for m in MODES:
        p = pool.PoolParams(ws, st, pad, ib, m)
        y = pool.np_pool(x, p)
        refs.append(y)
        if m == "max":
            refs.append(pool.np_max_pool_grad(x, y, np.sin(y), p))
            refs.append(pool.np_max_pool_grad_grad(x, y, np.cos(x), p))
        else:
            refs.append(pool.np_average_pool_grad(x.shape, np.sin(y), p, x.dtype))
    return refs


@pytest.mark.parametrize("name,mode", PARAMS, ids=[f"{a}-{b}" for a, b in PARAMS])
def test_c_matches_numpy_reference(name, mode):
    shape, *_, dtype, _ = CASES[name]
    rng = np.random.default_rng(len(name))
    x = rng.normal(size=shape).astype(dtype)
    x[..., 1] = x[..., 0]  # tied maxima: the first one in row-major order takes the gradient
    x[..., 2, :] = x[..., 1, :]
    refs = references(name, x)
    f = compiled(name, mode)
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == "float32" else dict(rtol=1e-13, atol=1e-13)
    for order in "CF":
        got = f(np.asarray(x, order=order))
        for g, r in zip(got, refs, strict=True):
            assert g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_allclose(g, r, **tol)


@pytest.mark.filterwarnings("ignore:invalid value encountered")
def test_nan_and_inf_follow_the_reference():
    name = "2d_pad_f64"
    x = np.random.default_rng(0).normal(size=CASES[name][0])
    x[0, 0, 1, 1] = np.nan
    x[1, 2] = -np.inf  # a whole plane of -inf: padding taps tie with the maximum
    got = compiled(name, "c")(x)
    for g, r in zip(got, references(name, x), strict=True):  # NaN where, and only where, NaN
        np.testing.assert_allclose(g, r, rtol=1e-13, atol=1e-13)


def test_c_runtime_errors_are_performs():
    x = pt.tensor4("x")
    y = pt.tensor4("y")
    f = pytensor.function([x, y], MaxPoolGrad((2, 2))(x, y, y), mode="C")
    xv = np.zeros((1, 1, 4, 4), x.dtype)
    with pytest.raises(ValueError, match=r"maxout has shape \(1, 1, 3, 3\); expected"):
        f(xv, np.zeros((1, 1, 3, 3), x.dtype))


@pytest.mark.parametrize("mode", ["max", "average_exc_pad"])
def test_windows_known_only_at_run_time(mode):
    """``DynamicPool`` (windows from the input's shape) runs its C code with those windows."""
    from lasagne_bn.ops.pool import DynamicPool, pool_2d

    x = pt.tensor4("x")
    ws = (x.shape[2] // 2, x.shape[3] // 2)
    y = pool_2d(x, ws, ignore_border=False, stride=(1, 2), mode=mode)
    gx = pytensor.grad((y * pt.sin(y)).sum(), x)
    f = pytensor.function([x], [y, gx], mode="C")
    assert any(isinstance(n.op, DynamicPool) for n in f.maker.fgraph.apply_nodes)
    rng = np.random.default_rng(4)
    xv = rng.normal(size=(2, 3, 7, 9)).astype(x.dtype)
    p = pool.PoolParams((3, 4), (1, 2), None, False, mode)
    ref = pool.np_pool(xv, p)
    dy = ref * np.cos(ref) + np.sin(ref)
    if mode == "max":
        ref_gx = pool.np_max_pool_grad(xv, ref, dy, p)
    else:
        ref_gx = pool.np_average_pool_grad(xv.shape, dy, p, xv.dtype)
    got = f(np.asfortranarray(xv))
    np.testing.assert_allclose(got[0], ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], ref_gx, rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="ws="):  # ws = 0 on the rows: PoolParams' error
        f(xv[:, :, :1])
