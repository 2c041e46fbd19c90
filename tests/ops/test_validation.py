"""One rule, one answer: the validation module and everything that uses it.

Layers and Ops refuse the same bad ``axes``, ``epsilon``, running-average
factor and dtype with the same error type and message when the graph is
built; symbolic values are refused when the graph runs, in every mode, with
that message again (inside JAX's own exception under JAX).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.layers import (
    BatchNormLayer,
    BiasLayer,
    GroupNormLayer,
    InputLayer,
    StandardizationLayer,
    get_output,
)
from lasagne_bn.layers.bn_storage import var_to_inv_std
from lasagne_bn.ops import BatchNormInference, BatchNormTrain, moments
from lasagne_bn.ops.api import batch_normalization_test, batch_normalization_train
from lasagne_bn.ops.validation import (
    ALPHA,
    EPSILON,
    LAYER_AXES_MODES,
    RULES,
    RUNNING_AVERAGE_FACTOR,
    OutOfRange,
    RangeCheck,
    checked,
    normalize_axes,
)
from tests.compile_modes import MODE_NAMES, mode_for

RNG = np.random.default_rng(16)


def _error(call):
    """``(type, message)`` of what ``call()`` raises."""
    with pytest.raises((TypeError, ValueError)) as info:
        call()
    return type(info.value), str(info.value)


# --------------------------------------------------------------------------
# the rules themselves


@pytest.mark.parametrize(
    ("axes", "ndim", "expected"),
    [
        ("spatial", 4, (0, 2, 3)),
        ("per-activation", 4, (0,)),
        ("spatial", 1, (0,)),  # Theano 1.0 too
        ((-1, 0), 4, (0, 3)),
        (np.array([3, 0]), 4, (0, 3)),
        (2, 3, (2,)),
        (np.int64(-1), 3, (2,)),
    ],
)
def test_normalize_axes(axes, ndim, expected):
    assert normalize_axes(axes, ndim) == expected


@pytest.mark.parametrize(
    ("axes", "error", "message"),
    [
        ((0, 4), ValueError, "axes=(0, 4) is out of range for inputs with ndim=4: expected "
         "axes in [-4, 3]"),
        ((-5,), ValueError, "axes=(-5,) is out of range"),
        ((0, -4), ValueError, "axes=(0, -4) repeats an axis: each axis may appear once"),
        ((0, 1.5), TypeError, "axes=(0, 1.5) must contain only ints, not 1.5"),
        ((True,), TypeError, "must contain only ints, not True"),
        (1.5, TypeError, "axes=1.5 (float) must be"),
        ("channel", ValueError, "axes='channel' is not a known mode"),
    ],
)  # fmt: skip
def test_normalize_axes_refuses(axes, error, message):
    with pytest.raises(error) as info:
        normalize_axes(axes, 4)
    assert message in str(info.value)


def test_empty_axes_are_the_callers_choice():
    with pytest.raises(ValueError, match=r"axes=\(\) is empty"):
        normalize_axes((), 3)
    assert normalize_axes((), 3, allow_empty=True) == ()
    assert normalize_axes("auto", 4, modes=LAYER_AXES_MODES) == (0, 2, 3)


VALUES = [-np.inf, -1.0, -0.0, 0.0, 1e-300, 1e-4, 0.5, 1.0, 1.5, 3.0, 1e300, np.inf, np.nan]


@pytest.mark.parametrize("rule", list(RULES.values()), ids=list(RULES))
def test_each_backends_test_is_the_rule(rule):
    """NumPy, the generated Python/Numba source and the traced JAX test agree."""
    for v in VALUES:
        expected = bool(rule.holds(np.float64(v)))
        assert bool(eval(rule.source("v"), {"np": np, "v": v})) is expected, v
        traced = jnp.asarray(v)  # float32 unless JAX runs with x64 (as PyTensor's JAX mode)
        with np.errstate(over="ignore"):
            same_dtype = np.asarray(v, traced.dtype)
        assert bool(rule.holds(traced, jnp)) is bool(rule.holds(same_dtype)), v
        if expected:
            rule.check(v)
        else:
            with pytest.raises(ValueError, match=f"{rule.name}=.* is out of range"):
                rule.check(np.asarray(v))


def test_messages_show_numbers_plainly():
    assert str(EPSILON.error(np.float32(-1.0))) == (
        "epsilon=-1.0 is out of range: expected a value in (0.0, inf)"
    )
    assert str(EPSILON.error(0)) == "epsilon=0 is out of range: expected a value in (0.0, inf)"
    assert "[1.0, inf]" in str(RULES["r_max"].error(0.5))
    assert isinstance(EPSILON.error(0.0), ValueError)
    # PyTensor's C linker re-raises an error as type(error)(message)
    assert str(OutOfRange(str(EPSILON.error(0.0)))) == str(EPSILON.error(0.0))


# --------------------------------------------------------------------------
# graph-build time: layers and Ops give the same error


L_IN = InputLayer((None, 3, 4, 5))
X4, G = pt.tensor4("x"), pt.vector("g")


@pytest.mark.parametrize("axes", [(0, 5), (-5, 0), (0, 0), (0, -4), (0, 1.5)])
def test_bad_axes_same_error_from_layer_and_op(axes):
    op = _error(lambda: batch_normalization_train(X4, G, G, axes=axes))
    assert _error(lambda: BatchNormLayer(L_IN, axes=axes)) == op
    assert _error(lambda: batch_normalization_test(X4, G, G, G, G, axes=axes)) == op
    assert _error(lambda: moments(X4, axes)) == op
    shared = _error(lambda: BiasLayer(L_IN, shared_axes=axes))
    assert shared == (op[0], op[1].replace("axes=", "shared_axes=", 1))


def test_negative_axes_mean_the_same_in_layer_and_op():
    layer = BatchNormLayer(L_IN, axes=(0, -2, -1))
    out = batch_normalization_train(X4, G, G, axes=(0, -2, -1))[0]
    assert layer.axes == out.owner.op.axes == (0, 2, 3)


def _epsilon_users(epsilon):
    """Every place that takes an epsilon, as a call that builds with it."""
    g4 = pt.tensor4("g4")
    return {
        "BatchNormLayer": lambda: BatchNormLayer(L_IN, epsilon=epsilon),
        "GroupNormLayer": lambda: GroupNormLayer(L_IN, groups=3, epsilon=epsilon),
        "StandardizationLayer": lambda: StandardizationLayer(L_IN, epsilon=epsilon),
        "batch_normalization_train": lambda: batch_normalization_train(
            X4, G, G, "spatial", epsilon
        ),
        "batch_normalization_test": lambda: batch_normalization_test(
            X4, G, G, G, G, "spatial", epsilon
        ),
        "BatchNormTrain": lambda: BatchNormTrain((0, 2, 3))(X4, g4, g4, epsilon),
        "BatchNormInference": lambda: BatchNormInference((0,))(X4, g4, g4, g4, g4, epsilon),
    }


@pytest.mark.parametrize("epsilon", [-1.0, 0.0, np.nan, np.inf, 0, "1e-4"])
def test_bad_epsilon_same_error_everywhere(epsilon):
    errors = {name: _error(call) for name, call in _epsilon_users(epsilon).items()}
    assert len(set(errors.values())) == 1, errors
    if not isinstance(epsilon, str):
        assert errors["BatchNormLayer"] == (OutOfRange, str(EPSILON.error(epsilon)))
        assert _error(lambda: var_to_inv_std(np.ones(2), epsilon)) == errors["BatchNormLayer"]


def test_constant_epsilon_tensor_is_checked_when_built():
    errors = {name: _error(call) for name, call in _epsilon_users(pt.constant(-1.0)).items()}
    assert set(errors.values()) == {(OutOfRange, str(EPSILON.error(-1.0)))}, errors


@pytest.mark.parametrize("factor", [-0.5, 1.5, np.nan])
def test_bad_factor_same_error_from_layer_and_op(factor):
    layer = _error(lambda: BatchNormLayer(L_IN, alpha=factor))
    op = _error(
        lambda: batch_normalization_train(
            X4, G, G, "spatial", running_average_factor=factor, running_mean=G, running_var=G
        )
    )
    assert op == (OutOfRange, str(RUNNING_AVERAGE_FACTOR.error(factor)))
    assert layer == (OutOfRange, str(ALPHA.error(factor)))


def test_bad_dtype_same_error_from_layer_and_op():
    x = pt.ltensor4("x")
    layer = _error(lambda: get_output(BatchNormLayer(L_IN), x))
    op = _error(lambda: batch_normalization_train(x, G, G, "spatial"))
    assert (
        layer
        == op
        == (
            TypeError,
            "inputs has dtype int64; expected a float dtype (float16, float32, float64)",
        )
    )
    assert _error(lambda: get_output(BatchNormLayer(L_IN), x, deterministic=True)) == op


def test_layer_passes_a_constant_epsilon_to_the_op_as_a_constant():
    """Lasagne's default updates need a dependency on the averages: not through epsilon."""
    for storage in ("inv_std", "var"):
        layer = BatchNormLayer(InputLayer((None, 3)), stat_storage=storage)
        out = get_output(layer)
        node = out.owner
        while not isinstance(node.op, BatchNormTrain):
            node = next(i.owner for i in node.inputs if i.owner is not None)
        assert isinstance(node.inputs[3], pt.TensorConstant), storage
        assert float(node.inputs[3].data) == 1e-4


