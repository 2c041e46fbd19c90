"""Where a second thread starts to pay, per kernel family (sets the *_MIN_WORK thresholds).

Calls the kernels' C entry points directly (ctypes; the same pointer the
compiled graphs call) with the thread count fixed by
``lasagne_bn.ops.numba.threads.set_kernel_threads``, one thread against
``numba.get_num_threads()`` threads, interleaved, over a range of sizes:

- warm: back-to-back calls (a training loop whose other ops also keep the
  pool awake);
- cold: a pause of ``--gap`` ms before each call, so Numba's workers have
  gone to sleep and the launch has to wake them.

Prints per size the median µs per call and the ratio many / one; the
thresholds in ``lasagne_bn/ops/numba/threads.py`` sit where the cold ratio drops below 1.

Run:  python benchmarks/thread_threshold.py [--family bn conv pool] [--reps 15]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import time

import numba
import numpy as np

from lasagne_bn.ops.numba import bn as nb
from lasagne_bn.ops.numba import conv as nc
from lasagne_bn.ops.numba import pool as npool
from lasagne_bn.ops.numba import threads as nt

P = ctypes.c_void_p
N = ctypes.c_ssize_t
D = ctypes.c_double
I32 = ctypes.c_int32


def ptr(a: np.ndarray) -> int:
    return a.ctypes.data


def bn_calls(shape):
    """(name, callable) for the three batch-norm entry points on an (A, C, B) float32 input."""
    A, C, B = shape
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    dy = rng.standard_normal(shape, dtype=np.float32)
    out = np.empty_like(x)
    dx = np.empty_like(x)
    stats3 = np.zeros((3, C))
    stats7 = np.zeros((7, C))
    stats7[0] = 1.0
    stats7[2] = 1.0
    stats4 = np.ones((4, C))
    gamma = np.ones(C)
    beta = np.zeros(C)
    fwd = ctypes.CFUNCTYPE(I32, P, N, N, N, P, P, D, P, P)(
        nb.ENTRY_POINTS.address("train_forward", "float32")
    )
    bwd = ctypes.CFUNCTYPE(I32, P, P, N, N, N, P, P)(
        nb.ENTRY_POINTS.address("train_backward", "float32")
    )
    inf = ctypes.CFUNCTYPE(I32, P, N, N, N, P, D, P)(
        nb.ENTRY_POINTS.address("inference", "float32")
    )
    args_f = (ptr(x), A, C, B, ptr(gamma), ptr(beta), 1e-4, ptr(out), ptr(stats3))
    args_b = (ptr(x), ptr(dy), A, C, B, ptr(stats7), ptr(dx))
    args_i = (ptr(x), A, C, B, ptr(stats4), 1e-4, ptr(out))
    keep = (x, dy, out, dx, stats3, stats7, stats4, gamma, beta)
    return [
        ("train_forward", lambda: fwd(*args_f), keep),
        ("train_backward", lambda: bwd(*args_b), keep),
        ("inference", lambda: inf(*args_i), keep),
    ]


def conv_calls(n, c, hw):
    """3x3 'same' convolution, c -> c channels, forward and both gradients."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, c, hw, hw), dtype=np.float32)
    k = rng.standard_normal((c, c, 3, 3), dtype=np.float32)
    out = np.empty_like(x)
    dims = np.array([n, c, hw, hw, c, c, 3, 3, hw, hw, 1, 1, 1, 1, 1, 1, 1, 1, 1, 8], np.int64)
    sig = ctypes.CFUNCTYPE(I32, P, P, P, P)
    calls = []
    for name, a, b, o in (
        ("conv_forward", x, k, out),
        ("conv_grad_inputs", k, out, x.copy()),
        ("conv_grad_weights", x, out, k.copy()),
    ):
        f = sig(nc.ENTRY_POINTS.address(name, "float32"))
        args = (ptr(a), ptr(b), ptr(o), ptr(dims))
        calls.append((name, lambda f=f, args=args: f(*args), (a, b, o, dims)))
    return calls


