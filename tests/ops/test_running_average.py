"""``running_average_update``: the one running-average formula, wherever it runs."""

from __future__ import annotations

import jax.numpy as jnp
import numba
import numpy as np
import pytensor.tensor as pt
import pytest

from lasagne_bn.ops.bn import running_average_update

AVG = np.array([1.0, 2.0, -3.0])
NEW = np.array([3.0, 0.0, 1.0])


def test_formula():
    np.testing.assert_allclose(running_average_update(AVG, NEW, 0.25), 0.75 * AVG + 0.25 * NEW)
    # keep: the caller's own 1 - factor (a constant rounded once)
    np.testing.assert_allclose(running_average_update(AVG, NEW, 0.25, 0.5), 0.5 * AVG + 0.25 * NEW)
    np.testing.assert_array_equal(running_average_update(AVG, NEW, 0.0), AVG)
    np.testing.assert_array_equal(running_average_update(AVG, NEW, 1.0), NEW)


@pytest.mark.default_mode
def test_same_numbers_in_numpy_pytensor_jax_and_numba():
    expected = running_average_update(AVG, NEW, 0.1)

    @numba.njit
    def in_numba(a, b, f):
        return running_average_update(a, b, f)

    graph = running_average_update(pt.as_tensor(AVG), pt.as_tensor(NEW), pt.constant(0.1))
    for value in (
        graph.eval(),
        np.asarray(running_average_update(jnp.asarray(AVG), jnp.asarray(NEW), 0.1)),
        in_numba(AVG, NEW, 0.1),
    ):
        np.testing.assert_allclose(value, expected, rtol=1e-6)
