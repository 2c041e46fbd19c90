"""Recipes' U-Net layer options against Theano 1.0.5 + Lasagne master (issue 41).

``tests/data/unet_oracle.npz`` (made by ``tests/data/make_unet_oracle.py``
on the CPU) holds every layer's output of a small network with the U-Net's
options.  Its convolutions come from the legacy idiom ``try: from
lasagne.layers.dnn import Conv2DDNNLayer as ConvLayer / except ImportError:
Conv2DLayer``: on a CPU, Theano had no cuDNN, so that was ``Conv2DLayer``
(``flip_filters=True``); the shims act as a cuDNN machine unless the flags
say ``device=cpu`` or ``dnn.enabled=False``, as Theano's did.
"""

from __future__ import annotations

import contextlib
import importlib
import sys

import numpy as np
import pytest
from legacy_helpers import DATA, QUIET, legacy  # noqa: F401  (the fixture)

pytestmark = QUIET

ORACLE = DATA / "unet_oracle.npz"


@contextlib.contextmanager
def theano_flag(key, value):
    from lasagne_bn_compat.theano._config import config

    saved = dict(config._ignored)
    sys.modules.pop("lasagne.layers.dnn", None)  # imported before the flag was set
    setattr(config, key, value)
    try:
        yield
    finally:
        config._ignored.clear()
        config._ignored.update(saved)


def conv_layer_class():
    """The legacy idiom, as the U-Net writes it."""
    try:
        from lasagne.layers.dnn import Conv2DDNNLayer as ConvLayer
    except ImportError:
        from lasagne.layers import Conv2DLayer as ConvLayer
    return ConvLayer


def build(ConvLayer, shape=(None, 1, 10, 11), n=3):
    L = importlib.import_module("lasagne.layers")
    from lasagne.nonlinearities import elu, softmax

    bn = L.batch_norm
    l_in = L.InputLayer(shape)
    c1 = bn(ConvLayer(l_in, n, 3, nonlinearity=elu, pad="same"))
    c2 = bn(ConvLayer(c1, n, 3, nonlinearity=elu, pad="same"))
    p = L.Pool2DLayer(c2, 2)
    e = bn(ConvLayer(p, 2 * n, 3, nonlinearity=elu, pad="same"))
    up = bn(L.Deconv2DLayer(e, 2 * n, 2, 2, crop="valid", nonlinearity=elu))
    cat = L.ConcatLayer([up, c2], cropping=(None, None, "center", "center"))
    x1 = bn(ConvLayer(cat, n, 3, nonlinearity=elu, pad="same"))
    seg = ConvLayer(x1, 2, 1, nonlinearity=None)
    r = L.ReshapeLayer(L.DimshuffleLayer(seg, (1, 0, 2, 3)), (2, -1))
    return L.NonlinearityLayer(L.DimshuffleLayer(r, (1, 0)), nonlinearity=softmax)


def layer_outputs(out, oracle, mode, flip_dnn=False):
    import theano
    import theano.tensor as T
    from lasagne.layers import get_all_layers, get_all_params, get_output

    params = get_all_params(out)
    keys = sorted(k for k in oracle.files if k.startswith("param/"))
    assert [k.partition("_")[2] for k in keys] == [p.name for p in params]
    for key, p in zip(keys, params, strict=True):
        value = oracle[key]
        if flip_dnn and p.name == "W" and type(p_owner(out, p)).__name__ == "Conv2DDNNLayer":
            value = value[:, :, ::-1, ::-1]  # a GPU run's weights for the same outputs
        p.set_value(np.ascontiguousarray(value))
    layers = get_all_layers(out)
    x = T.tensor4("x")
    kwargs = {
        "det": dict(deterministic=True),
        "batch": dict(
            deterministic=True, batch_norm_update_averages=False, batch_norm_use_averages=False
        ),
    }[mode]
    f = theano.function([x], get_output(layers, x, **kwargs), mode=None)
    return layers, f(oracle["x"])


def p_owner(out, param):
    from lasagne.layers import get_all_layers

    return next(layer for layer in get_all_layers(out) if param in layer.params)


def oracle_values(oracle, mode):
    return [oracle[k] for k in sorted(k for k in oracle.files if k.startswith(mode + "/"))]


@pytest.mark.parametrize("flags", [("device", "cpu"), ("dnn.enabled", False)])
def test_cpu_flags_keep_lasagne_layers_dnn_unimportable(legacy, flags):  # noqa: F811
    import theano

    key, value = flags
    section, _, option = key.rpartition(".")
    with theano_flag(key.replace(".", "__"), value):
        with pytest.raises(ImportError, match=r"^lasagne\.layers\.dnn requires GPU support and"):
            import lasagne.layers.dnn  # noqa: F401
        assert conv_layer_class().__name__ == "Conv2DLayer"
        assert str(
            getattr(getattr(theano.config, section) if section else theano.config, option)
        ) == str(value)
    assert conv_layer_class().__name__ == "Conv2DDNNLayer"


@pytest.mark.parametrize("mode", ["det", "batch"])
def test_unet_options_match_theano_on_the_cpu(legacy, mode):  # noqa: F811
    oracle = np.load(ORACLE)
    assert str(oracle["branch"]) == "Conv2DLayer"
    with theano_flag("device", "cpu"):
        out = build(conv_layer_class())
    layers, values = layer_outputs(out, oracle, mode)
    expected = oracle_values(oracle, mode)
    assert len(values) == len(expected) == len(layers)
    for layer, got, want in zip(layers, values, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-5, err_msg=type(layer).__name__)


def test_unet_options_on_a_cudnn_machine_correlate(legacy):  # noqa: F811
    # Unflagged, the idiom takes the cuDNN branch (flip_filters=False), as
    # Theano on a GPU did: the same outputs need spatially flipped filters.
    oracle = np.load(ORACLE)
    out = build(conv_layer_class())
    layers, values = layer_outputs(out, oracle, "det", flip_dnn=True)
    assert any(type(layer).__name__ == "Conv2DDNNLayer" for layer in layers)
    np.testing.assert_allclose(values[-1], oracle_values(oracle, "det")[-1], rtol=1e-5, atol=2e-5)
