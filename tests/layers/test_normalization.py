"""BatchNormLayer and batch_norm: Lasagne master's semantics on the lasagne_bn ops."""

from __future__ import annotations

import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params
from pytensor.graph.traversal import graph_inputs

from lasagne_bn import init, nonlinearities, objectives, updates
from lasagne_bn.layers import (
    BatchNormLayer,
    DenseLayer,
    InputLayer,
    Layer,
    LocalResponseNormalization2DLayer,
    NonlinearityLayer,
    StandardizationLayer,
    batch_norm,
    collect_updates,
    count_params,
    get_all_layers,
    get_all_params,
    get_output,
    instance_norm,
    layer_norm,
)

EPS = 1e-4
ALPHA = 0.1


# --------------------------------------------------------------------------
# float64 NumPy references (Lasagne's formulas)


def np_batch_stats(x, axes):
    """Batch mean, biased variance, and m (values per statistic), parameter layout."""
    mean = x.mean(axis=axes)
    var = x.var(axis=axes)
    m = int(np.prod([x.shape[a] for a in axes]))
    return mean, var, m


def np_expand(p, axes, ndim):
    """Broadcast a parameter-layout array against the input."""
    kept = [i for i in range(ndim) if i not in axes]
    full = [1] * ndim
    for i, k in enumerate(kept):
        full[k] = p.shape[i]
    return p.reshape(full)


def np_train_out(x, gamma, beta, axes, eps=EPS):
    mean, var, _ = np_batch_stats(x, axes)
    e = lambda p: np_expand(p, axes, x.ndim)  # noqa: E731
    return (x - e(mean)) * (e(gamma) / np.sqrt(e(var) + eps)) + e(beta)


def np_inv_std_out(x, gamma, beta, mean, inv_std, axes):
    e = lambda p: np_expand(p, axes, x.ndim)  # noqa: E731
    return (x - e(mean)) * (e(gamma) * e(inv_std)) + e(beta)


def np_var_out(x, gamma, beta, mean, var, axes, eps=EPS):
    e = lambda p: np_expand(p, axes, x.ndim)  # noqa: E731
    return (x - e(mean)) * (e(gamma) / np.sqrt(e(var) + eps)) + e(beta)


def np_new_stats(storage, x, axes, mean0, stat0, alpha=ALPHA, eps=EPS):
    mean, var, m = np_batch_stats(x, axes)
    new_mean = (1 - alpha) * mean0 + alpha * mean
    if storage == "inv_std":
        new_stat = (1 - alpha) * stat0 + alpha / np.sqrt(var + eps)
    else:
        new_stat = (1 - alpha) * stat0 + alpha * var * m / (m - 1)
    return new_mean, new_stat


# --------------------------------------------------------------------------
# construction: parameters, names, order, tags, errors


def test_params_names_order_and_tags():
    bn = BatchNormLayer(InputLayer((None, 3, 4, 5)), name="bn")
    assert bn.axes == (0, 2, 3)
    params = bn.get_params()
    assert [p.name for p in params] == ["bn.beta", "bn.gamma", "bn.mean", "bn.inv_std"]
    assert [bn.params[p] for p in params] == [
        {"trainable"},
        {"trainable", "regularizable"},
        {"batch_norm_stat"},
        {"batch_norm_stat"},
    ]
    assert bn.get_params(trainable=True) == [bn.beta, bn.gamma]
    assert bn.get_params(regularizable=True) == [bn.gamma]
    assert bn.get_params(batch_norm_stat=True) == [bn.mean, bn.inv_std]
    assert bn.get_params(trainable=False) == [bn.mean, bn.inv_std]
    for p, value in zip(params, (0, 1, 0, 1), strict=True):
        assert p.get_value().shape == (3,)
        np.testing.assert_array_equal(p.get_value(), value)
    assert bn.output_shape == (None, 3, 4, 5)


