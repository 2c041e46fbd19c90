"""Time a conv -> batch_norm -> rectify block, forward + backward, beside PyTorch CPU.

The block is what a ResNet stage repeats: a 3x3 'same' convolution without
bias (batch 32, 64 -> 64 channels, 56x56, float32), batch normalization with
batch statistics over (batch, rows, cols), and a rectifier; one step is the
forward pass and the gradients w.r.t. the input, the filters, gamma and beta.

Our graph runs in PyTensor's default mode (Numba) and in JAX; the anchor is
PyTorch on the CPU with 2 threads, run in a worker process (its own venv,
``--torch-python``) that times one step per request.  Repetitions are
interleaved (one step of each implementation per round, order rotated), so
a change in machine load hits all of them alike; the table shows medians.

The tables are also written as JSON (``--json``, default
``benchmarks/results/conv_bench.json``), from which ``benchmarks/report.py``
makes ``benchmarks/results/conv_bench.md``.

Usage::

    python benchmarks/conv_bench.py [--reps 15] [--torch-python /work/bench-venv/bin/python]
                                    [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import time

import numpy as np

SHAPE = (32, 64, 56, 56)
N_FILTERS = 64
KSIZE = 3
EPS = 1e-4
THREADS = 2

TORCH_WORKER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    import torch
    torch.set_num_threads(int(sys.argv[1]))
    data = np.load(sys.argv[2])
    x = torch.from_numpy(data["x"]).requires_grad_(True)
    w = torch.from_numpy(data["w_xcorr"]).requires_grad_(True)
    gamma = torch.from_numpy(data["gamma"]).requires_grad_(True)
    beta = torch.from_numpy(data["beta"]).requires_grad_(True)
    r = torch.from_numpy(data["r"])
    eps = float(data["eps"])

    def step():
        y = torch.nn.functional.conv2d(x, w, padding=w.shape[-1] // 2)
        y = torch.nn.functional.batch_norm(y, None, None, gamma, beta, training=True, eps=eps)
        loss = (torch.relu(y) * r).sum()
        for p in (x, w, gamma, beta):
            p.grad = None
        loss.backward()
        return loss

    loss = step()
    np.savez(sys.argv[3], loss=loss.detach().numpy(), gx=x.grad.numpy(), gw=w.grad.numpy(),
             gg=gamma.grad.numpy(), gb=beta.grad.numpy())
    print("ready " + torch.__version__, flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        t0 = time.perf_counter()
        step()
        print(repr(time.perf_counter() - t0), flush=True)
    """
)


def build_ours(mode):
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.ops import batch_normalization_train
    from lasagne_bn.ops.conv import conv2d

    x = pt.tensor4("x", dtype="float32", shape=SHAPE)
    w = pt.tensor4("w", dtype="float32", shape=(N_FILTERS, SHAPE[1], KSIZE, KSIZE))
    gamma = pt.vector("gamma", dtype="float32", shape=(N_FILTERS,))
    beta = pt.vector("beta", dtype="float32", shape=(N_FILTERS,))
    r = pt.tensor4("r", dtype="float32")
    y = conv2d(x, w, border_mode="half")  # filter_flip=True: a true convolution
    y, _, _ = batch_normalization_train(y, gamma, beta, axes="spatial", epsilon=EPS)
    loss = (pt.maximum(y, 0) * r).sum()
    grads = pytensor.grad(loss, [x, w, gamma, beta])
    return pytensor.function([x, w, gamma, beta, r], [loss, *grads], mode=mode)