# --------------------------------------------------------------------------
# run time: symbolic values, every mode

#: JAX passes our ValueError on inside its own exception (message included).
_RAISES = {
    name: (ValueError, RuntimeError) if name == "jax" else ValueError for name in MODE_NAMES
}
_FAST = ("py", "fast_compile", "jax")
_MODES = [m if m in _FAST else pytest.param(m, marks=pytest.mark.slow) for m in MODE_NAMES]


@pytest.mark.parametrize("mode_name", _MODES)
def test_range_check_op_in_every_mode(mode_name):
    a = pt.dscalar("a")
    f = pytensor.function([a], checked(a, ALPHA) * 2, mode=mode_for(mode_name))
    assert float(f(0.25)) == 0.5
    for bad in (1.5, -0.5, np.nan):
        with pytest.raises(_RAISES[mode_name]) as info:
            f(bad)
        assert str(ALPHA.error(bad)) in str(info.value)


def test_checked_adds_no_node_for_numbers_and_constants():
    assert checked(0.5, ALPHA) == 0.5
    const = pt.constant(0.5)
    assert checked(const, ALPHA) is const
    assert isinstance(checked(pt.dscalar(), ALPHA).owner.op, RangeCheck)
    with pytest.raises(ValueError, match=r"alpha=2\.0 is out of range"):
        checked(pt.constant(2.0), ALPHA)