def test_var_storage_params():
    bn = BatchNormLayer(InputLayer((None, 6)), stat_storage="var", name="bn")
    assert [p.name for p in bn.get_params()] == ["bn.beta", "bn.gamma", "bn.mean", "bn.var"]
    assert bn.params[bn.var] == {"batch_norm_stat"}
    np.testing.assert_array_equal(bn.var.get_value(), np.ones(6))
    assert not hasattr(bn, "inv_std")


def test_axes_variants_and_none_params():
    l_in = InputLayer((None, 3, 4, 5))
    assert BatchNormLayer(l_in, axes=0).mean.get_value().shape == (3, 4, 5)
    assert BatchNormLayer(l_in, axes=(0, 1)).mean.get_value().shape == (4, 5)
    assert BatchNormLayer(l_in, axes=(-1, 0, -2)).axes == (0, 2, 3)
    bn = BatchNormLayer(l_in, beta=None, gamma=None)
    assert bn.beta is None and bn.gamma is None
    assert bn.get_params() == [bn.mean, bn.inv_std]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"axes": (0, 5)}, ValueError, "out of range"),
        ({"axes": (0, 0)}, ValueError, "repeats"),
        ({"axes": "spatial"}, ValueError, "'spatial'"),
        ({"axes": (0, 1.5)}, TypeError, "only ints"),
        ({"stat_storage": "std"}, ValueError, "stat_storage='std'"),
        ({"epsilon": 0.0}, ValueError, "epsilon=0.0"),
        ({"alpha": 1.5}, ValueError, "alpha=1.5"),
        ({"alpha": "x"}, TypeError, "alpha='x'"),
        ({"var": init.Constant(2)}, ValueError, "stat_storage='var'"),
        ({"stat_storage": "var", "inv_std": init.Constant(2)}, ValueError, "inv_std"),
        ({"mean": np.zeros(4)}, ValueError, "shape"),
    ],
)
def test_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        BatchNormLayer(InputLayer((None, 3, 4, 5)), **kwargs)


def test_unknown_size_on_kept_axis_raises():
    with pytest.raises(ValueError, match="needs specified input sizes"):
        BatchNormLayer(InputLayer((None, None, 4)))


@pytest.mark.parametrize("mode", mode_params())
def test_batch_of_one_trains_as_lasagne_did(mode):
    # Lasagne: variance 0, so inv_std = 1/sqrt(epsilon) and the output is beta;
    # the last short batch of an epoch is often of size 1.
    bn = BatchNormLayer(InputLayer((None, 3)), beta=np.array([0.5, -1.0, 2.0]))
    x = pt.matrix("x")
    fn = pytensor.function([x], get_output(bn, x), mode=mode)
    np.testing.assert_allclose(fn(np.array([[1.0, 2.0, 3.0]])), [[0.5, -1.0, 2.0]])
    np.testing.assert_allclose(bn.mean.get_value(), [0.1, 0.2, 0.3], rtol=1e-6)
    np.testing.assert_allclose(bn.inv_std.get_value(), 0.9 + 0.1 * 100.0, rtol=1e-5)


# --------------------------------------------------------------------------
# numerics in every mode: training output, deterministic output, averages


def _bn_case(storage):
    """A 4-d (spatial) layer for 'inv_std' and a 2-d one for 'var', with non-trivial params."""
    r = np.random.RandomState(1)
    if storage == "inv_std":
        shape, n = (5, 3, 2, 4), 3
    else:
        shape, n = (7, 6), 6
    x = (r.randn(*shape) * 2 + 1).astype("float64")
    values = {
        "beta": r.randn(n),
        "gamma": r.rand(n) + 0.5,
        "mean": r.randn(n),
        storage: r.rand(n) + 0.5,
    }
    bn = BatchNormLayer(InputLayer((None,) + shape[1:]), stat_storage=storage, **values)
    return bn, x, values


