"""LocallyConnected2DLayer: Lasagne's constructor, shapes and errors; values in every mode.

References: a float64 NumPy loop written from the layer's definition (each
output position has its own filters, 'same' zero padding), and outputs of
Lasagne master on Theano 1.0.5 (tests/data/misc_oracle.npz, made by
tests/data/make_misc_oracle.py).  One function per mode computes every case.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import LAYER_MODES, mode_params

from lasagne_bn import nonlinearities
from lasagne_bn.layers import InputLayer, LocallyConnected2DLayer, get_all_params, get_output

ORACLE = np.load(Path(__file__).parents[1] / "data" / "misc_oracle.npz")

# the cases of tests/data/make_misc_oracle.py: input shape, layer arguments
ORACLE_CASES = {
    "flip": ((2, 3, 5, 4), dict(num_filters=2, filter_size=3)),
    "noflip_35": ((2, 3, 5, 6), dict(num_filters=4, filter_size=(3, 5), flip_filters=False)),
    "channelwise": ((2, 3, 5, 4), dict(num_filters=3, filter_size=(5, 3), channelwise=True)),
    "channelwise_noflip_untied": (
        (1, 2, 4, 4),
        dict(
            num_filters=2, filter_size=3, channelwise=True, flip_filters=False, untie_biases=True
        ),
    ),
    "untied_linear": (
        (2, 2, 3, 3),
        dict(num_filters=3, filter_size=1, untie_biases=True, nonlinearity=None),
    ),
}


def reference(x, W, b, flip, channelwise, untie_biases):
    """Locally connected 'same' layer without nonlinearity, by explicit loops."""
    n, c, rows, cols = x.shape
    fh, fw = W.shape[-4:-2]
    if flip:
        W = W[..., ::-1, ::-1, :, :]
    out = np.zeros((n, W.shape[0], rows, cols))
    for f in range(W.shape[0]):
        for y in range(rows):
            for xx in range(cols):
                for i in range(fh):
                    for j in range(fw):
                        yi, xj = y + i - fh // 2, xx + j - fw // 2
                        if not (0 <= yi < rows and 0 <= xj < cols):
                            continue
                        if channelwise:
                            out[:, f, y, xx] += x[:, f, yi, xj] * W[f, i, j, y, xx]
                        else:
                            out[:, f, y, xx] += x[:, :, yi, xj] @ W[f, :, i, j, y, xx]
    return out + (b if untie_biases else b[:, None, None])


def _cases():
    """(input variable, output expression, wanted value, input value) per case."""
    r = np.random.RandomState(5)
    cases = []
    for name, (shape, kwargs) in ORACLE_CASES.items():
        layer = LocallyConnected2DLayer(
            InputLayer((None,) + shape[1:]),
            W=ORACLE[f"local/{name}/W"],
            b=ORACLE[f"local/{name}/b"],
            **kwargs,
        )
        cases.append((layer, ORACLE[f"local/{name}/x"], ORACLE[f"local/{name}/out"]))
    # against the loop reference: float32, batch of one, no bias, tanh
    for shape, kwargs in [
        ((1, 2, 6, 5), dict(num_filters=3, filter_size=(3, 5))),
        ((3, 4, 3, 7), dict(num_filters=4, filter_size=(1, 3), channelwise=True)),
    ]:
        W_shape = LocallyConnected2DLayer(InputLayer(shape), **kwargs).W.get_value().shape
        W = r.randn(*W_shape).astype("float32")
        layer = LocallyConnected2DLayer(
            InputLayer(shape), W=W, b=None, nonlinearity=nonlinearities.tanh, **kwargs
        )
        x = r.randn(*shape).astype("float32")
        zero = np.zeros(kwargs["num_filters"])
        want = np.tanh(reference(x, W, zero, True, kwargs.get("channelwise", False), False))
        cases.append((layer, x, want))
    return cases


@pytest.mark.parametrize("mode", mode_params())
def test_values_against_lasagne_and_numpy(mode):
    cases = _cases()
    inputs = [pt.tensor4(dtype=x.dtype) for _, x, _ in cases]
    outputs = [get_output(layer, v) for (layer, _, _), v in zip(cases, inputs, strict=True)]
    got = pytensor.function(inputs, outputs, mode=mode)(*[x for _, x, _ in cases])
    for (layer, _, want), value in zip(cases, got, strict=True):
        assert value.shape == want.shape == (want.shape[0],) + layer.output_shape[1:]
        tol = 1e-10 if value.dtype == np.float64 else 1e-5
        np.testing.assert_allclose(value, want, rtol=tol, atol=tol)


def test_oracle_agrees_with_the_loop_reference():
    for name, (_, kwargs) in ORACLE_CASES.items():
        x, W, b = (ORACLE[f"local/{name}/{k}"] for k in "xWb")
        want = reference(
            x,
            W,
            b,
            kwargs.get("flip_filters", True),
            kwargs.get("channelwise", False),
            kwargs.get("untie_biases", False),
        )
        if kwargs.get("nonlinearity", nonlinearities.rectify) is not None:
            want = np.maximum(want, 0)
        np.testing.assert_allclose(ORACLE[f"local/{name}/out"], want, rtol=1e-12, atol=1e-12)


def test_gradients_flow_to_input_and_parameters():
    layer = LocallyConnected2DLayer(InputLayer((None, 2, 4, 4)), 3, 3, untie_biases=True)
    x = pt.tensor4()
    cost = get_output(layer, x).sum()
    grads = pytensor.grad(cost, [x, *get_all_params(layer)])
    values = pytensor.function([x], grads, mode=LAYER_MODES["fast_compile"])(
        np.random.RandomState(0).rand(2, 2, 4, 4)
    )
    assert [v.shape for v in values] == [(2, 2, 4, 4), (3, 2, 3, 3, 4, 4), (3, 4, 4)]
    assert all(np.abs(v).sum() > 0 for v in values)


def test_parameters_and_shapes():
    l_in = InputLayer((None, 3, 7, 6))
    layer = LocallyConnected2DLayer(l_in, 5, (3, 1), untie_biases=True, name="lc")
    assert layer.output_shape == (None, 5, 7, 6)
    assert layer.W.get_value().shape == (5, 3, 3, 1, 7, 6)
    assert layer.b.get_value().shape == (5, 7, 6)
    assert [p.name for p in layer.get_params(regularizable=True)] == ["lc.W"]
    assert layer.pad == "same" and layer.stride == (1, 1) and layer.flip_filters
    cw = LocallyConnected2DLayer(l_in, 3, 5, channelwise=True, b=None)
    assert cw.W.get_value().shape == (3, 5, 5, 7, 6) and cw.b is None
    assert cw.get_output_shape_for((4, 3, 7, 6)) == (4, 3, 7, 6)


def test_errors_as_lasagne():
    l_in = InputLayer((10, 2, 4, 4))
    for pad in ("valid", "full", 1):
        with pytest.raises(NotImplementedError, match="requires pad='same'"):
            LocallyConnected2DLayer(l_in, 2, 3, pad=pad)
    with pytest.raises(NotImplementedError, match=r"requires stride=1 / \(1, 1\)"):
        LocallyConnected2DLayer(l_in, 2, 3, stride=2)
    with pytest.raises(NotImplementedError, match="odd filter size"):
        LocallyConnected2DLayer(l_in, 2, 2)
    with pytest.raises(ValueError, match="num_filters and the number of input channels"):
        LocallyConnected2DLayer(l_in, 4, 3, channelwise=True)
    with pytest.raises(ValueError, match="requires a fixed input shape"):
        LocallyConnected2DLayer(InputLayer((10, 2, None, 4)), 4, 3)
    with pytest.raises(ValueError, match="requires a fixed input shape"):
        LocallyConnected2DLayer(InputLayer((10, None, 4, 4)), 4, 3)
