"""Update rules vs NumPy re-implementations of Lasagne's formulas; constraints; errors."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn import updates
from lasagne_bn.utils import is_portable, portable_shared

C = np.array([[1.0, 2.0, 0.5], [0.1, 3.0, 1.5]])
W0 = np.array([[1.0, -2.0, 0.3], [0.7, 0.2, -1.1]])
STEPS = 3


def _grad(w):
    return 2 * C * w  # of sum(C * w**2)


def np_steps(rule, w, steps=STEPS, **kw):
    """Lasagne's update formulas in float64 NumPy."""
    w = w.copy()
    z = lambda: np.zeros_like(w)  # noqa: E731
    s = {"v": z(), "a": z(), "d": z(), "m": z(), "u": z(), "vh": z(), "t": 0}
    for _ in range(steps):
        g = _grad(w)
        lr = kw.get("learning_rate")
        if rule == "sgd":
            w = w - lr * g
        elif rule == "momentum":
            s["v"] = kw["momentum"] * s["v"] - lr * g
            w = w + s["v"]
        elif rule == "nesterov_momentum":
            s["v"] = kw["momentum"] * s["v"] - lr * g
            w = w + kw["momentum"] * s["v"] - lr * g
        elif rule == "adagrad":
            s["a"] = s["a"] + g**2
            w = w - lr * g / np.sqrt(s["a"] + kw["epsilon"])
        elif rule == "rmsprop":
            s["a"] = kw["rho"] * s["a"] + (1 - kw["rho"]) * g**2
            w = w - lr * g / np.sqrt(s["a"] + kw["epsilon"])
        elif rule == "adadelta":
            rho, eps = kw["rho"], kw["epsilon"]
            s["a"] = rho * s["a"] + (1 - rho) * g**2
            step = g * np.sqrt(s["d"] + eps) / np.sqrt(s["a"] + eps)
            w = w - lr * step
            s["d"] = rho * s["d"] + (1 - rho) * step**2
        else:
            b1, b2, eps = kw["beta1"], kw["beta2"], kw["epsilon"]
            s["t"] += 1
            t = s["t"]
            s["m"] = b1 * s["m"] + (1 - b1) * g
            if rule == "adamax":
                s["u"] = np.maximum(b2 * s["u"], abs(g))
                w = w - lr / (1 - b1**t) * s["m"] / (s["u"] + eps)
                continue
            s["v"] = b2 * s["v"] + (1 - b2) * g**2
            a_t = lr * np.sqrt(1 - b2**t) / (1 - b1**t)
            if rule == "amsgrad":
                s["vh"] = np.maximum(s["vh"], s["v"])
                w = w - a_t * s["m"] / (np.sqrt(s["vh"]) + eps)
            else:
                w = w - a_t * s["m"] / (np.sqrt(s["v"]) + eps)
    return w


RULES = {
    "sgd": dict(learning_rate=0.1),
    "momentum": dict(learning_rate=0.1, momentum=0.9),
    "nesterov_momentum": dict(learning_rate=0.1, momentum=0.9),
    "adagrad": dict(learning_rate=1.0, epsilon=1e-6),
    "rmsprop": dict(learning_rate=1.0, rho=0.9, epsilon=1e-6),
    "adadelta": dict(learning_rate=1.0, rho=0.95, epsilon=1e-6),
    "adam": dict(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8),
    "adamax": dict(learning_rate=0.002, beta1=0.9, beta2=0.999, epsilon=1e-8),
    "amsgrad": dict(learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8),
}


@pytest.mark.parametrize("rule", list(RULES))
def test_rule_matches_numpy(rule):
    w = portable_shared(W0.copy(), name="w", shape=W0.shape)
    loss = pt.sum(C * w**2)
    kwargs = RULES[rule]
    # the defaults are Lasagne's: passing only the learning rate where there is none
    if rule in ("sgd", "momentum", "nesterov_momentum"):
        upd = getattr(updates, rule)(loss, [w], **kwargs)
    else:
        upd = getattr(updates, rule)(loss, [w])
    assert all(is_portable(v) for v in upd)
    assert all(v.type == e.type or v.type.is_super(e.type) for v, e in upd.items())
    f = pytensor.function([], [], updates=upd, mode="FAST_COMPILE")
    for _ in range(STEPS):
        f()
    np.testing.assert_allclose(w.get_value(), np_steps(rule, W0, **kwargs), rtol=1e-12, atol=1e-15)


