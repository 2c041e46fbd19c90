"""The ``lasagne-bn demo`` command: its options, its environment, and the run in order."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from lasagne_bn._files import RunFolder
from lasagne_bn._signals import DeferredInterrupt
from lasagne_bn.cli import (
    UserError,
    add_recycle_memory_argument,
    apply_recycle_memory,
    int_argument,
)
from lasagne_bn.demo.console import Console
from lasagne_bn.demo.data import Data, load_data
from lasagne_bn.demo.modes import compare_modes, have_jax
from lasagne_bn.demo.network import LEARNING_RATE, build_network, compile_predict
from lasagne_bn.demo.reload import save_and_reload
from lasagne_bn.demo.report import plot_curves, verdict, write_metrics
from lasagne_bn.demo.training import JAX_EXPORT, train_network

DEFAULT_EPOCHS = 12
DEFAULT_BATCH_SIZE = 64
DEFAULT_OUT = "lasagne-bn-demo"
# checked only for the default run: fewer epochs or images may legitimately score lower
DEFAULT_MIN_ACCURACY = 0.95
MIN_LIMIT = 100  # fewer images leave some classes with no test image
# Every file a run writes into --out; a finished run replaces all of them at once.
RUN_FILES = ["weights_inv_std.npz", "weights_var.npz", "training_curves.png", "metrics.json"]

# --mode value -> (pytensor mode argument, label)
TRAINING_MODES = {
    "default": (None, "default (Numba)"),
    "numba": (None, "default (Numba)"),
    "cvm": ("CVM", "C (CVM)"),
    "jax": ("JAX", "JAX"),
    "fast_compile": ("FAST_COMPILE", "FAST_COMPILE"),
    # the network exported to pure JAX (lasagne_bn.export): one jitted optax step
    JAX_EXPORT: (JAX_EXPORT, "exported JAX (lasagne_bn.export)"),
}

EPILOG = """\
examples:
  lasagne-bn demo                          # about 12 epochs, >= 95% test accuracy
  lasagne-bn demo --epochs 3 --out /tmp/bn-demo --mode jax
  lasagne-bn demo --mode jax-export        # the network exported to pure JAX
  python -m lasagne_bn demo --quiet

