"""BatchNormLayer.set_stat_storage: one layer switches between inv_std and var storage."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.layers import BatchNormLayer, DenseLayer, InputLayer, batch_norm, get_output
from lasagne_bn.layers.bn_storage import converted_statistic

EPS = 1e-4


def layer(storage="inv_std", name="bn"):
    bn = BatchNormLayer(InputLayer((None, 3)), name=name, stat_storage=storage)
    bn.mean.set_value(np.array([0.5, -1.0, 2.0]))
    stat = np.array([0.5, 1.0, 4.0])  # inv_std or var
    getattr(bn, storage).set_value(stat)
    return bn


def test_inv_std_to_var_and_back_keeps_position_tags_and_outputs():
    bn = layer()
    x = pt.matrix()
    f = pytensor.function([x], get_output(bn, x, deterministic=True), mode="FAST_COMPILE")
    data = np.random.RandomState(0).randn(4, 3)
    before = f(data)
    old = bn.inv_std
    tags = dict(bn.params)[old]
    assert bn.set_stat_storage("var") is True
    assert bn.stat_storage == "var" and not hasattr(bn, "inv_std")
    assert bn.var is not old and bn.var.name == "bn.var"
    assert list(bn.params)[3] is bn.var and bn.params[bn.var] == tags
    np.testing.assert_allclose(bn.var.get_value(), 1 / np.array([0.5, 1.0, 4.0]) ** 2 - EPS)
    g = pytensor.function([x], get_output(bn, x, deterministic=True), mode="FAST_COMPILE")
    np.testing.assert_allclose(g(data), before, rtol=1e-12)
    # the old function keeps the old variable, untouched
    np.testing.assert_array_equal(old.get_value(), [0.5, 1.0, 4.0])
    assert bn.set_stat_storage("inv_std") is True
    assert bn.stat_storage == "inv_std" and not hasattr(bn, "var")
    np.testing.assert_allclose(bn.inv_std.get_value(), [0.5, 1.0, 4.0], rtol=1e-12)
    assert [p.name for p in bn.get_params()] == ["bn.beta", "bn.gamma", "bn.mean", "bn.inv_std"]


def test_same_storage_changes_nothing_and_unnamed_layers_get_the_bare_name():
    bn = layer(name=None)
    old = bn.inv_std
    assert bn.set_stat_storage("inv_std") is False and bn.inv_std is old
    bn.set_stat_storage("var", epsilon=1e-2)
    assert bn.var.name == "var"
    np.testing.assert_allclose(bn.var.get_value(), 1 / np.array([0.5, 1.0, 4.0]) ** 2 - 1e-2)


def test_given_value_is_used_as_it_is():
    bn = layer()
    value = converted_statistic(bn, "var")
    bn.set_stat_storage("var", value=value * 2)
    np.testing.assert_array_equal(bn.var.get_value(), value * 2)
    with pytest.raises(ValueError, match=r"value of shape \(2,\) cannot replace its var"):
        bn.set_stat_storage("inv_std", value=np.ones(2))
    assert bn.stat_storage == "var"


@pytest.mark.parametrize("storage", ["std", None, "VAR"])
def test_unknown_storage_is_refused(storage):
    bn = layer()
    with pytest.raises(ValueError, match="expected 'inv_std' or 'var'"):
        bn.set_stat_storage(storage)
    assert bn.stat_storage == "inv_std"


def test_failures_leave_the_layer_as_it_was():
    bn = layer()
    bn.inv_std.set_value(np.array([0.5, -1.0, 4.0]))  # no variance gives that
    old = bn.inv_std
    with pytest.raises(ValueError, match="layer 'bn': inv_std holds 1 value"):
        bn.set_stat_storage("var")
    assert bn.stat_storage == "inv_std" and bn.inv_std is old and list(bn.params)[3] is old
    expr = BatchNormLayer(InputLayer((None, 2)), inv_std=pt.ones(2) * 2, name="e")
    with pytest.raises(ValueError, match="as an expression"):
        expr.set_stat_storage("var")
    assert expr.stat_storage == "inv_std"


def test_batch_norm_helper_layers_convert_inside_a_network():
    net = batch_norm(DenseLayer(InputLayer((None, 4)), 3, name="fc"))
    bn = net.input_layer
    assert bn.set_stat_storage("var")
    assert [p.name for p in bn.get_params()][-1] == "fc_bn.var"
