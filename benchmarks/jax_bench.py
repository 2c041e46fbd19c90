"""The exported JAX training step against Flax and against pytensor.function(mode="JAX").

Three ways to run one Adam training step (and one inference) of the demo's
network (conv3x3(16)-bn-relu, maxpool, conv3x3(32)-bn-relu, maxpool,
dense(64)-bn-relu, dense(10) softmax), on whatever device JAX has:

- export:   ``lasagne_bn.export.train_step(export(network), loss, optax.adam)``,
            one jitted function;
- flax:     the same architecture written by hand with ``flax.linen``
            (``nn.BatchNorm``, NHWC as Flax is meant to be used), ``optax.adam``,
            one jitted function: the anchor;
- lax:      the same network written by hand with ``lax.conv_general_dilated``,
            ``lax.reduce_window`` and Flax's batch-norm arithmetic (what
            ``nn.Conv``, ``nn.max_pool`` and ``nn.BatchNorm`` lower to), NCHW,
            ``optax.adam``: the anchor where flax is not installed;
- pytensor: ``pytensor.function(mode="JAX")`` with lasagne_bn's Adam
            updates: what a migrated script runs, with PyTensor's per-call
            conversion of inputs and shared variables.

The timings are interleaved (rotating order every repetition), medians of
``--reps``; the load average is printed with the table.  A second table
times one exported batch norm on a large tensor and reports the achieved
memory bandwidth (bytes each pass must move / time).

The tables are also written as JSON (``--json``, default
``benchmarks/results/jax_bench.json``), from which ``benchmarks/report.py``
makes ``benchmarks/results/jax_bench.md``.

Run:  python benchmarks/jax_bench.py [--reps 30] [--batch 64 256] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def build_ours(stat_storage="inv_std"):
    import pytensor

    from lasagne_bn.demo import build_network

    with pytensor.config.change_flags(floatX="float32"):
        return build_network(stat_storage)


def cross_entropy(probs, targets):
    import jax.numpy as jnp

    return -jnp.mean(jnp.log(jnp.take_along_axis(probs, targets[:, None], axis=1)))


def export_impl(batch):
    import optax

    from lasagne_bn.export import export, train_step

    model = export(build_ours())
    opt = optax.adam(0.003)
    step = train_step(model, cross_entropy, opt)
    state = {"params": model.params, "state": model.state}
    state["opt"] = opt.init(state["params"])
    import jax

    infer = jax.jit(lambda p, s, x: model.apply(p, s, x)[0])

    def train(x, y):
        p, s, o, loss = step(state["params"], state["state"], state["opt"], x, y)
        state.update(params=p, state=s, opt=o)
        return loss

    return train, lambda x: infer(state["params"], state["state"], x)


def flax_impl(batch):
    import flax.linen as nn
    import jax
    import jax.numpy as jnp
    import optax

    class Net(nn.Module):
        @nn.compact
        def __call__(self, x, train: bool):
            norm = {"use_running_average": not train, "momentum": 0.9, "epsilon": 1e-4}
            x = jnp.transpose(x, (0, 2, 3, 1))  # NCHW in, like the others
            for features in (16, 32):
                x = nn.Conv(features, (3, 3), padding="SAME", use_bias=False)(x)
                x = nn.relu(nn.BatchNorm(**norm)(x))
                x = nn.max_pool(x, (2, 2), (2, 2))
            x = x.reshape(x.shape[0], -1)
            x = nn.relu(nn.BatchNorm(**norm)(nn.Dense(64, use_bias=False)(x)))
            return nn.softmax(nn.Dense(10)(x))

    net = Net()
    variables = net.init(jax.random.PRNGKey(0), jnp.zeros((batch, 1, 8, 8)), train=False)
    opt = optax.adam(0.003)
    state = {
        "params": variables["params"],
        "stats": variables["batch_stats"],
        "opt": opt.init(variables["params"]),
    }

    @jax.jit
    def step(params, stats, opt_state, x, y):
        def loss_of(p):
            probs, new = net.apply(
                {"params": p, "batch_stats": stats}, x, train=True, mutable=["batch_stats"]
            )
            return cross_entropy(probs, y), new["batch_stats"]

        (loss, stats), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    infer = jax.jit(lambda p, s, x: net.apply({"params": p, "batch_stats": s}, x, train=False))

    def train(x, y):
        p, s, o, loss = step(state["params"], state["stats"], state["opt"], x, y)
        state.update(params=p, stats=s, opt=o)
        return loss

    return train, lambda x: infer(state["params"], state["stats"], x)


def lax_impl(batch):
    """The network by hand in ``lax`` (no flax needed); parameters as Flax initialises them."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    def bn(h, p, stats, axes, train):
        shape = [1] * h.ndim
        shape[1] = h.shape[1]
        if train:
            mean = jnp.mean(h, axes)
            var = jnp.maximum(0.0, jnp.mean(h * h, axes) - mean * mean)
            old = stats
            stats = {"mean": 0.9 * old["mean"] + 0.1 * mean, "var": 0.9 * old["var"] + 0.1 * var}
        else:
            mean, var = stats["mean"], stats["var"]
        scale = (p["scale"] * lax.rsqrt(var + 1e-4)).reshape(shape)
        return (h - mean.reshape(shape)) * scale + p["bias"].reshape(shape), stats

    def forward(params, stats, x, train):
        new = {}
        h = x
        for i in (0, 1):
            h = lax.conv_general_dilated(
                h, params[f"conv{i}"], (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW")
            )
            h, new[f"bn{i}"] = bn(h, params[f"bn{i}"], stats[f"bn{i}"], (0, 2, 3), train)
            h = lax.reduce_window(
                jax.nn.relu(h), -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID"
            )
        h = h.reshape(h.shape[0], -1) @ params["dense0"]
        h, new["bn2"] = bn(h, params["bn2"], stats["bn2"], (0,), train)
        h = jax.nn.relu(h) @ params["dense1"]["w"] + params["dense1"]["b"]
        return jax.nn.softmax(h), new

    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    init = jax.nn.initializers.lecun_normal()
    conv_init = jax.nn.initializers.lecun_normal(in_axis=1, out_axis=0)
    params = {
        "conv0": conv_init(keys[0], (16, 1, 3, 3), jnp.float32),
        "conv1": conv_init(keys[1], (32, 16, 3, 3), jnp.float32),
        "dense0": init(keys[2], (32 * 2 * 2, 64), jnp.float32),
        "dense1": {"w": init(keys[3], (64, 10), jnp.float32), "b": jnp.zeros(10, jnp.float32)},
    }
    stats = {}
    for name, width in (("bn0", 16), ("bn1", 32), ("bn2", 64)):
        params[name] = {
            "scale": jnp.ones(width, jnp.float32),
            "bias": jnp.zeros(width, jnp.float32),
        }
        stats[name] = {"mean": jnp.zeros(width, jnp.float32), "var": jnp.ones(width, jnp.float32)}
    opt = optax.adam(0.003)
    state = {"params": params, "stats": stats, "opt": opt.init(params)}

    @jax.jit
    def step(params, stats, opt_state, x, y):
        def loss_of(p):
            probs, new = forward(p, stats, x, True)
            return cross_entropy(probs, y), new

        (loss, stats), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = opt.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), stats, opt_state, loss

    infer = jax.jit(lambda p, s, x: forward(p, s, x, False)[0])

    def train(x, y):
        p, s, o, loss = step(state["params"], state["stats"], state["opt"], x, y)
        state.update(params=p, stats=s, opt=o)
        return loss

    return train, lambda x: infer(state["params"], state["stats"], x)


