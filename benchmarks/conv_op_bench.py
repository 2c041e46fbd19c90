"""Time one convolution's three Ops (forward, input and filter gradient) beside PyTorch CPU.

The shapes are the convolutions of ``net_bench.py``'s networks, by name:
``dcgan3`` (the DCGAN's worst: 4x4 stride 2 between 64x128x8x8 and
64x256x4x4, also the generator's first transposed convolution), ``dcgan2``,
``dcgan1``, ``res-s2`` (ResNet-20's first stride-2 3x3), ``res-32``,
``res-16``, ``res-8`` (its stride-1 3x3 at 32x32, 16x16 and 8x8).  Each Op
is compiled alone in the default mode (Numba, our thread policy per call)
and timed against ``torch.nn.functional.conv2d`` /
``torch.nn.grad.conv2d_input`` / ``conv2d_weight`` with ``--threads``
threads, medians of wall time and of process CPU time (CPU time is the
steadier number on a shared machine).  PyTorch runs in a child process
and the two alternate call by call: in one process, PyTorch's OpenMP
threads spin after each of its calls and took a core from ours (res-8's
forward pass: 7.2 ms in one process, 3.4 ms alone); and each call waits
``PAUSE`` first, so that neither side's threads are still spinning from
the other's call (our thread policy counts them as load and ran on one
thread).  The results are checked against each other.

The table is also written as JSON (``--json``, default
``benchmarks/results/conv_op_bench.json``), from which
``benchmarks/report.py`` makes ``benchmarks/results/conv_op_bench.md``.

Usage::

    python benchmarks/conv_op_bench.py [dcgan3 ...] [--reps 9] [--threads 2] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

# longer than an OpenMP runtime's spin after a call (libgomp: well under 10 ms)
PAUSE = 0.03

# name: (input shape, filter shape, stride, pad)
CASES = {
    "dcgan3": ((64, 128, 8, 8), (256, 128, 4, 4), 2, 1),
    "dcgan2": ((64, 64, 16, 16), (128, 64, 4, 4), 2, 1),
    "dcgan1": ((64, 3, 32, 32), (64, 3, 4, 4), 2, 1),
    "res-s2": ((128, 16, 32, 32), (32, 16, 3, 3), 2, 1),
    "res-32": ((128, 16, 32, 32), (16, 16, 3, 3), 1, 1),
    "res-16": ((128, 32, 16, 16), (32, 32, 3, 3), 1, 1),
    "res-8": ((128, 64, 8, 8), (64, 64, 3, 3), 1, 1),
}


def build_ours(xs, ks, stride, pad):
    """Three compiled functions: forward(x, w), grad_inputs(w, dy), grad_weights(x, dy)."""
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.ops.conv import conv2d, conv2d_grad_wrt_inputs, conv2d_grad_wrt_weights

    x = pt.tensor4("x", dtype="float32", shape=xs)
    w = pt.tensor4("w", dtype="float32", shape=ks)
    params = {"border_mode": (pad, pad), "subsample": (stride, stride), "filter_flip": False}
    y = conv2d(x, w, **params)
    dy = pt.tensor4("dy", dtype="float32", shape=y.type.shape)
    gx = conv2d_grad_wrt_inputs(dy, w, xs, **params)
    gw = conv2d_grad_wrt_weights(x, dy, ks, **params)
    return (
        pytensor.function([x, w], y),
        pytensor.function([w, dy], gx),
        pytensor.function([x, dy], gw),
    )


OPS = ("forward", "grad_inputs", "grad_weights")


def case_arrays(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``x``, ``w`` and ``dy`` of case ``name``: the same in both processes."""
    xs, ks, stride, pad = CASES[name]
    rng = np.random.default_rng(list(CASES).index(name))
    ho, wo = ((n + 2 * pad - k) // stride + 1 for n, k in zip(xs[2:], ks[2:], strict=True))
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ks, dtype=np.float32)
    dy = rng.standard_normal((xs[0], ks[0], ho, wo), dtype=np.float32)
    return x, w, dy


def torch_ops(name: str) -> dict:
    import torch

    xs, ks, stride, pad = CASES[name]
    tx, tw, tdy = (torch.from_numpy(a) for a in case_arrays(name))
    tf = torch.nn.functional
    return {
        "forward": lambda: tf.conv2d(tx, tw, stride=stride, padding=pad),
        "grad_inputs": lambda: torch.nn.grad.conv2d_input(xs, tw, tdy, stride=stride, padding=pad),
        "grad_weights": lambda: torch.nn.grad.conv2d_weight(
            tx, ks, tdy, stride=stride, padding=pad
        ),
    }


def torch_worker(threads: int) -> None:
    """The child process: ``case op`` on stdin runs one call and answers ``wall cpu``;
    ``case op path`` also saves the call's result to ``path`` (``.npy``)."""
    import torch

    torch.set_num_threads(threads)
    ops: dict = {}
    print(torch.__version__, flush=True)
    for line in sys.stdin:
        name, op, *save = line.split()
        if name not in ops:
            ops[name] = torch_ops(name)
        fn = ops[name][op]
        c0, t0 = time.process_time(), time.perf_counter()
        result = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if save:
            np.save(save[0], result.numpy())
        print(f"{wall} {cpu}", flush=True)


