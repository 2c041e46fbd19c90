"""Convolution layers: Lasagne's constructors, parameters, shapes, and numerics in every mode.

The references are float64 NumPy/SciPy code written from the layers'
definitions (``scipy.signal.correlate2d`` per channel pair, an explicit
scatter for the transposed convolution); one function per mode computes
every layer's output.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.signal
from compile_modes import mode_for

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers import (
    BatchNormLayer,
    Conv1DLayer,
    Conv2DLayer,
    Deconv2DLayer,
    DilatedConv2DLayer,
    InputLayer,
    NonlinearityLayer,
    PadLayer,
    TransposedConv2DLayer,
    batch_norm,
    get_all_params,
    get_output,
)
from lasagne_bn.layers.conv import conv_input_length, conv_output_length

MODES = ["default", "fast_compile", "py", "jax"]


def randn(*shape, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


# --------------------------------------------------------------------------
# references


def correlate(x, k, stride=(1, 1), dilation=(1, 1), groups=1):
    """Valid cross-correlation of NCHW ``x`` with OIHW ``k`` (SciPy per channel pair)."""
    kd = np.zeros(
        k.shape[:2] + tuple((s - 1) * d + 1 for s, d in zip(k.shape[2:], dilation, strict=True))
    )
    kd[:, :, :: dilation[0], :: dilation[1]] = k
    f, cg = k.shape[:2]
    fg = f // groups
    n = x.shape[0]
    ho = x.shape[2] - kd.shape[2] + 1
    wo = x.shape[3] - kd.shape[3] + 1
    out = np.zeros((n, f, ho, wo))
    for b in range(n):
        for fi in range(f):
            g = fi // fg
            for c in range(cg):
                out[b, fi] += scipy.signal.correlate2d(x[b, g * cg + c], kd[fi, c], mode="valid")
    return out[:, :, :: stride[0], :: stride[1]]


def pad_np(x, pads):
    return np.pad(x, [(0, 0), (0, 0), *pads])


def ref_conv_layer(layer, x):
    w = layer.W.get_value().astype(np.float64)
    k = w[:, :, ::-1, ::-1] if layer.flip_filters else w
    fs = layer.filter_size
    if layer.pad == "same":
        pads = [(f // 2, f // 2) for f in fs]
    elif layer.pad == "full":
        pads = [(f - 1, f - 1) for f in fs]
    else:
        pads = [(p, p) for p in layer.pad]
    out = correlate(pad_np(x.astype(np.float64), pads), k, layer.stride, groups=layer.num_groups)
    if layer.b is not None:
        b = layer.b.get_value()
        out = out + (b[None] if layer.untie_biases else b[None, :, None, None])
    return out


def ref_transposed(layer, x):
    """out[n, o, y*s + i - crop, x*s + j - crop] += in[n, c, y, x] * k[c, o, i, j]."""
    w = layer.W.get_value().astype(np.float64)
    k = w if layer.flip_filters else w[:, :, ::-1, ::-1]  # the forward conv's orientation
    kh, kw = layer.filter_size
    (sh, sw), crop = layer.stride, layer.crop
    crop = (kh // 2, kw // 2) if crop == "same" else crop
    crop = (kh - 1, kw - 1) if crop == "full" else crop
    n, c, h, wd = x.shape
    oh, ow = layer.output_shape[2:]
    big = np.zeros((n, k.shape[1], oh + 2 * crop[0] + kh, ow + 2 * crop[1] + kw))
    for i in range(kh):
        for j in range(kw):
            contrib = np.einsum("nchw,co->nohw", x.astype(np.float64), k[:, :, i, j])
            big[:, :, i : i + sh * (h - 1) + 1 : sh, j : j + sw * (wd - 1) + 1 : sw] += contrib
    out = big[:, :, crop[0] : crop[0] + oh, crop[1] : crop[1] + ow]
    return out + layer.b.get_value()[None, :, None, None]


# --------------------------------------------------------------------------
# layers under test (small, all in one compiled function per mode)


def make_layers():
    layers = {}

    def r():
        return init.Normal(0.3)

    layers["conv-valid"] = Conv2DLayer(InputLayer((2, 3, 7, 8)), 4, (3, 2), W=r(), b=r())
    layers["conv-same-stride"] = Conv2DLayer(
        InputLayer((2, 3, 9, 8)), 5, 3, stride=2, pad="same", W=r(), b=r(), nonlinearity=None
    )
    layers["conv-full-xcorr"] = Conv2DLayer(
        InputLayer((1, 2, 5, 6)),
        3,
        2,
        pad="full",
        flip_filters=False,
        W=r(),
        b=r(),
        nonlinearity=None,
    )
    layers["conv-pad-untied-groups"] = Conv2DLayer(
        InputLayer((2, 4, 6, 6)),
        6,
        3,
        pad=(1, 2),
        untie_biases=True,
        num_groups=2,
        W=r(),
        b=r(),
        nonlinearity=None,
    )
    layers["deconv"] = TransposedConv2DLayer(
        InputLayer((2, 4, 5, 5)), 3, 4, stride=2, crop=1, W=r(), b=r(), nonlinearity=None
    )
    layers["deconv-output-size-same"] = Deconv2DLayer(
        InputLayer((1, 3, 4, 5)),
        2,
        3,
        stride=(2, 3),
        crop="same",
        output_size=(8, 14),
        W=r(),
        b=r(),
        nonlinearity=None,
    )
    layers["dilated"] = DilatedConv2DLayer(
        InputLayer((2, 3, 9, 10)), 4, 3, dilation=(2, 3), W=r(), b=r(), nonlinearity=None
    )
    layers["conv1d"] = Conv1DLayer(
        InputLayer((2, 4, 11)),
        6,
        3,
        stride=2,
        pad=1,
        num_groups=2,
        W=r(),
        b=r(),
        nonlinearity=None,
    )
    layers["pad"] = PadLayer(InputLayer((2, 3, 4, 5)), width=[(1, 0), 2], val=-1.5)
    return layers


def reference(name, layer, x):
    if name.startswith("conv1d"):
        y = ref_conv_layer(_as_2d(layer), x[:, :, None, :])[:, :, 0, :]
        return y
    if name.startswith("conv"):
        y = ref_conv_layer(layer, x)
        return np.maximum(y, 0) if layer.nonlinearity is nonlinearities.rectify else y
    if name.startswith("deconv"):
        return ref_transposed(layer, x)
    if name == "dilated":
        w = layer.W.get_value().transpose(1, 0, 2, 3).astype(np.float64)
        out = correlate(x.astype(np.float64), w, dilation=layer.dilation)
        return out + layer.b.get_value()[None, :, None, None]
    if name == "pad":
        return np.pad(x, [(0, 0), (0, 0), (1, 0), (2, 2)], constant_values=-1.5)
    raise KeyError(name)


class _As2D:
    """A Conv1DLayer seen as the 2-D layer with a size-1 row axis (for the reference)."""

    def __init__(self, layer):
        self.W = type("W", (), {"get_value": lambda s: layer.W.get_value()[:, :, None, :]})()
        self.b = layer.b
        self.flip_filters = layer.flip_filters
        self.filter_size = (1, *layer.filter_size)
        self.pad = (0, *layer.pad)
        self.stride = (1, *layer.stride)
        self.num_groups = layer.num_groups
        self.untie_biases = False


def _as_2d(layer):
    return _As2D(layer)


@pytest.fixture(scope="module")
def layers():
    return make_layers()


@pytest.fixture(scope="module")
def inputs(layers):
    return {
        name: randn(*layer.input_shape, seed=i) for i, (name, layer) in enumerate(layers.items())
    }


_compiled = {}


@pytest.fixture(scope="module", params=MODES)
def outputs(request, layers, inputs):
    if request.param == "jax":
        pytest.importorskip("jax")
    key = request.param
    if key not in _compiled:
        ins = [layer.input_layer.input_var for layer in layers.values()]
        outs = [get_output(layer) for layer in layers.values()]
        _compiled[key] = pytensor.function(ins, outs, mode=mode_for(key))
    values = _compiled[key](*inputs.values())
    return dict(zip(layers, values, strict=True))


@pytest.mark.parametrize(
    "name",
    [
        "conv-valid",
        "conv-same-stride",
        "conv-full-xcorr",
        "conv-pad-untied-groups",
        "deconv",
        "deconv-output-size-same",
        "dilated",
        "conv1d",
        "pad",
    ],
)
def test_layer_output_matches_reference_and_output_shape(layers, inputs, outputs, name):
    layer = layers[name]
    got = outputs[name]
    assert got.shape == layer.output_shape
    want = reference(name, layer, inputs[name])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# constructors, parameters, shapes


def test_conv2d_layer_defaults_params_and_tags():
    l_in = InputLayer((None, 3, 32, 32))
    layer = Conv2DLayer(l_in, num_filters=16, filter_size=5, name="conv")
    assert layer.stride == (1, 1) and layer.pad == (0, 0)
    assert layer.flip_filters is True and layer.untie_biases is False
    assert layer.num_groups == 1 and layer.nonlinearity is nonlinearities.rectify
    assert layer.output_shape == (None, 16, 28, 28)
    assert layer.W.get_value().shape == (16, 3, 5, 5)
    assert layer.W.name == "conv.W" and layer.b.name == "conv.b"
    np.testing.assert_array_equal(layer.b.get_value(), np.zeros(16))
    assert layer.get_params(regularizable=True) == [layer.W]
    assert layer.get_params(trainable=True) == [layer.W, layer.b]
    w = layer.W.get_value()
    bound = np.sqrt(6.0 / ((3 + 16) * 25))  # Glorot uniform over fan-in + fan-out
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    untied = Conv2DLayer(l_in, 4, 3, pad="same", untie_biases=True)
    assert untied.b.get_value().shape == (4, 32, 32)
    no_bias = Conv2DLayer(l_in, 4, 3, b=None)
    assert no_bias.b is None and no_bias.get_params() == [no_bias.W]


@pytest.mark.parametrize(
    "kwargs, shape",
    [
        (dict(filter_size=3, pad="same", stride=2), (None, 8, 16, 15)),
        (dict(filter_size=3, pad="full"), (None, 8, 34, 32)),
        (dict(filter_size=(5, 3), pad="valid", stride=(1, 3)), (None, 8, 28, 10)),
        (dict(filter_size=3, pad=(2, 0), stride=3), (None, 8, 12, 10)),
        (dict(filter_size=1, pad=0), (None, 8, 32, 30)),
    ],
)
def test_conv2d_output_shapes_match_lasagne(kwargs, shape):
    l_in = InputLayer((None, 4, 32, 30))
    layer = Conv2DLayer(l_in, 8, **kwargs)
    assert layer.output_shape == shape
    fn = pytensor.function([l_in.input_var], get_output(layer), mode=mode_for("py"))
    assert fn(randn(2, 4, 32, 30)).shape == (2,) + shape[1:]


def test_conv_output_and_input_length():
    assert conv_output_length(None, 3, 1, "same") is None
    assert conv_output_length(10, 3, 3, "valid") == 3
    assert conv_output_length(10, 3, 3, 2) == 4
    assert conv_input_length(4, 3, 3, 2) == 8
    assert conv_input_length(5, 4, 2, "full") == 6
    for size in range(5, 12):
        out = conv_output_length(size, 3, 2, 1)
        assert conv_input_length(out, 3, 2, 1) <= size < conv_input_length(out, 3, 2, 1) + 2
    with pytest.raises(ValueError, match="Invalid pad: 'half'"):
        conv_output_length(10, 3, 1, "half")


def test_transposed_conv_inverts_the_shape_of_its_convolution():
    """Lasagne's recipe: transpose a convolution with tied weights."""
    l_in = InputLayer((None, 1, 32, 32))
    conv = Conv2DLayer(l_in, 16, 3, stride=2, pad=2)
    deconv = TransposedConv2DLayer(
        conv,
        conv.input_shape[1],
        conv.filter_size,
        stride=conv.stride,
        crop=conv.pad,
        W=conv.W,
        flip_filters=not conv.flip_filters,
    )
    assert conv.output_shape == (None, 16, 17, 17)
    assert deconv.output_shape == (None, 1, 31, 31)  # the smallest; output_size picks 32
    assert deconv.W is conv.W and deconv.get_W_shape() == (16, 1, 3, 3)
    assert Deconv2DLayer is TransposedConv2DLayer
    sized = TransposedConv2DLayer(conv, 1, 3, stride=2, crop=2, output_size=32)
    assert sized.output_shape == (None, 1, 32, 32)
    out = pytensor.function([l_in.input_var], get_output(sized), mode=mode_for("py"))
    assert out(randn(2, 1, 32, 32)).shape == (2, 1, 32, 32)
    # a symbolic output size
    size = pt.lvector("size")
    sym = TransposedConv2DLayer(conv, 1, 3, stride=2, crop=2, output_size=size)
    assert sym.output_shape == (None, 1, None, None)
    fn = pytensor.function([l_in.input_var, size], get_output(sym), mode=mode_for("py"))
    assert fn(randn(1, 1, 32, 32), np.array([31, 32])).shape == (1, 1, 31, 32)