def pytensor_impl(batch):
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.layers import get_all_params, get_output
    from lasagne_bn.updates import adam

    net = build_ours()
    l_in = net
    while hasattr(l_in, "input_layer"):
        l_in = l_in.input_layer
    y = pt.ivector("y")
    probs, state_updates = get_output(net, return_updates=True)
    loss = -pt.mean(pt.log(probs[pt.arange(batch), y]))
    params = get_all_params(net, trainable=True)
    updates = adam(loss, params, learning_rate=0.003)
    updates.update(state_updates)
    train = pytensor.function([l_in.input_var, y], loss, updates=updates, mode="JAX")
    infer = pytensor.function([l_in.input_var], get_output(net, deterministic=True), mode="JAX")
    return train, infer


def have_flax() -> bool:
    import importlib.util

    return importlib.util.find_spec("flax") is not None


IMPLS = {"export": export_impl, "flax": flax_impl, "lax": lax_impl, "pytensor": pytensor_impl}


def block(value):
    if hasattr(value, "block_until_ready"):
        value.block_until_ready()
    return value


def time_interleaved(fns: dict, args_of, reps: int) -> dict:
    times = {name: [] for name in fns}
    names = list(fns)
    for name in names:  # compile and warm up
        for _ in range(3):
            block(fns[name](*args_of(name)))
    for r in range(reps):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            args = args_of(name)
            t0 = time.perf_counter()
            block(fns[name](*args))
            times[name].append(time.perf_counter() - t0)
    return {name: statistics.median(t) * 1e3 for name, t in times.items()}