@pytest.fixture(scope="module", params=mode_params())
def compiled(request):
    """Per mode, both storages: functions for each use/update combination and both update ways."""
    mode = request.param
    result = {}
    for storage in ("inv_std", "var"):
        bn, x, values = _bn_case(storage)
        xv = pt.tensor(dtype="float64", shape=(None,) * x.ndim, name="x")
        fns = {
            "train": pytensor.function([xv], get_output(bn, xv), mode=mode),
            "det": pytensor.function([xv], get_output(bn, xv, deterministic=True), mode=mode),
            "use_update": pytensor.function(
                [xv], get_output(bn, xv, batch_norm_use_averages=True), mode=mode
            ),
            "batch_only": pytensor.function(
                [xv], get_output(bn, xv, batch_norm_update_averages=False), mode=mode
            ),
        }
        out, upd = get_output(bn, xv, return_updates=True)
        fns["explicit"] = pytensor.function([xv], out, updates=upd, mode=mode)
        out, upd = get_output(bn, xv, batch_norm_use_averages=True, return_updates=True)
        fns["explicit_use_update"] = pytensor.function([xv], out, updates=upd, mode=mode)
        result[storage] = (bn, x, values, fns)
    return result


def _reset(bn, values):
    for name, value in values.items():
        getattr(bn, name).set_value(value)


def _stats(bn):
    return bn.mean.get_value(), bn._stat2.get_value()


STORAGES = ("inv_std", "var")


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("fn", ["train", "explicit"])
def test_training_output_and_average_update(compiled, storage, fn):
    bn, x, values, fns = compiled[storage]
    _reset(bn, values)
    y = fns[fn](x)
    np.testing.assert_allclose(
        y, np_train_out(x, values["gamma"], values["beta"], bn.axes), rtol=1e-12, atol=1e-12
    )
    want_mean, want_stat = np_new_stats(storage, x, bn.axes, values["mean"], values[storage])
    mean, stat = _stats(bn)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stat, want_stat, rtol=1e-12)


@pytest.mark.parametrize("storage", STORAGES)
def test_deterministic_output_uses_stored_averages(compiled, storage):
    bn, x, values, fns = compiled[storage]
    _reset(bn, values)
    y = fns["det"](x)
    ref = np_inv_std_out if storage == "inv_std" else np_var_out
    want = ref(x, values["gamma"], values["beta"], values["mean"], values[storage], bn.axes)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    mean, stat = _stats(bn)
    np.testing.assert_array_equal(mean, values["mean"])
    np.testing.assert_array_equal(stat, values[storage])


@pytest.mark.parametrize("storage", STORAGES)
def test_batch_statistics_without_update(compiled, storage):
    bn, x, values, fns = compiled[storage]
    _reset(bn, values)
    y = fns["batch_only"](x)
    np.testing.assert_allclose(
        y, np_train_out(x, values["gamma"], values["beta"], bn.axes), rtol=1e-12, atol=1e-12
    )
    np.testing.assert_array_equal(_stats(bn)[0], values["mean"])


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("fn", ["use_update", "explicit_use_update"])
def test_use_and_update_averages_together(compiled, storage, fn):
    # The output must use the averages as they were *before* this call's
    # update, in every mode (PyTensor 3.0.7's Numba and CVM backends got
    # this wrong for Lasagne's aliased clones).
    bn, x, values, fns = compiled[storage]
    _reset(bn, values)
    y = fns[fn](x)
    ref = np_inv_std_out if storage == "inv_std" else np_var_out
    want = ref(x, values["gamma"], values["beta"], values["mean"], values[storage], bn.axes)
    np.testing.assert_allclose(y, want, rtol=1e-12, atol=1e-12)
    want_mean, want_stat = np_new_stats(storage, x, bn.axes, values["mean"], values[storage])
    mean, stat = _stats(bn)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(stat, want_stat, rtol=1e-12)