def flops() -> float:
    n, c, h, wd = SHAPE
    conv = 2.0 * n * N_FILTERS * c * KSIZE * KSIZE * h * wd
    return 3 * conv  # forward, input gradient, filter gradient


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument(
        "--torch-python",
        default=os.environ.get("LASAGNE_BN_TORCH_PYTHON", "/work/bench-venv/bin/python"),
        help="python of a venv with torch (the anchor); '' to skip it",
    )
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the tables as JSON (default benchmarks/results/conv_bench.json)",
    )
    args = parser.parse_args(argv)
    # The published figures were measured with freed buffers recycled, which
    # importing lasagne_bn.ops did until issue 16; now it is this explicit call.
    from lasagne_bn.ops import recycle_host_memory

    recycle_host_memory()

    rng = np.random.default_rng(0)
    x = rng.standard_normal(SHAPE, dtype=np.float32)
    w = (rng.standard_normal((N_FILTERS, SHAPE[1], KSIZE, KSIZE)) * 0.05).astype(np.float32)
    gamma = (1 + 0.1 * rng.standard_normal(N_FILTERS)).astype(np.float32)
    beta = (0.1 * rng.standard_normal(N_FILTERS)).astype(np.float32)
    r = rng.standard_normal((SHAPE[0], N_FILTERS) + SHAPE[2:], dtype=np.float32)
    inputs = (x, w, gamma, beta, r)

    load_before = os.getloadavg()
    print(f"load average before: {load_before}  (cores: {os.cpu_count()})")
    impls = {}
    t0 = time.perf_counter()
    impls["lasagne_bn default (Numba)"] = build_ours(None)
    if not args.no_jax:
        impls["lasagne_bn JAX"] = build_ours("JAX")
    reference = None
    results = {}
    for name, fn in impls.items():
        out = fn(*inputs)  # compile / warm
        results[name] = [np.asarray(o) for o in out]
        reference = reference or name
    print(f"compiled and warmed ours in {time.perf_counter() - t0:.1f} s")

    worker = None
    if args.torch_python:
        import tempfile

        tmp = tempfile.mkdtemp(prefix="conv_bench_")
        data_path = os.path.join(tmp, "data.npz")
        out_path = os.path.join(tmp, "torch_out.npz")
        np.savez(
            data_path,
            x=x,
            w_xcorr=np.ascontiguousarray(w[:, :, ::-1, ::-1]),  # torch cross-correlates
            gamma=gamma,
            beta=beta,
            r=r,
            eps=EPS,
        )
        env = dict(os.environ, OMP_NUM_THREADS=str(THREADS))
        worker = subprocess.Popen(
            [args.torch_python, "-c", TORCH_WORKER, str(THREADS), data_path, out_path],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        ready = worker.stdout.readline().strip()
        if not ready.startswith("ready"):
            raise RuntimeError(f"torch worker failed to start: {ready!r}")
        torch_version = ready.split()[1]
        t = np.load(out_path)
        results[f"PyTorch {torch_version} CPU"] = [
            t["loss"],
            t["gx"],
            np.ascontiguousarray(t["gw"][:, :, ::-1, ::-1]),
            t["gg"],
            t["gb"],
        ]

        def torch_step():
            worker.stdin.write("run\n")
            worker.stdin.flush()
            return float(worker.stdout.readline())

        anchor = f"PyTorch {torch_version} CPU"
    else:
        anchor = None

    # agreement with the first implementation (float32 rounding expected)
    names = list(results)
    agreement = []
    for name in names[1:]:
        errs = [
            float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
            for a, b in zip(results[name], results[names[0]], strict=True)
        ]
        print(f"max relative difference, {name} vs {names[0]}: {max(errs):.2e}")
        agreement.append(
            {
                "table": f"max relative difference of the outputs and gradients, vs {names[0]}",
                "implementation": name,
                "max relative difference": max(errs),
            }
        )

    def timed(fn):
        def run():
            t0 = time.perf_counter()
            for out in fn(*inputs):
                np.asarray(out)  # JAX dispatches asynchronously: wait for the values
            return time.perf_counter() - t0

        return run

    runners = {name: timed(fn) for name, fn in impls.items()}
    if worker is not None:
        runners[anchor] = torch_step
    for _ in range(args.warmup):
        for run in runners.values():
            run()
    times = {name: [] for name in runners}
    order = list(runners)
    for rep in range(args.reps):
        k = rep % len(order)
        for name in order[k:] + order[:k]:
            times[name].append(runners[name]())
    if worker is not None:
        worker.stdin.write("stop\n")
        worker.stdin.flush()
        worker.wait(timeout=60)

    load_after = os.getloadavg()
    med = {name: float(np.median(v)) for name, v in times.items()}
    gflop = flops() / 1e9
    print()
    title = (
        f"conv{KSIZE}x{KSIZE}(pad same, no bias) -> batch_norm(spatial) -> rectify, "
        f"input {SHAPE} float32, forward + backward (dx, dW, dgamma, dbeta); "
        f"{args.reps} interleaved reps, medians; {THREADS} threads"
    )
    print(title)
    records = []
    # the console's footnote, in the title: the table is what report.py shows
    timing_title = f"{title}; GFLOP/s counts the 3 convolutions only ({gflop:.1f} GFLOP per step)"
    header = (
        f"{'implementation':<30} {'median ms':>10} {'min ms':>9} {'GFLOP/s':>8} {'vs torch':>9}"
    )
    print(header)
    print("-" * len(header))
    for name in order:
        ratio = f"{med[name] / med[anchor]:.2f}x" if anchor else "-"
        print(
            f"{name:<30} {med[name] * 1e3:>10.1f} {min(times[name]) * 1e3:>9.1f} "
            f"{gflop / med[name]:>8.1f} {ratio:>9}"
        )
        records.append(
            {
                "table": timing_title,
                "implementation": name,
                "median ms": med[name] * 1e3,
                "min ms": min(times[name]) * 1e3,
                "GFLOP/s": gflop / med[name],
                "vs torch": med[name] / med[anchor] if anchor else None,
            }
        )
    print(f"(GFLOP/s counts the 3 convolutions only: {gflop:.1f} GFLOP per step)")
    print(f"load average after: {load_after}")
    records += agreement  # after the timings, as the less read table
    from _results import write

    before, after = (" ".join(f"{v:.2f}" for v in la) for la in (load_before, load_after))
    load = f"load average before: {before}; after: {after}"
    print(f"results: {write('conv_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