@pytest.fixture(scope="module")
def layer_fns():
    """Per mode: two BatchNormLayers (both storages) with symbolic epsilon and alpha."""
    cache = {}

    def get(mode_name):
        if mode_name not in cache:
            eps, alpha = pt.dscalar("eps"), pt.dscalar("alpha")
            l_in = InputLayer((None, 3))
            layers = [
                BatchNormLayer(l_in, epsilon=eps, alpha=alpha, stat_storage=s)
                for s in ("inv_std", "var")
            ]
            outs, updates = get_output(layers, return_updates=True)
            cache[mode_name] = pytensor.function(
                [l_in.input_var, eps, alpha], outs, updates=updates, mode=mode_for(mode_name)
            )
        return cache[mode_name]

    return get


@pytest.mark.parametrize("mode_name", _MODES)
@pytest.mark.parametrize(
    ("epsilon", "alpha", "rule", "bad"),
    [(-1.0, 0.1, EPSILON, -1.0), (np.nan, 0.1, EPSILON, np.nan), (1e-4, 1.5, ALPHA, 1.5)],
)
def test_symbolic_bad_values_raise_when_run_in_every_mode(
    mode_name, epsilon, alpha, rule, bad, layer_fns
):
    fn = layer_fns(mode_name)
    x = RNG.normal(size=(4, 3)).astype(pytensor.config.floatX)
    outs = fn(x, 1e-4, 1.0)
    for out in outs:
        np.testing.assert_allclose(out.mean(0), 0.0, atol=1e-5)
    with pytest.raises(_RAISES[mode_name]) as info:
        fn(x, epsilon, alpha)
    assert str(rule.error(bad)) in str(info.value)