def pool_calls(planes, hw):
    """2x2 max pooling, stride 2, forward and gradient."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((planes, 1, hw, hw), dtype=np.float32)
    o = hw // 2
    out = np.empty((planes, 1, o, o), dtype=np.float32)
    gx = np.empty_like(x)
    dims = np.array([planes, 1, hw, hw, 1, o, o, 1, 2, 2, 1, 2, 2, 0, 0, 0, 0], np.int64)
    fwd = ctypes.CFUNCTYPE(I32, P, P, P)(npool.ENTRY_POINTS.address("pool_forward", "float32"))
    grad = ctypes.CFUNCTYPE(I32, P, P, P, P)(
        npool.ENTRY_POINTS.address("max_pool_grad", "float32")
    )
    keep = (x, out, gx, dims)
    return [
        ("pool_forward", lambda: fwd(ptr(x), ptr(out), ptr(dims)), keep),
        ("max_pool_grad", lambda: grad(ptr(x), ptr(out), ptr(gx), ptr(dims)), keep),
    ]


def time_call(call, threads, gap_s, reps):
    """Median µs per call with the thread count fixed to ``threads``."""
    nt.set_kernel_threads(threads)
    try:
        call()
        t = time.perf_counter()
        call()
        single = time.perf_counter() - t
        calls = 1 if gap_s else max(1, min(500, int(0.005 / max(single, 1e-7))))
        samples = []
        for _ in range(reps):
            if gap_s:
                time.sleep(gap_s)
            t = time.perf_counter()
            for _ in range(calls):
                call()
            samples.append((time.perf_counter() - t) / calls * 1e6)
        return statistics.median(samples)
    finally:
        nt.set_kernel_threads("auto")


def measure(label, work, calls, many, gap_s, reps):
    for name, call, _keep in calls:
        row = [f"{label:22s}", f"{name:18s}", f"work {work:>11d}"]
        for mode, gap in (("warm", 0.0), ("cold", gap_s)):
            # interleaved one, many, one, many; the better of each pair of medians
            one, par = [], []
            for _ in range(2):
                one.append(time_call(call, 1, gap, reps))
                par.append(time_call(call, many, gap, reps))
            t1, tn = min(one), min(par)
            row.append(f"{mode}: 1t {t1:9.1f} {many}t {tn:9.1f} ratio {tn / t1:5.2f}")
        print(" | ".join(row), flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", nargs="*", default=["bn", "conv", "pool"])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--gap", type=float, default=30.0, help="ms pause before cold calls")
    args = parser.parse_args(argv)
    # The published figures were measured with freed buffers recycled, which
    # importing lasagne_bn.ops did until issue 16; now it is this explicit call.
    from lasagne_bn.ops import recycle_host_memory

    recycle_host_memory()
    many = numba.get_num_threads()
    gap_s = args.gap / 1e3
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(f"numba threads {many}, load average {load}")
    if "bn" in args.family:
        for a, c, b in [
            (8, 16, 64),
            (8, 16, 256),
            (16, 32, 256),
            (32, 64, 128),
            (32, 64, 256),
            (64, 64, 256),
            (64, 64, 784),
        ]:
            measure(f"bn ({a}, {c}, {b})", a * c * b, bn_calls((a, c, b)), many, gap_s, args.reps)
        for a, c in [(32, 256), (64, 512), (128, 512), (128, 1024), (256, 1024), (256, 4096)]:
            measure(f"bn ({a}, {c}, 1)", a * c, bn_calls((a, c, 1)), many, gap_s, args.reps)
    if "conv" in args.family:
        for n, c, hw in [
            (1, 8, 8),
            (2, 8, 16),
            (4, 16, 16),
            (8, 16, 16),
            (8, 32, 16),
            (16, 32, 32),
        ]:
            work = n * c * hw * hw * c * 9
            measure(
                f"conv ({n}, {c}, {hw}, {hw})", work, conv_calls(n, c, hw), many, gap_s, args.reps
            )
    if "pool" in args.family:
        for planes, hw in [(16, 16), (64, 16), (64, 32), (256, 32), (256, 64), (1024, 64)]:
            work = planes * hw * hw
            measure(
                f"pool ({planes}, {hw}, {hw})",
                work,
                pool_calls(planes, hw),
                many,
                gap_s,
                args.reps,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
