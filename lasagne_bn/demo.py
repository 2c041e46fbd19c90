"""``lasagne-bn demo``: the whole product on data that ships with scikit-learn.

The demo trains a Lasagne-style convolutional network with batch
normalization on scikit-learn's handwritten digits (1797 images of 8x8
pixels, no download), then shows what the package is for:

1. training with Lasagne's recipe (``get_output(..., return_updates=True)``
   for the running averages, ``updates.adam``), with a progress bar;
2. deterministic evaluation on held-out images (running statistics);
3. saving the weights as legacy Lasagne files (``np.savez(path,
   *get_all_param_values(net))``, batch-norm statistics stored as
   ``inv_std``) and in the ``var`` storage, and reloading both into fresh
   networks, which must predict exactly what the trained one does;
4. compiling inference under every supported mode (default/Numba, C via the
   CVM linker, JAX, FAST_COMPILE) on the same shared parameters, and
   checking that they agree to float32 rounding;
5. a PNG of the training curves, with the plotted numbers in
   ``metrics.json`` beside it.

Exit status: 0 when every check passed, 1 when one failed (one line says
which), 2 for a mistake on the command line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import threading
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

DEFAULT_EPOCHS = 12
DEFAULT_BATCH_SIZE = 64
DEFAULT_OUT = "lasagne-bn-demo"
DEFAULT_MIN_ACCURACY = 0.95
LEARNING_RATE = 0.003
MIN_LIMIT = 100
# Predictions of two modes may differ by float32 rounding, no more.
MODE_TOLERANCE = 1e-4
# Reloaded networks: the inv_std file must give bit-identical predictions (the
# same graph on the same values); the var file differs by the rounding of
# var -> 1/sqrt(var + eps).
RELOAD_TOLERANCE = 1e-5
N_CLASSES = 10
# Every file a run writes into --out; a finished run replaces all of them at once.
RUN_FILES = ["weights_inv_std.npz", "weights_var.npz", "training_curves.png", "metrics.json"]

JAX_EXPORT = "jax-export"
# --mode value -> (pytensor mode argument, label)
TRAINING_MODES = {
    "default": (None, "default (Numba)"),
    "numba": (None, "default (Numba)"),
    "cvm": ("CVM", "C (CVM)"),
    "jax": ("JAX", "JAX"),
    "fast_compile": ("FAST_COMPILE", "FAST_COMPILE"),
    # the network exported to pure JAX (lasagne_bn.jax): one jitted optax step
    "jax-export": (JAX_EXPORT, "exported JAX (lasagne_bn.jax)"),
}
# the rows of the mode table: (key, pytensor mode argument, label)
TABLE_MODES = [
    ("default", None, "default (Numba)"),
    ("cvm", "CVM", "C (CVM)"),
    ("jax", "JAX", "JAX"),
    ("fast_compile", "FAST_COMPILE", "FAST_COMPILE"),
]
COLORS = {"train": "#1f77b4", "test": "#d62728"}

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
# console output


class Console:
    """Lines on stdout; progress that rewrites its line only on a terminal."""

    def __init__(self, quiet: bool, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, text: str = "", progress: bool = False) -> None:
        """Print a line (``progress`` lines are left out by --quiet)."""
        if progress and self.quiet:
            return
        print(text, file=self.stream, flush=True)

    def partial(self, text: str) -> None:
        """Rewrite the current terminal line (nothing off a terminal or with --quiet)."""
        if self.tty and not self.quiet:
            self.stream.write("\r" + text + "\x1b[K")
            self.stream.flush()

    @contextlib.contextmanager
    def task(self, text: str):
        """Show ``text ...`` and the seconds it has been running; end the line with the total.

        Yields a dict whose ``"seconds"`` is set when the task ends.
        """
        result = {"seconds": 0.0}
        show = not self.quiet
        stop = threading.Event()
        start = time.perf_counter()
        ticker = None
        if show and self.tty:

            def tick():
                while not stop.wait(0.5):
                    self.partial(f"{text} ... {time.perf_counter() - start:.0f} s")

            self.partial(f"{text} ...")
            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        elif show:
            print(f"{text} ...", end="", file=self.stream, flush=True)
        try:
            yield result
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            result["seconds"] = time.perf_counter() - start
            if show:
                prefix = f"\r{text} ..." if self.tty else ""
                end = "\x1b[K" if self.tty else ""
                print(f"{prefix} {result['seconds']:.1f} s{end}", file=self.stream, flush=True)


def progress_bar(done: int, total: int, width: int = 20) -> str:
    """``[#######-------------]``: ``done`` of ``total`` as a bar of ``width`` cells."""
    filled = width if total <= 0 else min(width, round(width * done / total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


# --------------------------------------------------------------------------
# data and network


@dataclass
class Data:
    x_train: object
    y_train: object
    x_test: object
    y_test: object


def load_data(seed: int, limit: int | None) -> Data:
    """Digits as float32 ``(N, 1, 8, 8)`` in [0, 1]; a stratified 80/20 split."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    y = digits.target.astype(np.int32)
    if limit is not None and limit < len(y):
        x, _, y, _ = train_test_split(x, y, train_size=limit, stratify=y, random_state=seed)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=seed
    )
    return Data(x_train, y_train, x_test, y_test)


def build_network(stat_storage: str = "inv_std"):
    """conv3x3(16)-bn-relu, maxpool, conv3x3(32)-bn-relu, maxpool, dense(64)-bn-relu, dense(10)."""
    from lasagne_bn.layers import (
        Conv2DLayer,
        DenseLayer,
        InputLayer,
        MaxPool2DLayer,
        batch_norm,
    )
    from lasagne_bn.nonlinearities import softmax

    net = InputLayer((None, 1, 8, 8), name="input")
    net = Conv2DLayer(net, 16, 3, pad="same", name="conv1")
    net = batch_norm(net, stat_storage=stat_storage)
    net = MaxPool2DLayer(net, 2, name="pool1")
    net = Conv2DLayer(net, 32, 3, pad="same", name="conv2")
    net = batch_norm(net, stat_storage=stat_storage)
    net = MaxPool2DLayer(net, 2, name="pool2")
    net = batch_norm(DenseLayer(net, 64, name="fc"), stat_storage=stat_storage)
    return DenseLayer(net, N_CLASSES, nonlinearity=softmax, name="output")


NETWORK_LINES = (
    "conv 3x3 (16) > batch_norm > relu > max-pool 2 > conv 3x3 (32) > batch_norm > relu",
    "> max-pool 2 > dense (64) > batch_norm > relu > dense (10) > softmax",
)


def input_var(network):
    from lasagne_bn.layers import get_all_layers

    return get_all_layers(network)[0].input_var


def compile_predict(network, mode):
    """A function from images to class probabilities, deterministic (running statistics)."""
    import numpy as np
    import pytensor

    from lasagne_bn.layers import get_output

    probs = get_output(network, deterministic=True)
    function = pytensor.function([input_var(network)], probs, mode=mode)
    # np.asarray: JAX returns its own arrays, and before it has finished computing them
    return lambda images: np.asarray(function(images))


def compile_train(network, mode):
    import pytensor
    import pytensor.tensor as pt

    from lasagne_bn import objectives, updates
    from lasagne_bn.layers import get_all_params, get_output

    targets = pt.ivector("targets")
    probs, bn_updates = get_output(network, return_updates=True)
    loss = objectives.aggregate(objectives.categorical_crossentropy(probs, targets))
    accuracy = objectives.aggregate(objectives.categorical_accuracy(probs, targets))
    params = get_all_params(network, trainable=True)
    step = updates.adam(loss, params, learning_rate=LEARNING_RATE)
    step.update(bn_updates)  # the running averages of mean and inv_std
    return pytensor.function(
        [input_var(network), targets], [loss, accuracy], updates=step, mode=mode
    )


class ExportedTraining:
    """Training through :func:`lasagne_bn.jax.export`: the same network, Adam and loss.

    ``train(images, labels) -> (loss, accuracy)`` is one jitted JAX step on
    parameter and state dicts; :meth:`write_back` puts the trained values
    into the network for everything that follows (saving, other modes).
    """

    def __init__(self, network):
        import jax
        import jax.numpy as jnp
        import optax

        from lasagne_bn.jax import export, train_step

        def loss_fn(probs, targets):
            picked = jnp.take_along_axis(probs, targets[:, None], axis=1)[:, 0]
            accuracy = jnp.mean(jnp.argmax(probs, axis=1) == targets)
            return -jnp.mean(jnp.log(picked)), accuracy

        self.model = export(network)
        optimizer = optax.adam(LEARNING_RATE)  # Lasagne's adam defaults are optax's
        self.step = train_step(self.model, loss_fn, optimizer, has_aux=True)
        self.params, self.state = self.model.params, self.model.state
        self.opt_state = optimizer.init(self.params)
        self._predict = jax.jit(lambda p, s, x: self.model.apply(p, s, x)[0])

    def train(self, images, labels):
        self.params, self.state, self.opt_state, loss, accuracy = self.step(
            self.params, self.state, self.opt_state, images, labels
        )
        return loss, accuracy

    def predict(self, images):
        import numpy as np

        return np.asarray(self._predict(self.params, self.state, images))

    def write_back(self) -> None:
        self.model.write_back(self.params, self.state)


def loss_and_accuracy(probs, targets) -> tuple[float, float]:
    """Mean categorical cross-entropy and accuracy of predicted probabilities."""
    import numpy as np

    picked = probs[np.arange(len(targets)), targets].astype(np.float64)
    loss = float(-np.mean(np.log(np.maximum(picked, 1e-30))))
    return loss, float(np.mean(np.argmax(probs, axis=1) == targets))


# --------------------------------------------------------------------------
# the run


@dataclass
class Outcome:
    failures: list[str] = field(default_factory=list)
    metrics: dict = field(default_factory=dict)


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
    missing = []
    for module, package in (("sklearn", "scikit-learn"), ("matplotlib", "matplotlib")):
        try:
            __import__(module)
        except ImportError:
            missing.append(package)
    if missing:
        raise UserError(f"the demo needs {' and '.join(missing)}: pip install 'lasagne-bn[demo]'")
    if training_mode in ("jax", JAX_EXPORT) and not _have_jax():
        raise UserError(f"--mode {training_mode} needs jax: pip install 'lasagne-bn[jax]'")
    if training_mode == JAX_EXPORT:
        try:
            __import__("optax")
        except ImportError:
            raise UserError(
                "--mode jax-export needs optax: pip install 'lasagne-bn[jax]'"
            ) from None


def _have_jax() -> bool:
    try:
        import jax  # noqa: F401
    except ImportError:
        return False
    return True


def _single_threaded_blas():
    """Limit OpenBLAS to one thread while the demo runs.

    In the default (Numba) mode the dense layers' products call OpenBLAS,
    whose threads and the batch-norm / convolution kernels' Numba threads
    then take turns spinning on the same cores: on a 2-core machine a
    training step of this small network took 200-400 ms instead of about
    10 ms.  ``threadpoolctl`` comes with scikit-learn.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - scikit-learn depends on it
        return contextlib.nullcontext()
    return threadpool_limits(limits=1, user_api="blas")


def _passive_openmp_waits() -> None:
    """Let idle OpenMP threads sleep instead of spinning (unless the user chose).

    The Numba kernels run on an OpenMP thread pool; by default its threads
    spin while they wait for work.  On a 2-core machine shared with other
    processes that spinning starves the thread being waited for: right after
    a cold compile, training steps of this network took ~360 ms instead of
    1-2 ms for the first ~25 s, and inference of 360 images ~50 ms instead of
    ~7 ms.  libgomp reads the variable when it is loaded, so this only takes
    effect before the first parallel kernel runs (as in ``lasagne-bn demo``).
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


def demo(
    args,
    run_folder: RunFolder,
    console: Console,
    min_accuracy: float | None,
    interrupt: DeferredInterrupt,
) -> Outcome:
    import numpy as np

    from lasagne_bn.layers import count_params
    from lasagne_bn.random import get_rng, set_rng

    outcome = Outcome()
    t_start = time.perf_counter()
    mode, mode_label = TRAINING_MODES[args.mode]
    data = load_data(args.seed, args.limit)
    if args.batch_size > len(data.y_train):
        raise UserError(
            f"--batch-size {args.batch_size} is larger than the {len(data.y_train)} "
            "training images"
        )

    old_rng = get_rng()
    set_rng(np.random.RandomState(args.seed))
    try:
        network = build_network("inv_std")
        fresh = {storage: build_network(storage) for storage in ("inv_std", "var")}
    finally:
        set_rng(old_rng)

    console.line(
        "lasagne-bn demo: a Lasagne-style CNN with batch normalization on scikit-learn's digits",
        progress=True,
    )
    console.line(
        f"data     {len(data.y_train)} training / {len(data.y_test)} test images, "
        f"8x8 grey, 10 classes (stratified split, seed {args.seed})",
        progress=True,
    )
    console.line(f"network  {NETWORK_LINES[0]}", progress=True)
    console.line(f"         {NETWORK_LINES[1]}", progress=True)
    console.line(
        f"         {count_params(network):,} parameters; training in mode {mode_label}, "
        f"adam (lr {LEARNING_RATE}), batch {args.batch_size}, {args.epochs} epochs",
        progress=True,
    )

    # -- compile ----------------------------------------------------------
    with console.task(
        f"compiling the training and inference functions ({mode_label})"
    ) as compiled:
        if mode == JAX_EXPORT:
            exported = ExportedTraining(network)
            train, predict = exported.train, exported.predict
        else:
            exported = None
            train = compile_train(network, mode)
            predict = compile_predict(network, mode)
        predict(data.x_test)  # Numba and JAX compile on the first call
    batches = len(data.y_train) // args.batch_size
    first_step = (
        "first training step (Numba compiles its kernels now: 1-2 minutes the first time)"
        if mode is None
        else "first training step"
    )

    # -- train ------------------------------------------------------------
    shuffle = np.random.default_rng(args.seed)
    history = []
    step_compile = 0.0
    for epoch in range(1, args.epochs + 1):
        order = shuffle.permutation(len(data.y_train))
        losses, accs = [], []
        seen, step_time, last_draw = 0, 0.0, 0.0
        for b in range(batches):
            idx = order[b * args.batch_size : (b + 1) * args.batch_size]
            t0 = time.perf_counter()
            if epoch == 1 and b == 0:
                with console.task(first_step) as first:
                    loss, acc = train(data.x_train[idx], data.y_train[idx])
                step_compile = first["seconds"]
            else:
                loss, acc = train(data.x_train[idx], data.y_train[idx])
                step_time += time.perf_counter() - t0
                seen += len(idx)
            interrupt.check()
            losses.append(float(loss))
            accs.append(float(acc))
            now = time.perf_counter()
            if now - last_draw > 0.1 or b == batches - 1:
                last_draw = now
                rate = seen / step_time if step_time else 0.0
                console.partial(
                    f"epoch {epoch:>2}/{args.epochs} {progress_bar(b + 1, batches)} "
                    f"loss {np.mean(losses):.4f}  acc {np.mean(accs):.4f}  {rate:,.0f} ex/s"
                )
        test_loss, test_acc = loss_and_accuracy(predict(data.x_test), data.y_test)
        # None (JSON null) when no step was timed: a one-batch epoch is all compile
        rate = seen / step_time if step_time else None
        record = {
            "epoch": epoch,
            "train_loss": float(np.mean(losses)),
            "train_accuracy": float(np.mean(accs)),
            "test_loss": test_loss,
            "test_accuracy": test_acc,
            "examples_per_s": rate,
        }
        history.append(record)
        console.partial("")
        console.line(
            f"epoch {epoch:>2}/{args.epochs} "
            f"{progress_bar(batches, batches)} loss {record['train_loss']:.4f}  "
            f"acc {record['train_accuracy']:.4f} | test loss {test_loss:.4f}  "
            f"acc {test_acc:.4f} | {_rate_text(rate)}",
            progress=True,
        )

    if exported is not None:
        exported.write_back()  # the trained values into the network's parameters

    # -- evaluate (deterministic) -----------------------------------------
    reference = compile_predict(network, None)(data.x_test)  # the default mode's answer
    _, accuracy = loss_and_accuracy(reference, data.y_test)
    correct = int(round(accuracy * len(data.y_test)))
    console.line(
        f"test accuracy {accuracy:.2%} ({correct}/{len(data.y_test)} images; deterministic: "
        "batch norm uses the running averages)"
    )
    if min_accuracy is not None and accuracy < min_accuracy:
        outcome.failures.append(
            f"test accuracy {accuracy:.2%} is below --min-accuracy {min_accuracy:.2%}"
        )

    # -- save and reload --------------------------------------------------
    reload_rows = save_and_reload(network, fresh, run_folder, data, reference, console, outcome)
    interrupt.check()

    # -- every mode -------------------------------------------------------
    mode_rows = compare_modes(network, data, reference, console, outcome)

    # -- plot -------------------------------------------------------------
    metrics = {
        "seed": args.seed,
        "epochs": history,
        "training_mode": mode_label,
        "batch_size": args.batch_size,
        "train_images": len(data.y_train),
        "test_images": len(data.y_test),
        "compile_seconds": compiled["seconds"] + step_compile,
        "test_accuracy": accuracy,
        "min_accuracy": min_accuracy,
        "reload": reload_rows,
        "modes": mode_rows,
    }
    png = run_folder.final("training_curves.png")
    metrics["plot"] = plot_curves(
        history,
        run_folder.path("training_curves.png"),
        title=f"trained in mode {mode_label}, seed {args.seed}",
    )
    metrics["total_seconds"] = time.perf_counter() - t_start
    metrics["failures"] = outcome.failures
    metrics_path = run_folder.final("metrics.json")
    # allow_nan=False: a NaN would make the file invalid JSON; fail loudly instead
    text = json.dumps(metrics, indent=1, allow_nan=False) + "\n"
    run_folder.path("metrics.json").write_text(text)
    console.line(f"training curves: {png}  (the plotted numbers: {metrics_path})")
    verdict = _verdict(outcome, accuracy, min_accuracy)
    console.line(f"done in {metrics['total_seconds']:.0f} s: {verdict}")
    outcome.metrics = metrics
    return outcome


def _rate_text(rate: float | None) -> str:
    return "- ex/s (no timed step)" if rate is None else f"{rate:,.0f} ex/s"


def _verdict(outcome: Outcome, accuracy: float, min_accuracy: float | None) -> str:
    if outcome.failures:
        return "SOME CHECKS FAILED"
    if min_accuracy is not None:
        return "all checks passed"
    chance = 1 / N_CLASSES
    level = "at chance level, " if accuracy < 2 * chance else ""
    return (
        f"the checks passed; accuracy {accuracy:.0%} ({level}not checked with --epochs/--limit: "
        "pass --min-accuracy to check it)"
    )


def save_and_reload(
    network, fresh, run_folder: RunFolder, data, reference, console, outcome
) -> list:
    """Save in both formats, load each into a fresh network, compare predictions."""
    import numpy as np

    from lasagne_bn.layers import get_all_param_values, set_all_param_values
    from lasagne_bn.layers.bn_storage import convert_param_values

    values = get_all_param_values(network)
    files = {
        "inv_std": ("weights_inv_std.npz", values),
        "var": ("weights_var.npz", convert_param_values(network, values, to_storage="var")),
    }
    notes = {
        "inv_std": "legacy Lasagne format, batch-norm statistics as inv_std",
        "var": "the same, with the statistics as var",
    }
    for i, (storage, (name, file_values)) in enumerate(files.items()):
        np.savez(run_folder.path(name), *file_values)
        console.line(f"{'saved' if i == 0 else '':<9}{run_folder.final(name)}  ({notes[storage]})")
    console.line(
        "reloaded into fresh networks (Lasagne's recipe), predictions vs the trained one:"
    )
    rows = []
    for storage, (name, _) in files.items():
        path = run_folder.final(name)
        with np.load(run_folder.path(name)) as f:
            loaded = [f[f"arr_{i}"] for i in range(len(f.files))]
        set_all_param_values(fresh[storage], loaded)
        probs = compile_predict(fresh[storage], None)(data.x_test)
        diff = float(np.max(np.abs(probs - reference)))
        same_labels = bool(np.array_equal(probs.argmax(1), reference.argmax(1)))
        rows.append(
            {
                "storage": storage,
                "file": str(path),
                "max_abs_diff": diff,
                "same_labels": same_labels,
            }
        )
        target = f"{path.name} -> stat_storage={storage!r} network:"
        console.line(
            f"{'':<9}{target:<56}max |diff| {diff:.1e}, "
            f"{'same' if same_labels else 'DIFFERENT'} labels"
        )
        if not (diff <= RELOAD_TOLERANCE and same_labels):
            outcome.failures.append(
                f"the network reloaded from {path.name} predicts differently "
                f"(max |diff| {diff:.2e} > {RELOAD_TOLERANCE:g} or other labels)"
            )
    return rows


def _time_inference(predict, x, budget: float = 3.0, repeats: int = 3) -> float:
    """Best of up to ``repeats`` calls, stopping once ``budget`` seconds are spent."""

    best, spent = math.inf, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        predict(x)
        elapsed = time.perf_counter() - t0
        best, spent = min(best, elapsed), spent + elapsed
        if spent > budget:
            break
    return best


def compare_modes(network, data, reference, console, outcome) -> list:
    """Compile inference in every mode on the trained network; time it; compare."""
    import numpy as np

    have_jax = _have_jax()
    console.line(
        f"inference on the {len(data.y_test)} test images in every mode "
        "(the same shared parameters):"
    )
    header = (
        f"  {'mode':<17}{'compile s':>10}{'inference ms':>14}{'test acc':>10}"
        f"{'max |diff| vs default':>23}"
    )
    console.line(header)
    rows = []
    for key, mode, label in TABLE_MODES:
        row = {"mode": key, "label": label}
        if key == "jax" and not have_jax:
            row["skipped"] = "jax is not installed (pip install 'lasagne-bn[jax]')"
            console.line(f"  {label:<17}skipped: {row['skipped']}")
            rows.append(row)
            continue
        try:
            t0 = time.perf_counter()
            console.partial(f"  {label:<17}compiling ...")
            predict = compile_predict(network, mode)
            probs = predict(data.x_test)
            row["compile_s"] = time.perf_counter() - t0
            row["inference_ms"] = 1e3 * _time_inference(predict, data.x_test)
        except Exception as err:  # a mode that fails is a failed check, reported in one line
            console.partial("")
            reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            row["error"] = reason
            console.line(f"  {label:<17}FAILED: {reason}")
            outcome.failures.append(f"inference in mode {label} failed ({reason})")
            rows.append(row)
            continue
        row["max_abs_diff"] = float(np.max(np.abs(probs - reference)))
        row["test_accuracy"] = float(np.mean(probs.argmax(1) == data.y_test))
        console.partial("")
        console.line(
            f"  {label:<17}{row['compile_s']:>10.1f}"
            f"{row['inference_ms']:>14.1f}{row['test_accuracy']:>10.2%}"
            f"{row['max_abs_diff']:>23.1e}"
        )
        if not row["max_abs_diff"] <= MODE_TOLERANCE:
            outcome.failures.append(
                f"mode {label} predicts differently from the default mode "
                f"(max |diff| {row['max_abs_diff']:.2e} > {MODE_TOLERANCE:g})"
            )
        rows.append(row)
    for note in (
        "compile: pytensor.function + the first call (Numba and JAX compile then; kernels",
        "  compiled earlier in this run or cached on disk are reused); inference: best of 3.",
        "C (CVM): C code where an Op has it, Python elsewhere. Mode 'C' (the whole-graph C",
        "  linker) cannot run this network: the convolution Ops have no C code.",
    ):
        console.line("  " + note)
    return rows


# --------------------------------------------------------------------------
# the plot


def plot_curves(history: list[dict], path: Path, title: str) -> dict:
    """Plot loss and accuracy per epoch (train and test); return where everything landed.

    The returned dict (saved in metrics.json) gives the image size and, for
    each panel, its pixel box, axis limits and scale, so the plotted numbers
    can be checked against the picture.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    epochs = [h["epoch"] for h in history]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4), dpi=100)
    panels = {"loss": ax_loss, "accuracy": ax_acc}
    for panel, ax in panels.items():
        for split in ("train", "test"):
            ax.plot(
                epochs,
                [h[f"{split}_{panel}"] for h in history],
                marker="o",
                markersize=6,
                color=COLORS[split],
                label=split,
            )
        ax.set_xlabel("epoch")
        ax.set_ylabel(panel)
        ax.grid(True, alpha=0.3)
        ax.legend()
    ax_loss.set_yscale("log")
    ax_loss.set_title("cross-entropy loss")
    ax_acc.set_title("accuracy")
    fig.suptitle(f"lasagne_bn demo: a CNN with batch norm on digits; {title}")
    fig.tight_layout()
    fig.canvas.draw()
    width, height = fig.canvas.get_width_height()
    layout = {"size_px": [width, height], "colors": COLORS, "panels": {}}
    for panel, ax in panels.items():
        box = ax.get_window_extent()
        layout["panels"][panel] = {
            "bbox_px": [box.x0, box.y0, box.x1, box.y1],  # origin at the bottom left
            "xlim": list(ax.get_xlim()),
            "ylim": list(ax.get_ylim()),
            "yscale": ax.get_yscale(),
        }
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return layout
