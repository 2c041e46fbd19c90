"""The batch-norm Ops' C code (modes ``C`` and ``CVM``) against their NumPy ``perform``.

Each case compiles ONE function holding every Op (training with running
averages, its gradient with and without gradients reaching the statistics,
inference, the broadcasting ``BatchNormApply``), applied to a contiguous
input and to a transposed view of it, and runs it in ``C``, ``CVM`` and the
python linker (``perform``).  ``tests/ops/test_bn.py`` and
``test_bn_numerics.py`` check the same Ops against float64 references in
every mode; here the point is that C and ``perform`` agree node for node.
"""

from __future__ import annotations

import functools
import re
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from busy_cores import busy_cores
from compile_modes import mode_for
from pytensor.compile.debug.debugmode import DebugMode

from lasagne_bn.ops import batch_normalization_train
from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormCOp,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
)

C_MODES = ["c", "cvm"]

CASES = {
    # name: (shape, axes, dtype)
    "dense_f32": ((9, 13), (0,), "float32"),
    "spatial_f64": ((4, 3, 5, 6), (0, 2, 3), "float64"),
    "spatial_f32": ((3, 5, 7, 5), (0, 2, 3), "float32"),
    "not_adjacent_f32": ((3, 4, 5), (1,), "float32"),
    "not_adjacent_5d_f64": ((2, 3, 2, 2, 3), (0, 1, 3), "float64"),
    "all_axes_f64": ((6, 5), (0, 1), "float64"),
    "batch_of_one_f32": ((1, 3, 4, 4), (0, 2, 3), "float32"),
    "per_activation_batch_of_one_f64": ((1, 4), (0,), "float64"),
}


def full_shape(shape, axes):
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


def tensor(name, ndim, dtype):
    return pt.tensor(name, dtype=dtype, shape=(None,) * ndim)


def all_ops(x, params, axes):
    """Every Op applied to ``x``; ``params`` are full-layout tensors."""
    g, b, rm, rv, mu, var, gm, gv = params
    out, mean, invstd, new_rm, new_rv = BatchNormTrain(axes)(x, g, b, 1e-3, 0.3, rm, rv)
    dy = pt.sin(x * 3.0)
    grads = BatchNormTrainGrad(axes)(x, dy, g, mean, invstd)
    grads_stats = BatchNormTrainGrad(axes)(x, dy, g, mean, invstd, gm, gv)
    test_out = BatchNormInference(axes)(x, g, b, mu, var, 1e-3)
    applied = BatchNormApply()(x, g, b, mu, pt.sqrt(var + 1.0))
    return [out, mean, invstd, new_rm, new_rv, *grads, *grads_stats, test_out, applied]


class Case:
    def __init__(self, name, offset=0.0):
        shape, axes, dtype = CASES[name]
        rng = np.random.default_rng(len(name))
        self.shape, self.axes, self.dtype = shape, axes, dtype
        stat = full_shape(shape, axes)
        self.x = (offset + rng.normal(0.5, 2.0, size=shape)).astype(dtype)
        self.params = [rng.normal(1.0, 0.5, size=stat).astype(dtype) for _ in range(4)]
        self.params[3] = np.abs(self.params[3]) + 0.1  # running var
        self.params += [
            rng.normal(size=stat).astype(dtype),  # mean
            rng.uniform(0.5, 2.0, size=stat).astype(dtype),  # var
            rng.normal(size=stat).astype(dtype),  # g_mean
            rng.normal(size=stat).astype(dtype),  # g_var
        ]


@functools.cache
def compiled(name: str, mode_name: str):
    shape, axes, dtype = CASES[name]
    ndim = len(shape)
    x = tensor("x", ndim, dtype)
    # The same data given transposed: the Ops see a non-contiguous view.
    xt = tensor("xt", ndim, dtype)
    params = [tensor(f"p{i}", ndim, dtype) for i in range(8)]
    params = [pt.specify_broadcastable(p, *axes) for p in params]
    outputs = all_ops(x, params, axes) + all_ops(xt.T, params, axes)[:3]
    mode = mode_for(mode_name)
    return pytensor.function([x, xt, *params], outputs, mode=mode)


def run(name: str, mode_name: str, offset: float = 0.0):
    case = Case(name, offset)
    fn = compiled(name, mode_name)
    return fn(case.x, np.ascontiguousarray(case.x.T), *case.params)


def uses_c(fn) -> bool:
    """Whether every batch-norm node of a CVM function runs a C thunk."""
    nodes = fn.maker.fgraph.toposort()
    ours = [
        (n, t) for n, t in zip(nodes, fn.vm.thunks, strict=True) if isinstance(n.op, BatchNormCOp)
    ]
    return bool(ours) and all(hasattr(t, "cthunk") for _, t in ours)


