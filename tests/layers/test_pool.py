"""Pooling and upscaling layers: Lasagne's constructors and shapes, numerics in every mode."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_for

from lasagne_bn.layers import (
    FeaturePoolLayer,
    FeatureWTALayer,
    GlobalPoolLayer,
    InputLayer,
    MaxPool1DLayer,
    MaxPool2DLayer,
    MaxPool3DLayer,
    Pool1DLayer,
    Pool2DLayer,
    Pool3DLayer,
    SpatialPyramidPoolingLayer,
    Upscale1DLayer,
    Upscale2DLayer,
    Upscale3DLayer,
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


def make_new_layers():
    """The layers Lasagne master has beyond 2-D pooling (compiled separately: Numba's
    compile of all of them with the others takes minutes on a loaded machine)."""
    return {
        "max3d": MaxPool3DLayer(InputLayer((1, 2, 5, 4, 5)), 2, stride=(1, 2, 2), pad=(1, 0, 1)),
        "avg3d": Pool3DLayer(
            InputLayer((1, 2, 5, 4, 3)), (2, 2, 3), ignore_border=False, mode="average_exc_pad"
        ),
        "sum3d": Pool3DLayer(InputLayer((1, 1, 4, 4, 4)), (2, 3, 2), stride=1, mode="sum"),
        "up3d-repeat": Upscale3DLayer(InputLayer((1, 2, 2, 3, 2)), (2, 1, 3)),
        "up3d-dilate": Upscale3DLayer(InputLayer((1, 2, 2, 3, 2)), 2, mode="dilate"),
        "featurepool": FeaturePoolLayer(InputLayer((2, 6, 5)), 3),
        "featurepool-mean-axis2": FeaturePoolLayer(
            InputLayer((2, 3, 4, 5)), 2, axis=2, pool_function=pt.mean
        ),
        "wta": FeatureWTALayer(InputLayer((2, 6, 5)), 3),
        "wta-last-axis": FeatureWTALayer(InputLayer((2, 3, 4)), 2, axis=-1),
        "spp-fast": SpatialPyramidPoolingLayer(InputLayer((2, 3, 9, 7)), [1, 2, 3]),
        "spp-fast-avg": SpatialPyramidPoolingLayer(
            InputLayer((2, 3, 8, 8)), [2, 4], mode="average_exc_pad"
        ),
        "spp-kaiming": SpatialPyramidPoolingLayer(
            InputLayer((2, 3, 9, 7)), [1, 2, 3], mode="average_exc_pad", implementation="kaiming"
        ),
    }


def ref_pool_axis(x, axis, size, stride, pad, ignore_border, mode):
    """1-D pooling along ``axis`` in float64 (max and averages are separable)."""
    x = np.moveaxis(x.astype(np.float64), axis, -1)
    n = x.shape[-1]
    outs = []
    for o in range(pool_output_length(n, size, stride, pad, ignore_border)):
        s, e = o * stride, min(o * stride + size, n + 2 * pad)
        win = x[..., max(s, pad) - pad : min(e, n + pad) - pad]
        if mode == "max":
            outs.append(win.max(-1))
        elif mode == "sum":
            outs.append(win.sum(-1))
        elif mode == "average_inc_pad":
            outs.append(win.sum(-1) / (e - s))
        else:
            outs.append(win.mean(-1))
    return np.moveaxis(np.stack(outs, -1), -1, axis)


def ref_pool_nd(x, size, stride, pad, ignore_border, mode):
    nd = len(size)
    for i in range(nd):
        x = ref_pool_axis(x, x.ndim - nd + i, size[i], stride[i], pad[i], ignore_border, mode)
    return x


def ref_wta(x, size, axis):
    g = np.moveaxis(x, axis, -1)
    g = g.reshape(g.shape[:-1] + (-1, size))
    mask = np.zeros(g.shape)
    np.put_along_axis(mask, g.argmax(-1)[..., None], 1, -1)  # the first maximum wins
    return np.moveaxis((g * mask).reshape(g.shape[:-2] + (-1,)), -1, axis)


def ref_spp(x, pool_dims, mode, implementation):
    h, w = x.shape[2:]
    levels = []
    for n in pool_dims:
        if implementation == "fast":
            ws, st = ((h + n - 1) // n, (w + n - 1) // n), (h // n, w // n)
            pooled = ref_pool_nd(x, ws, st, (0, 0), True, mode)
            levels.append(pooled.reshape(x.shape[:2] + (-1,)))
            continue
        for r in range(n):
            r0, r1 = int(np.floor(r / n * h)), int(np.ceil((r + 1) / n * h))
            for c in range(n):
                c0, c1 = int(np.floor(c / n * w)), int(np.ceil((c + 1) / n * w))
                win = x[:, :, r0:r1, c0:c1].astype(np.float64)
                reduce = np.max if mode == "max" else np.mean
                levels.append(reduce(win, axis=(2, 3))[:, :, None])
    return np.concatenate(levels, axis=2)


def reference(name, layer, x):
    if name.endswith("3d"):
        return ref_pool_nd(
            x, layer.pool_size, layer.stride, layer.pad, layer.ignore_border, layer.mode
        )
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
    if name == "up3d-repeat":
        return x.repeat(2, axis=2).repeat(3, axis=4)
    if name == "up3d-dilate":
        out = np.zeros(x.shape[:2] + tuple(2 * s for s in x.shape[2:]))
        out[:, :, ::2, ::2, ::2] = x
        return out
    if name == "featurepool":
        return x.reshape(2, 2, 3, 5).max(axis=2)
    if name == "featurepool-mean-axis2":
        return x.reshape(2, 3, 2, 2, 5).mean(axis=3)
    if name.startswith("wta"):
        return ref_wta(x, layer.pool_size, layer.axis)
    if name.startswith("spp"):
        return ref_spp(x, layer.pool_dims, layer.mode, layer.implementation)
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


def run(key, layers, inputs, mode_name=None):
    """Every layer's output and the gradient of a fixed projection of it."""
    mode_name = key if mode_name is None else mode_name
    if key not in _compiled:
        ins = [layer.input_layer.input_var for layer in layers.values()]
        outs = []
        for layer in layers.values():
            y = get_output(layer)
            shape = layer.output_shape
            weights = pt.constant((np.arange(np.prod(shape)) % 7).reshape(shape), dtype="float32")
            outs += [y, pytensor.grad((y * weights).sum(), layer.input_layer.input_var)]
        _compiled[key] = pytensor.function(ins, outs, mode=mode_for(mode_name))
    values = _compiled[key](*inputs.values())
    return {name: values[2 * i : 2 * i + 2] for i, name in enumerate(layers)}


