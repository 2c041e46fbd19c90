"""Batch-norm ops against a float64 NumPy reference, in every compile mode.

Each (case, mode) compiles ONE function holding four applications of
``batch_normalization_train`` (reduced/full parameter layout x with/without
running statistics) and ``batch_normalization_test``, with the gradients of a
loss that reads every output (given as output gradients), so that the whole
matrix costs few compiles.  Reference gradients are central differences of
the NumPy reference.
"""

from __future__ import annotations

import functools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import MODE_NAMES, mode_for, one_compiled_backend

from lasagne_bn.ops import batch_normalization_test, batch_normalization_train

EPS = 1e-3
FACTOR = 0.3

CASES = {
    "2d_per_activation": ((6, 4), "per-activation"),
    "4d_spatial": ((4, 3, 2, 3), "spatial"),
    "3d_axes": ((4, 3, 5), (0, 2)),
    "3d_axes_not_adjacent": ((3, 4, 5), (1,)),
    "5d_axes": ((3, 2, 2, 3, 2), (0, 2, 3, 4)),
    "5d_axes_not_adjacent": ((2, 3, 2, 2, 3), (0, 1, 3)),
}
VARIANTS = [(layout, running) for layout in ("reduced", "full") for running in (False, True)]


def norm_axes(axes, ndim):
    if axes == "per-activation":
        return (0,)
    if axes == "spatial":
        return (0, *range(2, ndim))
    return tuple(axes)


# --------------------------------------------------------------------------
# float64 NumPy reference


def ref_train(x, gamma, beta, rmean, rvar, axes):
    """Outputs of batch_normalization_train for full-layout params (float64)."""
    x = x.astype(np.float64)
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    invstd = 1.0 / np.sqrt(var + EPS)
    out = (x - mean) * gamma * invstd + beta
    m = np.prod([x.shape[a] for a in axes])
    new_mean = rmean * (1 - FACTOR) + mean * FACTOR
    new_var = rvar * (1 - FACTOR) + var * m / (m - 1) * FACTOR
    return out, mean, invstd, new_mean, new_var


def ref_test(x, gamma, beta, mean, var):
    return (x - mean) * gamma / np.sqrt(var + EPS) + beta


def numeric_grad(f, arrays, index, h=1e-6):
    """Central-difference gradient of scalar ``f(*arrays)`` w.r.t. arrays[index]."""
    base = [a.astype(np.float64).copy() for a in arrays]
    target = base[index]
    grad = np.zeros_like(target)
    for i in np.ndindex(target.shape):
        old = target[i]
        target[i] = old + h
        up = f(*base)
        target[i] = old - h
        down = f(*base)
        target[i] = old
        grad[i] = (up - down) / (2 * h)
    return grad


class Problem:
    """Random data and loss weights for one case; reduced and full layouts."""

    def __init__(self, shape, axes_arg, dtype="float64", seed=0):
        rng = np.random.default_rng(seed)
        self.shape, self.axes_arg, self.dtype = shape, axes_arg, dtype
        self.axes = norm_axes(axes_arg, len(shape))
        self.stat_shape = tuple(1 if i in self.axes else s for i, s in enumerate(shape))
        self.reduced_shape = tuple(s for i, s in enumerate(shape) if i not in self.axes)
        self.x = rng.normal(1.5, 2.0, size=shape).astype(dtype)
        self.gamma = rng.normal(1.0, 0.5, size=self.stat_shape).astype(dtype)
        self.beta = rng.normal(0.0, 0.5, size=self.stat_shape).astype(dtype)
        self.rmean = rng.normal(0.0, 1.0, size=self.stat_shape).astype(dtype)
        self.rvar = rng.uniform(0.5, 2.0, size=self.stat_shape).astype(dtype)
        # weights of the loss sum(w_out*out) + sum(w_k * stat_k)
        self.w = [rng.normal(size=shape)] + [rng.normal(size=self.stat_shape) for _ in range(4)]
        self.w_test = rng.normal(size=shape)

    def param(self, value, layout):
        return value if layout == "full" else value.reshape(self.reduced_shape)

    def loss_train(self, x, gamma, beta, rmean, rvar, running):
        outs = ref_train(x, gamma, beta, rmean, rvar, self.axes)
        n = 5 if running else 3
        return sum(float((w * o).sum()) for w, o in zip(self.w[:n], outs[:n], strict=True))

    def loss_test(self, x, gamma, beta, mean, var):
        return float((self.w_test * ref_test(x, gamma, beta, mean, var)).sum())


# --------------------------------------------------------------------------
# symbolic side: one compiled function per (case, mode)


def tensor(name, shape, dtype):
    return pt.tensor(name, dtype=dtype, shape=(None,) * len(shape))


