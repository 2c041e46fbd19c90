"""Pooling and upscaling layers: Lasagne's constructors and shapes, numerics in every mode."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_for

from lasagne_bn.layers import (
    GlobalPoolLayer,
    InputLayer,
    MaxPool1DLayer,
    MaxPool2DLayer,
    Pool1DLayer,
    Pool2DLayer,
    Upscale1DLayer,
    Upscale2DLayer,
    get_output,
)
from lasagne_bn.layers.pool import pool_output_length

MODES = ["default", "fast_compile", "py", "jax"]


def ref_pool(x, size, stride, pad, ignore_border, mode):
    """Loop definition in float64 (padding never counts for max / exc_pad)."""
    out_hw = [
        pool_output_length(x.shape[2 + i], size[i], stride[i], pad[i], ignore_border)
        for i in range(2)
    ]
    out = np.zeros(x.shape[:2] + tuple(out_hw))
    h, w = x.shape[2:]
    for i in range(out_hw[0]):
        for j in range(out_hw[1]):
            r0, c0 = i * stride[0], j * stride[1]
            r1, c1 = min(r0 + size[0], h + 2 * pad[0]), min(c0 + size[1], w + 2 * pad[1])
            win = x[
                :,
                :,
                max(r0, pad[0]) - pad[0] : min(r1, h + pad[0]) - pad[0],
                max(c0, pad[1]) - pad[1] : min(c1, w + pad[1]) - pad[1],
            ].astype(np.float64)
            if mode == "max":
                out[:, :, i, j] = win.max(axis=(2, 3))
            elif mode == "average_inc_pad":
                out[:, :, i, j] = win.sum(axis=(2, 3)) / ((r1 - r0) * (c1 - c0))
            else:
                out[:, :, i, j] = win.mean(axis=(2, 3))
    return out


def make_layers():
    return {
        "max": MaxPool2DLayer(InputLayer((2, 3, 7, 8)), 2),
        "max-keep-border": MaxPool2DLayer(InputLayer((2, 3, 7, 8)), (3, 2), ignore_border=False),
        "max-pad-stride": MaxPool2DLayer(InputLayer((1, 2, 7, 7)), 3, stride=2, pad=1),
        "avg-inc": Pool2DLayer(
            InputLayer((1, 2, 7, 6)), 3, stride=(2, 1), pad=(1, 1), mode="average_inc_pad"
        ),
        "avg-exc": Pool2DLayer(
            InputLayer((1, 2, 7, 6)), 3, stride=(2, 1), pad=(1, 1), mode="average_exc_pad"
        ),
        "max1d": MaxPool1DLayer(InputLayer((2, 3, 11)), 3, stride=2),
        "avg1d": Pool1DLayer(
            InputLayer((2, 3, 11)), 2, ignore_border=False, mode="average_exc_pad"
        ),
        "global-mean": GlobalPoolLayer(InputLayer((2, 3, 4, 5))),
        "global-max": GlobalPoolLayer(InputLayer((2, 3, 4, 5)), pool_function=pt.max),
        "up-repeat": Upscale2DLayer(InputLayer((2, 3, 3, 4)), (2, 3)),
        "up-dilate": Upscale2DLayer(InputLayer((2, 3, 3, 4)), 2, mode="dilate"),
        "up1d": Upscale1DLayer(InputLayer((2, 3, 5)), 3),
    }


def reference(name, layer, x):
    if name.endswith("1d") and name.startswith(("max", "avg")):
        x4 = x[:, :, :, None]
        return ref_pool(
            x4,
            (layer.pool_size[0], 1),
            (layer.stride[0], 1),
            (layer.pad[0], 0),
            layer.ignore_border,
            layer.mode,
        )[:, :, :, 0]
    if name.startswith(("max", "avg")):
        return ref_pool(
            x, layer.pool_size, layer.stride, layer.pad, layer.ignore_border, layer.mode
        )
    if name == "global-mean":
        return x.mean(axis=(2, 3))
    if name == "global-max":
        return x.max(axis=(2, 3))
    if name == "up-repeat":
        return x.repeat(2, axis=2).repeat(3, axis=3)
    if name == "up-dilate":
        out = np.zeros(x.shape[:2] + (x.shape[2] * 2, x.shape[3] * 2))
        out[:, :, ::2, ::2] = x
        return out
    if name == "up1d":
        return x.repeat(3, axis=2)
    raise KeyError(name)


@pytest.fixture(scope="module")
def layers():
    return make_layers()


@pytest.fixture(scope="module")
def inputs(layers):
    r = np.random.RandomState(0)
    # small integers: tied maxima
    return {n: r.randint(-3, 4, size=l.input_shape).astype(np.float32) for n, l in layers.items()}


_compiled = {}


def run(mode_name, layers, inputs):
    """Every layer's output and the gradient of a fixed projection of it."""
    if mode_name not in _compiled:
        ins = [layer.input_layer.input_var for layer in layers.values()]
        outs = []
        for layer in layers.values():
            y = get_output(layer)
            shape = layer.output_shape
            weights = pt.constant((np.arange(np.prod(shape)) % 7).reshape(shape), dtype="float32")
            outs += [y, pytensor.grad((y * weights).sum(), layer.input_layer.input_var)]
        _compiled[mode_name] = pytensor.function(ins, outs, mode=mode_for(mode_name))
    values = _compiled[mode_name](*inputs.values())
    return {name: values[2 * i : 2 * i + 2] for i, name in enumerate(layers)}


