"""``lasagne-bn demo`` end to end: one short run (module fixture) checked from every side.

The run is a subprocess (``python -m lasagne_bn demo``), as a user starts it;
``--limit`` keeps it to a few hundred images and ``--epochs 3``.
"""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("matplotlib")

from lasagne_bn import demo  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--epochs", "3", "--limit", "300", "--seed", "1", "--batch-size", "32"]
MODE_LABELS = [label for _, _, label in demo.TABLE_MODES]

pytestmark = pytest.mark.slow


def run_demo(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "lasagne_bn", "demo", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "out"  # created by the demo
    proc = run_demo(*ARGS, "--out", str(out))
    metrics_path = out / "metrics.json"
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else None
    return proc, out, metrics


def test_exit_status_0_and_no_traceback(run):
    proc, _, _ = run
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""  # no traceback, no warning
    assert "FAILED" not in proc.stdout
    # --limit without --min-accuracy: the accuracy is reported, not checked, and the
    # verdict says so instead of "all checks passed"
    last = proc.stdout.rstrip().splitlines()[-1]
    assert "the checks passed" in last and "not checked" in last


def test_files_written(run):
    _, out, metrics = run
    for name in ("weights_inv_std.npz", "weights_var.npz", "training_curves.png", "metrics.json"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name
    assert not list(out.glob(".lasagne-bn-write-test"))
    assert not list(out.glob(".*partial*"))  # the run's staging folder is gone
    stdout = run[0].stdout
    assert f"training curves: {out / 'training_curves.png'}" in stdout
    assert metrics["train_images"] == 240 and metrics["test_images"] == 60


def test_network_is_described_by_the_network_itself(run):
    """The plan printed before training is describe_network's table, not a hand-written copy."""
    from lasagne_bn.layers import describe_network

    lines = run[0].stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("network  "))
    table = describe_network(demo.build_network()).splitlines()
    printed = [line[9:] for line in lines[start : start + len(table)]]
    assert printed == table
    assert lines[start + len(table)].startswith("         training in mode default (Numba)")


def test_progress_one_line_per_epoch(run):
    proc, _, metrics = run
    lines = [line for line in proc.stdout.splitlines() if line.startswith("epoch ")]
    assert len(lines) == 3
    for epoch, (line, record) in enumerate(zip(lines, metrics["epochs"], strict=True), 1):
        assert line.startswith(f"epoch  {epoch}/3 [####################] ")
        assert f"loss {record['train_loss']:.4f}" in line
        assert f"test loss {record['test_loss']:.4f}  acc {record['test_accuracy']:.4f}" in line
        assert re.search(r"\| [\d,]+ ex/s$", line), line
    assert "\r" not in proc.stdout  # not a terminal: no in-place redrawing


def test_training_learns(run):
    _, _, metrics = run
    epochs = metrics["epochs"]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert epochs[-1]["train_loss"] < epochs[0]["train_loss"]
    assert metrics["test_accuracy"] >= 0.8  # 3 short epochs on 240 images
    assert metrics["min_accuracy"] is None  # not the default run: reported, not enforced


def table_rows(stdout: str) -> dict[str, list[str]]:
    rows = {}
    for line in stdout.splitlines():
        for label in MODE_LABELS:
            if line.startswith(f"  {label} "):
                rows[label] = line[2 + len(label) :].split()
    return rows


def test_table_has_every_mode_agreeing(run):
    proc, _, metrics = run
    rows = table_rows(proc.stdout)
    assert sorted(rows) == sorted(MODE_LABELS), proc.stdout
    accuracy = f"{metrics['test_accuracy']:.2%}"
    for label, cells in rows.items():
        compile_s, inference_ms, acc, diff = cells
        assert float(compile_s) >= 0 and float(inference_ms) > 0
        assert acc == accuracy, (label, cells)
        assert float(diff) < demo.MODE_TOLERANCE, (label, cells)
    assert float(rows["default (Numba)"][3]) == 0.0
    assert [row["label"] for row in metrics["modes"]] == MODE_LABELS
    assert all(row["max_abs_diff"] < demo.MODE_TOLERANCE for row in metrics["modes"])


def test_saved_files_are_the_two_storages_of_the_trained_network(run):
    from lasagne_bn.layers import get_all_params
    from lasagne_bn.layers.bn_storage import bn_stat_indices, layer_epsilon

    _, out, metrics = run
    network = demo.build_network("inv_std")
    with np.load(out / "weights_inv_std.npz") as f:
        inv_std_values = [f[f"arr_{i}"] for i in range(len(f.files))]
    with np.load(out / "weights_var.npz") as f:
        var_values = [f[f"arr_{i}"] for i in range(len(f.files))]
    params = get_all_params(network)
    assert len(inv_std_values) == len(var_values) == len(params)
    stats = dict(bn_stat_indices(network))
    assert len(stats) == 3
    for i, (a, b) in enumerate(zip(inv_std_values, var_values, strict=True)):
        assert a.dtype == b.dtype == np.float32
        assert a.shape == params[i].get_value().shape
        if i in stats:  # var = 1 / inv_std**2 - epsilon
            eps = layer_epsilon(stats[i])
            np.testing.assert_allclose(b, 1 / a.astype(np.float64) ** 2 - eps, rtol=1e-5)
        else:
            np.testing.assert_array_equal(a, b)
    assert [r["storage"] for r in metrics["reload"]] == ["inv_std", "var"]
    assert metrics["reload"][0]["max_abs_diff"] == 0.0
    assert all(r["same_labels"] for r in metrics["reload"])


def test_legacy_file_reproduces_the_reported_accuracy(run):
    """Lasagne's loading recipe, outside the demo, gives the accuracy it printed."""
    import pytensor

    from lasagne_bn.layers import set_all_param_values

    _, out, metrics = run
    with pytensor.config.change_flags(floatX="float32"):
        network = demo.build_network("inv_std")
        with np.load(out / "weights_inv_std.npz") as f:
            set_all_param_values(network, [f[f"arr_{i}"] for i in range(len(f.files))])
        data = demo.load_data(seed=1, limit=300)
        probs = demo.compile_predict(network, "FAST_COMPILE")(data.x_test)
    assert np.mean(probs.argmax(1) == data.y_test) == metrics["test_accuracy"]


# ---------------------------------------------------------------------------
# the PNG is a plot of the recorded numbers


def read_png(path: Path) -> np.ndarray:
    import matplotlib.image

    image = matplotlib.image.imread(path)
    return image[..., :3]  # RGB in [0, 1]


def hex_rgb(color: str) -> np.ndarray:
    return np.array([int(color[i : i + 2], 16) / 255 for i in (1, 3, 5)])


def to_pixel(panel: dict, x: float, y: float, height: int) -> tuple[int, int]:
    """(row, column) of the data point (x, y) in the image of a panel."""
    x0, y0, x1, y1 = panel["bbox_px"]
    (xa, xb), (ya, yb) = panel["xlim"], panel["ylim"]
    fx = (x - xa) / (xb - xa)
    if panel["yscale"] == "log":
        fy = (math.log(y) - math.log(ya)) / (math.log(yb) - math.log(ya))
    else:
        fy = (y - ya) / (yb - ya)
    column = x0 + fx * (x1 - x0)
    row = height - (y0 + fy * (y1 - y0))  # the image's rows run downwards
    return round(row), round(column)


def marker_at(image: np.ndarray, row: int, column: int, color: str, radius: int = 2) -> bool:
    """Whether most pixels around (row, column) have ``color`` (a plotted marker)."""
    patch = image[row - radius : row + radius + 1, column - radius : column + radius + 1]
    close = np.abs(patch - hex_rgb(color)).max(axis=-1) < 0.1
    return close.mean() > 0.6


def points_found(image, layout, history, panel, split, values=None) -> list[bool]:
    values = values or [h[f"{split}_{panel}"] for h in history]
    info = layout["panels"][panel]
    color = layout["colors"][split]
    height = image.shape[0]
    return [
        marker_at(image, *to_pixel(info, h["epoch"], v, height), color)
        for h, v in zip(history, values, strict=True)
    ]


def test_png_is_a_plot_of_the_recorded_numbers(run):
    _, out, metrics = run
    image = read_png(out / "training_curves.png")
    layout = metrics["plot"]
    width, height = layout["size_px"]
    assert image.shape[:2] == (height, width) == (400, 1000)
    assert image.std() > 0.05 and (image.min(axis=-1) < 0.5).mean() > 0.01  # not blank
    history = metrics["epochs"]
    checked = 0
    for panel in ("loss", "accuracy"):
        for split in ("train", "test"):
            found = points_found(image, layout, history, panel, split)
            other = "test" if split == "train" else "train"
            for h, ok in zip(history, found, strict=True):
                # where the other series' marker sits on this one, it may hide it
                hidden = split == "train" and math.isclose(
                    h[f"{split}_{panel}"], h[f"{other}_{panel}"], rel_tol=0.02
                )
                assert ok or hidden, (panel, split, h)
                checked += ok
    assert checked >= 10


def test_png_check_rejects_numbers_that_were_not_plotted(run):
    """The check above is not vacuous: other numbers are not found in the picture."""
    _, out, metrics = run
    image = read_png(out / "training_curves.png")
    history = metrics["epochs"]
    losses = [h["train_loss"] for h in history]
    wrong = [losses[-1], losses[0], losses[1] * 3]  # the curve reversed, and off
    assert not all(points_found(image, metrics["plot"], history, "loss", "train", wrong))
    assert sum(points_found(image, metrics["plot"], history, "loss", "train", wrong)) <= 1
    swapped = points_found(image, metrics["plot"], history, "loss", "test", losses)
    assert not any(swapped)  # the train numbers in the test colour


# ---------------------------------------------------------------------------
# failure: one line on stderr, exit 1; --quiet; determinism


@pytest.fixture(scope="module")
def strict_quiet_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo-strict")
    proc = run_demo(*ARGS, "--out", str(out), "--quiet", "--min-accuracy", "1")
    return proc, json.loads((out / "metrics.json").read_text())


def test_accuracy_below_min_accuracy_fails_with_one_line(strict_quiet_run, run):
    proc, metrics = strict_quiet_run
    assert metrics["test_accuracy"] < 1.0
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("lasagne-bn demo: FAILED: test accuracy ")
    assert "below --min-accuracy 100.00%" in lines[0]


def test_quiet_prints_only_the_results(strict_quiet_run):
    proc, _ = strict_quiet_run
    assert not any(line.startswith(("epoch", "compiling")) for line in proc.stdout.splitlines())
    assert "test accuracy" in proc.stdout
    assert sorted(table_rows(proc.stdout)) == sorted(MODE_LABELS)


def test_same_seed_same_training(strict_quiet_run, run):
    _, metrics = strict_quiet_run
    first = run[2]["epochs"]
    again = metrics["epochs"]
    keys = ("train_loss", "train_accuracy", "test_loss", "test_accuracy")
    assert [[e[k] for k in keys] for e in again] == [[e[k] for k in keys] for e in first]


def test_training_under_jax_then_every_mode(tmp_path):
    """--mode jax: the parameters JAX updated serve Numba, CVM and FAST_COMPILE afterwards."""
    pytest.importorskip("jax")
    out = tmp_path / "jax"
    proc = run_demo("--mode", "jax", "--epochs", "1", "--limit", "100", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr == ""  # no warnings leak into a first run
    metrics = strict_json((out / "metrics.json").read_text())
    assert metrics["training_mode"] == "JAX"
    # 80 images, batch 64: the only step is the compiling one, so no speed is known
    assert [e["examples_per_s"] for e in metrics["epochs"]] == [None]
    assert "- ex/s (no timed step)" in proc.stdout and "nan" not in proc.stdout
    assert [row["label"] for row in metrics["modes"]] == MODE_LABELS
    assert all(row["max_abs_diff"] < demo.MODE_TOLERANCE for row in metrics["modes"])


def strict_json(text: str):
    """json.loads that refuses NaN/Infinity, which are not JSON."""

    def refuse(name):
        raise ValueError(f"{name} is not valid JSON")

    return json.loads(text, parse_constant=refuse)


def test_ctrl_c_ends_with_one_line_130_and_leaves_the_last_run(run):
    """Ctrl-C while training a rerun into the same --out: status 130, the old run intact."""
    _, out, _ = run
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lasagne_bn",
            "demo",
            *ARGS[2:],
            "--epochs",
            "200",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        for line in proc.stdout:
            if line.startswith("epoch  1/"):
                break
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert stderr == "lasagne-bn demo: interrupted\n"
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_training_through_the_exported_jax_model(tmp_path):
    """--mode jax-export: one jitted optax step; the trained values serve every mode after."""
    pytest.importorskip("optax")
    out = tmp_path / "export"
    proc = run_demo(
        "--mode", "jax-export", "--epochs", "2", "--limit", "300", "--batch-size", "32",
        "--out", str(out),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    metrics = strict_json((out / "metrics.json").read_text())
    assert metrics["training_mode"] == "exported JAX (lasagne_bn.export)"
    assert metrics["epochs"][-1]["train_loss"] < metrics["epochs"][0]["train_loss"]
    assert metrics["test_accuracy"] > 0.5
    assert all(row["max_abs_diff"] < demo.MODE_TOLERANCE for row in metrics["modes"])
