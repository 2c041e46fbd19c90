"""Theano's truth value of a variable under install(): true, except a comparison's result.

nolearn 0.6.1 counts a network's parameters with ``[p for p in params if p]``;
Theano 1.0 allowed that, and PyTensor raises for every variable.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import QUIET

import lasagne_bn_compat

pytestmark = QUIET


@pytest.fixture
def installed():
    lasagne_bn_compat.install(theano_flags="")
    try:
        yield
    finally:
        lasagne_bn_compat.uninstall()


def test_a_variable_is_true_as_in_theano(installed):
    import theano
    import theano.tensor as T

    x = T.matrix("x")
    w = theano.shared(np.ones((2, 2), np.float32), name="w")
    values = (x, w, x + 1, T.constant(0.0))
    assert [v for v in values if v] == list(values)


def test_a_comparison_result_still_refuses_a_truth_value(installed):
    import theano.tensor as T

    x, y = T.scalar("x"), T.scalar("y")
    for result in (x < y, x <= y, x > y, x >= y, 0 < x):
        with pytest.raises(TypeError, match="Variables do not support boolean operations"):
            bool(result)
    with pytest.raises(TypeError, match="Variables do not support boolean operations"):
        x < y < 1.0  # noqa: B015  (Python runs (x < y) and (y < 1.0))
    assert bool(T.lt(x, y))  # Theano marked the operators' results only
    assert (x < y).eval({x: 1.0, y: 2.0}) == 1


def test_nolearns_parameter_count(installed):
    import lasagne

    layer = lasagne.layers.InputLayer((None, 1, 8, 8))
    layer = lasagne.layers.Conv2DLayer(layer, num_filters=3, filter_size=3)
    layer = lasagne.layers.batch_norm(lasagne.layers.DenseLayer(layer, num_units=4))
    params = lasagne.layers.get_all_params(layer, trainable=True)
    shapes = [p.get_value().shape for p in params if p]
    assert sum(int(np.prod(s)) for s in shapes) == 3 * 9 + 3 + 3 * 6 * 6 * 4 + 4 + 4


def test_uninstall_gives_pytensors_rule_back():
    lasagne_bn_compat.install(theano_flags="")
    lasagne_bn_compat.uninstall()
    x = pt.matrix("x")
    with pytest.raises(TypeError, match="cannot be converted to Python boolean"):
        bool(x)
    with pytest.raises(TypeError, match="cannot be converted to Python boolean"):
        bool(pytensor.shared(np.ones(2)))
    assert not hasattr(x < 1, "_legacy_comparison")