class Torch:
    """PyTorch in a child process, one call per request."""

    def __init__(self, threads: int):
        cmd = [sys.executable, __file__, "--_torch-worker", "--threads", str(threads)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.version = self._read()

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("the PyTorch worker died")
        return line.strip()

    def call(self, name: str, op: str, save: str = "") -> tuple[float, float]:
        self.proc.stdin.write(f"{name} {op} {save}\n")
        self.proc.stdin.flush()
        wall, cpu = self._read().split()
        return float(wall), float(cpu)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def bench_case(name: str, reps: int, torch: Torch, scratch: str) -> list[dict]:
    """Print one line per Op of case ``name``: medians of ``reps`` alternated calls.

    Returns the lines as records (``"table"`` left to the caller).
    """
    xs, ks, stride, pad = CASES[name]
    fwd, gin, gwt = build_ours(xs, ks, stride, pad)
    x, w, dy = case_arrays(name)
    ours_ops = {"forward": lambda: fwd(x, w), "grad_inputs": lambda: gin(w, dy),
                "grad_weights": lambda: gwt(x, dy)}  # fmt: skip
    flop = 2.0 * np.prod(dy.shape) * np.prod(ks[1:]) / 1e9
    records = []
    for op in OPS:
        ours = ours_ops[op]
        path = os.path.join(scratch, f"{name}-{op}.npy")
        torch.call(name, op, path)
        a, b = np.asarray(ours()), np.load(path)
        err = float(np.abs(a - b).max() / np.abs(b).max())
        if err > 1e-4:
            raise RuntimeError(f"{name} {op}: ours and torch differ (relative {err:.1e})")
        wall = {"ours": [], "torch": []}
        cpu = {"ours": [], "torch": []}
        for rep in range(reps):
            for who in ("ours", "torch")[:: 1 if rep % 2 else -1]:
                time.sleep(PAUSE)
                if who == "torch":
                    t, c = torch.call(name, op)
                else:
                    c0, t0 = time.process_time(), time.perf_counter()
                    ours()
                    t, c = time.perf_counter() - t0, time.process_time() - c0
                wall[who].append(t)
                cpu[who].append(c)
        mw = {k: 1e3 * float(np.median(v)) for k, v in wall.items()}
        mc = {k: 1e3 * float(np.median(v)) for k, v in cpu.items()}
        print(
            f"{name:<8} {op:<13} {flop:>6.2f} {mw['ours']:>8.1f} {mw['torch']:>9.1f} "
            f"{mw['ours'] / mw['torch']:>5.2f}x {mc['ours']:>9.1f} {mc['torch']:>10.1f} "
            f"{mc['ours'] / mc['torch']:>8.2f}x",
            flush=True,
        )
        records.append(
            {
                "case": name,
                "op": op,
                "GFLOP": float(flop),
                "ours ms": mw["ours"],
                "torch ms": mw["torch"],
                "ratio": mw["ours"] / mw["torch"],
                "ours cpu ms": mc["ours"],
                "torch cpu ms": mc["torch"],
                "cpu ratio": mc["ours"] / mc["torch"],
            }
        )
    return records


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    # checked below, not with ``choices``: argparse tests an empty list
    # (or a list default) against the choices as one value and refuses it
    parser.add_argument("cases", nargs="*", help=f"default: dcgan3; of {', '.join(CASES)}")
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default benchmarks/results/conv_op_bench.json)",
    )
    parser.add_argument("--_torch-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        parser.error(f"unknown case(s) {', '.join(unknown)}: expected some of {', '.join(CASES)}")
    if args._torch_worker:
        torch_worker(args.threads)
        return 0

    import tempfile

    cases = args.cases or ["dcgan3"]
    torch = Torch(args.threads)
    load_before = os.getloadavg()
    print(f"load average before: {load_before}; torch {torch.version} in its own process, "
          f"{args.threads} threads; medians of {args.reps} alternated calls")  # fmt: skip
    title = (
        f"torch {torch.version} in its own process, {args.threads} threads; "
        f"medians of {args.reps} alternated calls (ms: wall; cpu: process CPU time)"
    )
    records = []
    print(f"{'case':<8} {'op':<13} {'GFLOP':>6} {'ours ms':>8} {'torch ms':>9} {'ratio':>6} "
          f"{'ours cpu':>9} {'torch cpu':>10} {'cpu ratio':>9}")  # fmt: skip
    try:
        with tempfile.TemporaryDirectory() as scratch:
            for name in cases:
                for row in bench_case(name, args.reps, torch, scratch):
                    records.append({"table": title, **row})
    finally:
        torch.close()
    load_after = os.getloadavg()
    print(f"load average after: {load_after}")
    from _results import write

    before, after = (" ".join(f"{v:.2f}" for v in la) for la in (load_before, load_after))
    load = f"load average before: {before}; after: {after}"
    print(f"results: {write('conv_op_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