def test_dilated_conv_layer_shapes_and_restrictions():
    l_in = InputLayer((None, 3, 20, 20))
    layer = DilatedConv2DLayer(l_in, 5, (3, 2), dilation=2)
    assert layer.W.get_value().shape == (3, 5, 3, 2)
    assert layer.output_shape == (None, 5, 16, 18)
    assert not hasattr(layer, "stride") and layer.dilation == (2, 2)
    with pytest.raises(NotImplementedError, match="requires pad=0"):
        DilatedConv2DLayer(l_in, 5, 3, pad=1)
    with pytest.raises(NotImplementedError, match="flip_filters=False"):
        DilatedConv2DLayer(l_in, 5, 3, flip_filters=True)


def test_conv1d_layer_shapes():
    layer = Conv1DLayer(InputLayer((None, 6, 50)), 10, 5, stride=2, pad="same")
    assert layer.W.get_value().shape == (10, 6, 5)
    assert layer.output_shape == (None, 10, 25)
    assert Conv1DLayer(
        InputLayer((None, 6, 50)), 10, 5, untie_biases=True
    ).b.get_value().shape == (
        10,
        46,
    )


def test_pad_layer_shapes():
    l_in = InputLayer((None, 3, None, 5))
    assert PadLayer(l_in, 2).output_shape == (None, 3, None, 9)
    assert PadLayer(l_in, [1, (0, 3)]).output_shape == (None, 3, None, 8)
    assert PadLayer(l_in, [1, 1, 1], batch_ndim=1).output_shape == (None, 5, None, 7)
    fn = pytensor.function([l_in.input_var], get_output(PadLayer(l_in, 1)), mode=mode_for("py"))
    assert fn(randn(2, 3, 4, 5)).shape == (2, 3, 6, 7)


