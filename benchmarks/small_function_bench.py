"""Seconds from ``theano.function`` to the first result, for small graphs, cold and warm.

Code that builds many small functions (Keras's Theano backend, symbolic
checks, debugging) pays each one's compile.  For each graph below, in each
mode, a fresh subprocess builds the graph through ``lasagne_bn_compat``'s
``theano``, calls ``theano.function`` and evaluates it once; the row gives
the seconds of that (compile plus first call, since the Numba backend
compiles on the first call) and the child's CPU seconds.  ``cold`` runs
with empty PyTensor and Numba caches (a fresh compile directory and
``NUMBA_CACHE_DIR``); ``warm`` runs again on the caches the cold child left.

Graphs:

- ``elemwise``: ``exp(x) * 2 + 1`` (a handful of nodes);
- ``dense_softmax``: a dense layer, softmax and the cross-entropy, with the
  gradient (Keras's backend tests build graphs of this size);
- ``mlp_step``: a two-layer classifier's SGD step with updates (tens of
  nodes).

Modes: ``default``, what ``theano.function`` compiles with when the script
names no mode (graphs of at most ``SMALL_GRAPH_NODES`` nodes run uncompiled);
``numba``, the compiled default mode every graph got before
(``lasagne_bn.ops.numba.linker.big_graph_mode``).

Usage::

    python benchmarks/small_function_bench.py
    python benchmarks/small_function_bench.py --graphs elemwise --modes default \\
        --json /tmp/small.json                    # smoke test
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

GRAPHS = ("elemwise", "dense_softmax", "mlp_step")
MODES = ("default", "numba")

CHILD = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import lasagne_bn_compat
lasagne_bn_compat.install(theano_flags="floatX=float32")
import theano
import theano.tensor as T
graph, mode = sys.argv[1], sys.argv[2]
rng = np.random.RandomState(0)
x = T.matrix("x")
xv = rng.standard_normal((8, 20)).astype("float32")
updates, args = [], [xv]
if graph == "elemwise":
    inputs, out = [x], T.exp(x) * 2 + 1
else:
    y = T.ivector("y")
    W = theano.shared(rng.standard_normal((20, 10)).astype("float32"))
    b = theano.shared(np.zeros(10, "float32"))
    params = [W, b]
    if graph == "dense_softmax":
        p = T.nnet.softmax(T.dot(x, W) + b)
    else:
        W2 = theano.shared(rng.standard_normal((10, 5)).astype("float32"))
        params.append(W2)
        p = T.nnet.softmax(T.dot(T.nnet.relu(T.dot(x, W) + b), W2))
    loss = T.nnet.categorical_crossentropy(p, y).mean()
    grads = T.grad(loss, params)
    if graph == "dense_softmax":
        out = [loss, *grads]
    else:
        out = loss
        updates = [(v, v - np.float32(0.1) * g) for v, g in zip(params, grads)]
    inputs, args = [x, y], [xv, (np.arange(8) % 5).astype("int32")]
kwargs = {}
if mode == "numba":
    from lasagne_bn.ops.numba.linker import big_graph_mode
    kwargs["mode"] = big_graph_mode()
built = time.perf_counter()
f = theano.function(inputs, out, updates=updates, **kwargs)
f(*args)
done = time.perf_counter()
print(json.dumps({"nodes": len(f.maker.fgraph.apply_nodes), "seconds": done - built,
                  "import_s": built - start}))
"""


def run_child(graph: str, mode: str, env: dict) -> dict:
    """One child: its JSON line, and its CPU seconds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, graph, mode],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{graph}/{mode} failed:\n{proc.stderr[-2000:]}")
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    row["cpu_s"] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graphs", nargs="+", choices=GRAPHS, default=list(GRAPHS))
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default "
        "benchmarks/results/small_function_bench.json)",
    )
    args = parser.parse_args(argv)
    load = f"load average {os.getloadavg()[0]:.2f} at the start"
    records = []
    for mode in args.modes:
        for graph in args.graphs:
            with tempfile.TemporaryDirectory(prefix="lbn-small-") as caches:
                env = dict(os.environ)
                env["PYTENSOR_FLAGS"] = f"base_compiledir={caches}/pytensor"
                env["NUMBA_CACHE_DIR"] = f"{caches}/numba"
                for cache in ("cold", "warm"):
                    start = time.perf_counter()
                    row = run_child(graph, mode, env)
                    records.append(
                        {
                            "table": "theano.function and its first call, "
                            "one fresh subprocess per row",
                            "graph": graph,
                            "mode": mode,
                            "caches": cache,
                            "nodes": row["nodes"],
                            "compile and first call s": row["seconds"],
                            "child CPU s": row["cpu_s"],
                            "child wall s": time.perf_counter() - start,
                        }
                    )
                    print(
                        f"{graph:14s} {mode:8s} {cache}: {row['seconds']:.3f} s "
                        f"({row['nodes']} nodes, child {row['cpu_s']:.1f} CPU-s)",
                        flush=True,
                    )
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _results import write

    print(f"results: {write('small_function_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
