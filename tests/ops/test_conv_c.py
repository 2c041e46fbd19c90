"""The convolution Ops' C code (modes ``C`` and ``CVM``) against their NumPy reference.

Each case compiles one function holding the three Ops (forward, input
gradient, filter gradient) applied to given arrays, runs it on C-ordered
and on Fortran-ordered (non-contiguous) copies, and compares with the
NumPy functions ``perform`` falls back to (``np_conv`` ...).
``tests/ops/test_conv.py`` / ``test_conv3d.py`` check the same Ops against
references in the other modes; the CNN test at the end trains a network
built from layers in mode ``C``.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.compile.debug.debugmode import DebugMode

from lasagne_bn.ops import conv
from lasagne_bn.ops.pool import pool_2d

CASES = {
    # name: (convdim, border_mode, subsample, dilation, groups, flip, dtype, modes)
    "valid_f64": (2, "valid", (1, 1), (1, 1), 1, True, "float64", ("c", "cvm")),
    "half_stride_dil_groups_f32": (2, "half", (2, 1), (1, 2), 2, False, "float32", ("c",)),
    "pairs_f32": (2, ((1, 2), (0, 1)), (1, 3), (2, 1), 1, True, "float32", ("c",)),
    "full_stride_f64": (2, "full", (2, 2), (1, 1), 3, True, "float64", ("c",)),
    "1x1_f32": (2, "valid", (1, 1), (1, 1), 1, True, "float32", ("c",)),
    "3d_half_f32": (3, "half", (1, 2, 1), (1, 1, 2), 2, True, "float32", ("c", "cvm")),
    "3d_pad_f64": (3, (1, 0, 2), (2, 1, 1), (1, 1, 1), 1, False, "float64", ("c",)),
}

PARAMS = [(name, m) for name, case in CASES.items() for m in case[-1]]


def arrays(name):
    n, bm, st, dil, g, flip, dtype, _ = CASES[name]
    p = conv.ConvParams(bm, st, flip, dil, g, n)
    rng = np.random.default_rng(len(name))
    k = (1,) * n if name.startswith("1x1") else (3, 2, 3)[-n:]
    x = rng.normal(size=(2, 2 * g, *(7, 8, 6)[-n:])).astype(dtype)
    w = rng.normal(size=(3 * g, 2, *k)).astype(dtype)
    y = conv.np_conv(x, w, p)
    dy = rng.normal(size=y.shape).astype(dtype)
    return p, x, w, dy


def compiled(name, mode):
    n, bm, st, dil, g, flip, dtype, _ = CASES[name]
    fwd, gin, gw = conv.FAMILIES[n]
    kw = dict(border_mode=bm, subsample=st, filter_flip=flip, filter_dilation=dil, num_groups=g)
    x, w, dy = (pt.tensor(nm, dtype=dtype, shape=(None,) * (n + 2)) for nm in "xwd")
    ishape = pt.lvector("ishape")
    kshape = pt.lvector("kshape")
    outs = [fwd(**kw)(x, w), gin(**kw)(w, dy, ishape), gw(**kw)(x, dy, kshape)]
    return pytensor.function([x, w, dy, ishape, kshape], outs, mode=mode.upper())


@pytest.mark.parametrize("name,mode", PARAMS, ids=[f"{a}-{b}" for a, b in PARAMS])
def test_c_matches_numpy_reference(name, mode):
    p, x, w, dy = arrays(name)
    f = compiled(name, mode)
    refs = [
        conv.np_conv(x, w, p),
        conv.np_conv_grad_inputs(w, dy, x.shape[2:], p),
        conv.np_conv_grad_weights(x, dy, w.shape[2:], p),
    ]
    tol = dict(rtol=2e-5, atol=2e-5) if x.dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for order in "CF":
        xs, ws, dys = (np.asarray(a, order=order) for a in (x, w, dy))
        got = f(xs, ws, dys, x.shape[2:], w.shape[2:])
        for g, r in zip(got, refs, strict=True):
            assert g.dtype == r.dtype and g.shape == r.shape
            np.testing.assert_allclose(g, r, **tol)


def test_c_runtime_errors_are_performs():
    """Shapes the graph could not check are refused with the NumPy code's message."""
    name = "valid_f64"
    p, x, w, dy = arrays(name)
    f = compiled(name, "c")
    with pytest.raises(ValueError) as c_err:
        f(x[:, :1], w, dy, x.shape[2:], w.shape[2:])  # 1 channel, filters want 2
    with pytest.raises(ValueError) as np_err:
        conv.np_conv(x[:, :1], w, p)
    assert str(c_err.value).splitlines()[0] == str(np_err.value)
    with pytest.raises(ValueError, match="output gradient has"):
        f(x, w, dy, (x.shape[2] + 1, x.shape[3]), w.shape[2:])  # input size/top size mismatch


