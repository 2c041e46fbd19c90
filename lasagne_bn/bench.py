"""``lasagne-bn bench``: a quick timing of the installed batch-norm ops.

For each shape, times a training step (forward, then the gradients w.r.t.
the input, gamma and beta for a given output gradient) and inference, of
``lasagne_bn.ops`` against the same maths written as a plain PyTensor graph
(``mean``, ``var``, elementwise ops, ``pytensor.grad``), both compiled in the
same mode, in this process.  It is a smoke test of speed on your machine;
``benchmarks/bn_bench.py`` in the repository is the full benchmark (more
shapes and modes, PyTorch and Flax anchors, separate worker processes).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

from lasagne_bn.cli import (
    UserError,
    add_recycle_memory_argument,
    apply_recycle_memory,
    int_argument,
)

DEFAULT_SHAPES = ["32,64,28,28", "256,1024"]
EPSILON = 1e-4
MODES = {"default": None, "numba": None, "cvm": "CVM", "jax": "JAX"}

EPILOG = """\
examples:
  lasagne-bn bench                          # (32,64,28,28) spatial and (256,1024)
  lasagne-bn bench --shape 64,64,56,56 --reps 10
  lasagne-bn bench --mode jax --shape 8,16,32,32

A 4-d shape (N, C, H, W) is normalized per channel (axes='spatial'), a 2-d
shape per feature (axes='per-activation').
"""


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(part) for part in text.replace("x", ",").split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated sizes like 32,64,28,28, got {text!r}"
        ) from None
    if len(shape) not in (2, 4) or min(shape) < 1:
        raise argparse.ArgumentTypeError(
            f"expected 2 or 4 positive sizes (N,F or N,C,H,W), got {text!r}"
        )
    if shape[0] * (shape[2] * shape[3] if len(shape) == 4 else 1) < 2:
        raise argparse.ArgumentTypeError(
            f"shape {text!r} has one value per statistic; training needs at least 2"
        )
    if math.prod(shape) > 2**28:
        raise argparse.ArgumentTypeError(f"shape {text!r} is too large (over 2**28 values)")
    return shape


def register(subparsers) -> None:
    """Add ``bench`` to the ``lasagne-bn`` command line."""
    parser = subparsers.add_parser(
        "bench",
        help="time the batch-norm ops against a plain PyTensor graph",
        description=__doc__.split("\n\n")[1].replace("\n", " "),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--shape",
        type=_shape,
        action="append",
        metavar="N,C,H,W",
        help="input shape, repeatable (default: " + " and ".join(DEFAULT_SHAPES) + ")",
    )
    parser.add_argument(
        "--reps",
        type=int_argument(1, 1000),
        default=5,
        help="timed repetitions, median reported (default 5)",
    )
    parser.add_argument(
        "--mode",
        type=str.lower,
        choices=sorted(MODES),
        default="default",
        help="PyTensor mode for both implementations (default: Numba)",
    )
    add_recycle_memory_argument(parser)
    parser.set_defaults(handler=run)


def _functions(shape, mode, plain: bool):
    import numpy as np
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn.ops import batch_normalization_test, batch_normalization_train

    axes_mode = "spatial" if len(shape) == 4 else "per-activation"
    axes = (0, 2, 3) if len(shape) == 4 else (0,)
    param_shape = (shape[1],) if len(shape) == 4 else shape[1:]
    x = pt.tensor("x", dtype="float32", shape=(None,) * len(shape))
    dy = pt.tensor("dy", dtype="float32", shape=(None,) * len(shape))
    g, b, m, v = (pt.vector(n, dtype="float32") for n in "gbmv")
    if plain:
        pattern = ["x", 0, "x", "x"] if len(shape) == 4 else ["x", 0]
        gb, bb, mb, vb = (p.dimshuffle(pattern) for p in (g, b, m, v))
        mean = x.mean(axes, keepdims=True)
        var = x.var(axes, keepdims=True)
        out = (x - mean) * (gb / pt.sqrt(var + EPSILON)) + bb
        test_out = (x - mb) * (gb / pt.sqrt(vb + EPSILON)) + bb
    else:
        out, _, _ = batch_normalization_train(x, g, b, axes=axes_mode, epsilon=EPSILON)
        test_out = batch_normalization_test(x, g, b, m, v, axes=axes_mode, epsilon=EPSILON)
    grads = pytensor.grad(None, [x, g, b], known_grads={out: dy})
    train = pytensor.function([x, g, b, dy], [out, *grads], mode=mode)
    infer = pytensor.function([x, g, b, m, v], test_out, mode=mode)

    rng = np.random.default_rng(0)
    xv = rng.standard_normal(shape, dtype=np.float32)
    dyv = rng.standard_normal(shape, dtype=np.float32)
    gv = rng.uniform(0.5, 1.5, param_shape).astype(np.float32)
    bv = rng.standard_normal(param_shape, dtype=np.float32)
    mv = xv.mean(axis=axes).astype(np.float32)
    vv = xv.var(axis=axes).astype(np.float32)
    return (lambda: train(xv, gv, bv, dyv)), (lambda: infer(xv, gv, bv, mv, vv))


def _median_ms(fn, reps: int) -> float:
    fn()  # compile (Numba, JAX) and warm up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def run(args) -> int:
    """The ``bench`` handler."""
    apply_recycle_memory(args)

    if args.mode == "jax":
        try:
            import jax  # noqa: F401
        except ImportError:
            raise UserError("--mode jax needs jax: pip install 'lasagne-bn[jax]'") from None
    shapes = args.shape or [_shape(s) for s in DEFAULT_SHAPES]
    mode = MODES[args.mode]
    print(f"batch norm, float32, mode {args.mode}, median of {args.reps} (ms)", flush=True)
    print(f"{'shape':<20}{'step':<8}{'lasagne_bn':>12}{'plain graph':>13}{'speed-up':>10}")
    for shape in shapes:
        label = "(" + ", ".join(map(str, shape)) + ")"
        if sys.stdout.isatty():
            print(f"{label:<20}compiling ...", end="\r", flush=True)
        ours = _functions(shape, mode, plain=False)
        plain = _functions(shape, mode, plain=True)
        for step, i in (("train", 0), ("infer", 1)):
            t_ours = _median_ms(ours[i], args.reps)
            t_plain = _median_ms(plain[i], args.reps)
            print(
                f"{label:<20}{step:<8}{t_ours:>12.2f}{t_plain:>13.2f}{t_plain / t_ours:>9.2f}x",
                flush=True,
            )
            label = ""
    print("train: forward + gradients w.r.t. x, gamma, beta; infer: with given mean and var")
    return 0
