"""3-D convolution layers: Lasagne's constructors, parameters, shapes, and numerics in every mode.

References are float64 NumPy/SciPy code written from the layers'
definitions (``scipy.signal.correlate`` per channel pair for the forward
layer, an explicit scatter for the transposed one); one function per mode
computes every layer's output.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
import scipy.signal
from compile_modes import mode_for

from lasagne_bn import init, nonlinearities
from lasagne_bn.layers import (
    Conv3DLayer,
    Deconv3DLayer,
    InputLayer,
    TransposedConv2DLayer,
    TransposedConv3DLayer,
    get_output,
)

MODES = ["default", "fast_compile", "py", "jax"]  # CVM: tests/ops/test_conv3d.py


def randn(*shape, seed=0):
    return np.random.RandomState(seed).randn(*shape).astype(np.float32)


def _pads(pad, fs):
    if pad == "same":
        return [(f // 2, f // 2) for f in fs]
    if pad == "full":
        return [(f - 1, f - 1) for f in fs]
    return [(p, p) for p in pad]


def ref_conv3d_layer(layer, x):
    w = layer.W.get_value().astype(np.float64)
    k = w[:, :, ::-1, ::-1, ::-1] if layer.flip_filters else w
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), *_pads(layer.pad, layer.filter_size)])
    f, cg = k.shape[:2]
    fg = f // layer.num_groups
    full = np.array(
        [
            [
                sum(
                    scipy.signal.correlate(xp[b, fi // fg * cg + c], k[fi, c], mode="valid")
                    for c in range(cg)
                )
                for fi in range(f)
            ]
            for b in range(x.shape[0])
        ]
    )
    sd, sh, sw = layer.stride
    out = full[:, :, ::sd, ::sh, ::sw]
    b = layer.b.get_value()
    out = out + (b[None] if layer.untie_biases else b[None, :, None, None, None])
    return np.maximum(out, 0) if layer.nonlinearity is nonlinearities.rectify else out


def ref_transposed3d(layer, x):
    """``out[n, o, s*z + i - crop, ...] += in[n, c, z, ...] * k[c, o, i, ...]``."""
    w = layer.W.get_value().astype(np.float64)
    k = w if layer.flip_filters else w[:, :, ::-1, ::-1, ::-1]
    crop = [lo for lo, _ in _pads(layer.crop, layer.filter_size)]
    stride = layer.stride
    out_sp = layer.output_shape[2:] if layer.output_shape[2] is not None else None
    big = np.zeros(
        (x.shape[0], k.shape[1])
        + tuple(o + 2 * c + f for o, c, f in zip(out_sp, crop, layer.filter_size, strict=True))
    )
    for tap in itertools.product(*(range(f) for f in layer.filter_size)):
        contrib = np.einsum("ncdhw,co->nodhw", x.astype(np.float64), k[(slice(None),) * 2 + tap])
        region = tuple(
            slice(t, t + s * (n - 1) + 1, s)
            for t, s, n in zip(tap, stride, x.shape[2:], strict=True)
        )
        big[(slice(None), slice(None), *region)] += contrib
    inner = tuple(slice(c, c + o) for c, o in zip(crop, out_sp, strict=True))
    out = big[(slice(None), slice(None), *inner)]
    return out + layer.b.get_value()[None, :, None, None, None]


def make_layers():
    def r():
        return init.Normal(0.3)

    return {
        "conv-valid": Conv3DLayer(InputLayer((2, 3, 4, 5, 6)), 4, (2, 3, 2), W=r(), b=r()),
        "conv-same-stride-groups": Conv3DLayer(
            InputLayer((2, 4, 5, 6, 5)),
            6,
            3,
            stride=(2, 1, 2),
            pad="same",
            num_groups=2,
            W=r(),
            b=r(),
            nonlinearity=None,
        ),
        "conv-full-xcorr-untied": Conv3DLayer(
            InputLayer((1, 2, 3, 4, 3)),
            3,
            2,
            pad="full",
            flip_filters=False,
            untie_biases=True,
            W=r(),
            b=r(),
            nonlinearity=None,
        ),
        "conv-pad": Conv3DLayer(
            InputLayer((1, 2, 3, 5, 4)), 2, (1, 3, 3), pad=(0, 2, 1), W=r(), b=r()
        ),
        "deconv": TransposedConv3DLayer(
            InputLayer((2, 3, 3, 4, 3)), 2, 3, stride=2, crop=1, W=r(), b=r(), nonlinearity=None
        ),
        "deconv-output-size-same": Deconv3DLayer(
            InputLayer((1, 2, 2, 3, 3)),
            3,
            (3, 3, 1),
            stride=(2, 2, 3),
            crop="same",
            output_size=(4, 6, 9),
            flip_filters=True,
            W=r(),
            b=r(),
            nonlinearity=None,
        ),
    }


@pytest.fixture(scope="module")
def layers():
    return make_layers()


@pytest.fixture(scope="module")
def inputs(layers):
    return {name: randn(*lay.input_shape, seed=i) for i, (name, lay) in enumerate(layers.items())}


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


@pytest.mark.parametrize("name", list(make_layers()))
def test_layer_output_matches_reference_and_output_shape(layers, inputs, outputs, name):
    layer = layers[name]
    got = outputs[name]
    assert got.shape == layer.output_shape
    ref = ref_transposed3d if name.startswith("deconv") else ref_conv3d_layer
    np.testing.assert_allclose(got, ref(layer, inputs[name]), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# constructors, parameters, shapes


def test_conv3d_layer_defaults_params_and_tags():
    l_in = InputLayer((None, 3, 10, 12, 14))
    layer = Conv3DLayer(l_in, num_filters=8, filter_size=3, name="c3")
    assert layer.stride == (1, 1, 1) and layer.pad == (0, 0, 0)
    assert layer.flip_filters is True and layer.untie_biases is False
    assert layer.num_groups == 1 and layer.nonlinearity is nonlinearities.rectify
    assert layer.n == 3 and layer.output_shape == (None, 8, 8, 10, 12)
    assert layer.W.get_value().shape == (8, 3, 3, 3, 3)
    assert layer.W.name == "c3.W" and layer.b.name == "c3.b"
    assert layer.get_params(regularizable=True) == [layer.W]
    bound = np.sqrt(6.0 / ((3 + 8) * 27))
    assert 0.8 * bound < np.abs(layer.W.get_value()).max() <= bound
    assert Conv3DLayer(l_in, 4, 3, pad="full", stride=2).output_shape == (None, 4, 6, 7, 8)
    assert Conv3DLayer(l_in, 4, 3, untie_biases=True).b.get_value().shape == (4, 8, 10, 12)
    with pytest.raises(ValueError, match="Tried to create a 3D convolution layer"):
        Conv3DLayer(InputLayer((None, 3, 10, 12)), 4, 3)
    with pytest.raises(NotImplementedError, match="requires odd filter size"):
        Conv3DLayer(l_in, 4, (3, 2, 3), pad="same")
    with pytest.raises(TypeError, match="iterable of int"):
        Conv3DLayer(l_in, 4, 3, pad="_nonexistent_mode")


def test_conv3d_layer_custom_convolution_gets_lasagne_arguments():
    seen = {}

    def convolution(input, W, input_shape, filter_shape, **kwargs):
        seen.update(kwargs, input_shape=input_shape, filter_shape=filter_shape)
        return pt.zeros((2, 4, 3, 3, 3))

    l_in = InputLayer((2, 2, 5, 5, 5))
    layer = Conv3DLayer(l_in, 4, 3, pad="same", stride=2, convolution=convolution)
    get_output(layer)
    assert seen == dict(
        subsample=(2, 2, 2),
        border_mode="half",
        filter_flip=True,
        input_shape=(2, 2, 5, 5, 5),
        filter_shape=(4, 2, 3, 3, 3),
    )


def test_transposed_conv3d_shapes_params_and_symbolic_output_size():
    l_in = InputLayer((None, 4, 3, 5, 5))
    layer = TransposedConv3DLayer(l_in, 2, 3, stride=2)
    assert layer.crop == (0, 0, 0) and not hasattr(layer, "pad")
    assert layer.flip_filters is False and layer.stride == (2, 2, 2)
    assert layer.output_shape == (None, 2, 7, 11, 11)
    assert layer.W.get_value().shape == (4, 2, 3, 3, 3)
    assert Deconv3DLayer is TransposedConv3DLayer
    assert not isinstance(layer, TransposedConv2DLayer)
    size = pt.lvector("size")
    sym = TransposedConv3DLayer(l_in, 2, 3, stride=2, output_size=size)
    assert sym.output_shape == (None, 2, None, None, None)
    x = l_in.input_var
    fn = pytensor.function([x, size], get_output(sym), mode=mode_for("py"))
    assert fn(randn(1, 4, 3, 5, 5), [8, 12, 11]).shape == (1, 2, 8, 12, 11)
    with pytest.raises((TypeError, ValueError), match="output_size"):
        TransposedConv3DLayer(l_in, 2, 3, output_size=(4, 4))
    # the unknown-batch graph in the default mode (sizes from the static shape)
    fn = pytensor.function([x], get_output(layer))
    assert fn(randn(3, 4, 3, 5, 5)).shape == (3, 2, 7, 11, 11)
