"""Network helpers: traversal order, outputs, shapes, parameters and their values."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.layers import (
    BatchNormLayer,
    ConcatLayer,
    DenseLayer,
    InputLayer,
    Layer,
    batch_norm,
    count_params,
    get_all_layers,
    get_all_param_values,
    get_all_params,
    get_output,
    get_output_shape,
    set_all_param_values,
)


class _Plus(Layer):
    """A parameter-free layer with an extra keyword (for kwargs plumbing)."""

    def get_output_for(self, input, amount=1.0, **kwargs):
        return input + amount


def test_get_all_layers_order():
    l1 = InputLayer((None, 2), name="l1")
    l2 = DenseLayer(l1, 3, name="l2")
    l3 = InputLayer((None, 4), name="l3")
    l4 = ConcatLayer([l2, l3], name="l4")
    l5 = DenseLayer(l4, 1, name="l5")
    assert get_all_layers(l5) == [l1, l2, l3, l4, l5]
    assert get_all_layers([l5, l2]) == [l1, l2, l3, l4, l5]
    assert get_all_layers([l2, l5]) == [l1, l2, l3, l4, l5]
    assert get_all_layers(l5, treat_as_input=[l4]) == [l4, l5]
    assert get_all_layers(l4, treat_as_input=[l2]) == [l2, l3, l4]


def test_get_all_layers_shared_input_appears_once():
    l1 = InputLayer((None, 2))
    a, b = DenseLayer(l1, 2), DenseLayer(l1, 2)
    top = ConcatLayer([a, b])
    assert get_all_layers(top) == [l1, a, b, top]


def test_get_output_variants():
    l_in = InputLayer((None, 3))
    l_plus = _Plus(l_in)
    x = pt.matrix("x")
    v = np.ones((2, 3))
    assert get_output(l_in) is l_in.input_var
    f = pytensor.function([l_in.input_var], get_output(l_plus), mode="FAST_COMPILE")
    np.testing.assert_array_equal(f(v), v + 1)
    f = pytensor.function([x], get_output(l_plus, x, amount=5.0), mode="FAST_COMPILE")
    np.testing.assert_array_equal(f(v), v + 5)
    # a dict may replace any layer's output
    f = pytensor.function([x], get_output(l_plus, {l_in: x * 2}), mode="FAST_COMPILE")
    np.testing.assert_array_equal(f(v), 2 * v + 1)
    out = get_output(l_plus, {l_plus: x})
    assert out is x
    # arrays are wrapped as constants
    np.testing.assert_array_equal(get_output(l_plus, v).eval(), v + 1)
    outs = get_output([l_in, l_plus], x)
    assert len(outs) == 2 and outs[0] is x


def test_get_output_errors_and_warnings():
    l1, l2 = InputLayer((None, 2)), InputLayer((None, 2))
    top = ConcatLayer([l1, l2])
    with pytest.raises(ValueError, match="multiple|2 input layers"):
        get_output(top, pt.matrix())
    with pytest.raises(TypeError, match="keys must be lasagne_bn layers"):
        get_output(top, {"l1": pt.matrix()})
    floating = DenseLayer((None, 2), 3)
    with pytest.raises(ValueError, match="free-floating"):
        get_output(floating)
    np.testing.assert_array_equal(
        get_output(floating, {floating: pt.as_tensor(np.zeros((1, 3)))}).eval(), np.zeros((1, 3))
    )
    with pytest.warns(UserWarning, match="deterministc \\(perhaps you meant deterministic\\)"):
        get_output(l1, deterministc=True)
    with pytest.warns(UserWarning, match="unused kwargs"):
        get_output(_Plus(l1), bogus=1)


def test_get_output_shape():
    l_in = InputLayer((None, 4))
    l1 = DenseLayer(l_in, 3)
    assert get_output_shape(l1) == (None, 3)
    assert get_output_shape(l1, (7, 4)) == (7, 3)
    assert get_output_shape([l_in, l1], {l_in: (5, 4)}) == [(5, 4), (5, 3)]
    top = ConcatLayer([l1, InputLayer((None, 2))])
    with pytest.raises(ValueError, match="single input shape"):
        get_output_shape(top, (2, 4))


def _network():
    l_in = InputLayer((None, 4))
    l1 = batch_norm(DenseLayer(l_in, 3, name="a"))
    l2 = DenseLayer(l1, 2, name="b")
    return l2


def test_get_all_params_order_and_tags():
    net = _network()
    names = lambda ps: [p.name for p in ps]  # noqa: E731
    assert names(get_all_params(net)) == [
        "a.W",
        "a_bn.beta",
        "a_bn.gamma",
        "a_bn.mean",
        "a_bn.inv_std",
        "b.W",
        "b.b",
    ]
    assert names(get_all_params(net, trainable=True)) == [
        "a.W",
        "a_bn.beta",
        "a_bn.gamma",
        "b.W",
        "b.b",
    ]
    assert names(get_all_params(net, regularizable=True)) == ["a.W", "a_bn.gamma", "b.W"]
    assert names(get_all_params(net, trainable=True, regularizable=False)) == [
        "a_bn.beta",
        "b.b",
    ]
    assert names(get_all_params(net, batch_norm_stat=True)) == ["a_bn.mean", "a_bn.inv_std"]


def test_params_shared_between_layers_listed_once():
    l_in = InputLayer((None, 3))
    l1 = DenseLayer(l_in, 3)
    l2 = DenseLayer(l1, 3, W=l1.W, b=l1.b)
    assert get_all_params(l2) == [l1.W, l1.b]


def test_expression_params_unwrap_to_shared():
    w = pytensor.shared(np.ones((3, 2)), name="w")
    layer = DenseLayer(InputLayer((None, 3)), 2, W=w * 2, b=None)
    assert layer.get_params(unwrap_shared=False)[0] is not w
    assert get_all_params(layer) == [w]


def test_count_params():
    net = _network()
    assert count_params(net) == 4 * 3 + 4 * 3 + 3 * 2 + 2
    assert count_params(net, trainable=True) == 12 + 6 + 8
    assert isinstance(count_params(net), int)


def test_get_and_set_all_param_values():
    net = _network()
    values = get_all_param_values(net)
    assert [v.shape for v in values] == [(4, 3), (3,), (3,), (3,), (3,), (3, 2), (2,)]
    new = [np.full(v.shape, i, dtype=v.dtype) for i, v in enumerate(values)]
    set_all_param_values(net, new)
    for i, v in enumerate(get_all_param_values(net)):
        np.testing.assert_array_equal(v, i)
    # values are copied, not aliased
    new[0][...] = 99
    assert get_all_param_values(net)[0][0, 0] == 0
    # tags select the same subset both ways
    trainable = get_all_param_values(net, trainable=True)
    set_all_param_values(net, [t + 1 for t in trainable], trainable=True)
    np.testing.assert_array_equal(get_all_param_values(net)[3], 3)  # the mean is untouched


def test_set_all_param_values_wrong_count_changes_nothing():
    net = _network()
    before = get_all_param_values(net)
    with pytest.raises(ValueError, match="got 6 values to set 7 parameters"):
        set_all_param_values(net, [np.zeros_like(v) for v in before[:-1]])
    for b, a in zip(before, get_all_param_values(net), strict=True):
        np.testing.assert_array_equal(a, b)


def test_set_all_param_values_wrong_shape_changes_nothing():
    net = _network()
    before = get_all_param_values(net)
    bad = [np.zeros_like(v) for v in before]
    bad[5] = np.zeros((2, 3))  # b.W is (3, 2)
    with pytest.raises(ValueError, match=r"parameter 5 \(b.W\) has shape \(3, 2\).*\(2, 3\)"):
        set_all_param_values(net, bad)
    for b, a in zip(before, get_all_param_values(net), strict=True):
        np.testing.assert_array_equal(a, b)


def test_set_all_param_values_wrong_dtype_changes_nothing():
    bn = BatchNormLayer(InputLayer((None, 2)), mean=np.zeros(2, "float32"))
    before = get_all_param_values(bn)
    values = [np.ones(2), np.ones(2), np.full(2, 0.1), np.ones(2)]  # float64 into float32 mean
    with pytest.raises(TypeError, match="parameter 2 .*no parameter was changed"):
        set_all_param_values(bn, values)
    for b, a in zip(before, get_all_param_values(bn), strict=True):
        np.testing.assert_array_equal(a, b)


def test_networks_pickle_with_their_parameters():
    import pickle

    from lasagne_bn.layers import DropoutLayer
    from lasagne_bn.utils import is_portable

    net = DropoutLayer(_network(), p=0.1)
    set_all_param_values(net, [np.full_like(v, 0.5) for v in get_all_param_values(net)])
    copy = pickle.loads(pickle.dumps(net))
    params = get_all_params(copy)
    assert [p.name for p in params] == [p.name for p in get_all_params(net)]
    assert all(is_portable(p) for p in params)
    for v in get_all_param_values(copy):
        np.testing.assert_array_equal(v, 0.5)
    l_in = get_all_layers(copy)[0]
    f = pytensor.function([l_in.input_var], get_output(copy), mode="FAST_COMPILE")
    assert f(np.ones((3, 4))).shape == (3, 2)
