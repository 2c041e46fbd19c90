"""inv_std <-> var conversion of batch-norm statistics: arrays, layers, networks, value lists."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.layers import (
    BatchNormLayer,
    DenseLayer,
    InputLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
    get_output,
    set_all_param_values,
)
from lasagne_bn.layers.bn_storage import (
    bn_stat_indices,
    convert_param_values,
    convert_stat_storage,
    inv_std_to_var,
    layer_epsilon,
    var_to_inv_std,
)

EPS = 1e-4


def two_bn_net(seed=0, stat_storage="inv_std", dtype="float64"):
    r = np.random.RandomState(seed)
    l_in = InputLayer((None, 5))
    kw = {"stat_storage": stat_storage}
    h = batch_norm(DenseLayer(l_in, 4, W=r.randn(5, 4).astype(dtype), name="fc1"), **kw)
    fc2 = DenseLayer(h, 3, W=r.randn(4, 3).astype(dtype), name="fc2")
    out = batch_norm(fc2, epsilon=1e-3, **kw)
    for layer in (h.input_layer, out.input_layer):
        layer.mean.set_value(r.randn(*layer.param_shape).astype(dtype))
        layer._stat2.set_value((r.rand(*layer.param_shape) + 0.5).astype(dtype))
        layer.gamma.set_value((r.rand(*layer.param_shape) + 0.5).astype(dtype))
    return l_in, out


def det_fn(l_in, net):
    return pytensor.function(
        [l_in.input_var], get_output(net, deterministic=True), mode="FAST_COMPILE"
    )


class TestArrays:
    def test_formulas(self):
        inv_std = np.array([0.5, 2.0, 10.0])
        np.testing.assert_allclose(inv_std_to_var(inv_std, EPS), 1 / inv_std**2 - EPS)
        var = np.array([0.0, 1.0, 3.5])
        np.testing.assert_allclose(var_to_inv_std(var, EPS), 1 / np.sqrt(var + EPS))

    @pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
    def test_round_trip_keeps_dtype(self, dtype):
        inv_std = (np.random.RandomState(1).rand(50) * 20 + 0.05).astype(dtype)
        var = inv_std_to_var(inv_std, EPS)
        assert var.dtype == np.dtype(dtype)
        back = var_to_inv_std(var, EPS)
        assert back.dtype == np.dtype(dtype)
        tol = {"float16": 3e-3, "float32": 2e-6, "float64": 1e-12}[dtype]
        np.testing.assert_allclose(back, inv_std, rtol=tol)

    def test_rounding_above_the_bound_gives_zero_variance(self):
        top = np.float32(1 / np.sqrt(EPS)) * np.float32(1 + 1e-6)
        assert inv_std_to_var(np.array([top]), EPS).tolist() == [0.0]

    def test_integer_input_gives_float64(self):
        assert inv_std_to_var(np.array([1, 2]), EPS).dtype == np.float64

    @pytest.mark.parametrize("bad", [0.0, -1.0, np.nan, np.inf])
    def test_bad_inv_std(self, bad):
        with pytest.raises(ValueError, match="inv_std holds 1 value"):
            inv_std_to_var(np.array([1.0, bad]), EPS)

    @pytest.mark.parametrize("bad", [-1.0, np.nan, np.inf])
    def test_bad_var(self, bad):
        with pytest.raises(ValueError, match="var holds 1 value"):
            var_to_inv_std(np.array([1.0, bad]), EPS)

    @pytest.mark.parametrize("eps", [0, -1e-3, np.nan])
    def test_bad_epsilon(self, eps):
        with pytest.raises(ValueError, match="epsilon="):
            var_to_inv_std(np.ones(2), eps)

    def test_epsilon_type(self):
        with pytest.raises(TypeError, match="epsilon='1e-4'"):
            var_to_inv_std(np.ones(2), "1e-4")

    def test_non_numeric(self):
        with pytest.raises(TypeError, match="dtype <U1"):
            inv_std_to_var(np.array(["a"]), EPS)


class TestNetworks:
    def test_convert_network_keeps_outputs_order_and_tags(self):
        l_in, net = two_bn_net()
        x = np.random.RandomState(3).randn(6, 5)
        before = det_fn(l_in, net)(x)
        params_before = get_all_params(net)
        bn = net.input_layer
        tags_before = [sorted(bn.params[p]) for p in bn.params]
        converted = convert_stat_storage(net, "var")
        assert [layer.name for layer in converted] == ["fc1_bn", "fc2_bn"]
        params = get_all_params(net)
        assert len(params) == len(params_before)
        assert [p.name for p in params] == [
            "fc1.W", "fc1_bn.beta", "fc1_bn.gamma", "fc1_bn.mean", "fc1_bn.var",
            "fc2.W", "fc2_bn.beta", "fc2_bn.gamma", "fc2_bn.mean", "fc2_bn.var",
        ]  # fmt: skip
        assert bn.stat_storage == "var" and not hasattr(bn, "inv_std")
        assert [sorted(bn.params[p]) for p in bn.params] == tags_before
        assert bn.var.type.shape == (3,)
        np.testing.assert_allclose(det_fn(l_in, net)(x), before, rtol=1e-10, atol=1e-12)
        # and back
        assert len(convert_stat_storage(net, "inv_std")) == 2
        assert [p.name for p in get_all_params(net)] == [p.name for p in params_before]
        np.testing.assert_allclose(det_fn(l_in, net)(x), before, rtol=1e-10, atol=1e-12)
        assert convert_stat_storage(net, "inv_std") == []

    def test_single_layer_and_own_epsilon(self):
        layer = BatchNormLayer(InputLayer((None, 2)), epsilon=0.5)
        layer.inv_std.set_value(np.array([1.0, 0.5]))
        convert_stat_storage(layer, "var")
        np.testing.assert_allclose(layer.var.get_value(), [0.5, 3.5])

    def test_failure_changes_nothing(self):
        l_in, net = two_bn_net()
        bad = net.input_layer
        bad.inv_std.set_value(np.array([1.0, -1.0, 1.0]))
        before = [(p, p.get_value()) for p in get_all_params(net)]
        with pytest.raises(ValueError, match="layer 'fc2_bn': inv_std holds 1 value.*no layer"):
            convert_stat_storage(net, "var")
        assert [p for p, _ in before] == get_all_params(net)
        for p, value in before:
            assert np.array_equal(p.get_value(), value)
        assert all(layer.stat_storage == "inv_std" for _, layer in bn_stat_indices(net))

    def test_expression_statistic_is_refused(self):
        layer = BatchNormLayer(InputLayer((None, 2)), inv_std=pt.ones((2,)) * 2)
        with pytest.raises(ValueError, match="expression"):
            convert_stat_storage(layer, "var")

    def test_symbolic_epsilon(self):
        eps = pt.scalar("eps")
        layer = BatchNormLayer(InputLayer((None, 2)), epsilon=eps)
        with pytest.raises(ValueError, match="symbolic epsilon"):
            layer_epsilon(layer)
        assert layer_epsilon(layer, 0.25) == 0.25
        const = BatchNormLayer(InputLayer((None, 2)), epsilon=pt.constant(0.5))
        assert layer_epsilon(const) == 0.5

    def test_bad_arguments(self):
        layer = BatchNormLayer(InputLayer((None, 2)))
        with pytest.raises(ValueError, match="to='variance' is not a statistic storage"):
            convert_stat_storage(layer, "variance")
        with pytest.raises(TypeError, match="layer_or_network=3"):
            convert_stat_storage(3, "var")


class TestValueLists:
    def test_indices(self):
        _, net = two_bn_net()
        assert [(i, layer.name) for i, layer in bn_stat_indices(net)] == [
            (4, "fc1_bn"),
            (9, "fc2_bn"),
        ]
        assert [i for i, _ in bn_stat_indices(net, trainable=True)] == []

    def test_legacy_values_into_a_var_network_and_back(self):
        l_in, legacy = two_bn_net(seed=5)
        x = np.random.RandomState(4).randn(6, 5)
        expected = det_fn(l_in, legacy)(x)
        values = get_all_param_values(legacy)  # inv_std, as Lasagne files hold
        l_in2, net = two_bn_net(seed=9, stat_storage="var")
        converted = convert_param_values(net, values, from_storage="inv_std")
        assert converted[0] is values[0]
        set_all_param_values(net, converted)
        np.testing.assert_allclose(det_fn(l_in2, net)(x), expected, rtol=1e-10, atol=1e-12)
        out = convert_param_values(net, get_all_param_values(net), to_storage="inv_std")
        for a, b in zip(out, values, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-12)

    def test_same_storage_is_untouched(self):
        _, net = two_bn_net()
        values = get_all_param_values(net)
        out = convert_param_values(net, values, from_storage="inv_std", to_storage="inv_std")
        assert all(a is b for a, b in zip(out, values, strict=True))

    def test_errors_name_the_problem(self):
        _, net = two_bn_net()
        values = get_all_param_values(net)
        with pytest.raises(ValueError, match="got 9 values for a network with 10 parameters"):
            convert_param_values(net, values[:-1], to_storage="var")
        values[4] = np.ones(7)
        with pytest.raises(ValueError, match=r"value 4 \(fc1_bn.inv_std\) has shape \(7,\)"):
            convert_param_values(net, values, to_storage="var")
        values[4] = -np.ones(4)
        with pytest.raises(ValueError, match=r"value 4 \(fc1_bn.inv_std\): inv_std holds 4"):
            convert_param_values(net, values, to_storage="var")
        with pytest.raises(ValueError, match="from_storage='std'"):
            convert_param_values(net, values, from_storage="std")