@pytest.fixture(scope="module")
def py_results(layers, inputs):
    return run("py", layers, inputs)


@pytest.fixture(scope="module", params=MODES)
def results(request, layers, inputs):
    if request.param == "jax":
        pytest.importorskip("jax")
    return run(request.param, layers, inputs)


@pytest.mark.parametrize("name", list(make_layers()))
def test_layer_output_and_gradient(layers, inputs, results, py_results, name):
    """Outputs against a loop reference; gradients against the python linker's.

    (tests/ops/test_pool.py checks those gradients against references.)
    """
    layer = layers[name]
    got, grad = results[name]
    assert got.shape == layer.output_shape
    np.testing.assert_allclose(got, reference(name, layer, inputs[name]), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad, py_results[name][1], rtol=1e-6, atol=1e-5)


def test_defaults_and_shapes():
    l_in = InputLayer((None, 3, 9, 8))
    layer = MaxPool2DLayer(l_in, 3)
    assert layer.stride == (3, 3) and layer.pad == (0, 0) and layer.ignore_border is True
    assert layer.mode == "max" and layer.output_shape == (None, 3, 3, 2)
    assert MaxPool2DLayer(l_in, 3, ignore_border=False).output_shape == (None, 3, 3, 3)
    assert Pool2DLayer(l_in, 2, stride=1).output_shape == (None, 3, 8, 7)
    assert MaxPool2DLayer(InputLayer((None, 3, None, 8)), 2).output_shape == (None, 3, None, 4)
    assert GlobalPoolLayer(InputLayer((None, 5, 4, 4, 4))).output_shape == (None, 5)
    assert Upscale2DLayer(InputLayer((None, 2, None, 3)), 2).output_shape == (None, 2, None, 6)
    assert MaxPool1DLayer(InputLayer((None, 2, 10)), 3, ignore_border=False).output_shape == (
        None,
        2,
        4,
    )
    # Lasagne's pool_output_length
    assert pool_output_length(None, 2, 2, 0, True) is None
    assert pool_output_length(10, 3, 2, 1, True) == 5
    assert pool_output_length(10, 3, 2, 0, False) == 5


def test_bad_arguments_are_named():
    l_in = InputLayer((None, 3, 8, 8))
    with pytest.raises(ValueError, match="Expected 4 input dimensions"):
        MaxPool2DLayer(InputLayer((None, 3, 8)), 2)
    with pytest.raises(ValueError, match="pool_size=0 must be >= 1"):
        MaxPool2DLayer(l_in, 0)
    with pytest.raises(ValueError, match=r"stride=\(1, 0\) must be >= 1"):
        MaxPool2DLayer(l_in, 2, stride=(1, 0))
    with pytest.raises(ValueError, match="requires ignore_border=True"):
        MaxPool2DLayer(l_in, 2, pad=1, ignore_border=False)
    with pytest.raises(ValueError, match=r"pad=2 must be smaller than pool_size=\(2, 2\)"):
        MaxPool2DLayer(l_in, 2, pad=2)
    with pytest.raises(ValueError, match="mode='average'"):
        Pool2DLayer(l_in, 2, mode="average")
    with pytest.raises(ValueError, match="Scale factor must be >= 1"):
        Upscale2DLayer(l_in, 0)
    with pytest.raises(ValueError, match="Mode must be either 'repeat' or 'dilate'"):
        Upscale2DLayer(l_in, 2, mode="nearest")
    with pytest.raises(TypeError, match="pool_function"):
        GlobalPoolLayer(l_in, pool_function="mean")
