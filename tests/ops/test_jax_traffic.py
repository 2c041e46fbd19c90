"""The memory traffic XLA compiles our JAX-mode graphs to (issue 42).

Batch norm is bound by memory traffic on every device, so the bytes XLA's
own ``cost_analysis()`` says a compiled graph accesses are checked against
the least the graph must move, counted in arrays the size of ``x``
(float32):

- inference: read ``x``, write ``y``: 2;
- training forward: the statistics read ``x``, the output reads ``x`` and
  writes ``y``: 3 (4 on a CPU, whose XLA reads ``x`` once per sum where a
  GPU fuses the two sums into one pass);
- training forward and backward: the forward's 3, the backward's sums read
  ``x`` and ``dy``, ``dx`` reads both and writes ``dx``: 8.

A graph passes at up to 1.3 times that.  Nothing runs: the graphs are only
compiled (``jax.ShapeDtypeStruct`` arguments), so the bench's large shapes
cost only compile time (under a second each).  The
convolution and pooling graphs are checked against the same graph written
by hand with ``lax.conv_general_dilated`` and ``lax.reduce_window`` (what
Flax's ``nn.Conv`` and ``nn.max_pool`` lower to).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")

import pytensor  # noqa: E402
import pytensor.tensor as pt  # noqa: E402
from jax import lax  # noqa: E402

from lasagne_bn.ops import batch_normalization_test, batch_normalization_train  # noqa: E402
from lasagne_bn.ops.conv import conv2d  # noqa: E402
from lasagne_bn.ops.pool import pool_2d  # noqa: E402

EPS = 1e-4
FACTOR = 1.3
# benchmarks/bn_bench.py's shapes: (shape, axes)
BENCH_SHAPES = {
    "(64, 64, 56, 56)": ((64, 64, 56, 56), "spatial"),
    "(32, 256, 28, 28)": ((32, 256, 28, 28), "spatial"),
    "(256, 4096)": ((256, 4096), "per-activation"),
    "(8, 16, 32, 32)": ((8, 16, 32, 32), "spatial"),
}


def bytes_accessed(fn, sizes: dict[str, tuple[int, ...]]) -> float:
    """XLA's bytes accessed for the compiled JAX-mode ``fn``; inputs by name (float32)."""
    specs = []
    for variable, storage in zip(fn.maker.fgraph.inputs, fn.vm.inputs, strict=True):
        if storage[0] is not None:  # a shared variable's value
            value = np.asarray(storage[0])
            specs.append(jax.ShapeDtypeStruct(value.shape, value.dtype))
        else:
            specs.append(jax.ShapeDtypeStruct(sizes[variable.name], np.float32))
    cost = fn.vm.jit_fn.lower(*specs).compile().cost_analysis()
    if isinstance(cost, list | tuple):  # older jax: one dict per computation
        cost = cost[0]
    return float(cost["bytes accessed"])


def bn_graphs(shape, axes_mode):
    """The bench's three JAX-mode functions: training forward, forward+backward, inference."""
    rng = np.random.default_rng(0)
    ndim = len(shape)
    param_shape = (shape[1],) if axes_mode == "spatial" else shape[1:]
    x = pt.tensor("x", dtype="float32", shape=(None,) * ndim)
    dy = pt.tensor("dy", dtype="float32", shape=(None,) * ndim)
    g, b, m, v = (
        pytensor.shared(rng.uniform(0.5, 1.5, param_shape).astype("float32"), name=n)
        for n in "gbmv"
    )
    out, _, _ = batch_normalization_train(x, g, b, axes=axes_mode, epsilon=EPS)
    test_out = batch_normalization_test(x, g, b, m, v, axes=axes_mode, epsilon=EPS)
    grads = pytensor.grad(None, [x, g, b], known_grads={out: dy})
    return {
        "forward": pytensor.function([x], out, mode="JAX"),
        "forward+backward": pytensor.function([x, dy], [out, *grads], mode="JAX"),
        "inference": pytensor.function([x], test_out, mode="JAX"),
    }


def least_arrays(graph: str) -> int:
    """Arrays of ``x``'s size the graph must move at least (see the module docstring)."""
    if graph == "forward":
        return 4 if jax.devices()[0].platform == "cpu" else 3
    return {"forward+backward": 8, "inference": 2}[graph]


def check_bn_traffic(key: str) -> dict[str, float]:
    shape, axes_mode = BENCH_SHAPES[key]
    nbytes = 4 * int(np.prod(shape))
    sizes = {"x": shape, "dy": shape}
    ratios = {}
    for graph, fn in bn_graphs(shape, axes_mode).items():
        ratios[graph] = bytes_accessed(fn, sizes) / (least_arrays(graph) * nbytes)
    print(key, {g: round(r, 3) for g, r in ratios.items()})
    assert all(r <= FACTOR for r in ratios.values()), (key, ratios)
    return ratios


@pytest.mark.parametrize("key", list(BENCH_SHAPES))
def test_bn_traffic_at_most_1_3x_least(key):
    # XLA counts a fusion's operands once: on a CPU the per-activation
    # forward is one YNNPACK fusion that XLA counts as reading x once
    check_bn_traffic(key)


# --------------------------------------------------------------------------
# convolution and pooling against the same graph written with lax

CONV_X, CONV_W = (32, 16, 28, 28), (32, 16, 3, 3)


def hand_written_bytes() -> dict[str, float]:
    """conv3x3 'same' (no flip) then 2x2 max pool, as Flax's nn.Conv and nn.max_pool lower."""

    def forward(x, w):
        y = lax.conv_general_dilated(
            x,
            w,
            (1, 1),
            [(1, 1), (1, 1)],
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
            precision=lax.Precision.HIGHEST,
        )
        return lax.reduce_window(y, -np.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def train(x, w, dy):
        out, vjp = jax.vjp(forward, x, w)
        return (out, *vjp(dy))

    x = jax.ShapeDtypeStruct(CONV_X, np.float32)
    w = jax.ShapeDtypeStruct(CONV_W, np.float32)
    out = jax.eval_shape(forward, x, w)
    results = {}
    for name, fn, args in (("forward", forward, (x, w)), ("train", train, (x, w, out))):
        cost = jax.jit(fn).lower(*args).compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list | tuple) else cost
        results[name] = float(cost["bytes accessed"])
    return results


def test_conv_pool_traffic_at_most_1_3x_hand_written_lax():
    x = pt.tensor("x", dtype="float32", shape=(None,) * 4)
    w = pt.tensor("w", dtype="float32", shape=(None,) * 4)
    dy = pt.tensor("dy", dtype="float32", shape=(None,) * 4)
    out = pool_2d(
        conv2d(x, w, filter_shape=CONV_W, border_mode="half", filter_flip=False),
        ws=(2, 2),
        ignore_border=True,
    )
    grads = pytensor.grad(None, [x, w], known_grads={out: dy})
    pooled = (CONV_X[0], CONV_W[0], CONV_X[2] // 2, CONV_X[3] // 2)
    sizes = {"x": CONV_X, "w": CONV_W, "dy": pooled}
    ours = {
        "forward": bytes_accessed(pytensor.function([x, w], out, mode="JAX"), sizes),
        "train": bytes_accessed(pytensor.function([x, w, dy], [out, *grads], mode="JAX"), sizes),
    }
    anchor = hand_written_bytes()
    ratios = {k: ours[k] / anchor[k] for k in ours}
    print({k: round(r, 3) for k, r in ratios.items()})
    assert all(r <= FACTOR for r in ratios.values()), (ours, anchor, ratios)
