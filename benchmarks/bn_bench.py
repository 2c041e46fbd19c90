"""Batch-norm speed and memory against the anchors, from ONE run.

For each shape it times training forward+backward (output, dx, dgamma, dbeta
from a given output gradient) and inference, for:

- ours: ``lasagne_bn.ops`` in the default mode (Numba), ``C`` (the whole
  graph as one C module), ``CVM`` (C thunks under PyTensor's C VM), ``JAX``,
  ``FAST_COMPILE`` and the python linker without rewrites;
- plain: the same maths as a plain PyTensor graph (mean, var, elementwise,
  ``pytensor.grad``) in the same modes (FAST_COMPILE only with --slow; no
  mode ``C``, whose linker aborts on this graph in PyTensor 3.0.7);
- torch: PyTorch CPU ``torch.nn.functional.batch_norm`` (2 threads); and
  torch+recycle, the same with the glibc allocator settings that the
  ``ours``, ``plain`` and ``floor`` workers make with
  ``lasagne_bn.ops.recycle_host_memory()`` (see
  ``lasagne_bn/ops/host_memory.py``), to show how much of a difference is
  the allocator's;
- flax: a hand-written ``jnp`` version in the style of Flax's BatchNorm
  (``jax.jit``, ``jax.vjp`` for the backward), and flax+recycle, the same
  with the recycling allocator (XLA's CPU buffers come from glibc too);
- floor: a PyTensor function on the same inputs that only adds 1 to ``x``,
  with the recycling allocator: what PyTensor's function call costs in a
  mode before any batch norm (most of a small-shape call: PyTensor checks
  every input in Python on every call);
- bound: bytes each pass must move / measured copy bandwidth.

Each implementation runs in its own worker process (so thread pools do not
fight), the workers are driven interleaved (a rotating order each
repetition) and medians reported; the load average is printed with the table, because these
machines are shared.  ``--memory`` adds the peak extra resident memory of one
training step per implementation, each measured in a fresh subprocess
with glibc's default allocator behaviour (see ``--memory`` below).

``--contend N`` runs N busy-loop processes (one Python ``while True``
each) from before the first worker starts until the last timing ends: a
loaded machine, as when a data loader or a second experiment shares the
cores.  They are killed on the way out, on an error or Ctrl-C too.

The results are written as JSON (``--json``, default
``benchmarks/results/bn_bench.json``), from which ``benchmarks/report.py``
makes ``benchmarks/results/bn_bench.md`` and the plot.

Run:  python benchmarks/bn_bench.py            (all shapes, ~5 minutes)
      python benchmarks/bn_bench.py --quick    (fewer repetitions)
      python benchmarks/bn_bench.py --contend 2 --impl ours/default plain/default torch
      python benchmarks/bn_bench.py --quick --json /tmp/bn.json   (results elsewhere)
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import os
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator

import numpy as np

SHAPES = {
    "(64, 64, 56, 56)": ((64, 64, 56, 56), "spatial"),
    "(32, 256, 28, 28)": ((32, 256, 28, 28), "spatial"),
    "(256, 4096)": ((256, 4096), "per-activation"),
    "(8, 16, 32, 32)": ((8, 16, 32, 32), "spatial"),
}
EPS = 1e-4


def axes_of(shape, mode):
    return (0,) if mode == "per-activation" else (0, *range(2, len(shape)))


class Case:
    """Data for one shape, in float32."""

    def __init__(self, shape, axes_mode):
        rng = np.random.default_rng(0)
        self.shape, self.axes_mode = shape, axes_mode
        self.axes = axes_of(shape, axes_mode)
        channels = shape[1]
        self.param_shape = (channels,) if axes_mode == "spatial" else shape[1:]
        self.x = rng.standard_normal(shape, dtype=np.float32)
        self.dy = rng.standard_normal(shape, dtype=np.float32)
        self.gamma = rng.uniform(0.5, 1.5, self.param_shape).astype(np.float32)
        self.beta = rng.standard_normal(self.param_shape, dtype=np.float32)
        self.mean = self.x.mean(axis=self.axes).astype(np.float32)
        self.var = self.x.var(axis=self.axes).astype(np.float32)


# --------------------------------------------------------------------------
# implementations: each returns (train_step, infer_step) callables


def pytensor_impl(case: Case, mode, kind: str, params: str = "shared"):
    """Train and infer steps through ``pytensor.function``.

    ``kind``: 'ours' (``lasagne_bn.ops``), 'plain' (the same maths as a plain
    graph) or 'floor' (``x + 1`` on the same inputs: PyTensor's call cost).
    ``params``: 'shared' (gamma, beta, mean and var in shared variables, as a
    layer keeps them) or 'inputs' (passed on every call, as the tables
    before 2026-11-28 did: PyTensor then checks five inputs per call).
    """
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.ops import batch_normalization_test, batch_normalization_train

    ndim = len(case.shape)
    x = pt.tensor("x", dtype="float32", shape=(None,) * ndim)
    dy = pt.tensor("dy", dtype="float32", shape=(None,) * ndim)
    pndim = len(case.param_shape)
    values = (case.gamma, case.beta, case.mean, case.var)
    if params == "shared":
        # As a BatchNormLayer holds them: the compiled function's only inputs
        # are the data (and, here, the output gradient).
        g, b, m, v = (pytensor.shared(a, name=n) for a, n in zip(values, "gbmv", strict=True))
    else:
        g, b, m, v = (pt.tensor(n, dtype="float32", shape=(None,) * pndim) for n in "gbmv")
    if kind == "floor":
        out = test_out = x + 1
    elif kind == "plain":
        it = iter(range(pndim))
        pattern = ["x" if i in case.axes else next(it) for i in range(ndim)]
        gb, bb, mb, vb = (p.dimshuffle(pattern) for p in (g, b, m, v))
        mean = x.mean(case.axes, keepdims=True)
        var = x.var(case.axes, keepdims=True)
        out = (x - mean) * (gb / pt.sqrt(var + EPS)) + bb
        test_out = (x - mb) * (gb / pt.sqrt(vb + EPS)) + bb
    else:
        out, _, _ = batch_normalization_train(x, g, b, axes=case.axes_mode, epsilon=EPS)
        test_out = batch_normalization_test(x, g, b, m, v, axes=case.axes_mode, epsilon=EPS)
    train_outputs = [out]
    extra = {"on_unused_input": "ignore"} if kind == "floor" else {}
    if kind != "floor":
        train_outputs += pytensor.grad(None, [x, g, b], known_grads={out: dy})
    if params == "shared":
        train = pytensor.function([x, dy], train_outputs, mode=mode, **extra)
        infer = pytensor.function([x], test_out, mode=mode, **extra)
        return lambda: train(case.x, case.dy), lambda: infer(case.x)
    train = pytensor.function([x, g, b, dy], train_outputs, mode=mode, **extra)
    infer = pytensor.function([x, g, b, m, v], test_out, mode=mode, **extra)
    return (
        lambda: train(case.x, case.gamma, case.beta, case.dy),
        lambda: infer(case.x, *values),
    )


def torch_impl(case: Case):
    import torch
    import torch.nn.functional as F

    torch.set_num_threads(2)
    x = torch.from_numpy(case.x)
    dy = torch.from_numpy(case.dy)
    if case.axes_mode == "spatial":
        shape_in = case.shape
    else:
        # per-activation over a (N, F) input is BatchNorm1d over F channels
        shape_in = (case.shape[0], int(np.prod(case.shape[1:])))
    x = x.reshape(shape_in)
    dy = dy.reshape(shape_in)
    w = torch.from_numpy(case.gamma.reshape(-1)).clone()
    b = torch.from_numpy(case.beta.reshape(-1)).clone()
    rm = torch.zeros_like(w)
    rv = torch.ones_like(w)
    mean = torch.from_numpy(case.mean.reshape(-1))
    var = torch.from_numpy(case.var.reshape(-1))

    def train():
        xg = x.detach().requires_grad_(True)
        wg = w.detach().requires_grad_(True)
        bg = b.detach().requires_grad_(True)
        out = F.batch_norm(xg, rm, rv, wg, bg, training=True, momentum=0.1, eps=EPS)
        out.backward(dy)
        return out, xg.grad, wg.grad, bg.grad

    def infer():
        with torch.no_grad():
            return F.batch_norm(x, mean, var, w, b, training=False, eps=EPS)

    return train, infer


def flax_impl(case: Case):
    """A Flax-style BatchNorm in plain jnp (fast variance, as Flax computes it)."""
    import jax
    import jax.numpy as jnp

    axes = case.axes
    ndim = len(case.shape)
    keep = [i for i in range(ndim) if i not in axes]
    bshape = [case.shape[i] if i in keep else 1 for i in range(ndim)]

    def forward(x, g, b):
        mean = jnp.mean(x, axes, keepdims=True)
        mean2 = jnp.mean(jnp.square(x), axes, keepdims=True)
        var = jnp.maximum(0.0, mean2 - jnp.square(mean))
        y = (x - mean) * jax.lax.rsqrt(var + EPS)
        return y * g.reshape(bshape) + b.reshape(bshape)

    @jax.jit
    def train(x, g, b, dy):
        out, vjp = jax.vjp(forward, x, g, b)
        return (out, *vjp(dy))

    @jax.jit
    def infer(x, g, b, m, v):
        scale = (g * jax.lax.rsqrt(v + EPS)).reshape(bshape)
        return (x - m.reshape(bshape)) * scale + b.reshape(bshape)

    def run_train():
        return [np.asarray(r) for r in train(case.x, case.gamma, case.beta, case.dy)]

    def run_infer():
        return np.asarray(infer(case.x, case.gamma, case.beta, case.mean, case.var))

    return run_train, run_infer


def build(name: str, case: Case, params: str = "shared") -> tuple[Callable, Callable]:
    from pytensor.compile.mode import Mode

    kind, _, mode = name.partition("/")
    modes = {
        "default": None,
        "C": "C",
        "CVM": "CVM",
        "JAX": "JAX",
        "FAST_COMPILE": "FAST_COMPILE",
        "py": Mode(linker="py", optimizer=None),
    }
    # '+recycle' only changes the worker's environment (worker_env).
    kind = kind.removesuffix("+recycle")
    if kind == "torch":
        return torch_impl(case)
    if kind == "flax":
        return flax_impl(case)
    return pytensor_impl(case, modes[mode], kind, params)


# --------------------------------------------------------------------------
# bandwidth bound


def copy_times(nbytes: int, reps: int = 7) -> tuple[float, float]:
    """Median seconds to copy ``nbytes`` into an existing and into a fresh array."""
    src = np.ones(nbytes // 4, dtype=np.float32)
    dst = np.empty_like(src)
    reuse, fresh = [], []
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(dst, src)
        reuse.append(time.perf_counter() - t)
        t = time.perf_counter()
        new = src.copy()
        fresh.append(time.perf_counter() - t)
        del new
    return statistics.median(reuse), statistics.median(fresh)


def bounds(case: Case) -> dict[str, float]:
    """Bandwidth-bound times (ms).

    Training moves 8 arrays' worth of bytes (statistics: read x; output: read
    x, write out; backward reductions: read x and dy; dx: read x and dy,
    write dx); inference 2.  A copy moves 2 (read + write).  'Fresh' adds
    the extra cost of writing into newly allocated memory for each output
    (2 in training, 1 in inference).
    """
    nbytes = case.x.nbytes
    reuse, fresh = copy_times(nbytes)
    per_array = reuse / 2
    extra = max(fresh - reuse, 0.0)
    return {
        "train": 8 * per_array * 1e3,
        "train_fresh": (8 * per_array + 2 * extra) * 1e3,
        "infer": 2 * per_array * 1e3,
        "infer_fresh": (2 * per_array + extra) * 1e3,
    }


# --------------------------------------------------------------------------
# memory: peak extra resident memory of one training step (fresh process)


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1])
    raise RuntimeError(field)


def measure_memory(name: str, shape_key: str, params: str) -> float:
    """Run in a subprocess: MiB of peak RSS above the resting RSS for one step."""
    case = Case(*SHAPES[shape_key])
    train, _ = build(name, case, params)
    train()  # compile and warm up
    result = None
    # Hand the warm-up step's freed buffers back first, or this step would
    # just reuse them and the resident size would not move.
    gc.collect()
    ctypes.CDLL(None).malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # reset the peak-RSS watermark (Linux)
    before = _rss_kib("VmRSS:")
    result = train()
    peak = _rss_kib("VmHWM:")
    del result
    return (peak - before) / 1024


# --------------------------------------------------------------------------


def block(result):
    """Wait for asynchronous (JAX) results, also inside lists and tuples."""
    if isinstance(result, list | tuple):
        for item in result:
            block(item)
    elif hasattr(result, "block_until_ready"):
        result.block_until_ready()
    return result


def worker_env(name: str) -> dict:
    """``+recycle`` rows get the glibc settings ``recycle_host_memory()`` makes."""
    env = dict(os.environ)
    if name.endswith("+recycle") or name.startswith("floor/"):
        env["MALLOC_MMAP_THRESHOLD_"] = str(256 * 2**20)
        env["MALLOC_TRIM_THRESHOLD_"] = str(512 * 2**20)
    return env


class Worker:
    """One implementation in its own process, timing steps on request.

    Separate processes keep thread pools apart: Numba's and PyTorch's OpenMP
    runtimes (and XLA's pool) in one process slow each other down many
    times over, which says nothing about either.
    """

    def __init__(self, name: str, shape_key: str, params: str = "shared"):
        cmd = [sys.executable, __file__, "--_worker", name, shape_key, params]
        self.name = name
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=worker_env(name)
        )
        self.build_seconds = float(self._read())

    def _read(self) -> str:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.name} died")
        return line.strip()

    def step(self, kind: str, calls: int = 1) -> float:
        """Mean ms per call over ``calls`` back-to-back calls."""
        self.proc.stdin.write(f"{kind} {calls}\n")
        self.proc.stdin.flush()
        return float(self._read())

    def close(self):
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        self.proc.wait()


def worker_loop(name: str, shape_key: str, params: str) -> None:
    if not name.startswith(("torch", "flax")):
        # The PyTensor workers time with freed buffers recycled: importing
        # lasagne_bn.ops did it until issue 16, the published tables have it.
        from lasagne_bn.ops import recycle_host_memory

        recycle_host_memory()
    t = time.perf_counter()
    case = Case(*SHAPES[shape_key])
    steps = dict(zip(("train", "infer"), build(name, case, params), strict=True))
    for step in steps.values():
        block(step())
    print(time.perf_counter() - t, flush=True)
    for line in sys.stdin:
        if line.strip() == "quit":
            return
        kind, calls = line.split()
        # One untimed lead call: the first call after an idle pause pays for
        # waking the thread pools and, on a VM, for faulting in memory the
        # guest has meanwhile handed back to the host (60 ms for 75 MB here).
        # A training loop calls back to back; so does each sample.
        block(steps[kind]())
        t = time.perf_counter()
        for _ in range(int(calls)):
            block(steps[kind]())
        print((time.perf_counter() - t) * 1e3 / int(calls), flush=True)


SAMPLE_MS = 30.0  # each sample: back-to-back calls for about this long


def time_interleaved(workers: dict[str, Worker], kind: str, reps: int) -> dict[str, float]:
    """Median ms per call; implementations run in a rotating order each rep.

    Each sample averages back-to-back calls (as in a training loop, so
    thread pools stay awake) lasting about SAMPLE_MS, after one untimed
    call; a short pause between workers lets the previous one's spinning
    threads go to sleep.
    """
    names = list(workers)
    if not names:
        return {}
    calls = {}
    for name in names:
        single = workers[name].step(kind, 3)
        calls[name] = max(2, min(200, int(SAMPLE_MS / max(single, 1e-3))))
    samples: dict[str, list[float]] = {n: [] for n in names}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for name in order:
            time.sleep(0.01)
            samples[name].append(workers[name].step(kind, calls[name]))
    return {n: statistics.median(v) for n, v in samples.items()}


def runnable_now() -> str:
    """Runnable tasks now (4th field of /proc/loadavg, this process included)."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[3].split("/")[0]
    except OSError:
        return "?"


def load_average() -> str:
    return "load average {:.2f} {:.2f} {:.2f}, runnable now {}".format(
        *os.getloadavg(), runnable_now()
    )


BUSY_LOOP = "while True:\n    pass\n"


@contextlib.contextmanager
def contention(n: int) -> Iterator[list[subprocess.Popen]]:
    """``n`` busy-loop processes for the duration of the block, killed on any exit."""
    procs: list[subprocess.Popen] = []

    def on_term(signum, frame):
        raise SystemExit(128 + signum)  # run the finally below

    previous = signal.signal(signal.SIGTERM, on_term) if n else None
    try:
        for _ in range(n):
            procs.append(subprocess.Popen([sys.executable, "-c", BUSY_LOOP]))
        if n:
            time.sleep(0.5)  # let them reach the loop
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()
        if n:
            signal.signal(signal.SIGTERM, previous)


IMPLS = [
    "ours/default",
    "ours/C",
    "ours/CVM",
    "ours/JAX",
    "ours/FAST_COMPILE",
    "ours/py",
    "plain/default",
    "plain/CVM",
    "plain/JAX",
    "torch",
    "torch+recycle",
    "flax",
    "flax+recycle",
    "floor/default",
    "floor/JAX",
]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", nargs="*", default=list(SHAPES), help="shape keys")
    parser.add_argument("--reps", type=int, default=15, help="repetitions per timing")
    parser.add_argument("--quick", action="store_true", help="5 repetitions")
    parser.add_argument("--slow", action="store_true", help="also plain/FAST_COMPILE")
    parser.add_argument("--memory", action="store_true", help="also peak memory per step")
    parser.add_argument("--impl", nargs="*", default=None, help="only these implementations")
    parser.add_argument(
        "--params",
        choices=("shared", "inputs"),
        default="shared",
        help="PyTensor rows: gamma, beta, mean, var in shared variables (as a layer "
        "holds them; the default) or passed as inputs on every call",
    )
    parser.add_argument(
        "--contend", type=int, default=0, metavar="N", help="N busy-loop processes during the run"
    )
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the results as JSON (default benchmarks/results/bn_bench.json)",
    )
    parser.add_argument("--_memory-child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--_worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._memory_child:
        print(measure_memory(*args._memory_child))
        return 0
    if args._worker:
        worker_loop(*args._worker)
        return 0
    reps = 5 if args.quick else args.reps
    impls = args.impl or IMPLS + (["plain/FAST_COMPILE"] if args.slow else [])

    import numba
    import torch

    if args.contend < 0:
        parser.error(f"--contend {args.contend}: expected a number of processes >= 0")
    print(f"numba threads: {numba.get_num_threads()}, torch threads: 2, {load_average()}")
    print(
        f"torch {torch.__version__}; float32; each implementation in its own process; "
        f"medians of {reps} interleaved repetitions (ms); PyTensor parameters: {args.params}"
    )
    with contention(args.contend):
        if args.contend:
            print(f"contention: {args.contend} busy-loop processes running; {load_average()}")
        records = run_shapes(args, impls, reps)
        load = f"{args.contend} busy-loop processes; {load_average()}"
    from _results import write

    print(f"results: {write('bn_bench', records, load=load, path=args.json)}")
    return 0


def run_shapes(args, impls, reps) -> list[dict]:
    """Build, time and print every shape (under whatever load is running)."""
    records = []
    for key in args.shapes:
        case = Case(*SHAPES[key])
        workers = {}
        for name in impls:
            workers[name] = Worker(name, key, args.params)
            seconds = workers[name].build_seconds
            print(f"  built {name:18s} for {key} in {seconds:6.1f} s", flush=True)
        slow = {n: w for n, w in workers.items() if n.endswith(("FAST_COMPILE", "/py"))}
        fast = {n: w for n, w in workers.items() if n not in slow}
        slow_reps = max(1, min(3, reps))
        train_ms, infer_ms = (
            time_interleaved(fast, kind, reps) | time_interleaved(slow, kind, slow_reps)
            for kind in ("train", "infer")
        )
        for w in workers.values():
            w.close()
        bound = bounds(case)
        memory = {}
        if args.memory:
            # With freed buffers recycled, a step's outputs reuse the last
            # step's memory and the RSS does not move: measure what a step
            # allocates with glibc's default behaviour instead (the memory
            # child never calls recycle_host_memory()).
            env = dict(os.environ)
            for name in impls:
                if name.endswith("+recycle"):
                    continue
                cmd = [sys.executable, __file__, "--_memory-child", name, key, args.params]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env)
                memory[name] = float(out.stdout.strip().splitlines()[-1])
        print_table(key, case, train_ms, infer_ms, bound, memory)
        records.append(
            {
                "shape": key,
                "axes": case.axes_mode,
                "train_ms": train_ms,
                "infer_ms": infer_ms,
                "bound_ms": bound,
                "peak_extra_mib": memory,
            }
        )
    return records