@pytest.mark.default_mode
def test_rules_run_in_the_default_mode_and_keep_float32():
    w = portable_shared(W0.astype("float32"), name="w", shape=W0.shape)
    loss = pt.sum(pt.as_tensor(C.astype("float32")) * w**2)
    upd = updates.adam(loss, [w], learning_rate=0.01)
    f = pytensor.function([], loss, updates=upd)
    f()
    f()
    assert w.get_value().dtype == np.float32
    want = np_steps("adam", W0, steps=2, **dict(RULES["adam"], learning_rate=0.01))
    np.testing.assert_allclose(w.get_value(), want, rtol=1e-5)


def test_gradient_list_and_errors():
    w = portable_shared(np.ones(3), name="w")
    upd = updates.sgd([pt.ones(3)], [w], learning_rate=0.5)
    pytensor.function([], [], updates=upd, mode="FAST_COMPILE")()
    np.testing.assert_allclose(w.get_value(), 0.5)
    with pytest.raises(ValueError, match="Got 2 gradient expressions for 1 parameters"):
        updates.sgd([pt.ones(3), pt.ones(3)], [w], learning_rate=0.5)
    with pytest.raises(ValueError, match=r"shared variables only; params\[0\]"):
        updates.sgd(pt.sum(w * 2), [w * 2], learning_rate=0.5)


def test_apply_momentum_to_a_subset():
    w = portable_shared(np.ones(2), name="w")
    b = portable_shared(np.ones(2), name="b")
    base = updates.sgd(pt.sum(w) + pt.sum(b), [w, b], learning_rate=0.1)
    upd = updates.apply_momentum(base, [w], momentum=0.5)
    assert len(upd) == 3 and upd[b] is base[b]
    upd = updates.apply_nesterov_momentum(base, momentum=0.5)
    assert len(upd) == 4


def test_norm_constraint():
    r = np.random.RandomState(0)
    W = r.randn(5, 3) * 4
    out = updates.norm_constraint(pt.as_tensor(W), max_norm=2.0).eval(mode="FAST_COMPILE")
    norms = np.sqrt((W**2).sum(axis=0))
    np.testing.assert_allclose(out, W * np.minimum(norms, 2.0) / (1e-7 + norms))
    conv = r.randn(2, 3, 2, 2)
    out = updates.norm_constraint(pt.as_tensor(conv), 1.0).eval(mode="FAST_COMPILE")
    assert np.all(np.sqrt((out**2).sum(axis=(1, 2, 3))) <= 1.0 + 1e-6)
    with pytest.raises(ValueError, match="Unsupported tensor dimensionality 1"):
        updates.norm_constraint(pt.vector(), 1.0)


def test_total_norm_constraint():
    a, b = np.array([3.0, 0.0]), np.array([0.0, 4.0])
    scaled, norm = updates.total_norm_constraint(
        [pt.as_tensor(a), pt.as_tensor(b)], max_norm=1.0, return_norm=True
    )
    assert float(norm.eval(mode="FAST_COMPILE")) == pytest.approx(5.0)
    np.testing.assert_allclose(scaled[0].eval(mode="FAST_COMPILE"), a / 5, rtol=1e-6)
    np.testing.assert_allclose(scaled[1].eval(mode="FAST_COMPILE"), b / 5, rtol=1e-6)
    same = updates.total_norm_constraint([pt.as_tensor(a)], max_norm=10.0)
    np.testing.assert_allclose(same[0].eval(mode="FAST_COMPILE"), a, rtol=1e-6)
