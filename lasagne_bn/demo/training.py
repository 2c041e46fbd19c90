"""The demo's training loop: minibatches of Adam, one line per epoch."""

from __future__ import annotations

import time
from dataclasses import dataclass

from lasagne_bn.demo.console import Console, progress_bar, rate_text
from lasagne_bn.demo.data import Data
from lasagne_bn.demo.network import (
    ExportedTraining,
    compile_predict,
    compile_train,
    loss_and_accuracy,
)

# the --mode value of training through lasagne_bn.export.export
JAX_EXPORT = "jax-export"


@dataclass
class Training:
    """What a training run leaves: one record per epoch and the compile time."""

    history: list[dict]
    compile_seconds: float  # the functions, plus the first step (Numba and JAX compile then)


def train_network(
    network,
    data: Data,
    mode,
    mode_label: str,
    epochs: int,
    batch_size: int,
    seed: int,
    console: Console,
    interrupt,
) -> Training:
    """Train ``network`` in place; print one line per epoch (with the test scores).

    ``mode`` is a PyTensor mode, or :data:`JAX_EXPORT` for one jitted JAX
    step on the exported network, whose results are written back into the
    network's parameters at the end.  ``interrupt.check()`` runs after every
    step, so that Ctrl-C stops between steps, never inside a parameter update.
    """
    import numpy as np

    with console.task(f"compiling the training and inference functions ({mode_label})") as task:
        if mode == JAX_EXPORT:
            exported = ExportedTraining(network)
            train, predict = exported.train, exported.predict
        else:
            exported = None
            train = compile_train(network, mode)
            predict = compile_predict(network, mode)
        predict(data.x_test)  # Numba and JAX compile on the first call
    first_step = (
        "first training step (Numba compiles its kernels now: 1-2 minutes the first time)"
        if mode is None
        else "first training step"
    )
    shuffle = np.random.default_rng(seed)
    batches = len(data.y_train) // batch_size
    history = []
    first_step_seconds = 0.0
    for epoch in range(1, epochs + 1):
        order = shuffle.permutation(len(data.y_train))
        losses, accs = [], []
        seen, step_time, last_draw = 0, 0.0, 0.0
        for b in range(batches):
            idx = order[b * batch_size : (b + 1) * batch_size]
            t0 = time.perf_counter()
            if epoch == 1 and b == 0:  # compiles: timed apart from the training speed
                with console.task(first_step) as first:
                    loss, acc = train(data.x_train[idx], data.y_train[idx])
                first_step_seconds = first["seconds"]
            else:
                loss, acc = train(data.x_train[idx], data.y_train[idx])
                step_time += time.perf_counter() - t0
                seen += len(idx)
            interrupt.check()
            losses.append(float(loss))
            accs.append(float(acc))
            now = time.perf_counter()
            if now - last_draw > 0.1 or b == batches - 1:  # redraw at most 10 times a second
                last_draw = now
                rate = seen / step_time if step_time else 0.0
                console.partial(
                    f"epoch {epoch:>2}/{epochs} {progress_bar(b + 1, batches)} "
                    f"loss {np.mean(losses):.4f}  acc {np.mean(accs):.4f}  {rate:,.0f} ex/s"
                )
        test_loss, test_acc = loss_and_accuracy(predict(data.x_test), data.y_test)
        record = {
            "epoch": epoch,
            "train_loss": float(np.mean(losses)),
            "train_accuracy": float(np.mean(accs)),
            "test_loss": test_loss,
            "test_accuracy": test_acc,
            # None (JSON null) when no step was timed: a one-batch epoch is all compile
            "examples_per_s": seen / step_time if step_time else None,
        }
        history.append(record)
        console.partial("")
        console.line(
            f"epoch {epoch:>2}/{epochs} "
            f"{progress_bar(batches, batches)} loss {record['train_loss']:.4f}  "
            f"acc {record['train_accuracy']:.4f} | test loss {test_loss:.4f}  "
            f"acc {test_acc:.4f} | {rate_text(record['examples_per_s'])}",
            progress=True,
        )
    if exported is not None:
        exported.write_back()  # the trained values into the network's parameters
    return Training(history, task["seconds"] + first_step_seconds)