def test_batch_norm_of_conv_drops_bias_and_normalizes_per_channel():
    l_in = InputLayer((None, 3, 8, 8))
    conv = Conv2DLayer(l_in, 6, 3, pad="same", name="c1")
    net = batch_norm(conv)
    assert isinstance(net, NonlinearityLayer) and isinstance(net.input_layer, BatchNormLayer)
    assert conv.b is None and conv.nonlinearity is nonlinearities.identity
    bn = net.input_layer
    assert bn.axes == (0, 2, 3)
    assert [p.name for p in get_all_params(net)] == [
        "c1.W",
        "c1_bn.beta",
        "c1_bn.gamma",
        "c1_bn.mean",
        "c1_bn.inv_std",
    ]
    assert bn.gamma.get_value().shape == (6,)
    fn = pytensor.function([l_in.input_var], get_output(bn))
    out = fn(randn(4, 3, 8, 8) * 3 + 2)
    np.testing.assert_allclose(out.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    np.testing.assert_allclose(out.std(axis=(0, 2, 3)), 1, atol=1e-3)


# --------------------------------------------------------------------------
# errors


def test_bad_arguments_are_named():
    l_in = InputLayer((None, 4, 16, 16))
    with pytest.raises(NotImplementedError, match="`same` padding requires odd filter size"):
        Conv2DLayer(l_in, 8, 4, pad="same")
    with pytest.raises(TypeError, match="pad=.half.: expected .* iterable of int"):
        Conv2DLayer(l_in, 8, 3, pad="half")
    with pytest.raises(ValueError, match=r"pad=-1 must be >= 0"):
        Conv2DLayer(l_in, 8, 3, pad=-1)
    with pytest.raises(ValueError, match=r"num_groups \(here: 3\) must be positive and evenly"):
        Conv2DLayer(l_in, 9, 3, num_groups=3)
    with pytest.raises(ValueError, match=r"num_groups \(here: 0\)"):
        Conv2DLayer(l_in, 8, 3, num_groups=0)
    with pytest.raises(ValueError, match=r"stride=0 must be positive"):
        Conv2DLayer(l_in, 8, 3, stride=0)
    with pytest.raises(TypeError, match=r"filter_size=\(3, 3, 3\) must be an int or a tuple of 2"):
        Conv2DLayer(l_in, 8, (3, 3, 3))
    with pytest.raises(ValueError, match="num_filters=0 must be positive"):
        Conv2DLayer(l_in, 0, 3)
    with pytest.raises(
        ValueError, match=r"Tried to create a 1D convolution layer with input shape"
    ):
        Conv1DLayer(l_in, 8, 3)
    with pytest.raises(ValueError, match="cannot create param"):
        Conv2DLayer(InputLayer((None, 4, 2, 2)), 8, 3, untie_biases=True)
    with pytest.raises(TypeError, match="width="):
        PadLayer(l_in, "wide")
    with pytest.raises(ValueError, match="output_size=0 must be positive"):
        TransposedConv2DLayer(l_in, 2, 3, output_size=0)
