"""Losses and accuracies vs NumPy; aggregate modes; error cases."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.basic import Variable, equal_computations

from lasagne_bn import objectives as O

R = np.random.RandomState(0)
P = R.dirichlet(np.ones(4), size=6)  # rows of probabilities
T_IDX = R.randint(0, 4, 6)
T_HOT = np.eye(4)[T_IDX]


def ev(expr):
    if not isinstance(expr, Variable):  # NumPy in gave NumPy out, as in Lasagne
        return np.asarray(expr)
    return pytensor.function([], expr, mode="FAST_COMPILE")()


def test_binary_crossentropy():
    p, t = R.rand(5, 1) * 0.9 + 0.05, (R.rand(5) > 0.5).astype(float)
    # a column of predictions with a vector of targets: Lasagne aligns them
    column = pt.specify_broadcastable(pt.as_tensor(p), 1)
    got = ev(O.binary_crossentropy(column, pt.as_tensor(t)))
    want = -(t[:, None] * np.log(p) + (1 - t[:, None]) * np.log(1 - p))
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_categorical_crossentropy_indices_and_one_hot():
    want = -np.log(P[np.arange(6), T_IDX])
    np.testing.assert_allclose(ev(O.categorical_crossentropy(P, T_IDX)), want, rtol=1e-12)
    np.testing.assert_allclose(ev(O.categorical_crossentropy(P, T_HOT)), want, rtol=1e-12)
    with pytest.raises(TypeError, match="rank mismatch"):
        O.categorical_crossentropy(P, np.zeros((6, 4, 1)))
    with pytest.raises(TypeError, match="must be integers"):
        O.categorical_crossentropy(P, T_IDX.astype(float))


def test_squared_error_and_huber():
    a, b = R.randn(3, 4), R.randn(3, 4)
    np.testing.assert_allclose(ev(O.squared_error(a, b)), (a - b) ** 2)
    d = np.abs(a - b)
    want = np.where(d <= 0.5, 0.5 * d**2, 0.5 * (d - 0.25))
    np.testing.assert_allclose(ev(O.huber_loss(a, b, delta=0.5)), want, rtol=1e-12)


def test_aggregate_modes():
    loss, w = R.rand(4, 3), R.rand(4, 3)
    np.testing.assert_allclose(ev(O.aggregate(loss)), loss.mean())
    np.testing.assert_allclose(ev(O.aggregate(loss, w)), (loss * w).mean())
    np.testing.assert_allclose(ev(O.aggregate(loss, mode="sum")), loss.sum())
    np.testing.assert_allclose(
        ev(O.aggregate(loss, w, mode="normalized_sum")), (loss * w).sum() / w.sum()
    )
    assert ev(O.aggregate(pt.as_tensor(np.array([True, False, True, True])))) == 0.75
    with pytest.raises(ValueError, match="require weights"):
        O.aggregate(loss, mode="normalized_sum")
    with pytest.raises(ValueError, match="got 'median'"):
        O.aggregate(loss, mode="median")


def test_aggregate_builds_lasagnes_expressions():
    # Lasagne's tests (and some legacy code) compare aggregate's graph with
    # the expression written out; mode 'C' aborts on the full mean (see
    # tests/layers/test_backends.py), so it is not compiled here.
    x, w = pt.matrix("x"), pt.matrix("w")
    pairs = [
        (O.aggregate(x), x.mean()),
        (O.aggregate(x, mode="sum"), x.sum()),
        (O.aggregate(x, w), (x * w).mean()),
        (O.aggregate(x, w, mode="sum"), (x * w).sum()),
        (O.aggregate(x, w, "normalized_sum"), (x * w).sum() / w.sum()),
    ]
    for got, want in pairs:
        assert equal_computations([got], [want])
    assert not equal_computations([O.aggregate(x)], [x.sum()])


def test_numpy_in_numpy_out_where_lasagne_gave_numpy():
    loss, w = R.rand(3, 4), R.rand(3, 4)
    got = O.aggregate(loss, w, "normalized_sum")
    assert isinstance(got, np.floating)
    np.testing.assert_allclose(got, (loss * w).sum() / w.sum())
    assert isinstance(O.aggregate(loss), np.floating)


def test_hinge_losses():
    logits, t = R.randn(5), (R.rand(5) > 0.5).astype(float)
    got = ev(O.binary_hinge_loss(logits, t, log_odds=True))
    np.testing.assert_allclose(got, np.maximum(0, 1 - logits * (2 * t - 1)))
    probs = R.rand(5) * 0.8 + 0.1
    got = ev(O.binary_hinge_loss(probs, 2 * t - 1, log_odds=False, binary=False, delta=0.5))
    odds = np.log(probs / (1 - probs))
    np.testing.assert_allclose(got, np.maximum(0, 0.5 - odds * (2 * t - 1)), rtol=1e-12)
    with pytest.raises(FutureWarning):
        O.binary_hinge_loss(logits, t)
    correct = P[np.arange(6), T_IDX]
    rest = np.where(T_HOT.astype(bool), -np.inf, P).max(axis=1)
    want = np.maximum(0, rest - correct + 1)
    np.testing.assert_allclose(ev(O.multiclass_hinge_loss(P, T_IDX)), want, rtol=1e-12)
    np.testing.assert_allclose(ev(O.multiclass_hinge_loss(P, T_HOT)), want, rtol=1e-12)


def test_accuracies():
    p = R.rand(6)
    t = (R.rand(6) > 0.5).astype(float)
    np.testing.assert_array_equal(ev(O.binary_accuracy(p, t)), (p >= 0.5) == t)
    np.testing.assert_array_equal(ev(O.categorical_accuracy(P, T_IDX)), P.argmax(1) == T_IDX)
    np.testing.assert_array_equal(ev(O.categorical_accuracy(P, T_HOT)), P.argmax(1) == T_IDX)
    top2 = np.argsort(P, axis=1)[:, -2:]
    want = (top2 == T_IDX[:, None]).any(axis=1)
    np.testing.assert_array_equal(ev(O.categorical_accuracy(P, T_IDX, top_k=2)), want)
    with pytest.raises(TypeError, match="rank mismatch"):
        O.categorical_accuracy(P, np.zeros((6, 4, 1)))


def test_integer_target_losses_trace_under_jax_with_a_computed_batch_size():
    # The batch size of these predictions is computed (a reshape), so
    # arange(predictions.shape[0]) could not be traced by JAX.
    pytest.importorskip("jax")
    x, t = pt.matrix("x"), pt.ivector("t")
    w = pytensor.shared(np.arange(12.0).reshape(4, 3) * 0.1, name="W")
    p = pt.special.softmax(pt.dot(x, w), axis=-1).reshape((-1, 3))
    xv = np.random.RandomState(0).randn(6, 4)
    tv = np.array([0, 2, 1, 2, 0, 1], dtype="int32")
    for loss_fn in (O.categorical_crossentropy, O.multiclass_hinge_loss):
        loss = loss_fn(p, t).mean()
        outs = [loss, pytensor.grad(loss, w)]
        want = pytensor.function([x, t], outs, mode="FAST_COMPILE")(xv, tv)
        got = pytensor.function([x, t], outs, mode="JAX")(xv, tv)
        for g, r in zip(got, want, strict=True):
            np.testing.assert_allclose(np.asarray(g), r, rtol=1e-10, atol=1e-12)
    probs = np.exp(xv @ w.get_value())
    probs /= probs.sum(1, keepdims=True)
    cce = pytensor.function([x, t], O.categorical_crossentropy(p, t), mode="JAX")
    np.testing.assert_allclose(np.asarray(cce(xv, tv)), -np.log(probs[np.arange(6), tv]))
