"""Smoke test of ``benchmarks/net_bench.py``: it runs, on tiny sizes, and its rows agree."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "net_bench.py"


def _load_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("net_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_net_bench_runs_tiny_mlp():
    # The benchmark's anchor is PyTorch, a test extra only below Python 3.12
    # (pyproject: no CPU build of it for the newer Pythons here).
    pytest.importorskip("torch")
    cmd = [sys.executable, str(BENCH), "--nets", "mlp", "--tiny", "--reps", "1"]
    cmd += ["--impl", "ours/default", "torch"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = {}
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ours/") or line.startswith("| torch"):
            rows[cells[0]] = cells
    assert set(rows) == {"ours/default", "torch"}, out.stdout
    assert rows["ours/default"][1] == "default: whole-graph/whole-graph"
    assert rows["torch"][4] == "1.00"  # the anchor's own ratio
    for cells in rows.values():
        assert float(cells[2]) > 0 and float(cells[3]) > 0  # train, inference ms
    # Identical initial weights: the same loss before the first update.
    losses = {name: float(cells[7]) for name, cells in rows.items()}
    assert losses["ours/default"] == pytest.approx(losses["torch"], rel=1e-4), losses
    assert "0 busy processes" in out.stdout
    assert "WARNING" not in out.stdout
    assert re.search(r"load average \d", out.stdout)


def test_contention_starts_and_ends_its_processes():
    bench = _load_bench()
    with bench.Contention(2) as load:
        procs = list(load.procs)
        assert len(procs) == 2 and all(p.poll() is None for p in procs)
    assert all(p.poll() is not None for p in procs)
    with pytest.raises(RuntimeError), bench.Contention(1) as load:  # ended on error too
        procs = list(load.procs)
        raise RuntimeError("boom")
    deadline = time.time() + 5
    while any(p.poll() is None for p in procs) and time.time() < deadline:
        time.sleep(0.05)
    assert all(p.poll() is not None for p in procs)
