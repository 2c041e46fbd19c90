"""utils: create_param, collect_shared_vars, portable_shared, set_default_update, small helpers."""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn import utils
from lasagne_bn.utils import (
    as_theano_expression,
    as_tuple,
    collect_shared_vars,
    compute_norms,
    create_param,
    floatX,
    inspect_kwargs,
    int_types,
    is_portable,
    match_type,
    one_hot,
    portable_shared,
    set_default_update,
    shared_empty,
    unique,
)


def test_small_helpers():
    assert isinstance(np.int64(3), int_types) and isinstance(np.prod((2, 3)), int_types)
    assert floatX([1, 2]).dtype == np.dtype(pytensor.config.floatX)
    assert shared_empty(3).get_value().shape == (1, 1, 1)
    assert unique([3, 1, 3, 2, 1]) == [3, 1, 2]
    assert inspect_kwargs(lambda a, b, c=42, bar="x": 0) == ["c", "bar"]
    assert inspect_kwargs(lambda x, *args, **kwargs: 0) == []
    np.testing.assert_array_equal(
        one_hot(pt.as_tensor([0, 2])).eval(mode="FAST_COMPILE"), [[1, 0, 0], [0, 0, 1]]
    )
    x = pt.matrix()
    assert as_theano_expression(x) is x
    with pytest.raises(TypeError, match="not a PyTensor expression"):
        as_theano_expression(object())


def test_as_tuple():
    assert as_tuple(3, 2) == (3, 3)
    assert as_tuple([1, 2], 2, int_types) == (1, 2)
    with pytest.raises(ValueError, match="length 4"):
        as_tuple([1, 2, 3], 4)
    with pytest.raises(TypeError, match="of int,"):
        as_tuple("asdf", 4, int_types)
    with pytest.raises(TypeError, match="of int or float,"):
        as_tuple("asdf", 4, (int, float))


def test_collect_shared_vars_order():
    x, y, z = (pytensor.shared(0.0, name=n) for n in "xyz")
    assert collect_shared_vars([x, y, z]) == [x, y, z]
    assert collect_shared_vars([x, y, x, y, y, z]) == [x, y, z]
    assert collect_shared_vars((x + y) + z) == [x, y, z]
    assert collect_shared_vars(x + (y + z)) == [x, y, z]
    assert collect_shared_vars([x**2, y * z * np.ones(10), x + pt.matrix()]) == [x, y, z]
    assert collect_shared_vars([pt.matrix() + pt.matrix(), pt.log(pt.matrix())]) == []


def test_compute_norms():
    a = np.random.RandomState(0).randn(4, 3, 2, 2)
    np.testing.assert_allclose(compute_norms(a), np.sqrt((a**2).sum(axis=(1, 2, 3))))
    np.testing.assert_allclose(
        compute_norms(pt.as_tensor(a)).eval(mode="FAST_COMPILE"), compute_norms(a)
    )
    np.testing.assert_allclose(compute_norms(a, norm_axes=(0, 2)), np.sqrt((a**2).sum((0, 2))))
    np.testing.assert_allclose(compute_norms(np.array([-1.0, 2.0])), [1.0, 2.0])
    with pytest.raises(RuntimeError, match="Unsupported type"):
        compute_norms([1.0])
    with pytest.raises(ValueError, match="Unsupported tensor dimensionality"):
        compute_norms(np.zeros((1,) * 6))


def test_create_param_kinds():
    arr = np.random.RandomState(0).randn(2, 3)
    p = create_param(arr, (2, 3), name="p")
    assert p.name == "p" and p.type.shape == (2, 3) and is_portable(p)
    np.testing.assert_array_equal(p.get_value(), arr)
    assert create_param(np.zeros((1, 3), "float32"), [1, 3]).broadcastable == (True, False)
    assert create_param(np.zeros((2,), "float32"), (2,)).dtype == "float32"
    assert float(create_param(2.5, ()).get_value()) == 2.5
    assert float(create_param(np.float32(2.5), ()).get_value()) == 2.5
    shared = pytensor.shared(arr)
    assert create_param(shared, (2, 3), name="s") is shared and shared.name == "s"
    expr = shared * 2
    assert create_param(lambda shape: expr, (2, 3)) is expr
    calls = []
    assert create_param(lambda shape: calls.append(shape) or np.ones(shape), (2, 3)) is not None
    assert calls == [(2, 3)]


