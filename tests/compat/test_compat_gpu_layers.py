"""lasagne.layers.dnn / corrmm / cuda_convnet via the shims: legacy constructors, same numbers."""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params
from legacy_helpers import QUIET, legacy  # noqa: F401  (the fixture)
from numpy.lib.stride_tricks import sliding_window_view

import lasagne_bn.layers
from lasagne_bn.layers import (
    BatchNormLayer,
    Conv2DLayer,
    InputLayer,
    NonlinearityLayer,
    get_all_params,
    get_output,
)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy")]


# ----------------------------------------------------------------------------
# NumPy references


def np_conv(x, w, stride=(1, 1), pad=(0, 0), flip=False, groups=1):
    """(b, c, h, w) correlated with (o, c // groups, kh, kw) (convolved if ``flip``)."""
    if flip:
        w = w[..., ::-1, ::-1]
    x = np.pad(x, ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2))
    win = sliding_window_view(x, w.shape[2:], axis=(2, 3))[:, :, :: stride[0], :: stride[1]]
    cg, og = x.shape[1] // groups, w.shape[0] // groups
    return np.concatenate(
        [
            np.einsum("bcijkl,ockl->boij", win[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og])
            for g in range(groups)
        ],
        axis=1,
    )


def np_pool(x, ws, stride, pad=(0, 0), ignore_border=True, mode="max"):
    """Pooling over the last two axes; partial windows with ``ignore_border=False``."""
    out = []
    h, w = x.shape[-2:]

    def starts(size, k, s, p):
        if ignore_border:
            n = (size + 2 * p - k) // s + 1
        else:
            n = max(0, (size - k + s - 1) // s) + 1 if s < k else (size + s - 1) // s
        return [i * s - p for i in range(n)]

    xf = x.astype(np.float64)
    for i in starts(h, ws[0], stride[0], pad[0]):
        row = []
        for j in starts(w, ws[1], stride[1], pad[1]):
            a, b = max(i, 0), min(i + ws[0], h)
            c, d = max(j, 0), min(j + ws[1], w)
            block = xf[..., a:b, c:d]
            if mode == "max":
                row.append(block.max(axis=(-2, -1)))
            elif mode == "average_inc_pad":
                row.append(block.sum(axis=(-2, -1)) / (ws[0] * ws[1]))
            else:
                row.append(block.mean(axis=(-2, -1)))
        out.append(np.stack(row, -1))
    return np.stack(out, -2)


def relu(x):
    return np.maximum(x, 0)


# ----------------------------------------------------------------------------
# one network of every 2-D legacy layer, compiled once per mode

R = np.random.RandomState(42)
X = R.randn(2, 4, 7, 6).astype("float32")  # bc01
X_C01B = np.ascontiguousarray(X.transpose(1, 2, 3, 0))


@pytest.fixture(scope="module")
def legacy_net(legacy):  # noqa: F811
    from lasagne.layers.corrmm import Conv2DMMLayer
    from lasagne.layers.cuda_convnet import (
        Conv2DCCLayer,
        MaxPool2DCCLayer,
        NINLayer_c01b,
        bc01_to_c01b,
        c01b_to_bc01,
    )
    from lasagne.layers.dnn import (
        BatchNormDNNLayer,
        Conv2DDNNLayer,
        MaxPool2DDNNLayer,
        Pool2DDNNLayer,
    )

    x = pt.tensor4("x", dtype="float32")
    l_in = InputLayer((None, 4, 7, 6), x)
    xc = pt.tensor4("xc", dtype="float32")
    l_in_c01b = InputLayer((4, 7, 6, None), xc)
    b6 = R.randn(6).astype("float32")
    b16 = R.randn(16).astype("float32")
    layers = {
        "dnn": Conv2DDNNLayer(l_in, 6, (3, 2), stride=(2, 1), pad=1, b=b6),
        "dnn_groups": Conv2DDNNLayer(l_in, 6, 3, pad="full", num_groups=2, nonlinearity=None),
        "dnn_flip": Conv2DDNNLayer(l_in, 6, 3, flip_filters=True, pad="same", b=None),
        "mm": Conv2DMMLayer(l_in, 6, (3, 3), stride=2, b=b6),
        "cc": Conv2DCCLayer(l_in, 16, 3, pad=1, b=b16),
        "cc_c01b": Conv2DCCLayer(l_in_c01b, 16, 3, stride=2, dimshuffle=False, b=b16),
        "cc_c01b_untied": Conv2DCCLayer(
            l_in_c01b, 16, 3, dimshuffle=False, untie_biases=True, nonlinearity=None
        ),
        "ccpool": MaxPool2DCCLayer(l_in, 3, stride=2),
        "ccpool_c01b": MaxPool2DCCLayer(l_in_c01b, 2, dimshuffle=False),
        "nin_c01b": NINLayer_c01b(l_in_c01b, 5, b=R.randn(5).astype("float32")),
        "nin_c01b_untied": NINLayer_c01b(l_in_c01b, 5, untie_biases=True, nonlinearity=None),
        "to_c01b": bc01_to_c01b(l_in),
        "to_bc01": c01b_to_bc01(l_in_c01b),
        "dnnpool": MaxPool2DDNNLayer(l_in, 3, stride=2, pad=1),
        "dnnpool_avg": Pool2DDNNLayer(l_in, (2, 3), pad=(1, 1), mode="average_exc_pad"),
        "dnnpool_inc": Pool2DDNNLayer(l_in, 2, mode="average_inc_pad"),
        "bn_dnn": BatchNormDNNLayer(l_in),
        "bn_dnn_first": BatchNormDNNLayer(l_in, axes=0),
    }
    untied = layers["nin_c01b_untied"].b
    untied.set_value(R.randn(*untied.get_value().shape).astype("float32"))
    untied = layers["cc_c01b_untied"].b
    untied.set_value(R.randn(*untied.get_value().shape).astype("float32"))
    for bn in ("bn_dnn", "bn_dnn_first"):
        for p in get_all_params(layers[bn]):
            p.set_value(R.rand(*p.get_value().shape).astype("float32") + 0.5)
    names = list(layers)
    outputs = get_output([layers[n] for n in names], deterministic=True)
    train_bn = get_output(layers["bn_dnn"], batch_norm_update_averages=False)
    return x, xc, layers, names, outputs, train_bn


def np_expected(layers):
    W = {name: layer.W.get_value() for name, layer in layers.items() if hasattr(layer, "W")}
    b = {
        name: layer.b.get_value()
        for name, layer in layers.items()
        if getattr(layer, "b", None) is not None
    }
    exp = {}
    exp["dnn"] = relu(np_conv(X, W["dnn"], (2, 1), (1, 1)) + b["dnn"][:, None, None])
    exp["dnn_groups"] = np_conv(X, W["dnn_groups"], pad=(2, 2), groups=2)
    exp["dnn_flip"] = relu(np_conv(X, W["dnn_flip"], pad=(1, 1), flip=True))
    exp["mm"] = relu(np_conv(X, W["mm"], (2, 2)) + b["mm"][:, None, None])
    exp["cc"] = relu(np_conv(X, W["cc"], pad=(1, 1)) + b["cc"][:, None, None])
    w_c01b = W["cc_c01b"].transpose(3, 0, 1, 2)
    exp["cc_c01b"] = relu(np_conv(X, w_c01b, (2, 2)) + b["cc_c01b"][:, None, None]).transpose(
        1, 2, 3, 0
    )
    w_c01b = W["cc_c01b_untied"].transpose(3, 0, 1, 2)
    exp["cc_c01b_untied"] = (np_conv(X, w_c01b) + b["cc_c01b_untied"]).transpose(1, 2, 3, 0)
    exp["ccpool"] = np_pool(X, (3, 3), (2, 2), ignore_border=False)
    exp["ccpool_c01b"] = np_pool(X, (2, 2), (2, 2), ignore_border=False).transpose(1, 2, 3, 0)
    nin = np.einsum("oc,chwb->ohwb", W["nin_c01b"], X_C01B)
    exp["nin_c01b"] = relu(nin + b["nin_c01b"][:, None, None, None])
    nin = np.einsum("oc,chwb->ohwb", W["nin_c01b_untied"], X_C01B)
    exp["nin_c01b_untied"] = nin + b["nin_c01b_untied"][..., None]
    exp["to_c01b"] = X_C01B
    exp["to_bc01"] = X
    exp["dnnpool"] = np_pool(X, (3, 3), (2, 2), (1, 1))
    exp["dnnpool_avg"] = np_pool(X, (2, 3), (2, 3), (1, 1), mode="average_exc_pad")
    exp["dnnpool_inc"] = np_pool(X, (2, 2), (2, 2), mode="average_inc_pad")
    for name, axes in (("bn_dnn", (0, 2, 3)), ("bn_dnn_first", (0,))):
        layer = layers[name]
        pattern = [slice(None) if a not in axes else None for a in range(4)]
        beta, gamma, mean, inv_std = (
            p.get_value()[tuple(pattern)]
            for p in (layer.beta, layer.gamma, layer.mean, layer.inv_std)
        )
        exp[name] = (X - mean) * gamma * inv_std + beta
    return exp


@pytest.mark.parametrize("mode", mode_params())
def test_outputs_match_numpy_in_every_mode(legacy_net, mode):
    x, xc, layers, names, outputs, train_bn = legacy_net
    f = pytensor.function([x, xc], [*outputs, train_bn], mode=mode, on_unused_input="ignore")
    *got, got_train = f(X, X_C01B)
    expected = np_expected(layers)
    for name, value in zip(names, got, strict=True):
        assert value.shape == expected[name].shape, name
        static = layers[name].output_shape
        assert all(s in (None, v) for s, v in zip(static, value.shape, strict=True)), name
        np.testing.assert_allclose(value, expected[name], rtol=2e-5, atol=2e-5, err_msg=name)
    # training mode: cuDNN's statistics are BatchNormLayer's (biased variance)
    bn = layers["bn_dnn"]
    mean = X.mean(axis=(0, 2, 3), keepdims=True)
    inv_std = 1 / np.sqrt(X.var(axis=(0, 2, 3), keepdims=True) + bn.epsilon)
    gamma, beta = (p.get_value()[None, :, None, None] for p in (bn.gamma, bn.beta))
    np.testing.assert_allclose(
        got_train, (X - mean) * gamma * inv_std + beta, rtol=1e-4, atol=1e-5
    )


# ----------------------------------------------------------------------------
# constructors, parameters, refusals


def test_modules_export_the_legacy_names():
    import lasagne
    import lasagne.layers.corrmm
    import lasagne.layers.cuda_convnet
    import lasagne.layers.dnn

    for name in ("Conv2DDNNLayer", "MaxPool2DDNNLayer", "Pool2DDNNLayer", "BatchNormDNNLayer"):
        assert name in lasagne.layers.dnn.__all__
    assert (
        lasagne.layers.cuda_convnet.bc01_to_c01b
        is lasagne.layers.cuda_convnet.ShuffleBC01ToC01BLayer
    )
    assert (
        lasagne.layers.cuda_convnet.c01b_to_bc01
        is lasagne.layers.cuda_convnet.ShuffleC01BToBC01Layer
    )
    assert lasagne.layers.corrmm.__all__ == ["Conv2DMMLayer"]
    namespace = {}
    exec("from lasagne.layers.dnn import *; from lasagne.layers.cuda_convnet import *", namespace)
    assert "batch_norm_dnn" in namespace and "NINLayer_c01b" in namespace


def test_conv_layers_keep_lasagnes_signature_and_params():
    from lasagne.layers.corrmm import Conv2DMMLayer
    from lasagne.layers.cuda_convnet import Conv2DCCLayer
    from lasagne.layers.dnn import Conv2DDNNLayer

    l_in = InputLayer((None, 4, 8, 8))
    for cls in (Conv2DDNNLayer, Conv2DMMLayer, Conv2DCCLayer):
        layer = cls(l_in, 16, 3, name="c")
        assert layer.flip_filters is False
        assert [p.name for p in layer.get_params()] == ["c.W", "c.b"]
        assert layer.get_params(regularizable=True) == [layer.W]
        assert layer.W.get_value().shape == (16, 4, 3, 3)
        assert layer.output_shape == (None, 16, 6, 6)
        none = cls(l_in, 16, 3, b=None, nonlinearity=None)
        assert none.b is None and none.nonlinearity is lasagne_bn.nonlinearities.identity
    # the same W gives the same numbers as Conv2DLayer(flip_filters=False)
    W = np.random.RandomState(0).randn(16, 4, 3, 3).astype("float32")
    plain = Conv2DLayer(l_in, 16, 3, W=W, flip_filters=False)
    dnn = Conv2DDNNLayer(l_in, 16, 3, W=W)
    x = pt.tensor4(dtype="float32")
    f = pytensor.function(
        [x], [plain.get_output_for(x), dnn.get_output_for(x)], mode="FAST_COMPILE"
    )
    a, b = f(np.random.RandomState(1).randn(2, 4, 8, 8).astype("float32"))
    np.testing.assert_array_equal(a, b)


def test_conv2dcc_c01b_layout_and_restrictions():
    from lasagne.layers.cuda_convnet import Conv2DCCLayer

    c01b = InputLayer((4, 32, 32, None))
    layer = Conv2DCCLayer(c01b, 16, (3, 3), dimshuffle=False, untie_biases=True)
    assert layer.W.get_value().shape == (4, 3, 3, 16)
    assert layer.b.get_value().shape == (16, 30, 30)
    assert [p.name for p in layer.get_params()] == ["W", "b"]
    assert layer.output_shape == (16, 30, 30, None)
    assert Conv2DCCLayer(InputLayer((None, 3, 32, 32)), 16, 3, pad=(3, 3)).output_shape == (
        None, 16, 36, 36,
    )  # fmt: skip
    bc01 = InputLayer((None, 3, 32, 32))
    for kwargs, message in [
        ({"filter_size": (3, 5)}, "only supports square filters"),
        ({"stride": (1, 2)}, "only supports square strides"),
        ({"num_filters": 15}, "num_filters to be a multiple of 16"),
        ({"pad": (1, 2)}, "only supports square padding"),
    ]:
        args = {"num_filters": 16, "filter_size": 3, **kwargs}
        with pytest.raises(RuntimeError, match=message) as info:
            Conv2DCCLayer(bc01, **args)
        assert "Conv2DLayer(..., flip_filters=False)" in str(info.value)
    with pytest.raises(RuntimeError, match="1, 2, 3 or a multiple of 4, but it is 7"):
        Conv2DCCLayer(InputLayer((None, 7, 32, 32)), 16, 3)


def test_partial_sum_is_ignored_with_one_warning():
    from lasagne.layers.cuda_convnet import Conv2DCCLayer

    from lasagne_bn_compat.lasagne.layers import _gpu

    _gpu._WARNED.discard(("Conv2DCCLayer", "partial_sum"))
    l_in = InputLayer((None, 4, 8, 8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Conv2DCCLayer(l_in, 16, 3)  # the default: no warning
        assert not caught
        layer = Conv2DCCLayer(l_in, 16, 3, partial_sum=4)
        Conv2DCCLayer(l_in, 16, 3, partial_sum=2)
    assert len(caught) == 1 and "partial_sum=4 is ignored" in str(caught[0].message)
    assert layer.partial_sum == 4


def test_maxpool2dcc_refusals_and_shapes():
    from lasagne.layers.cuda_convnet import MaxPool2DCCLayer

    l_in = InputLayer((None, 4, 12, 12))
    layer = MaxPool2DCCLayer(l_in, 3, stride=2, pad=0)
    assert (layer.pool_size, layer.stride) == (3, 2)
    assert layer.output_shape == (None, 4, 6, 6)
    assert layer.get_output_shape_for((1, 2, None, 6)) == (1, 2, None, 3)
    for kwargs, message in [
        ({"pad": 2}, "does not support padding"),
        ({"pool_size": (2, 3)}, "only supports square pooling regions"),
        ({"stride": (1, 2)}, "same stride in both directions"),
        ({"stride": 3}, "stride <= pool_size"),
        ({"ignore_border": True}, "does not support ignore_border=True"),
    ]:
        with pytest.raises(NotImplementedError, match=message):
            MaxPool2DCCLayer(l_in, **{"pool_size": 2, **kwargs})


def test_dnn_pooling_and_batch_norm_refusals():
    from lasagne.layers.dnn import BatchNormDNNLayer, MaxPool2DDNNLayer, Pool2DDNNLayer

    with pytest.raises(NotImplementedError, match="does not support ignore_border=False"):
        MaxPool2DDNNLayer((1, 2, 3, 4), 2, ignore_border=False)
    with pytest.raises(ValueError, match="Expected 4 input dimensions"):
        Pool2DDNNLayer((10, 20, 30), 3)
    with pytest.raises(ValueError, match="mode="):
        Pool2DDNNLayer((1, 2, 3, 4), 2, mode="median")
    assert MaxPool2DDNNLayer((None, 3, 24, 24), 2).output_shape == (None, 3, 12, 12)
    with pytest.raises(ValueError, match="BatchNormDNNLayer only supports"):
        BatchNormDNNLayer((2, 3, 4), axes=(1, 2))
    layer = BatchNormDNNLayer((None, 3, 4, 5), name="bn")
    assert isinstance(layer, BatchNormLayer)
    assert [p.name for p in layer.get_params()] == ["bn.beta", "bn.gamma", "bn.mean", "bn.inv_std"]


def test_batch_norm_dnn_takes_bias_and_nonlinearity():
    from lasagne.layers.dnn import BatchNormDNNLayer, Conv2DDNNLayer, batch_norm_dnn

    conv = Conv2DDNNLayer(InputLayer((None, 3, 8, 8)), 4, 3, name="conv")
    top = batch_norm_dnn(conv)
    assert isinstance(top, NonlinearityLayer) and top.name == "conv_bn_nonlin"
    assert isinstance(top.input_layer, BatchNormDNNLayer) and top.input_layer.axes == (0, 2, 3)
    assert conv.b is None and conv.nonlinearity is lasagne_bn.nonlinearities.identity
    assert [p.name for p in get_all_params(top)] == [
        "conv.W", "conv_bn.beta", "conv_bn.gamma", "conv_bn.mean", "conv_bn.inv_std"
    ]  # fmt: skip
    with pytest.raises(ValueError, match="BatchNormDNNLayer only supports"):
        batch_norm_dnn(Conv2DDNNLayer(InputLayer((None, 3, 8, 8)), 4, 3), axes=(0, 1))


def test_lasagne_layers_attribute_reaches_the_modules():
    import lasagne

    assert lasagne.layers.dnn.Conv2DDNNLayer.__module__ == "lasagne_bn_compat.lasagne.layers.dnn"
    assert lasagne.layers.cuda_convnet.NINLayer_c01b.__name__ == "NINLayer_c01b"


def test_pickled_cuda_convnet_layers_rebuild():
    """A GPU-era Conv2DCCLayer / MaxPool2DCCLayer pickle (pylearn2 ops inside) rebuilds."""
    from lasagne_bn_compat._pickle import Rebuilder, stand_in

    def obj(path, **state):
        o = stand_in(path)()
        o.__setstate__(state)
        return o

    W = np.random.RandomState(1).randn(16, 3, 3, 3).astype("float32")
    container = obj("theano.gof.link.Container", storage=[W])
    w = obj("theano.sandbox.cuda.var.CudaNdarraySharedVariable", container=container, name="W")
    l_in = obj("lasagne.layers.input.InputLayer", shape=(None, 3, 8, 8), input_var=None, name=None)
    conv = obj(
        "lasagne.layers.cuda_convnet.Conv2DCCLayer",
        input_layer=l_in, input_shape=(None, 3, 8, 8), name="cc", num_filters=16,
        filter_size=(3, 3), stride=(1, 1), pad=(0, 0), untie_biases=False, W=w, b=None,
        nonlinearity=stand_in("lasagne.nonlinearities.linear"), flip_filters=False, n=2,
        dimshuffle=True, partial_sum=1, params={w: {"trainable", "regularizable"}},
        filter_acts_op=obj("pylearn2.sandbox.cuda_convnet.filter_acts.FilterActs", stride=1),
    )  # fmt: skip
    pool = obj(
        "lasagne.layers.cuda_convnet.MaxPool2DCCLayer",
        input_layer=conv, input_shape=(None, 16, 6, 6), name="pool", pool_size=3, stride=2,
        dimshuffle=True, pool_op=obj("pylearn2.sandbox.cuda_convnet.pool.MaxPool", ds=3),
    )  # fmt: skip
    net = Rebuilder().convert(pool)
    assert type(net).__name__ == "MaxPool2DCCLayer" and net.output_shape == (None, 16, 3, 3)
    assert type(net.input_layer).__name__ == "Conv2DCCLayer"
    np.testing.assert_array_equal(net.input_layer.W.get_value(), W)


# ----------------------------------------------------------------------------
# the layers built on 3-D convolution / pooling and pyramid pooling


def _needs(name):
    if not hasattr(lasagne_bn.layers, name):
        pytest.skip(f"lasagne_bn.layers.{name} is not in this build")


def test_3d_and_pyramid_layers_say_what_they_need_when_missing():
    import lasagne.layers.dnn as dnn

    for name, base in [
        ("Conv3DDNNLayer", "Conv3DLayer"),
        ("MaxPool3DDNNLayer", "Pool3DLayer"),
        ("SpatialPyramidPoolingDNNLayer", "SpatialPyramidPoolingLayer"),
    ]:
        if hasattr(lasagne_bn.layers, base):
            assert name in dnn.__all__
            continue
        assert name not in dnn.__all__
        with pytest.raises(ImportError, match=f"lasagne_bn.layers.{base}"):
            exec(f"from lasagne.layers.dnn import {name}", {})
        assert not hasattr(dnn, name)


def test_conv3d_dnn_is_a_correlating_conv3d():
    _needs("Conv3DLayer")
    from lasagne.layers.dnn import Conv3DDNNLayer

    l_in = InputLayer((None, 2, 5, 6, 7))
    W = np.random.RandomState(3).randn(4, 2, 3, 2, 3).astype("float32")
    dnn = Conv3DDNNLayer(l_in, 4, (3, 2, 3), pad=1, W=W, name="c3")
    plain = lasagne_bn.layers.Conv3DLayer(l_in, 4, (3, 2, 3), pad=1, W=W, flip_filters=False)
    assert dnn.flip_filters is False
    assert [p.name for p in dnn.get_params()] == ["c3.W", "c3.b"]
    assert dnn.output_shape == plain.output_shape
    x = pt.tensor5(dtype="float32")
    f = pytensor.function([x], [dnn.get_output_for(x), plain.get_output_for(x)])
    a, b = f(np.random.RandomState(4).randn(2, 2, 5, 6, 7).astype("float32"))
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_pool3d_dnn_is_a_whole_window_pool3d():
    _needs("Pool3DLayer")
    from lasagne.layers.dnn import MaxPool3DDNNLayer, Pool3DDNNLayer

    with pytest.raises(NotImplementedError, match="Pool3DDNNLayer does not support"):
        MaxPool3DDNNLayer((1, 2, 3, 4, 5), 2, ignore_border=False)
    with pytest.raises(ValueError, match="Expected 5 input dimensions"):
        MaxPool3DDNNLayer((10, 20, 30, 40), 3)
    l_in = InputLayer((None, 2, 5, 6, 7))
    for dnn, plain in [
        (MaxPool3DDNNLayer(l_in, 2, pad=1), lasagne_bn.layers.MaxPool3DLayer(l_in, 2, pad=1)),
        (
            Pool3DDNNLayer(l_in, 3, stride=2, mode="average_inc_pad"),
            lasagne_bn.layers.Pool3DLayer(l_in, 3, stride=2, mode="average_inc_pad"),
        ),
    ]:
        assert dnn.output_shape == plain.output_shape
        x = pt.tensor5(dtype="float32")
        f = pytensor.function([x], [dnn.get_output_for(x), plain.get_output_for(x)])
        a, b = f(np.random.RandomState(5).randn(2, 2, 5, 6, 7).astype("float32"))
        np.testing.assert_array_equal(a, b)


def test_spatial_pyramid_pooling_dnn():
    _needs("SpatialPyramidPoolingLayer")
    from lasagne.layers.dnn import SpatialPyramidPoolingDNNLayer

    with pytest.raises(ValueError, match="Expected 4 input dimensions"):
        SpatialPyramidPoolingDNNLayer((10, 20, 30))
    layer = SpatialPyramidPoolingDNNLayer(InputLayer((None, 3, 9, 8)), pool_dims=[1, 2, 4])
    assert layer.output_shape == (None, 3, 21)
    x = pt.tensor4(dtype="float32")
    value = np.random.RandomState(6).randn(2, 3, 9, 8).astype("float32")
    got = pytensor.function([x], layer.get_output_for(x))(value)
    parts = []
    for p in (1, 2, 4):
        ws = tuple(-(-s // p) for s in value.shape[2:])
        stride = tuple(s // p for s in value.shape[2:])
        parts.append(np_pool(value, ws, stride).reshape(2, 3, -1))
    np.testing.assert_allclose(got, np.concatenate(parts, axis=2), rtol=1e-6)


# ----------------------------------------------------------------------------
# the cuDNN functions of theano.gpuarray.dnn


def test_gpuarray_dnn_functions_are_portable():
    from theano.gpuarray import dnn

    from lasagne_bn_compat.theano.gpuarray import dnn as shim

    assert dnn.dnn_present() is False  # legacy checks still take the CPU path
    shim._WARNED.discard("dnn_conv")
    x, w = pt.tensor4("x"), pt.tensor4("w")
    W = np.random.RandomState(2).randn(3, 4, 3, 2).astype("float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cross = dnn.dnn_conv(x, w, border_mode=(1, 0), conv_mode="cross", algo="time_once")
        conv = dnn.dnn_conv(x, w, subsample=(2, 2), algo="small", workmem="none")
    assert len(caught) == 1 and "algo='time_once' only tuned cuDNN" in str(caught[0].message)
    pooled = dnn.dnn_pool(x, (2, 3), stride=(1, 2), mode="average_inc_pad", pad=(1, 1))
    g = pt.vector("g")
    gamma = g.dimshuffle("x", 0, "x", "x")
    out, mean, invstd = dnn.dnn_batch_normalization_train(x, gamma, gamma * 0, "spatial", 1e-3)
    var = 1 / invstd**2 - 1e-3
    test = dnn.dnn_batch_normalization_test(x, gamma, gamma * 0, mean, var, "spatial", 1e-3)
    f = pytensor.function([x, w, g], [cross, conv, pooled, out, test], mode="FAST_COMPILE")
    got = f(X, W, np.ones(4, "float32"))
    np.testing.assert_allclose(got[0], np_conv(X, W, pad=(1, 0)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[1], np_conv(X, W, (2, 2), flip=True), rtol=1e-5, atol=1e-5)
    ref = np_pool(X, (2, 3), (1, 2), (1, 1), mode="average_inc_pad")
    np.testing.assert_allclose(got[2], ref, rtol=1e-5, atol=1e-6)
    normed = (X - X.mean(axis=(0, 2, 3), keepdims=True)) / np.sqrt(
        X.var(axis=(0, 2, 3), keepdims=True) + 1e-3
    )
    np.testing.assert_allclose(got[3], normed, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got[4], normed, rtol=1e-3, atol=1e-4)
    with pytest.raises(ValueError, match="conv_mode"):
        dnn.dnn_conv(x, w, conv_mode="full")
