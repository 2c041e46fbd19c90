"""Achieved memory bandwidth of the JAX-mode batch-norm kernels, against a plain copy.

For each of benchmarks/bn_bench.py's shapes (float32) it compiles, through
``pytensor.function(mode="JAX")``, the training forward, forward+backward
and inference graphs, and times the jitted XLA function itself on arrays
already on the device (``fn.vm.jit_fn``: what the kernels achieve, without
PyTensor's per-call conversion of NumPy inputs, which the last column
times).  Bandwidth is the least traffic each graph must move (arrays the
size of ``x``: inference 2, training forward 3, forward+backward 8; see
tests/ops/test_jax_traffic.py) over the time; the roof is ``x + 1``
(read x, write y) on the same device.  Prints one markdown table, and
writes it as JSON (``--json``, default ``benchmarks/results/jax_bandwidth.json``),
from which ``benchmarks/report.py`` makes ``benchmarks/results/jax_bandwidth.md``.

Run:  python benchmarks/jax_bandwidth.py [--reps 20] [--shapes "(8, 16, 32, 32)"] [--json PATH]
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


def rows(key: str, reps: int) -> list[dict]:
    """The copy (the roof) and the three graphs on shape ``key``, one record each."""
    import jax

    case = Case(*SHAPES[key])
    data = {"x": case.x, "dy": case.dy}
    nbytes = case.x.nbytes
    xd = jax.device_put(case.x)
    copy_ms = median_ms(jax.jit(lambda a: a + 1), (xd,), reps)
    roof = 2 * nbytes / (copy_ms * 1e-3) / 1e9
    out = [row(key, "copy x + 1 (roof)", copy_ms, roof, 1.0, None)]
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
        out.append(row(key, name, ms, gbs, gbs / roof, call_ms))
    return out


def row(key, graph, kernel_ms, gbs, over_copy, call_ms) -> dict:
    return {
        "shape": key,
        "graph": graph,
        "kernel ms": kernel_ms,
        "GB/s (least traffic)": gbs,
        "/ copy": over_copy,
        "pytensor call ms": call_ms,
    }


def markdown(rec: dict) -> str:
    """A record as the printed table's row."""
    call = "-" if rec["pytensor call ms"] is None else f"{rec['pytensor call ms']:.3f}"
    return (
        f"| {rec['shape']} | {rec['graph']} | {rec['kernel ms']:.3f} "
        f"| {rec['GB/s (least traffic)']:.1f} | {rec['/ copy']:.2f} | {call} |"
    )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES))
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default benchmarks/results/jax_bandwidth.json)",
    )
    args = parser.parse_args(argv)
    import jax

    device = jax.devices()[0]
    heading = f"device: {device.platform} {device.device_kind}, jax {jax.__version__}; float32"
    print(heading)
    print("| shape | graph | kernel ms | GB/s (least traffic) | / copy | pytensor call ms |")
    print("|---|---|---|---|---|---|")
    title = f"{heading}; medians of {args.reps}"
    records = []
    for key in args.shapes:
        for rec in rows(key, args.reps):
            print(markdown(rec), flush=True)
            records.append({"table": title, **rec})
    from _results import write

    print(f"results: {write('jax_bandwidth', records, path=args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
