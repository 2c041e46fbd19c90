"""NanGuardMode names the layer (name and class) where a NaN first appeared."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.layers import (
    BatchNormLayer,
    DenseLayer,
    InputLayer,
    NonlinearityLayer,
    get_output,
)
from lasagne_bn.nan_guard import NanGuardMode

X = np.ones((3, 4), "float32")


def _net(W2=None, nonlinearity=None, bn_var=None):
    l_in = InputLayer((None, 4), name="in")
    fc1 = DenseLayer(l_in, 5, name="fc1")
    bn = BatchNormLayer(fc1, name="fc1_bn")
    if bn_var is not None:
        bn.inv_std.set_value(np.full(5, bn_var, "float32"))
    act = NonlinearityLayer(bn, nonlinearity or (lambda x: x), name="act")
    fc2 = DenseLayer(act, 2, name="fc2", W=W2 if W2 is not None else np.ones((5, 2), "float32"))
    return l_in, fc2


def _first_line(l_in, net, mode=None, **kwargs):
    mode = mode or NanGuardMode()
    f = pytensor.function([l_in.input_var], get_output(net, **kwargs), mode=mode)
    with pytest.raises(AssertionError) as info:
        f(X)
    return str(info.value).splitlines()[0]


def test_a_nan_parameter_is_named_with_its_layer():
    W2 = np.ones((5, 2), "float32")
    W2[1, 1] = np.nan
    l_in, net = _net(W2=W2)
    assert _first_line(l_in, net, deterministic=True) == (
        "NaN detected in parameter fc2.W of layer 'fc2' (DenseLayer), the first non-finite value"
    )


def test_a_nan_output_names_the_layer_that_computed_it():
    l_in, net = _net(nonlinearity=lambda x: pt.log(x - 100.0))
    exact = _first_line(l_in, net, NanGuardMode(optimizer=None), deterministic=True)
    assert exact == (
        "NaN detected in the output of layer 'act' (NonlinearityLayer), the first non-finite value"
    )
    # rewritten, the log is fused with the batch norm before it: the message says so
    fused = _first_line(l_in, net, deterministic=True)
    assert fused.startswith(
        "NaN detected in a value the rewrites fused, computed from layer 'fc1_bn' "
        "(BatchNormLayer) (or in the layers after it"
    ), fused


def test_an_inf_batch_norm_statistic_is_named():
    l_in, net = _net(bn_var=np.inf)
    line = _first_line(l_in, net, deterministic=True)
    assert line.startswith("Inf detected in parameter fc1_bn.inv_std of layer 'fc1_bn'"), line


def test_graphs_without_layers_keep_pytensors_message():
    x = pt.vector("x")
    f = pytensor.function([x], pt.log(x), mode=NanGuardMode())
    with pytest.raises(AssertionError, match="NanGuardMode found an error") as info:
        f(np.array([-1.0], pytensor.config.floatX))
    assert "layer" not in str(info.value).splitlines()[0]


def test_compat_nanguardmode_names_the_layer(legacy_installed):
    import theano

    W2 = np.ones((5, 2), "float32")
    W2[0, 0] = np.nan
    l_in, net = _net(W2=W2)
    mode = theano.compile.NanGuardMode(nan_is_error=True, inf_is_error=True, big_is_error=False)
    f = theano.function([l_in.input_var], get_output(net, deterministic=True), mode=mode)
    with pytest.raises(AssertionError) as info:
        f(X)
    assert str(info.value).startswith("NaN detected in parameter fc2.W of layer 'fc2'")


@pytest.fixture
def legacy_installed():
    import lasagne_bn_compat

    lasagne_bn_compat.install(theano_flags="")
    yield
    lasagne_bn_compat.uninstall()