def assert_same(got, want, dtype):
    tol = 2e-5 if dtype == "float32" else 1e-11
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g.dtype == w.dtype and g.shape == w.shape, k
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol, err_msg=f"output {k}")


# The default tier runs the cases the other tests here compile anyway, which
# cover both C paths (inner == 1 and inner > 1) and both dtypes; every layout
# also runs in the C VM in test_bn.py.  The rest wait for the full tier.
DEFAULT_TIER_CASES = {"dense_f32", "spatial_f32", "spatial_f64", "per_activation_batch_of_one_f64"}


# perform's running variance of a one-value batch is 0 * inf (NaN), and says so.
@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
@pytest.mark.parametrize("mode_name", C_MODES)
@pytest.mark.parametrize(
    "name",
    [n if n in DEFAULT_TIER_CASES else pytest.param(n, marks=pytest.mark.slow) for n in CASES],
)
def test_c_matches_perform(name, mode_name):
    got = run(name, mode_name)
    want = run(name, "py")
    assert_same(got, want, CASES[name][2])
    # The transposed view gives the same training outputs.
    n_view = 3
    for g, w in zip(got[-n_view:], want[:n_view], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    if mode_name == "cvm":
        assert uses_c(compiled(name, mode_name))


@pytest.mark.filterwarnings("ignore:invalid value encountered in multiply:RuntimeWarning")
def test_batch_of_one_running_variance_is_nan_as_in_perform():
    got = run("per_activation_batch_of_one_f64", "cvm")
    assert np.isnan(got[4]).all() and not np.isnan(got[3]).any()


@pytest.mark.parametrize("mode_name", C_MODES)
def test_offset_1e6_float32_is_exact(mode_name):
    """float32 ``1e6 + N(0, 1)``: the float64 shifted sums keep the variance."""
    got = run("spatial_f32", mode_name, offset=1e6)
    want = run("spatial_f32", "py", offset=1e6)
    x64 = Case("spatial_f32", 1e6).x.astype(np.float64)
    axes = (0, 2, 3)
    true_invstd = 1 / np.sqrt(x64.var(axis=axes, keepdims=True) + 1e-3)
    np.testing.assert_allclose(got[1], x64.mean(axis=axes, keepdims=True), rtol=1e-7)
    np.testing.assert_allclose(got[2], true_invstd, rtol=1e-5)
    np.testing.assert_allclose(got[0], want[0], atol=1e-4)
    np.testing.assert_allclose(got[2], want[2], rtol=1e-5)


@functools.cache
def big_outputs(shape, axes, mode_name):
    """Large enough for the C kernels to split the work over threads."""
    x = tensor("x", len(shape), "float32")
    g = pt.specify_broadcastable(tensor("g", len(shape), "float32"), *axes)
    out, mean, invstd = BatchNormTrain(axes)(x, g, g, 1e-4)
    dx, dg, db = BatchNormTrainGrad(axes)(x, pt.cos(x), g, mean, invstd)
    fn = pytensor.function([x, g], [out, mean, invstd, dx, dg, db], mode=mode_for(mode_name))
    rng = np.random.default_rng(5)
    data = (3.0 + rng.standard_normal(shape, dtype=np.float32)).astype(np.float32)
    return fn(data, np.full(full_shape(shape, axes), 1.5, np.float32))


@pytest.mark.parametrize(
    "shape, axes", [((8, 16, 64, 64), (0, 2, 3)), ((1024, 512), (0,))], ids=["nchw", "dense"]
)
def test_threaded_path_matches_perform(shape, axes):
    got = big_outputs(shape, axes, "cvm")
    want = big_outputs(shape, axes, "py")
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        # float32 sums over 32 Ki values: perform sums in float32 (einsum)
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4, err_msg=f"output {k}")


# --------------------------------------------------------------------------
# errors: the same ValueError, word for word, in C and in perform


@functools.cache
def error_functions(mode_name):
    x = pt.matrix("x")
    g, b = pt.matrix("g"), pt.matrix("b")
    eps, factor = pt.dscalar("eps"), pt.dscalar("factor")
    g1, b1 = (pt.specify_broadcastable(v, 0) for v in (g, b))
    train = BatchNormTrain((0,))(x, g1, b1, eps, factor, g1, b1)
    dy = pt.matrix("dy")
    grad = BatchNormTrainGrad((0,))(x, dy, g1, g1, g1)
    test = BatchNormInference((0,))(x, g1, b1, g1, b1, eps)
    v = pt.matrix("v")
    apply = BatchNormApply()(x, v, v, v, v)
    mode = mode_for(mode_name)
    return {
        "train": pytensor.function([x, g, b, eps, factor], train, mode=mode),
        "grad": pytensor.function([x, dy, g], grad, mode=mode),
        "test": pytensor.function([x, g, b, eps], test, mode=mode),
        "apply": pytensor.function([x, v], apply, mode=mode),
    }


