"""Inference with batch norm folded into the convolutions, against the plain graph.

A VGG-style stack (``--blocks`` x ``batch_norm(Conv2DLayer(3x3, --filters,
rectify))`` on ``--batch`` x ``--filters`` x ``--size``\\ ^2 float32 input),
inference only (``deterministic=True``), timed interleaved in one process:

- plain: the graph as ``get_output`` builds it;
- rewrite: the same graph compiled with ``lasagne_bn.ops.bn_fold_rewrite.folding``
  (the folding rewrite, on a compiled graph, the network untouched);
- layers: the network returned by ``lasagne_bn.layers.fold_batch_norm``.

per mode (default and JAX by default).  Medians in ms and each one's ratio
to plain in the same mode.

The table is also written as JSON (``--json``, default
``benchmarks/results/fold_bench.json``), from which ``benchmarks/report.py``
makes ``benchmarks/results/fold_bench.md``.

Run:  python benchmarks/fold_bench.py [--reps 15] [--modes default jax] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np


def build(batch: int, filters: int, size: int, blocks: int):
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.layers import (
        BatchNormLayer,
        Conv2DLayer,
        InputLayer,
        batch_norm,
        get_all_layers,
    )
    from lasagne_bn.nonlinearities import rectify

    rng = np.random.default_rng(0)
    x = pt.tensor4("x", dtype="float32")
    net = InputLayer((None, filters, size, size), x)
    for _ in range(blocks):
        net = batch_norm(Conv2DLayer(net, filters, 3, pad="same", nonlinearity=rectify))
    for layer in get_all_layers(net):
        if isinstance(layer, BatchNormLayer):
            for p in layer.get_params():
                v = p.get_value()
                low = 0.5 if p.name in ("gamma", "inv_std") else -0.5
                p.set_value(rng.uniform(low, low + 1.0, v.shape).astype(v.dtype))
    xs = rng.standard_normal((batch, filters, size, size)).astype("float32")
    del pytensor
    return x, net, xs


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--filters", type=int, default=64)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--blocks", type=int, default=4)
    parser.add_argument("--modes", nargs="+", default=["default", "jax"])
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default benchmarks/results/fold_bench.json)",
    )
    args = parser.parse_args(argv)
    # The published figures were measured with freed buffers recycled, which
    # importing lasagne_bn.ops did until issue 16; now it is this explicit call.
    from lasagne_bn.ops import recycle_host_memory

    recycle_host_memory()

    import pytensor

    from lasagne_bn.layers import fold_batch_norm, get_output
    from lasagne_bn.ops.bn_fold_rewrite import folding

    x, net, xs = build(args.batch, args.filters, args.size, args.blocks)
    y = get_output(net, deterministic=True)
    y_layers = get_output(fold_batch_norm(net), x, deterministic=True)
    fns = {}
    for mode_name in args.modes:
        mode = None if mode_name == "default" else mode_name.upper()
        fns[mode_name, "plain"] = pytensor.function([x], y, mode=mode)
        fns[mode_name, "rewrite"] = pytensor.function([x], y, mode=folding(mode))
        fns[mode_name, "layers"] = pytensor.function([x], y_layers, mode=mode)
    ref = np.asarray(fns[args.modes[0], "plain"](xs))
    for key, f in fns.items():
        out = np.asarray(f(xs))  # compiles (Numba and JAX compile on the first call)
        err = float(np.max(np.abs(out - ref)) / np.max(np.abs(ref)))
        if err > 1e-4:
            raise SystemExit(f"{key}: folded output differs by {err:.2e} (relative)")
    times = {key: [] for key in fns}
    keys = list(fns)
    for rep in range(args.reps):
        for key in keys[rep % len(keys) :] + keys[: rep % len(keys)]:
            t0 = time.perf_counter()
            np.asarray(fns[key](xs))  # JAX returns before it has computed
            times[key].append(time.perf_counter() - t0)
    load = "load average " + " ".join(f"{v:.2f}" for v in os.getloadavg())
    title = (
        f"{args.blocks} x batch_norm(conv 3x3, {args.filters} filters) on "
        f"({args.batch}, {args.filters}, {args.size}, {args.size}) float32, inference; "
        f"medians of {args.reps} interleaved calls; {load}"
    )
    print(title)
    print("| mode | graph | ms | / plain |")
    print("|---|---|---|---|")
    records = []
    for (mode_name, kind), ts in times.items():
        ms = statistics.median(ts) * 1e3
        base = statistics.median(times[mode_name, "plain"]) * 1e3
        print(f"| {mode_name} | {kind} | {ms:.2f} | {ms / base:.2f} |")
        records.append(
            {"table": title, "mode": mode_name, "graph": kind, "ms": ms, "/ plain": ms / base}
        )
    from _results import write

    print(f"results: {write('fold_bench', records, load=load, path=args.json)}")


if __name__ == "__main__":
    main()