def print_table(key, case, train_ms, infer_ms, bound, memory):
    torch_train, torch_infer = train_ms.get("torch"), infer_ms.get("torch")
    print()
    size = case.x.nbytes / 2**20
    print(f"shape {key}, axes {case.axes_mode}, x = {size:.1f} MiB; {load_average()}")
    head = "| implementation | train fwd+bwd ms | infer ms | train / torch | infer / torch |"
    head += " train / plain | infer / plain | train / bound (fresh) | infer / bound (fresh) |"
    if memory:
        head += " peak extra MiB |"
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for name in train_ms:
        t, i = train_ms[name], infer_ms[name]
        row = f"| {name} | {t:.3f} | {i:.3f} | "
        row += f"{t / torch_train:.2f} | {i / torch_infer:.2f} | " if torch_train else "- | - | "
        # against the plain graph in the same mode (ours/C against plain/C, ...)
        plain = "plain/" + name.partition("/")[2]
        if name.startswith("ours/") and plain in train_ms:
            row += f"{t / train_ms[plain]:.2f} | {i / infer_ms[plain]:.2f} | "
        else:
            row += "- | - | "
        row += f"{t / bound['train_fresh']:.2f} | {i / bound['infer_fresh']:.2f} |"
        if memory:
            row += f" {memory[name]:.1f} |" if name in memory else " - |"
        print(row)
    print(
        f"| bound | {bound['train']:.3f} ({bound['train_fresh']:.3f} fresh) | "
        f"{bound['infer']:.3f} ({bound['infer_fresh']:.3f} fresh) | | | | | | |"
    )
    print()


if __name__ == "__main__":
    sys.exit(main())