@pytest.mark.parametrize("mode", [None, "CVM"], ids=["numba", "cvm"])
def test_reading_a_statistic_and_updating_its_clone_in_one_function(mode):
    # Lasagne's trick puts the default update on a memory-aliased clone; a
    # function that also reads the original (here: a deterministic output
    # next to the training output) must read it before the update.
    bn, x, values = _bn_case("inv_std")
    xv = pt.tensor4("x")
    f = pytensor.function(
        [xv], [get_output(bn, xv), get_output(bn, xv, deterministic=True)], mode=mode
    )
    _reset(bn, values)
    _, det = f(x)
    want = np_inv_std_out(
        x, values["gamma"], values["beta"], values["mean"], values["inv_std"], bn.axes
    )
    np.testing.assert_allclose(det, want, rtol=1e-12, atol=1e-12)
    want_mean, _ = np_new_stats("inv_std", x, bn.axes, values["mean"], values["inv_std"])
    np.testing.assert_allclose(bn.mean.get_value(), want_mean, rtol=1e-12)


@pytest.mark.parametrize("mode", mode_params())
def test_gamma_beta_none(mode):
    r = np.random.RandomState(2)
    x = r.randn(6, 4)
    bn = BatchNormLayer(InputLayer((None, 4)), beta=None, gamma=None, mean=r.randn(4))
    xv = pt.matrix("x")
    f = pytensor.function(
        [xv], [get_output(bn, xv), get_output(bn, xv, deterministic=True)], mode=mode
    )
    mean0 = bn.mean.get_value()
    train, det = f(x)
    np.testing.assert_allclose(train, np_train_out(x, np.ones(4), np.zeros(4), (0,)), atol=1e-12)
    np.testing.assert_allclose(det, x - mean0, atol=1e-12)


# --------------------------------------------------------------------------
# three SGD steps of a small network: stored statistics vs NumPy


