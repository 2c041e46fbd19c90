"""One network, several backends: JAX, Numba, C/CVM, FAST_COMPILE and the python linker
on the same shared parameters, in any order; and real training on scikit-learn's digits."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import DEFAULT_MODE
from pytensor.compile.mode import Mode

from lasagne_bn import objectives, updates
from lasagne_bn.layers import (
    BatchNormLayer,
    BiasLayer,
    DenseLayer,
    DropoutLayer,
    ElemwiseSumLayer,
    InputLayer,
    NonlinearityLayer,
    ScaleLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
    get_output,
    set_all_param_values,
)
from lasagne_bn.nonlinearities import softmax

pytest.importorskip("jax")

PY = Mode(linker="py", optimizer=None)


def _mlp(storage="inv_std", p=0.0):
    r = np.random.RandomState(0)
    l_in = InputLayer((None, 6))
    net = batch_norm(DenseLayer(l_in, 8, W=r.randn(6, 8) * 0.5), stat_storage=storage)
    if p:
        net = DropoutLayer(net, p=p)
    net = DenseLayer(net, 3, W=r.randn(8, 3), nonlinearity=softmax)
    return l_in, net


def _train_fn(l_in, net, mode, way="lasagne"):
    y = pt.ivector("y")
    if way == "lasagne":
        out, state = get_output(net), {}
    else:
        out, state = get_output(net, return_updates=True)
    loss = objectives.aggregate(objectives.categorical_crossentropy(out, y))
    upd = updates.momentum(loss, get_all_params(net, trainable=True), 0.1)
    upd.update(state)
    return pytensor.function([l_in.input_var, y], loss, updates=upd, mode=mode)


DATA = np.random.RandomState(1)
X = DATA.randn(16, 6)
Y = DATA.randint(0, 3, 16).astype("int32")


@pytest.mark.default_mode
@pytest.mark.slow
def test_train_under_jax_then_evaluate_under_numba_and_fast_compile():
    l_in, net = _mlp("inv_std", p=0.2)
    train = _train_fn(l_in, net, "JAX", way="explicit")
    for _ in range(3):
        train(X, Y)
    det = get_output(net, deterministic=True)
    outputs = {
        name: pytensor.function([l_in.input_var], det, mode=mode)(X)
        for name, mode in [("jax", "JAX"), ("numba", None), ("fast_compile", "FAST_COMPILE")]
    }
    for name in ("numba", "fast_compile"):
        np.testing.assert_allclose(outputs[name], outputs["jax"], rtol=1e-12, atol=1e-14)
    # JAX left writable NumPy arrays behind (training on under Numba after
    # JAX is part of test_any_backend_order_gives_the_same_trajectory)
    for p in get_all_params(net):
        value = p.get_value(borrow=True)
        assert type(value) is np.ndarray and value.flags.writeable


def _no_dot_net():
    # Mode "C" needs C code for every op; without a BLAS library PyTensor's
    # dot has none, so this network has no dense layer.  It has a batch-norm
    # layer of each stat_storage.
    l_in = InputLayer((None, 5))
    net = ScaleLayer(BiasLayer(l_in, b=np.linspace(-1, 1, 5)), scales=np.linspace(0.5, 2, 5))
    branches = [
        NonlinearityLayer(BatchNormLayer(net, stat_storage=storage))
        for storage in ("inv_std", "var")
    ]
    return l_in, ElemwiseSumLayer(branches, coeffs=[1.0, 0.5])


def _c_safe_loss(prediction, t):
    # mode "C" aborts the process (PyTensor 3.0.7) on a mean over all axes of
    # a matrix, which aggregate's default builds as Lasagne did: the same mean
    # as a sum over the size here.
    err = objectives.squared_error(prediction, t)
    return err.sum() / err.size


def _squared_error_train(l_in, net, mode):
    t = pt.matrix("t")
    loss = _c_safe_loss(get_output(net), t)
    upd = updates.adam(loss, get_all_params(net, trainable=True), learning_rate=0.05)
    return pytensor.function([l_in.input_var, t], loss, updates=upd, mode=mode)


@pytest.mark.slow
def test_any_backend_order_gives_the_same_trajectory():
    if not pytensor.config.cxx:
        pytest.skip("no C compiler")
    r = np.random.RandomState(2)
    batches = [(r.randn(8, 5), r.randn(8, 5)) for _ in range(6)]
    # (CVM is tested in test_normalization: its C compilation is slow here)
    order = ["JAX", None, "C", "FAST_COMPILE", "JAX", PY, "C", None]

    # reference: every step in the python linker
    l_in, net = _no_dot_net()
    start = get_all_param_values(net)
    ref_train = _squared_error_train(l_in, net, PY)
    ref_losses = [ref_train(*batches[i % len(batches)]) for i in range(len(order))]
    ref_values = get_all_param_values(net)

    set_all_param_values(net, start)
    # the adam state lives in new shared variables: one set, shared by all modes
    t = pt.matrix("t")
    loss = _c_safe_loss(get_output(net), t)
    upd = updates.adam(loss, get_all_params(net, trainable=True), learning_rate=0.05)
    fns = {}
    losses = []
    for i, mode in enumerate(order):
        key = mode if isinstance(mode, str | type(None)) else "py"
        if key not in fns:
            fns[key] = pytensor.function([l_in.input_var, t], loss, updates=upd, mode=mode)
        losses.append(fns[key](*batches[i % len(batches)]))
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-10)
    names = [p.name for p in get_all_params(net)]
    assert names.count("mean") == 2 and "inv_std" in names and "var" in names
    for got, want in zip(get_all_param_values(net), ref_values, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-9)


def test_objective_runs_under_mode_c():
    # a summed objective (see _c_safe_loss) trains and evaluates under mode "C"
    if not pytensor.config.cxx:
        pytest.skip("no C compiler")
    l_in, net = _no_dot_net()
    train = _squared_error_train(l_in, net, "C")
    t = pt.matrix("t")
    test_loss = _c_safe_loss(get_output(net, deterministic=True), t)
    evaluate = pytensor.function([l_in.input_var, t], test_loss, mode="C")
    x, target = np.random.RandomState(3).randn(8, 5), np.zeros((8, 5))
    first = train(x, target)
    for _ in range(20):
        last = train(x, target)
    assert last < first
    assert np.isfinite(evaluate(x, target))


@pytest.mark.slow
@pytest.mark.parametrize("mode", [DEFAULT_MODE, "JAX"], ids=["numba", "jax"])
def test_bn_mlp_learns_digits(mode):
    datasets = pytest.importorskip("sklearn.datasets")
    digits = datasets.load_digits()
    X_all = digits.data / 16.0
    y_all = digits.target.astype("int32")
    order = np.random.RandomState(0).permutation(len(y_all))
    X_all, y_all = X_all[order], y_all[order]
    X_train, y_train = X_all[:1400], y_all[:1400]
    X_test, y_test = X_all[1400:], y_all[1400:]

    l_in = InputLayer((None, 64))
    net = batch_norm(DenseLayer(l_in, 64))
    net = DenseLayer(net, 10, nonlinearity=softmax)
    y = pt.ivector("y")
    out, state = get_output(net, return_updates=True)
    loss = objectives.aggregate(objectives.categorical_crossentropy(out, y))
    upd = updates.nesterov_momentum(loss, get_all_params(net, trainable=True), 0.1)
    upd.update(state)
    train = pytensor.function([l_in.input_var, y], loss, updates=upd, mode=mode)
    acc = objectives.aggregate(
        objectives.categorical_accuracy(get_output(net, deterministic=True), y)
    )
    accuracy = pytensor.function([l_in.input_var, y], acc, mode=mode)
    for epoch in range(6):
        perm = np.random.RandomState(epoch).permutation(1400)
        for i in range(0, 1400, 50):
            idx = perm[i : i + 50]
            train(X_train[idx], y_train[idx])
    assert accuracy(X_test, y_test) >= 0.9


def test_batch_size_dependent_shapes_under_jax():
    # JAX compiles for concrete shapes and cannot build arrays, slices or
    # reshapes from traced sizes: layers use sizes known at build time where
    # they have them, and shapes taken straight from the input otherwise.
    from lasagne_bn.layers import (
        ConcatLayer,
        FlattenLayer,
        LocalResponseNormalization2DLayer,
        ReshapeLayer,
        StandardizationLayer,
    )

    a, b = InputLayer((None, 3, 4, 4)), InputLayer((None, 2, 4, 3))
    layers = [
        DenseLayer(a, 5),
        FlattenLayer(a),
        ReshapeLayer(a, ([0], -1)),
        ConcatLayer([a, b], axis=1, cropping=[None, None, None, "center"]),
        ConcatLayer([a, b], axis=1, cropping=[None, None, "lower", "upper"]),
        LocalResponseNormalization2DLayer(a, n=3),
        StandardizationLayer(a),
        BatchNormLayer(a),
    ]
    outs = get_output(layers, deterministic=True)
    f_jax = pytensor.function([a.input_var, b.input_var], outs, mode="JAX")
    f_ref = pytensor.function([a.input_var, b.input_var], outs, mode="FAST_COMPILE")
    r = np.random.RandomState(4)
    for n in (2, 5):
        xa, xb = r.randn(n, 3, 4, 4), r.randn(n, 2, 4, 3)
        for got, want, layer in zip(f_jax(xa, xb), f_ref(xa, xb), layers, strict=True):
            assert got.shape[0] == n
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12, err_msg=repr(layer))