Writes to --out: weights_inv_std.npz (legacy Lasagne format), weights_var.npz,
training_curves.png and metrics.json.  Exit status 0: every check passed;
1: a check failed (accuracy, reloaded weights, modes disagreeing); 2: bad usage.
"""


# --------------------------------------------------------------------------
# command line


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text}")
    return value


def register(subparsers) -> None:
    """Add ``demo`` to the ``lasagne-bn`` command line."""
    parser = subparsers.add_parser(
        "demo",
        help="train a CNN with batch norm on scikit-learn's digits; check every mode",
        description=(
            "Train a Lasagne-style CNN with batch normalization on scikit-learn's digits "
            "(no download), evaluate it, save and reload its weights in the legacy "
            "(inv_std) and var formats, compare inference under every PyTensor mode, "
            "and plot the training curves."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--epochs",
        type=int_argument(1),
        default=DEFAULT_EPOCHS,
        help=f"training epochs (default {DEFAULT_EPOCHS})",
    )
    parser.add_argument(
        "--batch-size",
        type=int_argument(2),
        default=DEFAULT_BATCH_SIZE,
        help=f"minibatch size, at least 2 for batch statistics (default {DEFAULT_BATCH_SIZE})",
    )
    parser.add_argument(
        "--mode",
        type=str.lower,
        choices=sorted(TRAINING_MODES),
        default="default",
        help="PyTensor mode to train in (default: PyTensor's default, Numba)",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        default=DEFAULT_OUT,
        help=f"directory for the weights, the plot and metrics.json (default ./{DEFAULT_OUT})",
    )
    parser.add_argument(
        "--seed",
        type=int_argument(0),
        default=0,
        help="seed of the data split, initial weights and shuffling (default 0)",
    )
    parser.add_argument(
        "--min-accuracy",
        type=_fraction,
        default=None,
        help=(
            "fail (exit 1) below this test accuracy (default: "
            f"{DEFAULT_MIN_ACCURACY} with the default --epochs and all the data, else no check)"
        ),
    )
    parser.add_argument(
        "--limit",
        type=int_argument(MIN_LIMIT),
        default=None,
        metavar="N",
        help=f"use only N of the 1797 images, stratified (N >= {MIN_LIMIT}; for quick tests)",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        help="no progress and no per-epoch lines: only the results",
    )
    add_recycle_memory_argument(parser)
    parser.set_defaults(handler=run)


# --------------------------------------------------------------------------
# before the run: the output folder, the optional packages, the process


def prepare_out_dir(path: str) -> Path:
    """Create ``path`` if needed and make sure files can be written there (else UserError)."""
    out = Path(path).expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {path}: exists and is not a directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".lasagne-bn-write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        reason = err.strerror or str(err)
        raise UserError(f"--out {path}: cannot write there ({reason})") from None
    return out


def _check_dependencies(training_mode: str) -> None:
    """Refuse to start (one line, status 2) rather than fail halfway on a missing package."""
    missing = []
    for module, package in (("sklearn", "scikit-learn"), ("matplotlib", "matplotlib")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise UserError(f"the demo needs {' and '.join(missing)}: pip install 'lasagne-bn[demo]'")
    if training_mode in ("jax", JAX_EXPORT) and not have_jax():
        raise UserError(f"--mode {training_mode} needs jax: pip install 'lasagne-bn[jax]'")
    if training_mode == JAX_EXPORT:
        try:
            __import__("optax")
        except ImportError:
            raise UserError(
                "--mode jax-export needs optax: pip install 'lasagne-bn[jax]'"
            ) from None


def _single_threaded_blas():
    """Limit OpenBLAS to one thread while the demo runs.

    In the default (Numba) mode the dense layers' products call OpenBLAS
    while the batch-norm and convolution kernels run on Numba's own thread
    pool.  Two pools that each expect every core fight over them, and the
    products of a network this small gain nothing from threads.
    ``threadpoolctl`` comes with scikit-learn.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn depends on it
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _passive_openmp_waits() -> None:
    """Let idle OpenMP threads sleep instead of spinning (unless the user chose).

    The Numba kernels run on an OpenMP thread pool whose idle threads spin
    by default.  On a machine with few cores, or one shared with other
    processes, the spinning threads take the cores from the thread they are
    waiting for, and every small kernel waits for it.  libgomp reads the
    variable when it is loaded, so this only takes effect before the first
    parallel kernel runs (as in ``lasagne-bn demo``).
    """
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def run(args) -> int:
    """The ``demo`` handler: returns the exit status."""
    _passive_openmp_waits()
    apply_recycle_memory(args)
    if args.limit is not None and args.limit < MIN_LIMIT:  # pragma: no cover - argparse
        raise UserError(f"--limit must be at least {MIN_LIMIT}")
    _check_dependencies(args.mode)
    out = prepare_out_dir(args.out)
    console = Console(args.quiet)
    min_accuracy = args.min_accuracy
    if min_accuracy is None and args.epochs == DEFAULT_EPOCHS and args.limit is None:
        min_accuracy = DEFAULT_MIN_ACCURACY
    import pytensor

    # float32 throughout, as a Lasagne user's floatX=float32 setup had it
    with (
        _single_threaded_blas(),
        pytensor.config.change_flags(floatX="float32"),
        warnings.catch_warnings(),
    ):
        # Known, harmless notices that would only confuse a first run: pip's
        # PyTensor links no BLAS for the C backend (its products then run in
        # NumPy); JAX drops PyTensor's shape assertions when it traces, and
        # without jax_enable_x64 it runs int64 indices as int32 and PyTensor's
        # float64 accumulators of float32 sums (loss, softmax) in float32.
        warnings.filterwarnings("ignore", message="PyTensor could not link to a BLAS")
        warnings.filterwarnings("ignore", message="Skipping Assert")
        warnings.filterwarnings("ignore", message="Explicitly requested dtype (int|float)64")
        with RunFolder(out, RUN_FILES) as run_folder, DeferredInterrupt() as interrupt:
            outcome = demo(args, run_folder, console, min_accuracy, interrupt)
    for failure in outcome.failures:
        print(f"lasagne-bn demo: FAILED: {failure}", file=sys.stderr, flush=True)
    return 1 if outcome.failures else 0


# --------------------------------------------------------------------------
# the run


@dataclass
class Outcome:
    failures: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