@pytest.fixture(scope="module")
def py_results(layers, inputs):
    return run("py", layers, inputs)


@pytest.fixture(scope="module", params=MODES)
def results(request, layers, inputs):
    if request.param == "jax":
        pytest.importorskip("jax")
    return run(request.param, layers, inputs)


@pytest.fixture(scope="module")
def new_layers():
    return make_new_layers()


@pytest.fixture(scope="module")
def new_inputs(new_layers):
    r = np.random.RandomState(1)
    return {
        n: r.randint(-3, 4, size=l.input_shape).astype(np.float32) for n, l in new_layers.items()
    }


@pytest.fixture(scope="module")
def new_py_results(new_layers, new_inputs):
    return run("py-new", new_layers, new_inputs, mode_name="py")


_SLOW = pytest.mark.slow
NEW_MODES = [
    pytest.param("default", marks=_SLOW),
    "fast_compile",
    "py",
    pytest.param("jax", marks=_SLOW),
]


@pytest.fixture(scope="module", params=NEW_MODES)
def new_results(request, new_layers, new_inputs):
    if request.param == "jax":
        pytest.importorskip("jax")
    return run(f"{request.param}-new", new_layers, new_inputs, mode_name=request.param)


@pytest.mark.parametrize("name", list(make_new_layers()))
def test_new_layer_output_and_gradient(new_layers, new_inputs, new_results, new_py_results, name):
    """As below, for the 3-D, feature and pyramid pooling layers."""
    layer = new_layers[name]
    got, grad = new_results[name]
    assert got.shape == layer.output_shape
    want = reference(name, layer, new_inputs[name])
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(grad, new_py_results[name][1], rtol=1e-6, atol=1e-5)


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