@pytest.mark.parametrize(
    ("spec", "shape", "error", "match"),
    [
        (np.zeros((2, 3)), (3, 2), ValueError, r"numpy array has shape \(2, 3\)"),
        (pytensor.shared(np.zeros(3)), (3, 1), ValueError, "has 1 dimensions, should be 2"),
        (pytensor.shared(np.zeros(3)), (4,), ValueError, r"holds a value of shape \(3,\)"),
        (pt.vector(shape=(3,)), (4,), ValueError, "static shape"),
        (lambda shape: np.zeros((1,)), (2,), ValueError, "returned by the provided callable"),
        (lambda shape: "x", (2,), TypeError, "returned by the provided callable"),
        ("x", (2,), TypeError, "not a numpy array, a PyTensor expression, or a callable"),
        (np.zeros(2), (0, 2), ValueError, "non-positive"),
    ],
)
def test_create_param_errors(spec, shape, error, match):
    with pytest.raises(error, match=match):
        create_param(spec, shape, name="p")


def test_portable_shared_keeps_writable_numpy_arrays():
    ro = np.ones(3)
    ro.setflags(write=False)
    v = portable_shared(ro, borrow=True)
    assert v.get_value(borrow=True).flags.writeable
    v.set_value(ro, borrow=True)
    assert v.get_value(borrow=True).flags.writeable and v.get_value(borrow=True) is not ro
    jnp = pytest.importorskip("jax.numpy")
    v.container.storage[0] = jnp.arange(3.0)  # what a JAX function's update writes
    value = v.get_value(borrow=True)
    assert type(value) is np.ndarray and value.flags.writeable
    np.testing.assert_array_equal(value, [0.0, 1.0, 2.0])
    clone = v.clone()
    assert clone.container.storage is v.container.storage


def test_portable_shared_after_a_jax_update():
    pytest.importorskip("jax")
    w = portable_shared(np.ones(3), name="w", shape=(3,))
    x = pt.vector("x")
    pytensor.function([x], (x * w).sum(), updates={w: w * 2}, mode="JAX")(np.ones(3))
    value = w.get_value(borrow=True)
    assert type(value) is np.ndarray and value.flags.writeable
    f = pytensor.function([x], (x * w).sum(), updates={w: w + 1})  # Numba, in place
    assert f(np.ones(3)) == 6.0
    np.testing.assert_array_equal(w.get_value(), 3.0)


def test_set_default_update_without_deprecation_warning():
    count = portable_shared(np.zeros(()), name="count")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        set_default_update(count, count + 1)
    f = pytensor.function([], count, mode="FAST_COMPILE")
    f()
    f()
    assert float(count.get_value()) == 2.0


def test_set_default_update_gets_the_exact_type():
    v = portable_shared(np.zeros(3, "float32"), shape=(3,))
    set_default_update(v, v + np.float64(0.5))  # float64 expression: cast back
    assert v.default_update.type == v.type
    loose = pytensor.shared(np.zeros(3, "float32"))  # static shape unknown
    set_default_update(loose, loose * 2)
    assert loose.default_update.type == loose.type
    with pytest.raises(TypeError, match="static shape"):
        set_default_update(loose, pt.zeros((3,), dtype="float32"))
    with pytest.raises(TypeError, match="same ndim"):
        set_default_update(v, pt.zeros((3, 1), dtype="float32"))
    with pytest.raises(TypeError, match="must be a shared variable"):
        set_default_update(pt.vector(), pt.vector())


def test_match_type_pins_static_shape():
    target = pt.vector(shape=(4,)).type
    out = match_type(pt.vector(), target)
    assert out.type == target
    with pytest.raises(TypeError, match="expected shape"):
        match_type(pt.vector(shape=(3,)), target)


def test_utils_module_exports():
    for name in utils.__all__:
        assert hasattr(utils, name)