def demo(
    args,
    run_folder: RunFolder,
    console: Console,
    min_accuracy: float | None,
    interrupt: DeferredInterrupt,
) -> Outcome:
    """Train, evaluate, save and reload, compare the modes, plot: the demo in order."""
    t_start = time.perf_counter()
    mode, mode_label = TRAINING_MODES[args.mode]
    data = load_data(args.seed, args.limit)
    if args.batch_size > len(data.y_train):
        raise UserError(
            f"--batch-size {args.batch_size} is larger than the {len(data.y_train)} "
            "training images"
        )
    network, fresh = _build_networks(args.seed)
    _print_plan(console, args, data, network, mode_label)
    training = train_network(
        network, data, mode, mode_label, args.epochs, args.batch_size, args.seed,
        console, interrupt,
    )  # fmt: skip
    reference = compile_predict(network, None)(data.x_test)  # the default mode's answer
    accuracy, failures = _evaluate(reference, data, min_accuracy, console)
    reload_rows, reload_failures = save_and_reload(
        network, fresh, run_folder, data, reference, console
    )
    interrupt.check()
    mode_rows, mode_failures = compare_modes(network, data, reference, console)
    failures += reload_failures + mode_failures
    metrics = {
        "seed": args.seed,
        "epochs": training.history,
        "training_mode": mode_label,
        "batch_size": args.batch_size,
        "train_images": len(data.y_train),
        "test_images": len(data.y_test),
        "compile_seconds": training.compile_seconds,
        "test_accuracy": accuracy,
        "min_accuracy": min_accuracy,
        "reload": reload_rows,
        "modes": mode_rows,
    }
    metrics["plot"] = plot_curves(
        training.history,
        run_folder.path("training_curves.png"),
        title=f"trained in mode {mode_label}, seed {args.seed}",
    )
    metrics["total_seconds"] = time.perf_counter() - t_start
    metrics["failures"] = failures
    write_metrics(metrics, run_folder.path("metrics.json"))
    png, metrics_path = run_folder.final("training_curves.png"), run_folder.final("metrics.json")
    console.line(f"training curves: {png}  (the plotted numbers: {metrics_path})")
    console.line(
        f"done in {metrics['total_seconds']:.0f} s: {verdict(failures, accuracy, min_accuracy)}"
    )
    return Outcome(failures, metrics)


def _build_networks(seed: int):
    """The network to train, and one fresh network per storage to reload the files into.

    All three draw their initial weights from one generator seeded with
    ``seed``, so that a run is repeatable; the library's generator is
    restored afterwards.
    """
    import numpy as np

    from lasagne_bn.random import get_rng, set_rng

    old_rng = get_rng()
    set_rng(np.random.RandomState(seed))
    try:
        network = build_network("inv_std")
        fresh = {storage: build_network(storage) for storage in ("inv_std", "var")}
    finally:
        set_rng(old_rng)
    return network, fresh


def _print_plan(console: Console, args, data: Data, network, mode_label: str) -> None:
    """The lines before training: the data, the network (described by itself), the settings."""
    from lasagne_bn.layers import describe_network

    console.line(
        "lasagne-bn demo: a Lasagne-style CNN with batch normalization on scikit-learn's digits",
        progress=True,
    )
    console.line(
        f"data     {len(data.y_train)} training / {len(data.y_test)} test images, "
        f"8x8 grey, 10 classes (stratified split, seed {args.seed})",
        progress=True,
    )
    for i, line in enumerate(describe_network(network).splitlines()):
        console.line(f"{'network' if i == 0 else '':<9}{line}", progress=True)
    console.line(
        f"{'':<9}training in mode {mode_label}, adam (lr {LEARNING_RATE}), "
        f"batch {args.batch_size}, {args.epochs} epochs",
        progress=True,
    )


def _evaluate(
    reference, data: Data, min_accuracy: float | None, console: Console
) -> tuple[float, list[str]]:
    """Print the test accuracy of the default mode's predictions; check it if asked."""
    from lasagne_bn.demo.network import loss_and_accuracy

    _, accuracy = loss_and_accuracy(reference, data.y_test)
    correct = int(round(accuracy * len(data.y_test)))
    console.line(
        f"test accuracy {accuracy:.2%} ({correct}/{len(data.y_test)} images; deterministic: "
        "batch norm uses the running averages)"
    )
    failures = []
    if min_accuracy is not None and accuracy < min_accuracy:
        failures.append(f"test accuracy {accuracy:.2%} is below --min-accuracy {min_accuracy:.2%}")
    return accuracy, failures
