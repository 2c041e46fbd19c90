"""Theano's conv2d / pool_2d and Lasagne's conv and pooling layers through lasagne_bn_compat."""

from __future__ import annotations

import runpy
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import DATA, QUIET, SCRIPTS, legacy  # noqa: F401
from scipy.signal import correlate2d

import lasagne_bn.layers
import lasagne_bn_compat
import lasagne_bn_compat.io as cio
from lasagne_bn import nonlinearities, objectives, random, updates
from lasagne_bn.layers import (
    Conv2DLayer,
    DenseLayer,
    InputLayer,
    MaxPool2DLayer,
    batch_norm,
    get_all_layers,
    get_all_params,
    get_output,
)
from lasagne_bn.ops.conv import conv2d as lasagne_bn_conv2d
from lasagne_bn.ops.pool import pool_2d as lasagne_bn_pool_2d

pytestmark = QUIET
ORACLE = DATA / "compat_oracle"


def np_corr(x, w, pad=0, stride=1, flip=True):
    """Reference: (batch, c, h, w) * (out, c, kh, kw), zero padding, strides."""
    if flip:
        w = w[:, :, ::-1, ::-1]
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.array(
        [[sum(correlate2d(xp[b, c], w[o, c], mode="valid") for c in range(x.shape[1]))
          for o in range(w.shape[0])] for b in range(x.shape[0])]
    )  # fmt: skip
    return out[:, :, ::stride, ::stride]


