"""Achieved memory bandwidth of the JAX-mode batch-norm kernels, against a plain copy.

For each of benchmarks/bn_bench.py's shapes (float32) it compiles, through
``pytensor.function(mode="JAX")``, the training forward, forward+backward
and inference graphs, and times the jitted XLA function itself on arrays
already on the device (``fn.vm.jit_fn``: what the kernels achieve, without
PyTensor's per-call conversion of NumPy inputs, which the last column
times).  Bandwidth is the least traffic each graph must move (arrays the
size of ``x``: inference 2, training forward 3, forward+backward 8; see
tests/ops/test_jax_traffic.py) over the time; the roof is ``x + 1``
(read x, write y) on the same device.  Prints one markdown table.

Run:  python benchmarks/jax_bandwidth.py [--reps 20] [--shapes "(8, 16, 32, 32)"]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bn_bench import EPS, SHAPES, Case  # noqa: E402

LEAST = {"inference": 2, "training forward": 3, "training forward+backward": 8}


def graphs(case: Case) -> dict:
    """name -> (pytensor function, input names) for the three graphs."""
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.ops import batch_normalization_test, batch_normalization_train

    ndim = len(case.shape)
    x = pt.tensor("x", dtype="float32", shape=(None,) * ndim)
    dy = pt.tensor("dy", dtype="float32", shape=(None,) * ndim)
    values = (case.gamma, case.beta, case.mean, case.var)
    g, b, m, v = (pytensor.shared(a, name=n) for a, n in zip(values, "gbmv", strict=True))
    out, _, _ = batch_normalization_train(x, g, b, axes=case.axes_mode, epsilon=EPS)
    test_out = batch_normalization_test(x, g, b, m, v, axes=case.axes_mode, epsilon=EPS)
    grads = pytensor.grad(None, [x, g, b], known_grads={out: dy})
    return {
        "inference": pytensor.function([x], test_out, mode="JAX"),
        "training forward": pytensor.function([x], out, mode="JAX"),
        "training forward+backward": pytensor.function([x, dy], [out, *grads], mode="JAX"),
    }


def median_ms(fn, args, reps: int) -> float:
    import jax

    for _ in range(3):
        jax.block_until_ready(fn(*args))
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def rows(key: str, reps: int) -> list[str]:
    import jax

    case = Case(*SHAPES[key])
    data = {"x": case.x, "dy": case.dy}
    nbytes = case.x.nbytes
    xd = jax.device_put(case.x)
    copy_ms = median_ms(jax.jit(lambda a: a + 1), (xd,), reps)
    roof = 2 * nbytes / (copy_ms * 1e-3) / 1e9
    out = [f"| {key} | copy x + 1 (roof) | {copy_ms:.3f} | {roof:.1f} | 1.00 | - |"]
    for name, fn in graphs(case).items():
        host = [
            data[v.name] if s[0] is None else s[0]
            for v, s in zip(fn.maker.fgraph.inputs, fn.vm.inputs, strict=True)
        ]
        device = [jax.device_put(a) for a in host]
        ms = median_ms(fn.vm.jit_fn, device, reps)
        names = [v.name for v in fn.maker.fgraph.inputs if v.name in data]
        call_ms = median_ms(lambda *a, fn=fn: fn(*a), [data[n] for n in names], reps)
        gbs = LEAST[name] * nbytes / (ms * 1e-3) / 1e9
        out.append(f"| {key} | {name} | {ms:.3f} | {gbs:.1f} | {gbs / roof:.2f} | {call_ms:.3f} |")
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    args = parser.parse_args(argv)
    import jax

    device = jax.devices()[0]
    print(f"device: {device.platform} {device.device_kind}, jax {jax.__version__}; float32")
    print("| shape | graph | kernel ms | GB/s (least traffic) | / copy | pytensor call ms |")
    print("|---|---|---|---|---|---|")
    for key in args.shapes:
        for row in rows(key, args.reps):
            print(row, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