def _small_net(storage):
    r = np.random.RandomState(3)
    l_in = InputLayer((None, 6))
    dense = DenseLayer(l_in, 5, W=r.randn(6, 5) * 0.5, name="fc")
    net = batch_norm(dense, stat_storage=storage)
    net = DenseLayer(net, 3, W=r.randn(5, 3), nonlinearity=nonlinearities.softmax, name="out")
    return l_in, dense, net


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("mode", mode_params())
def test_three_sgd_steps_stored_statistics(mode, storage):
    # Two copies of the network in one function (one compilation): one keeps
    # its averages Lasagne's way, the other through explicit updates.
    r = np.random.RandomState(4)
    X = r.randn(3, 16, 6)
    Y = r.randint(0, 3, (3, 16)).astype("int32")
    y = pt.ivector("y")
    nets, losses, state = [], [], {}
    for way in ("lasagne", "explicit"):
        l_in, dense, net = _small_net(storage)
        if way == "lasagne":
            out = get_output(net, l_in.input_var)
        else:
            out, state = get_output(net, l_in.input_var, return_updates=True)
        losses.append(objectives.aggregate(objectives.categorical_crossentropy(out, y)))
        nets.append((l_in, dense, get_all_layers(net)[2], net))
    params = [p for *_, net in nets for p in get_all_params(net, trainable=True)]
    param_updates = updates.sgd(losses[0] + losses[1], params, learning_rate=0.1)
    param_updates.update(state)
    inputs = [nets[0][0].input_var, nets[1][0].input_var, y]
    train = pytensor.function(inputs, losses, updates=param_updates, mode=mode)

    want = [(bn.mean.get_value(), bn._stat2.get_value()) for _, _, bn, _ in nets]
    for step in range(3):
        # the batch-norm inputs (the dense bias was removed by batch_norm)
        hs = [X[step] @ dense.W.get_value() for _, dense, _, _ in nets]
        train(X[step], X[step], Y[step])
        want = [np_new_stats(storage, h, (0,), *w) for h, w in zip(hs, want, strict=True)]
    for (_, dense, bn, _), (mean, stat) in zip(nets, want, strict=True):
        assert isinstance(bn, BatchNormLayer) and bn.stat_storage == storage
        np.testing.assert_allclose(bn.mean.get_value(), mean, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(bn._stat2.get_value(), stat, rtol=1e-10)
        # the training graph changed W: the three batches saw different inputs
        assert not np.allclose(dense.W.get_value(), _small_net(storage)[1].W.get_value())
    # both ways give the same network
    for a, b in zip(get_all_params(nets[0][3]), get_all_params(nets[1][3]), strict=True):
        np.testing.assert_allclose(a.get_value(), b.get_value(), rtol=1e-12, atol=1e-15)


# --------------------------------------------------------------------------
# the two ways of updating, and warnings


def test_explicit_way_returns_updates_and_sets_no_default_update():
    bn = BatchNormLayer(InputLayer((None, 3)), name="bn")
    x = pt.matrix("x")
    out, upd = get_output(bn, x, return_updates=True)
    assert list(upd) == [bn.mean, bn.inv_std]
    assert all(v.type == k.type for k, v in upd.items())
    shared = [v for v in graph_inputs([out]) if hasattr(v, "container")]
    assert all(v.default_update is None for v in shared)
    f_without = pytensor.function([x], out, mode="FAST_COMPILE")
    f_without(np.random.RandomState(0).randn(4, 3))
    np.testing.assert_array_equal(bn.mean.get_value(), np.zeros(3))
    f_with = pytensor.function([x], out, updates=upd, mode="FAST_COMPILE")
    xv = np.random.RandomState(0).randn(4, 3)
    f_with(xv)
    np.testing.assert_allclose(bn.mean.get_value(), ALPHA * xv.mean(0), rtol=1e-12)


def test_collect_updates_block_and_double_update_error():
    bn = BatchNormLayer(InputLayer((None, 3)))
    with collect_updates() as upd:
        get_output(bn)
        with pytest.raises(ValueError, match="updated twice"):
            get_output(bn)
    assert list(upd) == [bn.mean, bn.inv_std]
    # one call for several outputs is the way
    with collect_updates() as upd:
        get_output([bn, bn.input_layer])
    assert len(upd) == 2


def test_lasagne_way_uses_aliased_clones_with_exact_types():
    bn = BatchNormLayer(InputLayer((None, 3)), stat_storage="var")
    out = get_output(bn)
    clones = [
        v
        for v in graph_inputs([out])
        if getattr(v, "container", None) in (bn.mean.container, bn.var.container)
    ]
    assert len(clones) == 2
    for clone in clones:
        assert clone is not bn.mean and clone is not bn.var
        assert clone.default_update is not None
        assert clone.default_update.type == clone.type
    assert bn.mean.default_update is None and bn.var.default_update is None


@pytest.mark.parametrize("way", ["lasagne", "explicit"])
def test_no_deprecation_warning_reaches_the_user(way):
    l_in = InputLayer((None, 4))
    net = batch_norm(DenseLayer(l_in, 3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if way == "lasagne":
            out, upd = get_output(net), {}
        else:
            out, upd = get_output(net, return_updates=True)
        f = pytensor.function([l_in.input_var], out, updates=upd)
        f(np.random.RandomState(0).randn(5, 4))
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert deprecations == [], [str(w.message) for w in deprecations]


def test_float32_statistics_keep_their_type():
    # A default update must have exactly the shared variable's type: float32
    # statistics with float64 alpha / floatX must not be upcast.
    r = np.random.RandomState(5)
    f32 = dict(
        beta=np.zeros(3, "float32"),
        gamma=np.ones(3, "float32"),
        mean=np.zeros(3, "float32"),
        inv_std=np.ones(3, "float32"),
    )
    bn = BatchNormLayer(InputLayer((None, 3)), **f32)
    x = pt.matrix("x", dtype="float32")
    out = get_output(bn, x)
    assert out.dtype == "float32"
    f = pytensor.function([x], out, mode="FAST_COMPILE")
    xv = r.randn(8, 3).astype("float32")
    f(xv)
    assert bn.mean.get_value().dtype == np.float32
    np.testing.assert_allclose(bn.mean.get_value(), ALPHA * xv.mean(0), rtol=1e-5, atol=1e-7)


def test_user_shared_statistic_without_static_shape():
    # pytensor.shared gives no static shape; the clone gets the parameter's.
    mean = pytensor.shared(np.zeros(3), name="my_mean")
    bn = BatchNormLayer(InputLayer((None, 3)), mean=mean)
    assert bn.mean is mean
    x = pt.matrix("x")
    f = pytensor.function([x], get_output(bn, x), mode="FAST_COMPILE")
    xv = np.random.RandomState(6).randn(4, 3)
    f(xv)
    np.testing.assert_allclose(mean.get_value(), ALPHA * xv.mean(0), rtol=1e-12)


def test_expression_statistic_cannot_be_updated():
    bn = BatchNormLayer(InputLayer((None, 3)), mean=pt.zeros(3))
    get_output(bn, deterministic=True)  # reading it is fine
    with pytest.raises(ValueError, match="not a shared variable"):
        get_output(bn)


# --------------------------------------------------------------------------
# batch_norm()


def test_batch_norm_on_dense_with_bias_and_rectify():
    l_in = InputLayer((None, 4))
    dense = DenseLayer(l_in, 3, name="fc")
    assert dense.b is not None and dense.nonlinearity is nonlinearities.rectify
    top = batch_norm(dense)
    layers = get_all_layers(top)
    assert [type(lyr).__name__ for lyr in layers] == [
        "InputLayer",
        "DenseLayer",
        "BatchNormLayer",
        "NonlinearityLayer",
    ]
    assert [lyr.name for lyr in layers] == [None, "fc", "fc_bn", "fc_bn_nonlin"]
    assert dense.b is None and list(dense.params) == [dense.W]
    assert dense.nonlinearity is nonlinearities.identity
    assert top.nonlinearity is nonlinearities.rectify
    assert [p.name for p in get_all_params(top)] == [
        "fc.W",
        "fc_bn.beta",
        "fc_bn.gamma",
        "fc_bn.mean",
        "fc_bn.inv_std",
    ]
    # Lasagne: W (4 * 3) + beta, gamma, mean, inv_std (4 * 3)
    assert count_params(top) == 24
    assert count_params(top, trainable=True) == 18


def test_batch_norm_names_and_kwargs():
    l_in = InputLayer((None, 4))
    top = batch_norm(DenseLayer(l_in, 3), name="custom", alpha=0.5, stat_storage="var")
    bn = top.input_layer
    assert (bn.name, top.name) == ("custom", "custom_nonlin")
    assert bn.alpha == 0.5 and bn.stat_storage == "var"
    unnamed = batch_norm(DenseLayer(l_in, 3))
    assert unnamed.name is None and unnamed.input_layer.name is None
    linear = batch_norm(DenseLayer(l_in, 3, b=None, nonlinearity=None))
    # DenseLayer turns None into identity, which batch_norm moves on top (as Lasagne)
    assert isinstance(linear, NonlinearityLayer)


class _ConvLike(Layer):
    """Any layer with W, b and nonlinearity (what Conv2DLayer will be)."""

    def __init__(self, incoming, num_filters, **kwargs):
        super().__init__(incoming, **kwargs)
        self.nonlinearity = nonlinearities.rectify
        self.W = self.add_param(init.GlorotUniform(), (num_filters, self.input_shape[1]), "W")
        self.b = self.add_param(init.Constant(0), (num_filters,), "b", regularizable=False)
        self.num_filters = num_filters

    def get_output_shape_for(self, input_shape):
        return (input_shape[0], self.num_filters) + tuple(input_shape[2:])

    def get_output_for(self, input, **kwargs):
        out = pt.tensordot(input, self.W, axes=[[1], [1]]).dimshuffle(0, 3, 1, 2)
        if self.b is not None:
            out = out + self.b.dimshuffle("x", 0, "x", "x")
        return self.nonlinearity(out)


def test_batch_norm_on_any_layer_with_w_b_nonlinearity():
    l_in = InputLayer((None, 2, 5, 5))
    conv = _ConvLike(l_in, 4, name="conv")
    top = batch_norm(conv)
    bn = top.input_layer
    assert bn.axes == (0, 2, 3) and bn.mean.get_value().shape == (4,)
    assert conv.b is None and [p.name for p in conv.get_params()] == ["conv.W"]
    x = np.random.RandomState(7).randn(3, 2, 5, 5)
    f = pytensor.function([l_in.input_var], get_output(top), mode="FAST_COMPILE")
    h = np.einsum("nchw,fc->nfhw", x, conv.W.get_value())
    want = np.maximum(np_train_out(h, np.ones(4), np.zeros(4), (0, 2, 3)), 0)
    np.testing.assert_allclose(f(x), want, atol=1e-12)


# --------------------------------------------------------------------------
# the other normalization layers


def test_local_response_normalization():
    r = np.random.RandomState(8)
    x = r.randn(2, 7, 3, 3)
    layer = LocalResponseNormalization2DLayer(InputLayer((None, 7, 3, 3)), n=3)
    f = pytensor.function([layer.input_layer.input_var], get_output(layer), mode="FAST_COMPILE")
    sq = np.pad(x**2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    scale = 2 + 1e-4 * (sq[:, :-2] + sq[:, 1:-1] + sq[:, 2:])
    np.testing.assert_allclose(f(x), x / scale**0.75, rtol=1e-12)
    with pytest.raises(NotImplementedError):
        LocalResponseNormalization2DLayer(InputLayer((None, 7, 3, 3)), n=4)


def test_standardization_instance_and_layer_norm():
    r = np.random.RandomState(9)
    x = r.randn(2, 3, 4, 4) * 3 + 2
    l_in = InputLayer((None, 3, 4, 4))
    std = StandardizationLayer(l_in, axes="spatial")
    f = pytensor.function([l_in.input_var], get_output(std), mode="FAST_COMPILE")
    m = x.mean(axis=(2, 3), keepdims=True)
    v = x.var(axis=(2, 3), keepdims=True)
    np.testing.assert_allclose(f(x), (x - m) / np.sqrt(v + 1e-4), rtol=1e-10, atol=1e-12)
    top = instance_norm(l_in, name="in")
    assert [lyr.name for lyr in get_all_layers(top)][1:] == ["in", "in_scale", "in_bias"]
    top = layer_norm(DenseLayer(InputLayer((None, 5)), 6, name="d"))
    assert [lyr.name for lyr in get_all_layers(top)][1:] == [
        "d",
        "d_ln",
        "d_ln_scale",
        "d_ln_bias",
        "d_ln_nonlin",
    ]


@pytest.mark.parametrize(
    "wrap",
    [
        lambda layer: batch_norm(layer, epsilon=-1.0),
        lambda layer: batch_norm(layer, axes=(5,)),
        lambda layer: layer_norm(layer, epsilon=0.0),
    ],
    ids=["batch_norm epsilon", "batch_norm axes", "layer_norm epsilon"],
)
def test_a_rejected_wrapper_leaves_the_layer_as_it_was(wrap):
    dense = DenseLayer(InputLayer((None, 4)), 3, name="fc")
    with pytest.raises(ValueError):
        wrap(dense)
    assert list(dense.params) == [dense.W, dense.b]
    assert dense.nonlinearity is nonlinearities.rectify


# --------------------------------------------------------------------------
# Legacy subclasses and empty axes: Lasagne's formulas from the current attributes


class _LayerNormSubclass(BatchNormLayer):
    """A layer norm as legacy code wrote one: per example over the features."""

    def __init__(self, incoming, **kwargs):
        super().__init__(incoming, gamma=None, beta=None, **kwargs)
        self.axes = (1,)  # changed after construction; no learned scale/shift


def _lasagne_reference(x, axes, eps=1e-4):
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("mode", mode_params())
def test_subclass_changing_axes_normalizes_over_its_axes_and_differentiates_twice(mode):
    layer = _LayerNormSubclass(InputLayer((None, 4)))
    x = pt.matrix("x")
    out = get_output(layer, x, batch_norm_update_averages=False)
    # WGAN-GP style: a gradient penalty differentiated again w.r.t. the input.
    g = pytensor.grad((out * pt.arange(4)).sum(), x)
    penalty_grad = pytensor.grad(pt.sqr(g).sum(), x)
    fn = pytensor.function([x], [out, penalty_grad], mode=mode)
    xv = np.random.RandomState(3).randn(5, 4)
    got, pg = fn(xv)
    np.testing.assert_allclose(got, _lasagne_reference(xv, (1,)), rtol=1e-5, atol=1e-6)
    assert pg.shape == (5, 4) and np.isfinite(pg).all()


def test_subclass_with_own_parameter_shapes_updates_its_averages():
    class PerExampleStats(BatchNormLayer):
        def __init__(self, incoming, batch, **kwargs):
            super().__init__(incoming, **kwargs)
            self.axes = (1,)
            self.gamma = self.add_param(init.Constant(2.0), (batch,), "g2")
            self.beta = self.add_param(init.Constant(0.5), (batch,), "b2")
            self.mean = self.add_param(init.Constant(0.0), (batch,), "m2", trainable=False)
            self.inv_std = self.add_param(init.Constant(1.0), (batch,), "s2", trainable=False)

    layer = PerExampleStats(InputLayer((3, 4)), batch=3)
    x = pt.matrix("x")
    fn = pytensor.function([x], get_output(layer, x))
    xv = np.random.RandomState(4).randn(3, 4)
    np.testing.assert_allclose(fn(xv), 2.0 * _lasagne_reference(xv, (1,)) + 0.5, rtol=1e-5)
    np.testing.assert_allclose(layer.mean.get_value(), 0.1 * xv.mean(1), rtol=1e-5)
    want_inv_std = 0.9 + 0.1 / np.sqrt(xv.var(1) + 1e-4)
    np.testing.assert_allclose(layer.inv_std.get_value(), want_inv_std, rtol=1e-5)


@pytest.mark.parametrize("mode", mode_params())
def test_empty_axes_normalize_over_nothing(mode):
    # Lasagne: mean over no axis is the input, variance 0: the output is beta.
    layer = BatchNormLayer(InputLayer((2, 3)), axes=(), beta=init.Constant(0.25))
    assert layer.axes == ()
    x = pt.matrix("x")
    fn = pytensor.function([x], get_output(layer, x, batch_norm_update_averages=False), mode=mode)
    np.testing.assert_allclose(fn(np.ones((2, 3))), 0.25)


@pytest.mark.parametrize("mode", ["FAST_COMPILE", "JAX"])
def test_two_training_passes_chain_var_storage_updates_in_loss_order(mode):
    # Theano 1.0 applied the two running-average updates one after the other,
    # the pass met first in the outputs first (tests/layers/test_train_oracle.py
    # checks the inv_std storage against recorded legacy values).
    rng = np.random.RandomState(0)
    x1v, x2v = rng.randn(4, 3) + 5, rng.randn(5, 3) - 3
    m0, v0 = np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 0.5])
    bn = BatchNormLayer(InputLayer((None, 3)), mean=m0.copy(), var=v0.copy(), stat_storage="var")
    x1, x2 = pt.matrix(), pt.matrix()
    loss = get_output(bn, x2).sum() + get_output(bn, x1).sum()  # x2's pass first
    pytensor.function([x1, x2], loss, mode=mode)(x1v, x2v)
    m1, v1 = 0.9 * m0 + 0.1 * x2v.mean(0), 0.9 * v0 + 0.1 * x2v.var(0, ddof=1)
    m2, v2 = 0.9 * m1 + 0.1 * x1v.mean(0), 0.9 * v1 + 0.1 * x1v.var(0, ddof=1)
    np.testing.assert_allclose(bn.mean.get_value(), m2, rtol=1e-6)
    np.testing.assert_allclose(bn.var.get_value(), v2, rtol=1e-6)