def np_pool(x, k, mode="max"):
    b, c, h, w = x.shape
    blocks = x[:, :, : h // k * k, : w // k * k].reshape(b, c, h // k, k, w // k, k)
    return blocks.max(axis=(3, 5)) if mode == "max" else blocks.mean(axis=(3, 5))


@pytest.mark.usefixtures("legacy")
class TestTheanoFunctions:
    def test_names(self):
        import theano.tensor as T
        from theano.tensor.nnet import abstract_conv, conv2d
        from theano.tensor.signal import pool

        assert T.nnet.conv2d is conv2d is abstract_conv.conv2d
        assert pool.max_pool_2d_same_size is not None
        assert callable(T.nnet.conv2d_transpose)
        shape = abstract_conv.get_conv_output_shape((2, 1, 8, 8), (4, 1, 3, 3), "valid", (1, 1))
        assert shape == (2, 4, 6, 6)

    def test_conv2d_and_pool_2d_match_numpy(self):
        import theano
        import theano.tensor as T
        import theano.tensor.nnet.conv as old_conv
        from theano.tensor.signal import downsample
        from theano.tensor.signal.pool import max_pool_2d_same_size, pool_2d

        x, w = T.tensor4("x"), T.tensor4("w")
        outs = [
            T.nnet.conv2d(x, w),
            T.nnet.conv2d(x, w, border_mode="half", filter_flip=False),
            T.nnet.conv2d(x, w, border_mode=1, subsample=(2, 2), image_shape=(3, 2, 7, 7)),
            T.nnet.conv2d(x, w, border_mode="full"),
            old_conv.conv2d(x, w, image_shape=(3, 2, 7, 7), filter_shape=(4, 2, 3, 3)),
            pool_2d(x, ws=(2, 2), ignore_border=True),
            pool_2d(x, ds=(2, 2), ignore_border=True, mode="average_inc_pad"),
            downsample.max_pool_2d(x, (2, 2), ignore_border=True),
            max_pool_2d_same_size(x, (2, 2)),
        ]
        f = theano.function([x, w], outs, mode="FAST_COMPILE")
        r = np.random.RandomState(0)
        xv, wv = r.randn(3, 2, 7, 7), r.randn(4, 2, 3, 3)
        got = f(xv, wv)
        same = np_pool(xv, 2)
        mask = np.kron(same, np.ones((1, 1, 2, 2))) == xv[:, :, :6, :6]
        expected = [
            np_corr(xv, wv),
            np_corr(xv, wv, pad=1, flip=False),
            np_corr(xv, wv, pad=1, stride=2),
            np_corr(xv, wv, pad=2),
            np_corr(xv, wv),
            same,
            np_pool(xv, 2, "mean"),
            same,
            None,
        ]
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            if b is not None:
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"output {i}")
        np.testing.assert_allclose(got[-1][:, :, :6, :6], np.where(mask, xv[:, :, :6, :6], 0))

    def test_conv2d_transpose_is_the_input_gradient(self):
        import theano
        import theano.tensor as T

        x, w, dy = T.tensor4("x"), T.tensor4("w"), T.tensor4("dy")
        y = T.nnet.conv2d(x, w, border_mode=1, subsample=(2, 2))
        grad = T.grad((y * dy).sum(), x)
        transposed = T.nnet.conv2d_transpose(
            dy, w, output_shape=(2, 3, 7, 7), border_mode=1, input_dilation=(2, 2)
        )
        f = theano.function([x, w, dy], [grad, transposed], mode="FAST_COMPILE")
        r = np.random.RandomState(1)
        a, b = f(r.randn(2, 3, 7, 7), r.randn(5, 3, 3, 3), r.randn(2, 5, 4, 4))
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)

    def test_abstract_conv_op_classes_and_conv3d(self):
        """Theano's Op classes as legacy layers build them, and T.nnet.conv3d."""
        import theano
        import theano.tensor as T
        from theano.tensor.nnet import abstract_conv as ac

        x, w, dy = T.tensor4("x"), T.tensor4("w"), T.tensor4("dy")
        y = T.nnet.conv2d(x, w, border_mode=1, subsample=(2, 2))
        gx, gw = T.grad((y * dy).sum(), [x, w])
        kw = dict(border_mode=1, subsample=(2, 2), filter_flip=True)
        op = ac.AbstractConv2d_gradInputs(imshp=(None, 3, 7, 7), kshp=(5, 3, 3, 3), **kw)
        assert (op.imshp, op.kshp, op.subsample) == ((None, 3, 7, 7), (5, 3, 3, 3), (2, 2))
        sym_size = x.shape[2:]  # Lasagne passes symbolic sizes when they are unknown
        outs = [
            ac.AbstractConv2d(**kw)(x, w),
            op(w, dy, (7, 7)),
            ac.AbstractConv2d_gradInputs(**kw)(w, dy, sym_size),
            ac.AbstractConv2d_gradWeights(**kw)(x, dy, (3, 3)),
        ]
        f = theano.function([x, w, dy], [y, gx, gw, *outs], mode="FAST_COMPILE")
        r = np.random.RandomState(2)
        got = f(r.randn(2, 3, 7, 7), r.randn(5, 3, 3, 3), r.randn(2, 5, 4, 4))
        for a, b in zip(got[3:], [got[0], got[1], got[1], got[2]], strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        with pytest.raises(ValueError, match="unshared"):
            ac.AbstractConv2d(unshared=True)

        v, k = T.tensor5("v"), T.tensor5("k")
        out3 = T.nnet.conv3d(v, k, border_mode="half", filter_flip=False)
        op3 = ac.AbstractConv3d_gradInputs(imshp=None, kshp=None, subsample=(1, 2, 1))
        back = op3(k, T.tensor5("t"), (4, 7, 5))
        assert back.type.shape[2:] == (4, 7, 5)
        g3 = ac.AbstractConv3d_gradWeights()(v, out3, (3, 3, 3))
        assert g3.type.shape[2:] == (3, 3, 3)
        vv, kv = r.randn(1, 2, 4, 5, 3), r.randn(3, 2, 3, 3, 3)
        got3 = theano.function([v, k], out3, mode="FAST_COMPILE")(vv, kv)
        xp = np.pad(vv, [(0, 0), (0, 0), (1, 1), (1, 1), (1, 1)])
        want = np.einsum(
            "ncdhwijk,fcijk->nfdhw",
            np.lib.stride_tricks.sliding_window_view(xp, (3, 3, 3), axis=(2, 3, 4)),
            kv,
        )
        np.testing.assert_allclose(got3, want, rtol=1e-10, atol=1e-12)
        assert ac.conv3d is T.nnet.conv3d and callable(ac.conv3d_grad_wrt_weights)

    def test_errors(self):
        import theano.tensor as T
        from theano.tensor.signal import pool

        x = T.tensor4()
        with pytest.raises(ValueError, match="unshared"):
            T.nnet.conv2d(x, x, unshared=True)
        with pytest.raises(TypeError, match=r"unexpected keyword arguments \['bogus'\]"):
            T.nnet.conv2d(x, x, bogus=1)
        with pytest.raises(ValueError, match="give ws or its old name ds, not both"):
            pool.pool_2d(x, ws=(2, 2), ds=(2, 2), ignore_border=True)
        with pytest.raises(AttributeError, match="pooling gradients come from theano.grad"):
            pool.MaxPoolRop  # noqa: B018
        # 3-D convolutions and pooling are there
        scope = {}
        exec("from lasagne.layers import Conv3DLayer, Deconv3DLayer, TransposedConv3DLayer", scope)
        assert scope["Conv3DLayer"] is lasagne_bn.layers.Conv3DLayer
        assert scope["Deconv3DLayer"] is lasagne_bn.layers.TransposedConv3DLayer
        assert T.nnet.conv3d is T.nnet.abstract_conv.conv3d
        assert callable(pool.pool_3d)

    def test_layers_are_lasagne_bn_s(self):
        import lasagne
        from lasagne.layers import Conv2DLayer as C2
        from lasagne.layers.pool import MaxPool2DLayer as M2

        assert C2 is Conv2DLayer and M2 is MaxPool2DLayer
        assert lasagne.layers.conv is lasagne_bn.layers.conv
        assert lasagne.layers.Upscale2DLayer is lasagne_bn.layers.Upscale2DLayer


def test_theano_pickled_convnet(tmp_path):
    """Conv2DLayer + batch_norm + MaxPool2DLayer pickled by real Lasagne: rebuilt and loaded."""
    with np.load(ORACLE / "expected.npz") as f:
        x, expected, names = f["conv_x"], f["conv_out"], list(f["conv_param_names"])
    network = cio.load_network(ORACLE / "convnet_p4.pkl")
    layers = get_all_layers(network)
    assert [type(layer).__name__ for layer in layers] == [
        "InputLayer", "Conv2DLayer", "BatchNormLayer", "NonlinearityLayer", "MaxPool2DLayer",
        "DenseLayer",
    ]  # fmt: skip
    assert layers[1].pad == (1, 1) and layers[4].pool_size == (2, 2)
    assert [p.name for p in get_all_params(network)] == names
    f = pytensor.function(
        [layers[0].input_var], get_output(network, deterministic=True), mode="FAST_COMPILE"
    )
    np.testing.assert_allclose(f(x), expected, rtol=1e-5, atol=1e-6)
    # the same values into a network built on lasagne_bn
    l_in = InputLayer((None, 2, 6, 6))
    c = batch_norm(Conv2DLayer(l_in, 3, 3, pad=1, name="conv"))
    net = DenseLayer(MaxPool2DLayer(c, 2), 3, nonlinearity=nonlinearities.softmax)
    cio.load_params(net, ORACLE / "convnet_p4.pkl")
    g = pytensor.function(
        [l_in.input_var], get_output(net, deterministic=True), mode="FAST_COMPILE"
    )
    np.testing.assert_allclose(g(x.astype("float64")), expected, rtol=1e-5, atol=1e-6)


def native_cnn(steps=3):
    """legacy_cnn.py on lasagne_bn and PyTensor."""
    random.set_rng(np.random.RandomState(7))
    rng = np.random.RandomState(1)
    X = rng.randn(12, 1, 8, 8).astype(pytensor.config.floatX)
    y = rng.randint(0, 3, 12).astype("int32")
    input_var, target_var = pt.tensor4("inputs"), pt.ivector("targets")
    network = InputLayer((None, 1, 8, 8), input_var=input_var)
    conv = Conv2DLayer(network, 4, (3, 3), pad="same")
    network = MaxPool2DLayer(batch_norm(conv), (2, 2))
    network = DenseLayer(network, 3, nonlinearity=nonlinearities.softmax)
    loss = objectives.categorical_crossentropy(get_output(network), target_var).mean()
    params = get_all_params(network, trainable=True)
    mode = "FAST_COMPILE"
    train_fn = pytensor.function(
        [input_var, target_var], loss, updates=updates.momentum(loss, params, 0.05), mode=mode
    )
    predict_fn = pytensor.function([input_var], get_output(network, deterministic=True), mode=mode)
    losses = [train_fn(X, y) for _ in range(steps)]
    maps = lasagne_bn_pool_2d(
        nonlinearities.rectify(lasagne_bn_conv2d(input_var, conv.W, border_mode="half")),
        ws=(2, 2),
        ignore_border=True,
    )
    features = pytensor.function([input_var], maps, mode=mode)(X)
    return {"losses": np.array(losses), "pred": predict_fn(X), "features": features}


def test_legacy_cnn_script_matches_lasagne_bn(tmp_path):
    results = tmp_path / "cnn.npz"
    argv = sys.argv[:]
    # inside change_flags: the mode install() sets is undone with the block, so
    # the tests after this one still run in the default mode
    with pytensor.config.change_flags(mode="FAST_COMPILE"):
        lasagne_bn_compat.install(theano_flags="mode=FAST_COMPILE")
        try:
            sys.argv = [str(SCRIPTS / "legacy_cnn.py"), str(results)]
            runpy.run_path(str(SCRIPTS / "legacy_cnn.py"), run_name="__main__")
            native = native_cnn()
        finally:
            sys.argv = argv
            lasagne_bn_compat.uninstall()
    with np.load(results) as f:
        for key in ("losses", "pred", "features"):
            np.testing.assert_allclose(f[key], native[key], rtol=1e-12, atol=1e-14, err_msg=key)
        assert f["losses"][-1] < f["losses"][0]


def test_pickled_cudnn_layers_rebuild_as_compat_layers():
    """Conv2DDNNLayer (flip_filters=False by default) and friends, from a GPU-era pickle."""
    from lasagne_bn_compat._pickle import Rebuilder, stand_in

    def obj(path, **state):
        o = stand_in(path)()
        o.__setstate__(state)
        return o

    r = np.random.RandomState(0)
    W = r.randn(2, 1, 3, 3)

    def shared(value, name):
        container = obj("theano.gof.link.Container", storage=[value])
        return obj(
            "theano.sandbox.cuda.var.CudaNdarraySharedVariable", container=container, name=name
        )

    l_in = obj("lasagne.layers.input.InputLayer", shape=(None, 1, 5, 5), input_var=None, name="in")
    w = shared(W, "conv.W")
    conv = obj(
        "lasagne.layers.dnn.Conv2DDNNLayer",
        input_layer=l_in, input_shape=(None, 1, 5, 5), name="conv", num_filters=2,
        filter_size=(3, 3), stride=(1, 1), pad=(0, 0), untie_biases=False, W=w, b=None,
        nonlinearity=stand_in("lasagne.nonlinearities.linear"), flip_filters=False, n=2,
        num_groups=1, params={w: {"trainable", "regularizable"}},
    )  # fmt: skip
    pool = obj(
        "lasagne.layers.dnn.MaxPool2DDNNLayer",
        input_layer=conv, input_shape=(None, 2, 3, 3), name="pool", pool_size=(2, 2),
        stride=(1, 1), pad=(0, 0), mode="max", ignore_border=True,
    )  # fmt: skip
    net = Rebuilder().convert(pool)
    rebuilt = get_all_layers(net)
    assert [type(layer).__name__ for layer in rebuilt] == [
        "InputLayer", "Conv2DDNNLayer", "MaxPool2DDNNLayer"
    ]  # fmt: skip
    assert rebuilt[1].flip_filters is False
    x = r.randn(1, 1, 5, 5)
    f = pytensor.function([rebuilt[0].input_var], get_output(net), mode="FAST_COMPILE")
    corr = np_corr(x, W, flip=False)
    expected = np.maximum.reduce(
        [corr[:, :, i : i + 2, j : j + 2] for i in range(2) for j in range(2)]
    )
    np.testing.assert_allclose(f(x), expected, rtol=1e-12)
