"""Theano names whose PyTensor counterparts are deprecated: lasagne_bn_compat's own, no warning.

``T.sgn``, ``T.extract_diag``, ``T.complex_from_polar``, ``T.Lop`` / ``T.Rop``,
``theano.as_op``, ``theano.sparse.mul`` / ``sub`` warn in PyTensor;
``T.batched_dot`` / ``batched_tensordot`` are gone from PyTensor 3.3.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import QUIET, legacy  # noqa: F401  (the fixture)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy")]

MODE = "FAST_COMPILE"


@pytest.fixture
def no_deprecation():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", FutureWarning)
        yield


def _run(inputs, outputs, *values):
    return pytensor.function(inputs, outputs, mode=MODE, on_unused_input="ignore")(*values)


def test_elementwise_names(no_deprecation):
    import theano.tensor as T

    x = T.vector("x")
    m = T.matrix("m")
    v = np.array([-2.0, 0.0, 3.0], x.dtype)
    a = np.arange(9, dtype=m.dtype).reshape(3, 3)
    sgn, diag, polar = _run(
        [x, m], [T.sgn(x), T.extract_diag(m), T.complex_from_polar(x, x)], v, a
    )
    np.testing.assert_array_equal(sgn, np.sign(v))
    np.testing.assert_array_equal(diag, np.diag(a))
    np.testing.assert_allclose(polar, v * np.exp(1j * v), rtol=1e-6)


@pytest.mark.parametrize(
    ("a_shape", "b_shape"),
    [((4, 2, 3), (4, 3, 5)), ((4, 3), (4, 3)), ((4, 2, 3), (4, 3)), ((4,), (4, 3, 2)),
     ((4, 3, 2), (4,)), ((4, 2, 3, 5), (4, 5, 2))],
)  # fmt: skip
def test_batched_dot_is_dot_per_batch_entry(no_deprecation, a_shape, b_shape):
    import theano.tensor as T

    rng = np.random.default_rng(1)
    a = pt.tensor("a", dtype="float64", shape=(None,) * len(a_shape))
    b = pt.tensor("b", dtype="float64", shape=(None,) * len(b_shape))
    av, bv = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    got = _run([a, b], T.batched_dot(a, b), av, bv)
    if len(a_shape) == 1:
        want = [av[i] * bv[i] for i in range(4)]
    elif len(b_shape) == 1:
        want = [av[i] * bv[i] for i in range(4)]
    else:
        want = [np.dot(av[i], bv[i]) for i in range(4)]
    np.testing.assert_allclose(got, np.stack(want), rtol=1e-12)


@pytest.mark.parametrize(
    ("x_shape", "y_shape", "axes", "np_axes"),
    [
        ((3, 2, 4), (3, 4, 5), 1, 1),
        ((3, 2, 4, 5), (3, 4, 5, 6), 2, 2),
        ((3, 4, 2), (3, 5, 4), [[1], [2]], [[0], [1]]),
        ((3, 4, 2, 5), (3, 4, 5), [[1, 3], [1, 2]], [[0, 2], [0, 1]]),
    ],
)
def test_batched_tensordot_counts_axes_on_the_whole_tensors(
    no_deprecation, x_shape, y_shape, axes, np_axes
):
    import theano.tensor as T

    rng = np.random.default_rng(2)
    x = pt.tensor("x", dtype="float64", shape=(None,) * len(x_shape))
    y = pt.tensor("y", dtype="float64", shape=(None,) * len(y_shape))
    xv, yv = rng.standard_normal(x_shape), rng.standard_normal(y_shape)
    got = _run([x, y], T.batched_tensordot(x, y, axes), xv, yv)
    want = np.stack([np.tensordot(xv[i], yv[i], np_axes) for i in range(3)])
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_batched_tensordot_refuses_the_batch_axis():
    import theano.tensor as T

    with pytest.raises(ValueError, match="batch axis 0"):
        T.batched_tensordot(pt.tensor3(), pt.tensor3(), [[0], [1]])
    with pytest.raises(TypeError, match=r"x.ndim=1"):
        T.batched_tensordot(pt.vector(), pt.tensor3(), 1)


def test_lop_rop_are_pullback_pushforward(no_deprecation):
    import theano
    import theano.tensor as T

    x = T.vector("x")
    w = np.array([[1.0, 2.0], [3.0, 4.0]], x.dtype)
    y = T.dot(theano.shared(w), x)
    u = T.vector("u")
    jv = T.Rop(y, x, u)
    vj = T.Lop(y, x, u)
    assert theano.gradient.Rop is T.Rop and theano.gradient.Lop is T.Lop
    one = np.array([1.0, -1.0], x.dtype)
    got_jv, got_vj = _run([x, u], [jv, vj], one, one)
    np.testing.assert_allclose(got_jv, w @ one)
    np.testing.assert_allclose(got_vj, one @ w)


def test_as_op_and_sparse_names(no_deprecation):
    import scipy.sparse
    import theano
    import theano.compile
    import theano.compile.ops
    import theano.sparse

    @theano.as_op(itypes=[pt.dvector], otypes=[pt.dvector])
    def twice(v):
        return 2 * v

    assert theano.compile.as_op is theano.as_op is theano.compile.ops.as_op
    x = pt.dvector("x")
    np.testing.assert_array_equal(_run([x], twice(x), np.ones(2)), [2.0, 2.0])
    a = theano.sparse.csr_matrix("a", dtype="float64")
    b = theano.sparse.csr_matrix("b", dtype="float64")
    av = scipy.sparse.csr_matrix(np.array([[1.0, 0.0], [0.0, 2.0]]))
    bv = scipy.sparse.csr_matrix(np.array([[3.0, 0.0], [1.0, 2.0]]))
    prod, diff = _run([a, b], [theano.sparse.mul(a, b), theano.sparse.sub(a, b)], av, bv)
    np.testing.assert_array_equal(prod.toarray(), av.multiply(bv).toarray())
    np.testing.assert_array_equal(diff.toarray(), (av - bv).toarray())