X = np.ones((3, 4))
ROW = np.ones((1, 4))
BAD_CALLS = {
    "epsilon": ("train", (X, ROW, ROW, -1.0, 0.1)),
    "epsilon_nan": ("train", (X, ROW, ROW, np.nan, 0.1)),
    "factor": ("train", (X, ROW, ROW, 1e-4, 1.5)),
    "gamma_shape": ("train", (X, np.ones((1, 5)), ROW, 1e-4, 0.1)),
    "m_zero": ("train", (np.ones((0, 4)), ROW, ROW, 1e-4, 0.1)),
    "grad_dy_shape": ("grad", (X, np.ones((2, 4)), ROW)),
    "grad_stat_shape": ("grad", (X, X, np.ones((1, 3)))),
    "test_epsilon": ("test", (X, ROW, ROW, 0.0)),
    "test_shape": ("test", (X, ROW, np.ones((1, 2)), 1e-4)),
    "apply_broadcast": ("apply", (X, np.ones((2, 4)))),
}


def error_message(mode_name, which, args):
    with pytest.raises(ValueError) as info:
        error_functions(mode_name)[which](*args)
    # PyTensor appends "Apply node that caused the error: ..." hints.
    return str(info.value).split("\nApply node")[0]


@pytest.mark.parametrize("mode_name", C_MODES)
@pytest.mark.parametrize("bad", list(BAD_CALLS))
def test_c_raises_perform_error(bad, mode_name):
    which, args = BAD_CALLS[bad]
    want = error_message("py", which, args)
    got = error_message(mode_name, which, args)
    assert got == want
    assert "refused inputs the NumPy reference accepts" not in got
    assert re.search(r"\w", got)


# --------------------------------------------------------------------------
# DebugMode: C and perform run side by side on every node


@pytest.mark.slow  # the default tier's DebugMode check: test_bn_numerics.py
def test_debugmode_compares_c_with_perform():
    x = pt.tensor4("x")
    g, b = pt.vector("g"), pt.vector("b")
    rm, rv = pt.vector("rm"), pt.vector("rv")
    out, mean, invstd, new_rm, new_rv = batch_normalization_train(
        x, g, b, axes="spatial", running_mean=rm, running_var=rv
    )
    loss = (out * pt.cos(x)).sum() + (mean * invstd).sum()
    grads = pytensor.grad(loss, [x, g, b])
    fn = pytensor.function(
        [x, g, b, rm, rv],
        [out, new_rm, new_rv, *grads],
        mode=DebugMode(check_py_code=True, check_c_code=True, stability_patience=1),
    )
    ops = {type(n.op) for n in fn.maker.fgraph.toposort()}
    assert {BatchNormTrain, BatchNormTrainGrad} <= ops
    rng = np.random.default_rng(7)
    data = rng.normal(2.0, 1.5, size=(3, 2, 2, 3))
    fn(data, np.ones(2), np.zeros(2), np.zeros(2), np.ones(2))


# --------------------------------------------------------------------------
# gradients through the C path


def test_gradients_through_c_match_finite_differences():
    rng = np.random.default_rng(11)
    weights = rng.normal(size=(4, 3, 2, 2))

    def loss(x, g, b):
        out, mean, invstd = batch_normalization_train(x, g, b, axes="spatial")
        return (out * weights).sum() + (mean * invstd).sum()

    data = [rng.normal(size=(4, 3, 2, 2)), rng.normal(1, 0.2, size=3), rng.normal(size=3)]
    pytensor.gradient.verify_grad(loss, data, rng=rng, mode="CVM", abs_tol=1e-6, rel_tol=1e-6)


