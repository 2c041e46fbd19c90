"""BatchNormLayer's alpha=None, renorm and virtual_batch_size; GroupNormLayer and group_norm.

One function per mode holds every variant side by side (one compile per
mode keeps this file fast); three training steps are checked against a
float64 NumPy simulation of the outputs and of the running statistics.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_for
from pytensor.compile.mode import Mode
from pytensor.gradient import verify_grad

from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    BatchNormLayer,
    DenseLayer,
    GroupNormLayer,
    InputLayer,
    StandardizationLayer,
    collect_updates,
    get_all_params,
    get_output,
    group_norm,
)

EPS = 1e-4
SHAPE = (6, 4, 3)  # batch, channels, positions; batch norm over axes (0, 2)
AXES = (0, 2)
MODES = ["default", "fast_compile", "py", "cvm", "jax"]
# Numba and the C backend compile this file's one big graph in 15-40 s when
# nothing is cached yet (about 1-3 s afterwards).
SLOW_MODES = ("default", "cvm")
PY = Mode(linker="py", optimizer=None)


# --------------------------------------------------------------------------
# float64 NumPy references


def np_bn_train(x, p, storage, size=None, renorm=None):
    """Training output and the batch statistics to average (layer's storage).

    ``p``: gamma, beta, mean, stat2 (the running values before this step);
    ``size``: virtual batch size (TensorFlow's grouping); ``renorm``:
    ``(r_max, d_max)`` or None.
    """
    n = x.shape[0]
    if size:
        xr = x.reshape((size, n // size) + x.shape[1:])
        axes = (0,) + tuple(a + 1 for a in AXES if a)
        chan = 2
    else:
        xr, axes, chan = x, AXES, 1
    shape = [1] * xr.ndim
    shape[chan] = -1
    e = lambda v: v.reshape(shape)  # noqa: E731
    mean = xr.mean(axis=axes, keepdims=True)
    var = xr.var(axis=axes, keepdims=True)
    y = (xr - mean) / np.sqrt(var + EPS)
    if renorm:
        r_max, d_max = renorm
        run_std = 1 / p["stat2"] if storage == "inv_std" else np.sqrt(p["stat2"] + EPS)
        r = np.clip(np.sqrt(var + EPS) / e(run_std), 1 / r_max, r_max)
        d = np.clip((mean - e(p["mean"])) / e(run_std), -d_max, d_max)
        y = y * r + d
    y = (y * e(p["gamma"]) + e(p["beta"])).reshape(x.shape)
    m = np.prod([xr.shape[a] for a in axes])
    keep = tuple(a for a in range(xr.ndim) if a != chan)
    batch_mean = mean.mean(axis=keep)
    batch_var = var.mean(axis=keep)  # over the virtual batches (one without)
    if storage == "inv_std":
        stat2 = 1 / np.sqrt(batch_var + EPS)
    else:
        stat2 = batch_var * m / (m - 1)
    return y, batch_mean, stat2


def np_group_norm(x, groups, axis, gamma, beta, eps=1e-3):
    s = list(x.shape)
    xr = x.reshape(s[:axis] + [groups, s[axis] // groups] + s[axis + 1 :])
    axes = tuple(a for a in range(1, xr.ndim) if a != axis)
    y = (xr - xr.mean(axes, keepdims=True)) / np.sqrt(xr.var(axes, keepdims=True) + eps)
    shape = [1] * x.ndim
    shape[axis] = -1
    return y.reshape(x.shape) * gamma.reshape(shape) + beta.reshape(shape)


# --------------------------------------------------------------------------
# every variant in one function per mode


# name: (BatchNormLayer kwargs, explicit updates?)
VARIANTS = {
    "cumulative_inv_std": ({"alpha": None}, False),
    "cumulative_var": ({"alpha": None, "stat_storage": "var"}, True),
    "renorm_inv_std_schedule": ({"renorm": True}, True),
    "ghost_var": ({"virtual_batch_size": 2, "stat_storage": "var"}, True),
    "ghost_renorm_var_cumulative": (
        {
            "virtual_batch_size": 3,
            "renorm": True,
            "r_max": 1.2,
            "d_max": 0.2,
            "alpha": None,
            "stat_storage": "var",
        },
        False,
    ),
}
GROUP_NORMS = {"gn2": (2, 1), "gn_last_axis": (3, -1)}


def _initial(storage, seed):
    r = np.random.RandomState(seed)
    return {
        "gamma": r.rand(4) + 0.5,
        "beta": r.randn(4),
        "mean": r.randn(4),
        "stat2": r.rand(4) + 0.5,
    }


@pytest.fixture(
    scope="module",
    params=[pytest.param(m, marks=pytest.mark.slow) if m in SLOW_MODES else m for m in MODES],
)
def compiled(request):
    l_in = InputLayer((None,) + SHAPE[1:])
    x = l_in.input_var
    layers, params = {}, {}
    r_max = pytensor.shared(1.0, name="r_max")
    d_max = pytensor.shared(0.0, name="d_max")
    for i, (name, (kwargs, _)) in enumerate(VARIANTS.items()):
        storage = kwargs.get("stat_storage", "inv_std")
        p = _initial(storage, i)
        if name == "renorm_inv_std_schedule":
            kwargs = {**kwargs, "r_max": r_max, "d_max": d_max}
        layers[name] = BatchNormLayer(
            l_in,
            axes=AXES,
            epsilon=EPS,
            gamma=p["gamma"],
            beta=p["beta"],
            mean=p["mean"],
            **{storage: p["stat2"]},
            **kwargs,
        )
        params[name] = p
    gn_in = InputLayer((None, 4, 3, 6))
    r = np.random.RandomState(9)
    gns = {}
    for name, (groups, axis) in GROUP_NORMS.items():
        c = 4 if axis == 1 else 6
        g, b = r.rand(c) + 0.5, r.randn(c)
        gns[name] = (GroupNormLayer(gn_in, groups, axis=axis, gamma=g, beta=b), g, b)
    explicit = [n for n, (_, e) in VARIANTS.items() if e]
    implicit = [n for n, (_, e) in VARIANTS.items() if not e]
    with collect_updates() as updates:
        outs = get_output([layers[n] for n in explicit])
    outs += get_output([layers[n] for n in implicit])
    outs += get_output([gn for gn, _, _ in gns.values()])
    fn = pytensor.function(
        [x, gn_in.input_var], outs, updates=updates, mode=mode_for(request.param)
    )
    return fn, layers, params, gns, explicit + implicit, (r_max, d_max)


def test_three_training_steps_match_numpy(compiled):
    fn, layers, params, gns, order, (r_max, d_max) = compiled
    r = np.random.RandomState(3)
    state = {n: dict(p) for n, p in params.items()}
    schedule = [(1.0, 0.0), (2.0, 0.5), (2.0, 0.5)]
    for step in range(3):
        r_max.set_value(schedule[step][0])
        d_max.set_value(schedule[step][1])
        x = r.randn(*SHAPE) * 2 + 1
        xg = r.randn(5, 4, 3, 6) * 3 + 50
        outs = fn(x, xg)
        for name, out in zip(order, outs, strict=False):
            kwargs = VARIANTS[name][0]
            storage = kwargs.get("stat_storage", "inv_std")
            if kwargs.get("renorm"):
                renorm = schedule[step] if name == "renorm_inv_std_schedule" else (
                    kwargs["r_max"], kwargs["d_max"])  # fmt: skip
            else:
                renorm = None
            s = state[name]
            y, bm, bs = np_bn_train(x, s, storage, kwargs.get("virtual_batch_size"), renorm)
            np.testing.assert_allclose(out, y, rtol=1e-6, atol=1e-9, err_msg=name)
            a = 1 / (step + 1) if "alpha" in kwargs else 0.1
            s["mean"] = (1 - a) * s["mean"] + a * bm
            s["stat2"] = (1 - a) * s["stat2"] + a * bs
            layer = layers[name]
            np.testing.assert_allclose(layer.mean.get_value(), s["mean"], rtol=1e-6, err_msg=name)
            np.testing.assert_allclose(
                layer._stat2.get_value(), s["stat2"], rtol=1e-6, err_msg=name
            )
            if "alpha" in kwargs:
                assert layer.num_batches_tracked.get_value() == step + 1
        for (name, (_groups, axis)), out in zip(
            GROUP_NORMS.items(), outs[len(order) :], strict=True
        ):
            gn, g, b = gns[name]
            want = np_group_norm(xg, gn.groups, axis % 4, g, b)
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-9, err_msg=name)


# --------------------------------------------------------------------------
# alpha=None details (python linker: no compile cost)


def test_cumulative_average_is_the_mean_of_all_batches_seen():
    bn = BatchNormLayer(InputLayer((None, 3)), alpha=None, stat_storage="var")
    assert [p.name for p in bn.get_params()][-1] == "num_batches_tracked"
    assert bn.num_batches_tracked.dtype == "int64"
    assert not bn.params[bn.num_batches_tracked] & {"trainable", "regularizable"}
    x = bn.input_layer.input_var
    # averages used and updated in one function: the counter still advances
    train = pytensor.function([x], get_output(bn, batch_norm_use_averages=True), mode=PY)
    test = pytensor.function([x], get_output(bn, deterministic=True), mode=PY)
    batches = [np.random.RandomState(i).randn(4 + i, 3) for i in range(4)]
    for b in batches:
        train(b)
    test(batches[0])
    assert bn.num_batches_tracked.get_value() == 4
    want_var = np.mean([b.var(axis=0, ddof=1) for b in batches], axis=0)
    np.testing.assert_allclose(bn.var.get_value(), want_var, rtol=1e-12)
    np.testing.assert_allclose(bn.mean.get_value(), np.mean([b.mean(0) for b in batches], 0))


def test_cumulative_average_in_lasagnes_own_formulas():
    # axes set after construction (as legacy subclasses do) take Lasagne's formulas
    bn = BatchNormLayer(InputLayer((None, 3)), alpha=None)
    bn.axes = [0]
    assert not bn._fits_ops(2)
    _, updates = get_output(bn, return_updates=True)
    fn = pytensor.function([bn.input_layer.input_var], [], updates=updates, mode=PY)
    fn(np.ones((2, 3)))
    fn(np.array([[3.0, 3.0, 3.0], [5.0, 5.0, 5.0]]))
    np.testing.assert_allclose(bn.mean.get_value(), 2.5)
    assert bn.num_batches_tracked.get_value() == 2


def test_recompute_sets_the_batch_counter():
    from lasagne_bn.layers import recompute_bn_stats

    bn = BatchNormLayer(InputLayer((None, 2)), alpha=None)
    data = [np.arange(6.0).reshape(3, 2), np.ones((2, 2))]
    recompute_bn_stats(bn, data, progress=False, mode=PY)
    assert bn.num_batches_tracked.get_value() == 2
    np.testing.assert_allclose(bn.mean.get_value(), np.concatenate(data).mean(0))


def test_interchange_carries_the_batch_counter():
    from lasagne_bn_compat.interchange import (
        bn_to_keras,
        from_torch_state_dict,
        to_torch_state_dict,
    )

    bn = BatchNormLayer(InputLayer((None, 2)), alpha=None, name="bn")
    bn.num_batches_tracked.set_value(np.int64(7))
    state = to_torch_state_dict(bn)
    assert state["bn.num_batches_tracked"] == 7
    state["bn.num_batches_tracked"] = np.int64(11)
    from_torch_state_dict(bn, state)
    assert bn.num_batches_tracked.get_value() == 11
    with pytest.raises(ValueError, match="alpha=None"):
        bn_to_keras(bn)


# --------------------------------------------------------------------------
# renormalization and ghost batches: reductions to plain batch norm, gradients


def _pair(**kwargs):
    """A plain and a variant BatchNormLayer with the same parameters on one input."""
    r = np.random.RandomState(5)
    values = {"gamma": r.rand(4) + 0.5, "beta": r.randn(4), "mean": r.randn(4)}
    values["inv_std"] = r.rand(4) + 0.5
    l_in = InputLayer((6, 4, 3))
    plain = BatchNormLayer(l_in, axes=AXES, **values)
    variant = BatchNormLayer(l_in, axes=AXES, **values, **kwargs)
    return l_in, plain, variant, values


@pytest.mark.parametrize(
    "kwargs",
    [{"renorm": True, "r_max": 1.0, "d_max": 0.0}, {"virtual_batch_size": 6}],
    ids=["renorm_fully_clipped", "one_virtual_batch"],
)
def test_reduces_to_plain_batch_norm(kwargs):
    l_in, plain, variant, _ = _pair(**kwargs)
    outs, updates = get_output([plain, variant], return_updates=True)
    det = get_output([plain, variant], deterministic=True)
    fn = pytensor.function([l_in.input_var], outs + det, updates=updates, mode=PY)
    x = np.random.RandomState(0).randn(6, 4, 3) * 3
    y_plain, y_variant, d_plain, d_variant = fn(x)
    np.testing.assert_allclose(y_variant, y_plain, rtol=1e-10)
    np.testing.assert_allclose(d_variant, d_plain, rtol=1e-10)
    np.testing.assert_allclose(variant.mean.get_value(), plain.mean.get_value(), rtol=1e-10)
    np.testing.assert_allclose(variant.inv_std.get_value(), plain.inv_std.get_value(), rtol=1e-10)


def test_unclipped_renorm_normalizes_with_the_running_averages():
    # r and d unclipped: x_hat * r + d is (x - running mean) / running std
    l_in, _, variant, values = _pair(renorm=True, r_max=np.inf, d_max=np.inf)
    out = get_output(variant, batch_norm_update_averages=False)
    x = np.random.RandomState(3).randn(6, 4, 3) * 2
    e = lambda v: v[:, None]  # noqa: E731
    want = (x - e(values["mean"])) * e(values["inv_std"] * values["gamma"]) + e(values["beta"])
    got = pytensor.function([l_in.input_var], out, mode=PY)(x)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_renorm_gradient_treats_r_and_d_as_constants():
    l_in, _, variant, values = _pair(renorm=True, r_max=1.3, d_max=0.4)
    x = np.random.RandomState(1).randn(6, 4, 3) * 2 + 0.5
    w = np.random.RandomState(2).randn(6, 4, 3)
    xs = l_in.input_var
    cost = (get_output(variant, batch_norm_update_averages=False) * w).sum()
    grads = pytensor.function(
        [xs], pytensor.grad(cost, [xs, variant.gamma, variant.beta]), mode=PY
    )
    # r and d of this batch, computed in NumPy, then plain batch norm with
    # gamma * r and beta + gamma * d: the same output, and the gradient renorm
    # must have w.r.t. x
    mean, var = x.mean(axis=AXES), x.var(axis=AXES)
    run_std = 1 / values["inv_std"]
    r = np.clip(np.sqrt(var + EPS) / run_std, 1 / 1.3, 1.3)
    d = np.clip((mean - values["mean"]) / run_std, -0.4, 0.4)
    ref = BatchNormLayer(l_in, axes=AXES, gamma=values["gamma"] * r,
                         beta=values["beta"] + values["gamma"] * d)  # fmt: skip
    ref_cost = (get_output(ref, batch_norm_update_averages=False) * w).sum()
    ref_gx = pytensor.function([xs], pytensor.grad(ref_cost, xs), mode=PY)(x)
    gx, g_gamma, g_beta = grads(x)
    np.testing.assert_allclose(gx, ref_gx, rtol=1e-8, atol=1e-10)
    x_hat = (x - mean[:, None]) / np.sqrt(var[:, None] + EPS)
    np.testing.assert_allclose(g_gamma, ((x_hat * r[:, None] + d[:, None]) * w).sum((0, 2)))
    np.testing.assert_allclose(g_beta, w.sum((0, 2)))

    # gamma and beta do not enter r and d: the numeric gradient agrees
    def renormed(gamma, beta):
        layer = BatchNormLayer(
            l_in,
            axes=AXES,
            gamma=gamma,
            beta=beta,
            mean=values["mean"],
            inv_std=values["inv_std"],
            renorm=True,
            r_max=1.3,
            d_max=0.4,
        )
        return get_output(layer, pt.as_tensor(x), batch_norm_update_averages=False)

    verify_grad(renormed, [values["gamma"], values["beta"]], rng=np.random.default_rng(0), mode=PY)


def test_ghost_batch_gradient():
    r = np.random.RandomState(4)

    def ghost(x, gamma, beta):
        layer = BatchNormLayer(InputLayer((4, 3, 2)), axes=AXES, gamma=gamma, beta=beta,
                               virtual_batch_size=2)  # fmt: skip
        return get_output(layer, x, batch_norm_update_averages=False)

    args = [r.randn(4, 3, 2), r.rand(3) + 0.5, r.randn(3)]
    verify_grad(ghost, args, rng=np.random.default_rng(0), mode=PY)


def test_group_norm_gradient():
    r = np.random.RandomState(6)

    def gn(x, gamma, beta):
        layer = GroupNormLayer(InputLayer((None, 4, 3)), groups=2, gamma=gamma, beta=beta)
        return get_output(layer, x)

    args = [r.randn(2, 4, 3), r.rand(4) + 0.5, r.randn(4)]
    verify_grad(gn, args, rng=np.random.default_rng(0), mode=PY)


# --------------------------------------------------------------------------
# GroupNormLayer against the other normalizations; group_norm


def test_group_norm_edge_cases_are_instance_and_layer_norm():
    x = np.random.RandomState(7).randn(3, 4, 5) * 4 + 1e3
    l_in = InputLayer((None, 4, 5))
    pairs = [
        (GroupNormLayer(l_in, -1, epsilon=1e-4), StandardizationLayer(l_in, "spatial")),
        (GroupNormLayer(l_in, 1, epsilon=1e-4), StandardizationLayer(l_in, "features")),
    ]
    outs = get_output([layer for pair in pairs for layer in pair])
    values = pytensor.function([l_in.input_var], outs, mode=PY)(x)
    np.testing.assert_allclose(values[0], values[1], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(values[2], values[3], rtol=1e-10, atol=1e-12)


def test_group_norm_without_parameters_and_float32():
    gn = GroupNormLayer(InputLayer((None, 4, 3)), groups=2, beta=None, gamma=None)
    assert gn.get_params() == []
    x = pt.tensor3(dtype="float32")
    out = get_output(gn, x)
    assert out.dtype == "float32"
    xv = (np.random.RandomState(8).randn(2, 4, 3) + 1e3).astype("float32")
    want = np_group_norm(xv.astype("float64"), 2, 1, np.ones(4), np.zeros(4))
    np.testing.assert_allclose(pytensor.function([x], out, mode=PY)(xv), want, atol=2e-3)


@pytest.mark.parametrize("mode", ["default", "py"])
def test_float16_group_and_standardization_normalize_in_float32(mode):
    # Numba has no float16 arithmetic: the normalization runs in float32
    x = pt.tensor3(dtype="float16")
    l_in = InputLayer((None, 4, 5), input_var=x)
    outs = get_output([GroupNormLayer(l_in, 2), StandardizationLayer(l_in)])
    xv = (np.random.RandomState(12).randn(3, 4, 5) * 2 + 10).astype("float16")
    gn, std = pytensor.function([x], outs, mode=mode_for(mode))(xv)
    assert gn.dtype == std.dtype == "float16"
    x64 = xv.astype("float64")
    want = np_group_norm(x64, 2, 1, np.ones(4), np.zeros(4))
    np.testing.assert_allclose(gn, want, atol=4e-3)
    want = (x64 - x64.mean(2, keepdims=True)) / np.sqrt(x64.var(2, keepdims=True) + 1e-4)
    np.testing.assert_allclose(std, want, atol=4e-3)


def test_group_norm_helper_moves_bias_and_nonlinearity():
    dense = DenseLayer(InputLayer((None, 5)), 8, name="fc")
    top = group_norm(dense, groups=4)
    assert top.name == "fc_gn_nonlin" and top.nonlinearity is nonlinearities.rectify
    assert dense.b is None and dense.nonlinearity is nonlinearities.identity
    assert [p.name for p in get_all_params(top)] == ["fc.W", "fc_gn.beta", "fc_gn.gamma"]
    assert top.input_layer.groups == 4 and top.input_layer.epsilon == 1e-3


# --------------------------------------------------------------------------
# bad arguments: clear errors when the layer is built


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"alpha": "none"}, TypeError, "alpha='none'"),
        ({"renorm": 1}, TypeError, "renorm=1 must be True or False"),
        ({"r_max": 2.0}, ValueError, "r_max=2.0 is only used with renorm=True"),
        ({"renorm": True, "r_max": 0.5}, ValueError, r"r_max=0.5 is out of range.*\[1.0"),
        ({"renorm": True, "d_max": -1.0}, ValueError, r"d_max=-1.0 is out of range"),
        ({"renorm": True, "d_max": float("nan")}, ValueError, r"d_max=nan is out of range"),
        ({"renorm": True, "r_max": True}, TypeError, r"r_max=True must be a real number"),
        ({"renorm": True, "r_max": pt.vector()}, ValueError, "r_max must be a scalar"),
        ({"virtual_batch_size": 2.0}, TypeError, "virtual_batch_size=2.0 must be a positive int"),
        ({"virtual_batch_size": 0}, ValueError, "virtual_batch_size=0 must be a positive int"),
        ({"virtual_batch_size": 4}, ValueError, "does not divide the batch size 6"),
        ({"virtual_batch_size": 2, "axes": (2,)}, ValueError, "batch axis 0"),
    ],
)
def test_bad_batch_norm_options(kwargs, error, match):
    with pytest.raises(error, match=match):
        BatchNormLayer(InputLayer((6, 4, 3)), **kwargs)


@pytest.mark.parametrize(
    ("shape", "kwargs", "error", "match"),
    [
        ((None, 6, 2), {"groups": 4}, ValueError, "groups=4 must be -1 or a positive divisor"),
        ((None, 6, 2), {"groups": 0}, ValueError, "groups=0"),
        ((None, 6, 2), {"groups": 12}, ValueError, "groups=12"),
        ((None, 6, 2), {"groups": 2.0}, TypeError, "groups=2.0 must be an int"),
        ((None, 6, 2), {"groups": 2, "axis": 0}, ValueError, "axis=0 is the batch axis"),
        ((None, 6, 2), {"groups": 2, "axis": 3}, ValueError, r"axis=\(3,\) is out of range"),
        ((None, None, 2), {"groups": 2}, ValueError, "needs the size of axis 1"),
        ((None, 6, 2), {"groups": 2, "epsilon": 0}, ValueError, "epsilon=0 is out of range"),
    ],
)
def test_bad_group_norm_arguments(shape, kwargs, error, match):
    with pytest.raises(error, match=match):
        GroupNormLayer(InputLayer(shape), **kwargs)


# --------------------------------------------------------------------------
# against PyTorch (CPU, test-only dependency): momentum=None and GroupNorm


def test_cumulative_average_matches_pytorch_momentum_none():
    torch = pytest.importorskip("torch")
    r = np.random.RandomState(10)
    batches = [r.randn(5, 3, 4, 4) * (i + 1) + i for i in range(3)]
    ref = torch.nn.BatchNorm2d(3, eps=EPS, momentum=None).double().train()
    bn = BatchNormLayer(InputLayer((None, 3, 4, 4)), epsilon=EPS, alpha=None, stat_storage="var")
    out, updates = get_output(bn, return_updates=True)
    fn = pytensor.function([bn.input_layer.input_var], out, updates=updates, mode=PY)
    for x in batches:
        want = ref(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(fn(x), want, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(bn.mean.get_value(), ref.running_mean.numpy(), rtol=1e-10)
    np.testing.assert_allclose(bn.var.get_value(), ref.running_var.numpy(), rtol=1e-10)
    assert bn.num_batches_tracked.get_value() == ref.num_batches_tracked.item() == 3


def test_group_norm_matches_pytorch():
    torch = pytest.importorskip("torch")
    r = np.random.RandomState(11)
    x = r.randn(3, 6, 4, 5) * 2 + 3
    gamma, beta = r.rand(6) + 0.5, r.randn(6)
    ref = torch.nn.GroupNorm(3, 6, eps=1e-5).double()
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(gamma))
        ref.bias.copy_(torch.from_numpy(beta))
    gn = GroupNormLayer(InputLayer((None, 6, 4, 5)), 3, epsilon=1e-5, gamma=gamma, beta=beta)
    fn = pytensor.function([gn.input_layer.input_var], get_output(gn), mode=PY)
    want = ref(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(fn(x), want, rtol=1e-10, atol=1e-12)


def test_jax_export_keeps_the_counter_as_state():
    pytest.importorskip("jax")
    from lasagne_bn.export import export

    l_in = InputLayer((None, 4))
    bn = BatchNormLayer(
        DenseLayer(l_in, 6, name="fc"), alpha=None, renorm=True, virtual_batch_size=2, name="bn"
    )
    model = export(GroupNormLayer(bn, 3, name="gn"))
    assert sorted(model.state) == ["bn.inv_std", "bn.mean", "bn.num_batches_tracked"]
    assert sorted(model.params) == ["bn.beta", "bn.gamma", "fc.W", "fc.b", "gn.beta", "gn.gamma"]
    x = np.arange(16, dtype=pytensor.config.floatX).reshape(4, 4)
    state = model.state
    for step in (1, 2):
        _, state = model.apply(model.params, state, x, train=True)
        assert int(state["bn.num_batches_tracked"]) == step
