"""``theano.tensor.subtensor``: the ``*subtensor1`` helpers without PyTensor 3.3's warnings."""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_for
from legacy_helpers import QUIET, legacy  # noqa: F401  (the fixture)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy")]


@pytest.fixture(scope="module")
def graphs():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning on PyTensor 3.3, none on 3.0
        from theano.tensor import subtensor

        x, y, rows = pt.matrix("x"), pt.matrix("y"), pt.lvector("rows")
        outs = [
            subtensor.advanced_subtensor1(x, rows),
            subtensor.advanced_inc_subtensor1(x, y, rows),
            subtensor.advanced_set_subtensor1(x, y, rows),
        ]
    return [x, y, rows], outs


@pytest.mark.parametrize("mode", ["default", "fast_compile", "jax"])
def test_helpers_index_increment_and_set_like_numpy(graphs, mode):
    if mode == "jax":
        pytest.importorskip("jax")
    inputs, outs = graphs
    f = pytensor.function(inputs, outs, mode=mode_for(mode))
    x = np.arange(12.0).reshape(4, 3).astype(pytensor.config.floatX)
    y = np.ones((3, 3), dtype=x.dtype) * np.array([[1.0], [10.0], [100.0]], dtype=x.dtype)
    rows = np.array([2, 0, 2])
    got, inc, put = f(x, y, rows)
    np.testing.assert_array_equal(got, x[rows])
    want_inc = x.copy()
    np.add.at(want_inc, rows, y)  # repeated rows add up, as in Theano
    np.testing.assert_array_equal(inc, want_inc)
    want_set = x.copy()
    want_set[rows] = y
    np.testing.assert_array_equal(put, want_set)


def test_other_names_are_pytensors():
    import pytensor.tensor.subtensor as pts
    from theano.tensor import subtensor

    assert subtensor.Subtensor is pts.Subtensor
    assert subtensor.set_subtensor is pts.set_subtensor
    with pytest.raises(AttributeError, match="theano.tensor.subtensor"):
        subtensor.no_such_name  # noqa: B018
