"""Time one convolution's three Ops (forward, input and filter gradient) beside PyTorch CPU.

The shapes are the convolutions of ``net_bench.py``'s networks, by name:
``dcgan3`` (the DCGAN's worst: 4x4 stride 2 between 64x128x8x8 and
64x256x4x4, also the generator's first transposed convolution), ``dcgan2``,
``dcgan1``, ``res-s2`` (ResNet-20's first stride-2 3x3), ``res-32``,
``res-8`` (its stride-1 3x3 at 32x32 and 8x8).  Each Op is compiled alone
in the default mode (Numba, our thread policy per call) and timed against
``torch.nn.functional.conv2d`` / ``torch.nn.grad.conv2d_input`` /
``conv2d_weight`` with ``--threads`` threads, interleaved in one process,
medians of wall time and of process CPU time (CPU time is the steadier
number on a shared machine).  The results are checked against each other.

Usage::

    python benchmarks/conv_op_bench.py [dcgan3 ...] [--reps 9] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

# name: (input shape, filter shape, stride, pad)
CASES = {
    "dcgan3": ((64, 128, 8, 8), (256, 128, 4, 4), 2, 1),
    "dcgan2": ((64, 64, 16, 16), (128, 64, 4, 4), 2, 1),
    "dcgan1": ((64, 3, 32, 32), (64, 3, 4, 4), 2, 1),
    "res-s2": ((128, 16, 32, 32), (32, 16, 3, 3), 2, 1),
    "res-32": ((128, 16, 32, 32), (16, 16, 3, 3), 1, 1),
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


def bench_case(name: str, reps: int, rng, torch) -> None:
    """Print one line per Op of case ``name``: medians of ``reps`` interleaved calls."""
    xs, ks, stride, pad = CASES[name]
    fwd, gin, gwt = build_ours(xs, ks, stride, pad)
    x = rng.standard_normal(xs, dtype=np.float32)
    w = rng.standard_normal(ks, dtype=np.float32)
    y = fwd(x, w)
    dy = rng.standard_normal(y.shape, dtype=np.float32)
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    tf = torch.nn.functional
    pairs = {
        "forward": (lambda: fwd(x, w), lambda: tf.conv2d(tx, tw, stride=stride, padding=pad)),
        "grad_inputs": (
            lambda: gin(w, dy),
            lambda: torch.nn.grad.conv2d_input(xs, tw, tdy, stride=stride, padding=pad),
        ),
        "grad_weights": (
            lambda: gwt(x, dy),
            lambda: torch.nn.grad.conv2d_weight(tx, ks, tdy, stride=stride, padding=pad),
        ),
    }
    flop = 2.0 * np.prod(y.shape) * np.prod(ks[1:]) / 1e9
    for op, (ours, theirs) in pairs.items():
        a, b = np.asarray(ours()), theirs().numpy()
        err = float(np.abs(a - b).max() / np.abs(b).max())
        if err > 1e-4:
            raise RuntimeError(f"{name} {op}: ours and torch differ (relative {err:.1e})")
        wall = {"ours": [], "torch": []}
        cpu = {"ours": [], "torch": []}
        for rep in range(reps):
            order = [("ours", ours), ("torch", theirs)][:: 1 if rep % 2 else -1]
            for who, fn in order:
                c0, t0 = time.process_time(), time.perf_counter()
                fn()
                wall[who].append(time.perf_counter() - t0)
                cpu[who].append(time.process_time() - c0)
        mw = {k: 1e3 * float(np.median(v)) for k, v in wall.items()}
        mc = {k: 1e3 * float(np.median(v)) for k, v in cpu.items()}
        print(
            f"{name:<8} {op:<13} {flop:>6.2f} {mw['ours']:>8.1f} {mw['torch']:>9.1f} "
            f"{mw['ours'] / mw['torch']:>5.2f}x {mc['ours']:>9.1f} {mc['torch']:>10.1f} "
            f"{mc['ours'] / mc['torch']:>8.2f}x",
            flush=True,
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="*", default=["dcgan3"], choices=list(CASES))
    parser.add_argument("--reps", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    rng = np.random.default_rng(0)
    print(f"load average before: {os.getloadavg()}; torch {torch.__version__}, "
          f"{args.threads} threads; medians of {args.reps} interleaved reps")  # fmt: skip
    print(f"{'case':<8} {'op':<13} {'GFLOP':>6} {'ours ms':>8} {'torch ms':>9} {'ratio':>6} "
          f"{'ours cpu':>9} {'torch cpu':>10} {'cpu ratio':>9}")  # fmt: skip
    for name in args.cases:
        bench_case(name, args.reps, rng, torch)
    print(f"load average after: {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