@functools.cache
def compiled(case: str, mode_name: str, dtype: str = "float64"):
    shape, axes_arg = CASES[case]
    prob = Problem(shape, axes_arg, dtype)
    inputs, outputs, names = [], [], []
    for layout, running in VARIANTS:
        pshape = prob.stat_shape if layout == "full" else prob.reduced_shape
        x = tensor("x", shape, dtype)
        g, b, rm, rv = (tensor(n, pshape, dtype) for n in ("g", "b", "rm", "rv"))
        kwargs = {"running_mean": rm, "running_var": rv} if running else {}
        outs = batch_normalization_train(
            x, g, b, axes=axes_arg, epsilon=EPS, running_average_factor=FACTOR, **kwargs
        )
        # The loss sum(w_k * output_k) enters as its output gradients w_k:
        # the same gradients, without a loss graph to compile.
        weights = [pt.as_tensor(prob.param(w, layout) if i else w) for i, w in enumerate(prob.w)]
        known = dict(zip(outs, weights[: len(outs)], strict=True))
        wrt = [x, g, b] + ([rm, rv] if running else [])
        grads = pytensor.grad(None, wrt, known_grads=known)
        inputs += [x, g, b, rm, rv]
        outputs += list(outs) + grads
        names.append((layout, running, len(outs), len(grads)))
    # the inference op, reduced layout
    x = tensor("xt", shape, dtype)
    g, b, mu, var = (tensor(n, prob.reduced_shape, dtype) for n in ("gt", "bt", "mt", "vt"))
    out = batch_normalization_test(x, g, b, mu, var, axes=axes_arg, epsilon=EPS)
    grads = pytensor.grad(None, [x, g, b, mu, var], known_grads={out: pt.as_tensor(prob.w_test)})
    inputs += [x, g, b, mu, var]
    outputs += [out, *grads]
    fn = pytensor.function(inputs, outputs, mode=mode_for(mode_name), on_unused_input="ignore")
    args = []
    for layout, _ in VARIANTS:
        args += [prob.x] + [
            prob.param(v, layout) for v in (prob.gamma, prob.beta, prob.rmean, prob.rvar)
        ]
    args += [prob.x] + [
        prob.param(v, "reduced") for v in (prob.gamma, prob.beta, prob.rmean, prob.rvar)
    ]
    return prob, names, fn(*args)


@functools.cache
def reference(case: str):
    shape, axes_arg = CASES[case]
    prob = Problem(shape, axes_arg)
    full = (prob.x, prob.gamma, prob.beta, prob.rmean, prob.rvar)
    results = {}
    for running in (False, True):
        outs = ref_train(*full, prob.axes)[: 5 if running else 3]
        n_grads = 5 if running else 3
        loss = functools.partial(prob.loss_train, running=running)
        grads = [numeric_grad(loss, full, i) for i in range(n_grads)]
        results[running] = list(outs) + grads
    test_args = (prob.x, prob.gamma, prob.beta, prob.rmean, prob.rvar)
    test_out = ref_test(*test_args)
    test_grads = [numeric_grad(prob.loss_test, test_args, i) for i in range(5)]
    results["test"] = [test_out, *test_grads]
    return results


# The default tier compiles each layout in one compiled backend (inner == 1 and
# inner > 1 in each, a transposing layout in each).
@pytest.mark.parametrize(
    ("case", "mode_name"),
    one_compiled_backend(
        CASES, MODE_NAMES, {"2d_per_activation", "4d_spatial", "3d_axes_not_adjacent"}
    ),
)
def test_outputs_and_gradients_match_numpy(case, mode_name):
    prob, names, got = compiled(case, mode_name)
    ref = reference(case)
    pos = 0
    for layout, running, n_outs, n_grads in names:
        want = ref[running]
        for k in range(n_outs + n_grads):
            value = got[pos + k]
            expected = want[k]
            if layout == "reduced" and k > 0:
                expected = (
                    expected.reshape(value.shape) if expected.size == value.size else expected
                )
            tol = 1e-5 if k >= n_outs else 1e-9
            np.testing.assert_allclose(
                value.reshape(expected.shape),
                expected,
                rtol=tol,
                atol=tol,
                err_msg=f"{case} {mode_name} layout={layout} running={running} item={k}",
            )
            if layout == "reduced" and 0 < k < n_outs:
                assert value.shape == prob.reduced_shape
        pos += n_outs + n_grads
    for k, expected in enumerate(ref["test"]):
        value = got[pos + k]
        np.testing.assert_allclose(
            value.reshape(expected.shape),
            expected,
            rtol=1e-5 if k else 1e-9,
            atol=1e-5 if k else 1e-9,
            err_msg=f"{case} {mode_name} batch_normalization_test item={k}",
        )
