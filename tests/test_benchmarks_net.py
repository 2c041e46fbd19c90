"""Smoke test of ``benchmarks/net_bench.py``: it runs, on tiny sizes, and its rows agree."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "net_bench.py"
REPORT = ROOT / "benchmarks" / "report.py"


def _load_bench():
    import importlib.util

    spec = importlib.util.spec_from_file_location("net_bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_net_bench_runs_tiny_mlp(tmp_path):
    # The benchmark's anchor is PyTorch, a test extra only below Python 3.12
    # (pyproject: no CPU build of it for the newer Pythons here).
    pytest.importorskip("torch")
    # --json into tmp_path: a test must never overwrite the committed results
    result_path = tmp_path / "net_bench.json"
    cmd = [sys.executable, str(BENCH), "--nets", "mlp", "--tiny", "--reps", "1"]
    cmd += ["--impl", "ours/default", "torch", "--json", str(result_path)]
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
    assert f"results: {result_path}" in out.stdout

    result = json.loads(result_path.read_text())
    assert result["benchmark"] == "net_bench"
    assert "--json" in result["command"] and result["versions"]["torch"]
    records = result["records"]
    tables = list(dict.fromkeys(r["table"] for r in records))
    assert len(tables) == 1 and tables[0].startswith("mlp {'batch': 8,"), tables
    assert "0 busy processes; load average" in tables[0]
    by_impl = {r["implementation"]: r for r in records}
    assert list(by_impl) == ["ours/default", "torch"]
    for rec in records:
        assert rec["mode"] == rows[rec["implementation"]][1]  # the JSON is what was printed
        for key in ("train step ms", "inference ms", "compile + first calls s", "first loss"):
            assert isinstance(rec[key], float) and math.isfinite(rec[key]), (key, rec)
        assert rec["train step ms"] > 0 and rec["inference ms"] > 0
        assert isinstance(rec["trainable params"], int) and rec["trainable params"] > 0
    assert by_impl["torch"]["train / torch"] == 1.0 == by_impl["torch"]["infer / torch"]
    assert by_impl["ours/default"]["first loss"] == pytest.approx(
        by_impl["torch"]["first loss"], rel=1e-4
    )

    md = tmp_path / "net_bench.md"
    report = [sys.executable, str(REPORT), str(result_path), "--md", str(md)]
    done = subprocess.run(report, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    text = md.read_text()
    assert f"## {tables[0]}" in text
    head = "| implementation | mode | train step ms | inference ms | train / torch |"
    assert head in text
    assert "| ours/default | default: whole-graph/whole-graph |" in text
    assert re.search(r"^\| torch \| .* \| 1\.00 \| 1\.00 \| ", text, re.M), text


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
