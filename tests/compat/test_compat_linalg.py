"""``theano.tensor.nlinalg`` / ``slinalg``: PyTensor's linalg under Theano's names, no warnings.

PyTensor's own ``pytensor.tensor.nlinalg`` / ``slinalg`` warn for every name
read from them (3.0.7 and 3.3.x); lasagne_bn_compat's modules read ``pytensor.tensor.linalg``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import QUIET, legacy  # noqa: F401  (the fixture)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy")]

NLINALG = [
    "MatrixInverse", "matrix_inverse", "MatrixPinv", "pinv", "matrix_dot", "AllocDiag",
    "alloc_diag", "extract_diag", "diag", "trace", "Det", "det", "Eig", "eig", "Eigh", "eigh",
    "qr", "SVD", "svd", "lstsq", "matrix_power", "norm", "TensorInv", "tensorinv",
    "TensorSolve", "tensorsolve",
]  # fmt: skip
SLINALG = [
    "Cholesky", "cholesky", "Solve", "solve", "solve_lower_triangular",
    "solve_upper_triangular", "solve_symmetric", "Eigvalsh", "eigvalsh", "kron", "Expm", "expm",
]  # fmt: skip


@pytest.mark.parametrize(
    ("module", "names"), [("theano.tensor.nlinalg", NLINALG), ("theano.tensor.slinalg", SLINALG)]
)
def test_theanos_names_are_there_without_a_warning(module, names):
    import importlib

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mod = importlib.import_module(module)
        for name in names:
            assert getattr(mod, name) is not None, name
    import theano.tensor as T

    assert getattr(T, module.rsplit(".", 1)[1]) is mod


def test_gone_names_say_what_to_use():
    from theano.tensor import nlinalg, slinalg

    with pytest.raises(AttributeError, match="mode='complete'"):
        nlinalg.QRFull  # noqa: B018
    with pytest.raises(ImportError, match="own gradient"):
        from theano.tensor.slinalg import CholeskyGrad  # noqa: F401
    with pytest.raises(AttributeError, match="theano.tensor.slinalg"):
        slinalg.no_such_name  # noqa: B018


def test_values_match_numpy():
    from theano.tensor import nlinalg, slinalg

    rng = np.random.default_rng(0)
    dtype = pytensor.config.floatX
    m = rng.standard_normal((4, 4)).astype(dtype)
    spd = (m @ m.T + 4 * np.eye(4)).astype(dtype)
    b = rng.standard_normal(4).astype(dtype)
    tall = rng.standard_normal((5, 3)).astype(dtype)
    a, v, t, s = pt.matrix("a"), pt.vector("v"), pt.matrix("t"), pt.matrix("s")
    lower = np.tril(spd)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        warnings.simplefilter("error", FutureWarning)
        q, r = nlinalg.qr(t)
        w, _ = nlinalg.eigh(a, UPLO="U")
        outs = [
            nlinalg.matrix_dot(a, a, a),
            nlinalg.trace(a),
            nlinalg.extract_diag(a),
            q,
            r,
            w,
            slinalg.solve_lower_triangular(a, v),
            slinalg.solve_upper_triangular(a.T, v),
            # its own input: PyTensor 3.3 takes ``s`` as symmetric everywhere in the graph
            slinalg.solve_symmetric(s, v),
        ]
        f = pytensor.function([a, v, t, s], outs, mode="FAST_COMPILE")
        got = f(spd, b, tall, spd)
        got_lower = f(lower, b, tall, spd)
    tol = {"rtol": 1e-4, "atol": 1e-4} if dtype == "float32" else {}
    np.testing.assert_allclose(got[0], spd @ spd @ spd, **tol)
    np.testing.assert_allclose(got[1], np.trace(spd), **tol)
    np.testing.assert_allclose(got[2], np.diag(spd), **tol)
    assert got[3].shape == (5, 3) and got[4].shape == (3, 3)  # NumPy's 'reduced' QR
    np.testing.assert_allclose(got[3] @ got[4], tall, **tol)
    np.testing.assert_allclose(got[5], np.linalg.eigvalsh(spd, UPLO="U"), **tol)
    np.testing.assert_allclose(got_lower[6], np.linalg.solve(lower, b), **tol)
    np.testing.assert_allclose(got_lower[7], np.linalg.solve(lower.T, b), **tol)
    np.testing.assert_allclose(got[8], np.linalg.solve(spd, b), **tol)


def test_bad_arguments_are_refused():
    from theano.tensor import nlinalg

    with pytest.raises(ValueError, match="UPLO='X'"):
        nlinalg.eigh(pt.matrix(), UPLO="X")
    with pytest.raises(TypeError, match="at least one matrix"):
        nlinalg.matrix_dot()
