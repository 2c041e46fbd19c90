"""Initializers: shapes, distributions, gains, errors, reproducibility."""

from __future__ import annotations

import numpy as np
import pytensor
import pytest

from lasagne_bn import init
from lasagne_bn.random import get_rng, set_rng


@pytest.fixture(autouse=True)
def _seeded():
    old = get_rng()
    set_rng(np.random.RandomState(0))
    yield
    set_rng(old)


def test_constant_normal_uniform():
    assert init.Constant(3)((2, 3)).tolist() == [[3.0] * 3] * 2
    assert init.Constant()((2,)).dtype == np.dtype(pytensor.config.floatX)
    x = init.Normal(std=2.0, mean=1.0)((200, 100))
    assert abs(x.mean() - 1) < 0.05 and abs(x.std() - 2) < 0.05
    u = init.Uniform((1.0, 2.0))((1000,))
    assert u.min() >= 1 and u.max() < 2
    u = init.Uniform(0.5)((1000,))
    assert u.min() >= -0.5 and u.max() < 0.5
    u = init.Uniform(std=2.0, mean=1.0)((20000,))
    assert abs(u.std() - 2) < 0.05 and abs(u.mean() - 1) < 0.05


@pytest.mark.parametrize(
    ("cls", "shape", "std"),
    [
        (init.GlorotNormal, (200, 300), np.sqrt(2 / 500)),
        (init.GlorotUniform, (20, 30, 5, 5), np.sqrt(2 / (50 * 25))),
        (init.HeNormal, (300, 200), np.sqrt(1 / 300)),
        (init.HeUniform, (20, 30, 5, 5), np.sqrt(1 / (30 * 25))),
    ],
)
def test_glorot_and_he_scale(cls, shape, std):
    x = cls()(shape)
    assert x.shape == shape
    assert abs(x.std() / std - 1) < 0.05
    y = cls(gain="relu")(shape)
    assert abs(y.std() / (std * np.sqrt(2)) - 1) < 0.05


def test_c01b_and_errors():
    x = init.GlorotUniform(c01b=True)((30, 5, 5, 20))
    assert abs(x.std() / np.sqrt(2 / (50 * 25)) - 1) < 0.05
    x = init.HeNormal(c01b=True)((30, 5, 5, 20))
    assert abs(x.std() / np.sqrt(1 / (30 * 25)) - 1) < 0.05
    for cls in (init.GlorotUniform, init.HeNormal):
        with pytest.raises(RuntimeError, match="length 4"):
            cls(c01b=True)((2, 3))
        with pytest.raises(RuntimeError, match="shapes of length >= 2"):
            cls()((3,))


def test_sparse_and_orthogonal():
    w = init.Sparse(sparsity=0.2, std=1.0)((50, 10))
    assert np.all((w != 0).sum(axis=0) == 10)
    with pytest.raises(RuntimeError, match="length 2"):
        init.Sparse()((2, 3, 4))
    q = init.Orthogonal()((4, 6))
    np.testing.assert_allclose(q @ q.T, np.eye(4), atol=1e-10)
    q = init.Orthogonal(gain="relu")((6, 2, 2))
    flat = q.reshape(6, 4)
    np.testing.assert_allclose(flat.T @ flat, 2 * np.eye(4), atol=1e-10)
    with pytest.raises(RuntimeError, match="length 2 or more"):
        init.Orthogonal()((3,))


def test_reproducible_with_set_rng():
    set_rng(np.random.RandomState(5))
    a = init.GlorotUniform()((3, 4))
    set_rng(np.random.RandomState(5))
    np.testing.assert_array_equal(a, init.GlorotUniform()((3, 4)))
