"""PyTorch, Keras 3 and Flax conversions of batch-norm networks, against the real PyTorch."""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import pytensor
import pytest

import lasagne_bn_compat.interchange as ix
from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    BatchNormLayer,
    Conv2DLayer,
    DenseLayer,
    InputLayer,
    batch_norm,
    get_all_layers,
    get_output,
)
from lasagne_bn.random import get_rng, set_rng

torch = pytest.importorskip("torch")


def build(flip=True, storage="inv_std"):
    old = get_rng()
    set_rng(np.random.RandomState(0))
    try:
        l_in = InputLayer((None, 2, 6, 6))
        h = batch_norm(
            Conv2DLayer(l_in, 3, 3, pad=1, flip_filters=flip, name="conv"), stat_storage=storage
        )
        h = batch_norm(DenseLayer(h, 5, name="fc"), stat_storage=storage)
        out = DenseLayer(h, 4, nonlinearity=None, name="out")
    finally:
        set_rng(old)
    r = np.random.RandomState(1)
    for layer in get_all_layers(out):
        if isinstance(layer, BatchNormLayer):
            shape = layer.param_shape
            layer.gamma.set_value(r.rand(*shape) + 0.5)
            layer.beta.set_value(r.randn(*shape))
            layer.mean.set_value(r.randn(*shape))
            layer._stat2.set_value(r.rand(*shape) + 0.2)
    return l_in, out


def torch_model():
    nn = torch.nn
    return nn.Sequential(
        OrderedDict(
            conv=nn.Conv2d(2, 3, 3, padding=1, bias=False),
            conv_bn=nn.BatchNorm2d(3, eps=1e-4, momentum=0.1),
            relu1=nn.ReLU(),
            flat=nn.Flatten(),
            fc=nn.Linear(3 * 36, 5, bias=False),
            fc_bn=nn.BatchNorm1d(5, eps=1e-4),
            relu2=nn.ReLU(),
            out=nn.Linear(5, 4),
        )
    ).double()


def ours(l_in, out, x):
    return pytensor.function([l_in.input_var], get_output(out, deterministic=True))(x)


@pytest.mark.parametrize("flip", [True, False])
@pytest.mark.parametrize("storage", ["inv_std", "var"])
def test_to_torch_gives_the_same_outputs(flip, storage):
    l_in, out = build(flip, storage)
    x = np.random.RandomState(2).randn(4, 2, 6, 6)
    model = torch_model()
    sd = ix.to_torch_state_dict(out)
    model.load_state_dict({k: torch.as_tensor(v) for k, v in sd.items()})
    model.eval()
    with torch.no_grad():
        got = model(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(got, ours(l_in, out, x), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("storage", ["inv_std", "var"])
def test_from_torch_gives_the_same_outputs(storage):
    model = torch_model()
    torch.manual_seed(0)
    x = np.random.RandomState(3).randn(16, 2, 6, 6)
    model.train()
    with torch.no_grad():
        for _ in range(3):  # give the running statistics real values
            model(torch.as_tensor(x) * 2 + 1)
    model.eval()
    l_in, out = build(True, storage)
    ix.from_torch_state_dict(out, model.state_dict())
    with torch.no_grad():
        want = model(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(ours(l_in, out, x), want, rtol=1e-7, atol=1e-9)


def test_from_torch_is_all_or_nothing():
    l_in, out = build()
    before = [p.get_value().copy() for p in out.get_params()]
    sd = ix.to_torch_state_dict(out)
    del sd["fc_bn.running_var"]
    with pytest.raises(KeyError, match="fc_bn.running_var"):
        ix.from_torch_state_dict(out, sd)
    sd = ix.to_torch_state_dict(out)
    sd["conv_bn.running_var"] = -sd["conv_bn.running_var"]
    with pytest.raises(ValueError, match="variance"):
        ix.from_torch_state_dict(out, sd)
    for p, b in zip(out.get_params(), before, strict=True):
        np.testing.assert_array_equal(p.get_value(), b)


def test_keras_and_flax_conventions():
    _, out = build(storage="inv_std")
    bn = get_all_layers(out)[2]
    keras = ix.bn_to_keras(bn)
    assert keras["momentum"] == pytest.approx(0.9) and keras["epsilon"] == 1e-4
    inv_std = bn.inv_std.get_value()
    np.testing.assert_allclose(1 / np.sqrt(keras["moving_variance"] + 1e-4), inv_std, rtol=1e-12)
    flax = ix.bn_to_flax(bn)
    np.testing.assert_array_equal(flax["batch_stats"]["var"], keras["moving_variance"])
    np.testing.assert_array_equal(flax["params"]["scale"], bn.gamma.get_value())
    # and back, through the other layer storage
    _, out_var = build(storage="var")
    target = get_all_layers(out_var)[2]
    ix.bn_from_flax(target, flax)
    np.testing.assert_allclose(target.var.get_value(), keras["moving_variance"], rtol=1e-12)
    ix.bn_from_keras(bn, keras)
    np.testing.assert_allclose(bn.inv_std.get_value(), inv_std, rtol=1e-12)


def test_layers_without_a_counterpart_are_refused():
    per_pixel = BatchNormLayer(InputLayer((None, 3, 4, 4)), axes=(0,), name="bn")
    with pytest.raises(ValueError, match="no PyTorch BatchNorm counterpart"):
        ix.to_torch_state_dict(per_pixel)
    unnamed = DenseLayer(InputLayer((None, 3)), 2, nonlinearity=nonlinearities.identity)
    with pytest.raises(ValueError, match="has no name"):
        ix.to_torch_state_dict(unnamed)
