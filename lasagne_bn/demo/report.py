"""The demo's results: the plot of the training curves, metrics.json and the verdict."""

from __future__ import annotations

import json
from pathlib import Path

from lasagne_bn.demo.network import N_CLASSES

COLORS = {"train": "#1f77b4", "test": "#d62728"}


def plot_curves(history: list[dict], path: Path, title: str) -> dict:
    """Plot loss and accuracy per epoch (train and test); return where everything landed.

    The returned dict (saved in metrics.json) gives the image size and, for
    each panel, its pixel box, axis limits and scale, so the plotted numbers
    can be checked against the picture.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)  # no display needed, and none opened
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


def write_metrics(metrics: dict, path: Path) -> None:
    """``metrics`` as indented JSON; a NaN raises instead of making the file invalid JSON."""
    path.write_text(json.dumps(metrics, indent=1, allow_nan=False) + "\n")


def verdict(failures: list[str], accuracy: float, min_accuracy: float | None) -> str:
    """The last line's summary; it says when the accuracy was reported but not checked."""
    if failures:
        return "SOME CHECKS FAILED"
    if min_accuracy is not None:
        return "all checks passed"
    chance = 1 / N_CLASSES
    level = "at chance level, " if accuracy < 2 * chance else ""
    return (
        f"the checks passed; accuracy {accuracy:.0%} ({level}not checked with --epochs/--limit: "
        "pass --min-accuracy to check it)"
    )
