"""lasagne_bn.lint and ``lasagne-bn inspect --lint``: each finding, and none on a clean network."""

from __future__ import annotations

import numpy as np
import pytensor
import pytest

from lasagne_bn.layers import (
    BatchNormLayer,
    Conv2DLayer,
    DenseLayer,
    InputLayer,
    batch_norm,
    get_all_param_values,
    get_output,
)
from lasagne_bn.lint import lint


def clean():
    l_in = InputLayer((None, 1, 4, 4))
    h = batch_norm(Conv2DLayer(l_in, 2, 3, name="conv"))
    net = batch_norm(DenseLayer(h, 3, name="fc"))
    for bn in (net.input_layer, h.input_layer):
        bn.mean.set_value(bn.mean.get_value() + 0.1)
    return l_in, net


def codes(messages):
    return sorted(m.code for m in messages)


def test_clean_network_has_no_findings():
    l_in, net = clean()
    out, updates = get_output(net, return_updates=True)
    train = pytensor.function([l_in.input_var], out, updates=updates)
    assert lint(net, train_fn=train, batch_size=8) == []


def test_bias_and_nonlinearity_before_bn_and_untrained_stats():
    net = BatchNormLayer(DenseLayer(InputLayer((None, 4)), 3, name="fc"), name="bn")
    messages = lint(net)
    assert codes(messages) == ["bias-before-bn", "bn-after-nonlinearity", "stats-at-init"]
    assert all(m.layer == "bn" for m in messages)
    assert "b=None" in str(messages[0]) or "b=None" in " ".join(map(str, messages))


@pytest.mark.parametrize("lasagne_way", [True, False])
def test_training_function_that_never_updates_the_averages(lasagne_way):
    l_in, net = clean()
    if lasagne_way:  # default updates: every function with the output updates them
        fine = pytensor.function([l_in.input_var], get_output(net))
        assert lint(net, train_fn=fine) == []
    out, _ = get_output(net, return_updates=True)
    forgot = pytensor.function([l_in.input_var], out)  # updates dropped
    assert codes(lint(net, train_fn=forgot)) == ["stats-never-updated"] * 2
    test_fn = pytensor.function([l_in.input_var], get_output(net, deterministic=True))
    assert lint(net, train_fn=test_fn) == []  # no batch statistics: nothing to update


def test_batch_of_one():
    _, net = clean()
    found = lint(net, batch_size=1)
    assert codes(found) == ["batch-of-one"]  # the dense BN; conv has 4 pixels per statistic
    assert found[0].layer == "fc_bn"


def test_epsilon_mismatch_against_a_checkpoint():
    _, net = clean()
    values = get_all_param_values(net)
    assert lint(net, checkpoint=values) == []
    values[-1] = np.full_like(values[-1], 300.0)  # fc_bn.inv_std; 1/sqrt(1e-4) = 100
    found = lint(net, checkpoint=values)
    assert codes(found) == ["epsilon-mismatch"] and found[0].layer == "fc_bn"
    with pytest.raises(TypeError, match="checkpoint="):
        lint(net, checkpoint={"a": 1})
    with pytest.raises(TypeError, match="train_fn="):
        lint(net, train_fn=lambda x: x)