def test_float16_runs_perform_under_cvm_without_warning():
    x = pt.matrix("x", dtype="float16")
    g = pt.vector("g", dtype="float32")
    out, mean, invstd = batch_normalization_train(x, g, g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fn = pytensor.function([x, g], [out, mean], mode="CVM")
    data = np.random.default_rng(3).normal(size=(6, 2)).astype("float16")
    got = fn(data, np.ones(2, "float32"))
    assert got[0].dtype == np.float16
    np.testing.assert_allclose(got[1], data.astype(np.float64).mean(0), rtol=1e-6)


# --------------------------------------------------------------------------
# threads: as many as the cores can give, the same bits however many


def test_busy_cores_change_no_result():
    """A large call is split into the same pieces on a busy machine (fewer threads run them).

    (64, 8, 32, 32): two pieces of 2 ** 18 elements, and two of the convolution's batch.
    """
    import os

    from lasagne_bn.ops.conv import conv2d

    x, w = pt.tensor4("x", dtype="float32"), pt.tensor4("w", dtype="float32")
    ones, zeros = pt.ones((1, 8, 1, 1), "float32"), pt.zeros((1, 8, 1, 1), "float32")
    out, mean, invstd = batch_normalization_train(x, ones, zeros, axes="spatial")[:3]
    conv = conv2d(x, w, border_mode="half")
    fn = pytensor.function(
        [x, w],
        [out, mean, invstd, pytensor.grad((out**2).sum(), x), pytensor.grad((conv**2).sum(), w)],
        mode="CVM",
    )
    r = np.random.RandomState(0)
    args = ((r.randn(64, 8, 32, 32) * 3 + 5).astype("float32"), r.randn(8, 8, 3, 3).astype("f4"))
    quiet = fn(*args)
    with busy_cores(os.cpu_count()):
        busy = fn(*args)
    for a, b in zip(quiet, busy, strict=True):
        np.testing.assert_array_equal(a, b)


_HELPERS_SCRIPT = """
import os, pickle
import numpy as np, pytensor, pytensor.tensor as pt
from lasagne_bn.ops import batch_normalization_test, batch_normalization_train
from lasagne_bn.ops.c import common as c_common

x, g = pt.matrix("x", dtype="float32"), pt.vector("g", dtype="float32")
out = batch_normalization_train(x, g, g * 0, axes="per-activation")[0]
fn = pytensor.function([x, g], [out, pytensor.grad((out**2).sum(), x)], mode="CVM")
infer = pytensor.function([x, g], batch_normalization_test(x, g, g * 0, g * 0, g,
                          axes="per-activation"), mode="CVM")
r = np.random.RandomState(1)
data, gamma = r.randn(512, 1024).astype("float32"), np.ones(1024, "float32")
tasks = lambda: len(os.listdir("/proc/self/task"))
before = tasks()
expected = fn(data, gamma)
infer(data, gamma)
assert tasks() - before <= 1, (tasks(), before)  # LASAGNE_BN_C_THREADS=2: one helper
pools = [k for k in vars(c_common) if k.startswith("_c_helpers_")]
assert len(pools) == 1, pools

read, write = os.pipe()
pid = os.fork()
if pid == 0:
    try:
        with os.fdopen(write, "wb") as w:
            pickle.dump(fn(data, gamma), w)
    finally:
        os._exit(0)
os.close(write)
with os.fdopen(read, "rb") as rd:
    got = pickle.load(rd)
os.waitpid(pid, 0)
for a, b in zip(expected, got, strict=True):
    np.testing.assert_array_equal(a, b)
print("ok")
"""


def test_c_helpers_are_shared_and_survive_fork():
    """The C modules share one set of helper threads, and a forked child starts its own.

    In a fresh interpreter (no JAX threads to fork), with two threads fixed:
    a (512, 1024) training step and an inference, two C modules, start one
    helper thread and one pool; a forked child computes the same bits as its
    parent, so it did not wait for the parent's helpers, which it lacks.
    """
    import os
    import subprocess
    import sys

    # Two threads fixed: the pool is used whatever the machine's load.
    env = dict(os.environ, LASAGNE_BN_C_THREADS="2")
    done = subprocess.run(
        [sys.executable, "-c", _HELPERS_SCRIPT],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


@pytest.mark.default_mode
@pytest.mark.optimized_build  # both compilers fuse the affine pass's multiply-add
def test_large_outputs_stream_with_the_default_modes_bits():
    """From 16 MiB the C affine pass streams its stores, as the default mode's: same bits."""
    from lasagne_bn.ops import batch_normalization_test
    from lasagne_bn.ops.c import bn as c_bn

    x = pt.tensor4("x", dtype="float32")
    v = pt.vector("v", dtype="float32")
    out = batch_normalization_test(x, v, v * 0.5, v * 0.1, v, axes="spatial")
    r = np.random.RandomState(4)
    data = r.randn(4, 64, 128, 129).astype("float32")  # odd rows: heads and tails
    assert data.nbytes >= c_bn.STREAM_BYTES
    vec = r.uniform(0.5, 1.5, 64).astype("float32")
    got = pytensor.function([x, v], out, mode="CVM")(data, vec)
    want = pytensor.function([x, v], out)(data, vec)
    np.testing.assert_array_equal(got, want)
