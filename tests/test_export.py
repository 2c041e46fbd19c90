"""lasagne_bn.export: a network as pure JAX functions, equal to pytensor.function in every mode."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytensor
import pytest

jax = pytest.importorskip("jax")
optax = pytest.importorskip("optax")

from compile_modes import LAYER_MODES  # noqa: E402

from lasagne_bn import nonlinearities  # noqa: E402
from lasagne_bn.export import export, train_step  # noqa: E402
from lasagne_bn.layers import (  # noqa: E402
    Conv2DLayer,
    DenseLayer,
    DropoutLayer,
    InputLayer,
    batch_norm,
    get_all_params,
    get_output,
)
from lasagne_bn.random import get_rng, set_rng  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MODES = {**LAYER_MODES, "cvm": "CVM"}


def build(dropout: float = 0.0):
    """conv-bn(inv_std)-relu, dense-bn(var)-relu, [dropout], dense softmax; float32."""
    old = get_rng()
    set_rng(np.random.RandomState(3))
    try:
        with pytensor.config.change_flags(floatX="float32"):
            l_in = InputLayer((None, 2, 6, 6), name="in")
            h = batch_norm(Conv2DLayer(l_in, 3, 3, pad=1, name="conv"))
            h = batch_norm(DenseLayer(h, 5, name="fc"), stat_storage="var")
            if dropout:
                h = DropoutLayer(h, dropout, name="drop")
            out = DenseLayer(h, 4, nonlinearity=nonlinearities.softmax, name="out")
    finally:
        set_rng(old)
    return l_in, out


def data(n=8, seed=0):
    r = np.random.RandomState(seed)
    x = (r.randn(n, 2, 6, 6) * 3 + 1).astype("float32")
    t = np.eye(4, dtype="float32")[r.randint(0, 4, n)]
    return x, t


@pytest.fixture(scope="module")
def net():
    l_in, out = build()
    return l_in, out, export(out)


def _loss(y, t):
    return -(t * jax.numpy.log(y)).sum(axis=1).mean()


def test_names_and_values(net):
    _, out, model = net
    assert sorted(model.params) == sorted(p.name for p in get_all_params(out, trainable=True))
    assert sorted(model.state) == ["conv_bn.inv_std", "conv_bn.mean", "fc_bn.mean", "fc_bn.var"]
    for name, p in model._shared.items():
        value = (model.params | model.state)[name]
        np.testing.assert_array_equal(value, p.get_value())


@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
def test_inference_equals_pytensor_function(net, mode):
    l_in, out, model = net
    x, _ = data()
    expected = pytensor.function([l_in.input_var], get_output(out, deterministic=True), mode=mode)(
        x
    )
    y, state = model.apply(model.params, model.state, x)
    np.testing.assert_allclose(np.asarray(y), expected, rtol=2e-5, atol=1e-6)
    assert state.keys() == model.state.keys()


@pytest.mark.parametrize("mode", list(MODES.values()), ids=list(MODES))
def test_training_outputs_and_new_state_equal_pytensor_function(mode):
    l_in, out = build()
    model = export(out)
    x, _ = data(seed=1)
    params, state = model.params, model.state
    y, new_state = jax.jit(lambda p, s, x: model.apply(p, s, x, train=True))(params, state, x)
    y_pt, updates = get_output(out, deterministic=False, return_updates=True)
    f = pytensor.function([l_in.input_var], y_pt, updates=updates, mode=mode)
    np.testing.assert_allclose(np.asarray(y), f(x), rtol=2e-5, atol=1e-6)
    for name in state:
        np.testing.assert_allclose(
            np.asarray(new_state[name]), model._shared[name].get_value(), rtol=2e-5, atol=1e-6
        )


def _pytensor_loss(l_in, out):
    """The training loss as a PyTensor graph of (input, targets), and the parameters."""
    target = pytensor.tensor.matrix("t", dtype="float32")
    y_pt = get_output(out, deterministic=False, return_updates=True)[0]
    loss = -(target * pytensor.tensor.log(y_pt)).sum(axis=1).mean()
    return loss, [l_in.input_var, target], get_all_params(out, trainable=True)


def _assert_param_grads_equal(model, params, jgrads, grads, rtol):
    names = {id(p): n for n, p in model._shared.items()}
    for p, g in zip(params, grads, strict=True):
        np.testing.assert_allclose(np.asarray(jgrads[names[id(p)]]), g, rtol=rtol, atol=1e-6)


@pytest.mark.parametrize("gradients", ["pytensor", "jax"])
def test_gradients_equal_pytensor_grad(gradients):
    l_in, out = build()
    model = export(out, gradients=gradients)
    x, t = data(seed=2)
    loss, inputs, params = _pytensor_loss(l_in, out)
    grads = pytensor.function(inputs, pytensor.grad(loss, params))(x, t)

    def loss_of(p):
        y, _ = model.apply(p, model.state, x, train=True)
        return _loss(y, t)

    jgrads = jax.jit(jax.grad(loss_of))(model.params)
    _assert_param_grads_equal(model, params, jgrads, grads, rtol=2e-4)


@pytest.mark.parametrize("gradients", ["pytensor", "jax"])
def test_second_order_gradient_penalty_equals_pytensor(gradients):
    """d/dparams of ||d loss / d x||^2 (WGAN-GP's penalty): JAX differentiates the gradient."""
    l_in, out = build()
    model = export(out, gradients=gradients)
    x, t = data(seed=3)
    loss, inputs, params = _pytensor_loss(l_in, out)
    penalty = (pytensor.grad(loss, l_in.input_var) ** 2).sum()
    expected = pytensor.function(inputs, pytensor.grad(penalty, params))(x, t)

    def penalty_of(p):
        def loss_of(xs):
            return _loss(model.apply(p, model.state, xs, train=True)[0], t)

        return (jax.grad(loss_of)(x) ** 2).sum()

    got = jax.jit(jax.grad(penalty_of))(model.params)
    _assert_param_grads_equal(model, params, got, expected, rtol=2e-3)


def test_gradients_option():
    _, out = build()
    x, _ = data()
    jax_model = export(out, gradients="jax")
    # forward mode needs JAX's own derivative
    tangent = jax.jvp(
        lambda xs: jax_model.apply(jax_model.params, jax_model.state, xs, train=True)[0],
        (x,),
        (np.ones_like(x),),
    )[1]
    assert tangent.shape == (8, 4)
    with pytest.raises(ValueError, match="gradients='numeric'; expected one of pytensor, jax"):
        export(out, gradients="numeric")


def test_vmap_over_inputs_in_inference(net):
    _, _, model = net
    x, _ = data()
    stacked = np.stack([x, x * 2])
    batched = jax.vmap(lambda xs: model.apply(model.params, model.state, xs)[0])(stacked)
    for i in range(2):
        np.testing.assert_allclose(
            np.asarray(batched[i]),
            np.asarray(model.apply(model.params, model.state, stacked[i])[0]),
            rtol=1e-5,
            atol=1e-6,
        )


def test_dropout_with_a_fixed_key():
    _, out = build(dropout=0.5)
    model = export(out, seed=7)
    x, _ = data()
    assert "rng" in model.state
    key = jax.random.PRNGKey(1)
    a, _ = model.apply(model.params, model.state, x, train=True, rng=key)
    b, _ = model.apply(model.params, model.state, x, train=True, rng=key)
    c, _ = model.apply(model.params, model.state, x, train=True, rng=jax.random.PRNGKey(2))
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
    # without rng=, state['rng'] is used and advanced
    state = model.state
    d, state2 = model.apply(model.params, state, x, train=True)
    e, state3 = model.apply(model.params, state2, x, train=True)
    assert not np.array_equal(np.asarray(state["rng"]), np.asarray(state2["rng"]))
    assert not np.allclose(np.asarray(d), np.asarray(e))
    # deterministic: no dropout, no key needed, state unchanged
    f, same = model.apply(model.params, {k: v for k, v in state.items() if k != "rng"}, x)
    assert "rng" not in same


def test_write_back_then_legacy_save(tmp_path):
    import lasagne_bn_compat.io as cio

    _, out = build()
    model = export(out)
    params = {k: v * 0 + 0.5 for k, v in model.params.items()}
    model.write_back(params, model.state)
    for name in params:
        np.testing.assert_array_equal(model._shared[name].get_value(), 0.5)
    cio.save_params(out, tmp_path / "w.npz")
    assert len(cio.read_checkpoint(tmp_path / "w.npz").values) == len(get_all_params(out))
    before = {n: p.get_value().copy() for n, p in model._shared.items()}
    with pytest.raises(ValueError, match="has shape"):
        model.write_back({"fc.W": np.ones(3), "out.b": np.ones(4)})
    with pytest.raises(KeyError, match="no parameter 'nope'"):
        model.write_back({"nope": 1.0})
    for n, p in model._shared.items():
        np.testing.assert_array_equal(p.get_value(), before[n])  # nothing half-written


def test_train_step_learns_and_updates_state():
    _, out = build()
    model = export(out)
    opt = optax.adam(0.01)
    step = train_step(model, _loss, opt)
    params, state = model.params, model.state
    opt_state = opt.init(params)
    x, t = data(32, seed=4)
    losses = []
    for _ in range(30):
        params, state, opt_state, loss = step(params, state, opt_state, x, t)
        losses.append(float(loss))
    assert losses[-1] < 0.5 * losses[0]
    assert not np.allclose(np.asarray(state["conv_bn.mean"]), model.state["conv_bn.mean"])


def test_bad_apply_arguments(net):
    _, _, model = net
    with pytest.raises(TypeError, match="apply takes 1 input"):
        model.apply(model.params, model.state)


SHARDED = textwrap.dedent(
    """
    import json, sys
    import numpy as np, jax, jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    sys.path.insert(0, sys.argv[1])
    from test_export import build, data, _loss
    from lasagne_bn.export import export

    assert jax.device_count() == 8, jax.devices()
    _, out = build()
    x, t = data(32, seed=5)

    def step_of(model):
        def step(params, state, x, t):
            def loss_of(p):
                y, s = model.apply(p, state, x, train=True)
                return _loss(y, t), s
            (loss, s), g = jax.value_and_grad(loss_of, has_aux=True)(params)
            return loss, g, s
        return step

    model = export(out)
    ref = jax.jit(step_of(model))(model.params, model.state, x, t)
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    shard = NamedSharding(mesh, P("batch"))
    xs, ts = jax.device_put(x, shard), jax.device_put(t, shard)
    sharded = jax.jit(step_of(model))(model.params, model.state, xs, ts)

    mapped_model = export(out, axis_name="batch")
    inner = step_of(mapped_model)
    def per_device(params, state, x, t):
        loss, g, s = inner(params, state, x, t)
        # the loss is each shard's mean: average; gradients of that average
        return (jax.lax.pmean(loss, "batch"), jax.lax.pmean(g, "batch"), s)
    mapped = jax.jit(jax.shard_map(per_device, mesh=mesh,
        in_specs=(P(), P(), P("batch"), P("batch")), out_specs=(P(), P(), P()),
        check_vma=False))(mapped_model.params, mapped_model.state, x, t)

    def diff(a, b):
        la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
        return max(float(jnp.max(jnp.abs(u - v) / (1e-3 + jnp.abs(v)))) for u, v in zip(la, lb))
    print(json.dumps({"sharded": diff(sharded, ref), "mapped": diff(mapped, ref)}))
    """
)


@pytest.mark.slow
def test_data_parallel_on_8_devices_equals_one_device(tmp_path):
    script = tmp_path / "sharded.py"
    script.write_text(SHARDED)
    env = {
        **os.environ,
        "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}",
    }
    proc = subprocess.run(
        [sys.executable, str(script), str(ROOT / "tests")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    diffs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert diffs["sharded"] < 1e-4, diffs
    assert diffs["mapped"] < 1e-4, diffs


def test_no_float64_anywhere_in_the_exported_step(net):
    """GPU-ready: with jax_enable_x64 off, the jitted training step holds no float64."""
    _, _, model = net
    x, t = data()

    def step(p):
        y, s = model.apply(p, model.state, x, train=True)
        return _loss(y, t), s

    text = str(jax.make_jaxpr(jax.grad(lambda p: step(p)[0]))(model.params))
    assert "f64" not in text
    assert "f32" in text


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_half_precision_inputs_get_float32_statistics(dtype):
    import jax.numpy as jnp

    from lasagne_bn.ops.jax.bn import train_forward

    r = np.random.RandomState(0)
    x64 = r.randn(16, 3, 4, 4) * 2 + 100
    x = jnp.asarray(x64, dtype=dtype)
    g, b = jnp.ones((1, 3, 1, 1), dtype), jnp.zeros((1, 3, 1, 1), dtype)
    out, mean, invstd, var = train_forward(x, g, b, 1e-4, (0, 2, 3))
    assert out.dtype == jnp.dtype(dtype)
    assert mean.dtype == invstd.dtype == var.dtype == jnp.float32
    xr = np.asarray(x, dtype=np.float64)  # the rounded inputs, exactly
    np.testing.assert_allclose(np.asarray(mean).ravel(), xr.mean(axis=(0, 2, 3)), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(var).ravel(), xr.var(axis=(0, 2, 3)), rtol=1e-3)
