"""``batch_normalization`` (BatchNormApply), default mode: the per-channel loop and its fallback.

Parameters that share one broadcast layout with adjacent kept axes take the
generated loop; others (kept axes apart, or sizes that broadcast at run
time) the broadcasting expression.  Both must equal the python linker's
``perform`` to rounding, for negative ``std``, at a large offset, and for a
Fortran-ordered input.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.mode import Mode

from lasagne_bn.ops import batch_normalization

# About PyTensor's default (Numba) mode itself: the default tier keeps it there.
pytestmark = pytest.mark.default_mode

LAYOUTS = [
    ((4, 5, 3, 6), (1, 5, 1, 1)),  # conv channels: the loop
    ((7, 9), (1, 9)),  # per-activation: the loop
    ((4, 5, 3, 6), (1, 5, 3, 1)),  # kept axes adjacent: the loop
    ((4, 5, 3, 6), (1, 1, 1, 6)),  # last axis kept: the loop
    ((4, 5, 3, 6), (1, 5, 1, 6)),  # kept axes apart: the expression
]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize(("shape", "pshape"), LAYOUTS, ids=lambda v: str(v))
def test_default_mode_equals_perform(shape, pshape, dtype):
    rng = np.random.default_rng(0)
    x = pt.tensor(dtype=dtype, shape=(None,) * len(shape))
    params = [pt.tensor(dtype=dtype, shape=tuple(1 if s == 1 else None for s in pshape))]
    params += [params[0].type() for _ in range(3)]
    out = batch_normalization(x, *params)
    fast = pytensor.function([x, *params], out)
    reference = pytensor.function([x, *params], out, mode=Mode(linker="py", optimizer=None))
    xv = (1e3 + rng.standard_normal(shape)).astype(dtype)
    pv = [rng.standard_normal(pshape).astype(dtype) for _ in range(3)]
    sign = np.where(rng.random(pshape) < 0.3, -1.0, 1.0)
    pv.append((sign * (0.5 + rng.random(pshape))).astype(dtype))  # std, some negative
    want = reference(xv, *pv)
    for xin in (xv, np.asfortranarray(xv)):
        got = fast(xin, *pv)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=np.finfo(dtype).eps * 4, atol=0)


def test_parameters_that_broadcast_at_run_time_take_the_expression():
    x = pt.tensor4("x")
    params = [pt.tensor4(shape=(1, None, 1, 1)) for _ in range(4)]
    f = pytensor.function([x, *params], batch_normalization(x, *params))
    xv = np.ones((2, 3, 2, 2), dtype=x.dtype)
    one = np.full((1, 1, 1, 1), 2.0, dtype=x.dtype)  # size 1, not the 3 channels
    # (1 - 2) * (2 / 2) + 2, broadcast over the 3 channels, as NumPy (and perform) do
    np.testing.assert_allclose(f(xv, one, one, one, one), np.ones((2, 3, 2, 2)))


# Which parameters are scalars (all axes broadcastable): Lasagne's inference
# graph folds inv_std into gamma and passes std = 1 as a constant.
SCALARS = [(3,), (0, 3), (1, 2), (0, 1, 2)]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("scalars", SCALARS, ids=lambda v: "scalar" + "".join(map(str, v)))
def test_scalar_parameters_take_the_loop_and_equal_perform(scalars, dtype):
    from lasagne_bn.ops.numba.bn import _apply_loop

    rng = np.random.default_rng(1)
    shape = (4, 5, 3, 6)
    x = pt.tensor(dtype=dtype, shape=(None,) * 4)
    channel = pt.tensor(dtype=dtype, shape=(1, None, 1, 1))
    params, values = [], []
    for k in range(4):
        pshape = (1, 1, 1, 1) if k in scalars else (1, 5, 1, 1)
        params.append(pt.tensor(dtype=dtype, shape=pshape) if k in scalars else channel.type())
        values.append((0.5 + rng.random(pshape)).astype(dtype))
    out = batch_normalization(x, *params)
    assert _apply_loop(out.owner, dtype), "the per-channel loop should serve this layout"
    fast = pytensor.function([x, *params], out)
    reference = pytensor.function([x, *params], out, mode=Mode(linker="py", optimizer=None))
    xv = (1e3 + rng.standard_normal(shape)).astype(dtype)
    want = reference(xv, *values)
    got = fast(xv, *values)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=np.finfo(dtype).eps * 4, atol=0)


def test_all_scalar_parameters_take_the_expression():
    from lasagne_bn.ops.numba.bn import _apply_loop

    x = pt.tensor4("x")
    params = [pt.tensor4(shape=(1, 1, 1, 1)) for _ in range(4)]
    out = batch_normalization(x, *params)
    assert _apply_loop(out.owner, x.dtype) == []  # no channel axis to loop over
    values = [np.full((1, 1, 1, 1), v, dtype=x.dtype) for v in (2.0, 1.0, 0.5, 4.0)]
    xv = np.arange(24, dtype=x.dtype).reshape(2, 3, 2, 2)
    np.testing.assert_allclose(
        pytensor.function([x, *params], out)(xv, *values), (xv - 0.5) * 0.5 + 1
    )


def test_layouts_that_differ_in_broadcasting_only_do_not_share_code():
    # Same Op, dtypes and ndims: a scalar std first, then a per-channel one.
    # The generated code of the first indexes std at 0; the second must not
    # get it from the cache (it did when the key held dtypes and ndims, not
    # the generated code).
    from lasagne_bn.ops.numba._codegen import node_key
    from lasagne_bn.ops.numba.bn import _apply_loop

    x = pt.tensor3("x")
    channel = [pt.tensor3(n, shape=(1, None, 1)) for n in "gbm"]
    scalar_std = pt.tensor3("s1", shape=(1, 1, 1))
    channel_std = pt.tensor3("s", shape=(1, None, 1))
    rng = np.random.default_rng(2)
    xv = rng.normal(size=(3, 4, 2))
    pv = [rng.normal(size=(1, 4, 1)) for _ in range(3)]
    first = batch_normalization(x, *channel, scalar_std)
    second = batch_normalization(x, *channel, channel_std)
    codes = [_apply_loop(out.owner, "float64") for out in (first, second)]
    keys = [
        node_key(out.owner.op, out.owner, "v", code)
        for out, code in zip((first, second), codes, strict=True)
    ]
    assert codes[0] != codes[1] and keys[0] != keys[1]
    sv = np.full((1, 1, 1), 1.5)
    got = pytensor.function([x, *channel, scalar_std], first)(xv, *pv, sv)
    np.testing.assert_allclose(got, (xv - pv[2]) * (pv[0] / sv) + pv[1], rtol=1e-12)
    std = rng.uniform(1, 2, (1, 4, 1))
    got = pytensor.function([x, *channel, channel_std], second)(xv, *pv, std)
    np.testing.assert_allclose(got, (xv - pv[2]) * (pv[0] / std) + pv[1], rtol=1e-12)