@pytest.mark.filterwarnings("ignore:Numba will use object mode")
def test_float16_falls_back_to_perform_under_cvm():
    x = pt.tensor4("x", dtype="float16")
    w = pt.tensor4("w", dtype="float16")
    f = pytensor.function([x, w], conv.conv2d(x, w), mode="CVM")
    xv = np.ones((1, 1, 3, 3), "float16")
    assert f(xv, xv[:, :, :2, :2]).dtype == np.float16


def test_debugmode_conv_and_pool_graph():
    """DebugMode runs every node's C code and its Python perform, and compares them."""
    x = pt.tensor4("x")
    w = pt.tensor4("w")
    y = pool_2d(conv.conv2d(x, w, border_mode="half"), (2, 2), ignore_border=True)
    cost = (y**2).sum()
    grads = pytensor.grad(cost, [x, w])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = pytensor.function([x, w], [y, *grads], mode=DebugMode(check_py_code=True))
    rng = np.random.default_rng(0)
    xv = rng.normal(size=(2, 2, 4, 4)).astype(x.dtype)
    wv = rng.normal(size=(3, 2, 3, 3)).astype(x.dtype)
    out = f(xv, wv)
    p = conv.ConvParams("half", (1, 1), True, (1, 1), 1)
    ref = conv.np_conv(xv, wv, p).reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5))
    np.testing.assert_allclose(out[0], ref, rtol=1e-5, atol=1e-5)


def _cnn():
    from lasagne_bn import layers
    from lasagne_bn.init import GlorotUniform
    from lasagne_bn.nonlinearities import rectify

    rng = np.random.default_rng(1)
    net = layers.InputLayer((4, 3, 8, 8))
    net = layers.Conv2DLayer(net, 4, 3, pad="same", W=GlorotUniform(), nonlinearity=None)
    net = layers.batch_norm(net)
    net = layers.MaxPool2DLayer(net, 2)
    net = layers.Conv2DLayer(net, 5, 3, stride=1, pad=1, nonlinearity=rectify)
    net = layers.batch_norm(net)
    net = layers.GlobalPoolLayer(net)
    params = layers.get_all_params(net, trainable=True)
    for prm in params:  # the same start in every mode
        prm.set_value(rng.normal(0, 0.3, size=prm.get_value().shape).astype(prm.dtype))
    return net, params


@pytest.mark.default_mode
@pytest.mark.slow
def test_small_cnn_trains_a_step_in_mode_c_as_in_the_default_mode():
    from lasagne_bn import layers, updates

    x = pt.tensor4("x")
    t = pt.matrix("t")
    rng = np.random.default_rng(2)
    xv = rng.normal(size=(4, 3, 8, 8)).astype(x.dtype)
    tv = rng.normal(size=(4, 5)).astype(x.dtype)
    results = {}
    for mode in (None, "C"):
        net, params = _cnn()
        out = layers.get_output(net, x)
        loss = ((out - t) ** 2).mean()
        upd = updates.sgd(loss, params, learning_rate=0.1)
        f = pytensor.function([x, t], loss, updates=upd, mode=mode)
        if mode == "C":  # the whole graph, convolutions and pooling included, is one C module
            assert type(f.maker.linker).__name__ == "CLinker"
        losses = [float(f(xv, tv)) for _ in range(2)]
        all_values = layers.get_all_param_values(net)
        results[mode] = (losses, all_values)
    (l0, v0), (l1, v1) = results[None], results["C"]
    np.testing.assert_allclose(l1, l0, rtol=1e-4)
    for a, b in zip(v1, v0, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5)


def test_batch_split_over_threads_matches_reference():
    """Enough work for two threads or more (4M multiply-adds each, up to the CPUs we may
    use): each has its own buffers and filter-gradient sums."""
    p = conv.ConvParams("half", (1, 1), True, (1, 1), 1)
    rng = np.random.default_rng(3)
    x = rng.normal(size=(8, 16, 32, 32)).astype("float32")
    w = rng.normal(size=(16, 16, 3, 3)).astype("float32")
    dy = rng.normal(size=(8, 16, 32, 32)).astype("float32")
    xt, wt, dt = (pt.tensor4(n) for n in "xwd")
    y = conv.conv2d(xt, wt, border_mode="half")
    gx, gw = pytensor.grad((y * dt).sum(), [xt, wt])
    got = pytensor.function([xt, wt, dt], [y, gx, gw], mode="C")(x, w, dy)
    refs = [
        conv.np_conv(x, w, p),
        conv.np_conv_grad_inputs(w, dy, x.shape[2:], p),
        conv.np_conv_grad_weights(x, dy, w.shape[2:], p),
    ]
    for g, r in zip(got, refs, strict=True):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-3)