def bn_bandwidth(reps: int) -> list[tuple[str, float, float]]:
    """One exported batch norm on (64, 64, 56, 56) float32: ms and GB/s per pass kind."""
    import jax
    import pytensor

    from lasagne_bn.export import export
    from lasagne_bn.layers import BatchNormLayer, InputLayer

    shape = (64, 64, 56, 56)
    with pytensor.config.change_flags(floatX="float32"):
        layer = BatchNormLayer(InputLayer((None, *shape[1:])))  # 'auto': over (0, 2, 3)
    model = export(layer)
    x = np.random.RandomState(0).randn(*shape).astype("float32")
    xj = jax.device_put(x)
    p, s = model.params, model.state
    infer = jax.jit(lambda x: model.apply(p, s, x)[0])
    train = jax.jit(lambda x: model.apply(p, s, x, train=True)[0])
    train_grad = jax.jit(jax.grad(lambda x: model.apply(p, s, x, train=True)[0].sum()))
    nbytes = x.nbytes
    rows = []
    # bytes each must move at least: read x and write y; train reads x twice
    # (statistics, then normalize); the backward reads x and dy, writes dx
    for name, fn, moved in (
        ("inference", infer, 2 * nbytes),
        ("training forward", train, 3 * nbytes),
        ("training forward+backward", train_grad, 6 * nbytes),
    ):
        ms = time_interleaved({name: fn}, lambda _: (xj,), reps)[name]
        rows.append((name, ms, moved / (ms * 1e-3) / 1e9))
    return rows


def load_average() -> str:
    try:
        return ", ".join(f"{v:.2f}" for v in os.getloadavg())
    except OSError:  # pragma: no cover
        return "unknown"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--batch", type=int, nargs="*", default=[64, 256])
    parser.add_argument("--no-bandwidth", action="store_true")
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the tables as JSON (default benchmarks/results/jax_bench.json)",
    )
    args = parser.parse_args(argv)
    # The published figures were measured with freed buffers recycled, which
    # importing lasagne_bn.ops did until issue 16; now it is this explicit call.
    from lasagne_bn.ops import recycle_host_memory

    recycle_host_memory()
    import jax

    device = f"{jax.devices()[0].device_kind} x{jax.device_count()}"
    print(f"device: {device}, jax {jax.__version__}")
    load_before = load_average()
    print(f"load average before: {load_before}")
    if not have_flax():
        print("flax is not installed: the anchor is the hand-written lax network")
    records = []
    for batch in args.batch:
        rng = np.random.RandomState(batch)
        x = rng.rand(batch, 1, 8, 8).astype("float32")
        y = rng.randint(0, 10, batch).astype("int32")
        impls = {n: f for n, f in IMPLS.items() if n != "flax" or have_flax()}
        anchor = "flax" if "flax" in impls else "lax"
        built = {name: impl(batch) for name, impl in impls.items()}
        xy, x1 = (x, y), (x,)
        train = time_interleaved({n: b[0] for n, b in built.items()}, lambda _, a=xy: a, args.reps)
        infer = time_interleaved({n: b[1] for n, b in built.items()}, lambda _, a=x1: a, args.reps)
        title = f"batch {batch} (8x8 digits network), median of {args.reps}, ms"
        print(f"\n{title}:")
        vs = f"vs {anchor}"
        print(f"  {'':<10}{'train step':>12}{vs:>9}{'inference':>12}{vs:>9}")
        for name in impls:
            print(
                f"  {name:<10}{train[name]:>12.3f}{train[name] / train[anchor]:>9.2f}"
                f"{infer[name]:>12.3f}{infer[name] / infer[anchor]:>9.2f}"
            )
            records.append(
                {
                    # the device in the title: the JSON has no other place for it
                    "table": f"{title}; device {device}",
                    "implementation": name,
                    "train step ms": train[name],
                    f"train {vs}": train[name] / train[anchor],
                    "inference ms": infer[name],
                    f"inference {vs}": infer[name] / infer[anchor],
                }
            )
        print(
            f"  export vs pytensor(mode=JAX): train {train['pytensor'] / train['export']:.1f}x "
            f"faster, inference {infer['pytensor'] / infer['export']:.1f}x faster"
        )
    if not args.no_bandwidth:
        title = "one exported batch norm, (64, 64, 56, 56) float32"
        print(f"\n{title}:")
        for name, ms, gbs in bn_bandwidth(max(5, args.reps // 3)):
            print(f"  {name:<28}{ms:>9.2f} ms {gbs:>8.1f} GB/s")
            records.append(
                {"table": f"{title}; device {device}", "pass": name, "ms": ms, "GB/s": gbs}
            )
    load_after = load_average()
    print(f"\nload average after: {load_after}")
    from _results import write

    load = f"load average before: {load_before}; after: {load_after}"
    print(f"results: {write('jax_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