# --------------------------------------------------------------------------
# the layers Lasagne master added beyond 2-D pooling


def test_new_layer_shapes_and_defaults():
    assert Pool3DLayer(InputLayer((None, 3, 8, 7, 6)), 2).output_shape == (None, 3, 4, 3, 3)
    layer = MaxPool3DLayer(InputLayer((None, 3, None, 7, 6)), 3, stride=2, ignore_border=False)
    assert layer.output_shape == (None, 3, None, 3, 3)
    assert layer.pad == (0, 0, 0) and layer.mode == "max"
    assert Upscale3DLayer(InputLayer((1, 2, None, 3, 4)), 2).output_shape == (1, 2, None, 6, 8)
    pool = FeaturePoolLayer(InputLayer((None, 12, None)), 4)
    assert pool.output_shape == (None, 3, None) and pool.pool_function is pt.max
    assert FeaturePoolLayer(InputLayer((None, None)), 4).output_shape == (None, None)
    assert FeatureWTALayer(InputLayer((None, 6, 3)), 3).output_shape == (None, 6, 3)
    spp = SpatialPyramidPoolingLayer(InputLayer((None, 8, None, None)))
    assert spp.pool_dims == [4, 2, 1] and spp.mode == "max" and spp.implementation == "fast"
    assert spp.output_shape == (None, 8, 21)
    # Lasagne took anything as the input of GlobalPoolLayer (mocks with one axis too)
    assert GlobalPoolLayer(InputLayer((None,))).get_output_shape_for((2, 3, 4)) == (2, 3)


def test_new_layers_refuse_what_lasagne_refused():
    with pytest.raises(ValueError, match="Expected 5 input dimensions"):
        Pool3DLayer(InputLayer((10, 20, 30, 40)), 3)
    with pytest.raises(ValueError, match="Scale factor must be >= 1"):
        Upscale3DLayer(InputLayer((1, 2, 3, 4, 5)), (2, 0, 1))
    with pytest.raises(ValueError, match="not a multiple of the pool size"):
        FeaturePoolLayer(InputLayer((2, 3, 4)), 2)
    with pytest.raises(ValueError, match="not a multiple of the region size"):
        FeatureWTALayer(InputLayer((2, 3, 4)), 2)
    with pytest.raises(ValueError, match="Expected 4 input dimensions"):
        SpatialPyramidPoolingLayer(InputLayer((10, 20, 30)))
    with pytest.raises(
        ValueError,
        match="Mode must be either 'max', 'average_inc_pad' or 'average_exc_pad'. Got 'other'",
    ):
        SpatialPyramidPoolingLayer(
            InputLayer((1, 2, 5, 5)), mode="other", implementation="kaiming"
        )
    with pytest.raises(ValueError, match="implementation='slow'"):
        SpatialPyramidPoolingLayer(InputLayer((1, 2, 5, 5)), implementation="slow")


@pytest.mark.parametrize("mode_name", [pytest.param("default", marks=pytest.mark.slow), "py"])
def test_spp_with_unknown_spatial_size(mode_name):
    """'fast' pools with windows computed from the run-time size; one function, two sizes."""
    l_in = InputLayer((None, 2, None, None))
    layers = [
        SpatialPyramidPoolingLayer(l_in, [1, 2, 3]),
        SpatialPyramidPoolingLayer(
            l_in, [1, 2, 3], mode="average_inc_pad", implementation="kaiming"
        ),
    ]
    outs = [get_output(layer) for layer in layers]
    grad = pytensor.grad(sum((o**2).sum() for o in outs), l_in.input_var)
    fn = pytensor.function([l_in.input_var], [*outs, grad], mode=mode_for(mode_name))
    r = np.random.RandomState(1)
    for shape in [(2, 2, 9, 7), (1, 2, 6, 12)]:
        x = r.standard_normal(shape).astype(np.float32)
        fast, kaiming, g = fn(x)
        np.testing.assert_allclose(fast, ref_spp(x, [1, 2, 3], "max", "fast"), rtol=1e-6)
        np.testing.assert_allclose(
            kaiming, ref_spp(x, [1, 2, 3], "average_inc_pad", "kaiming"), rtol=1e-5
        )
        assert fast.shape == (shape[0], 2, 14) and g.shape == shape
