"""Benchmark results as data: one JSON file per benchmark in benchmarks/results/.

Each file holds the run's context (versions, machine, command, load) and its
records; ``benchmarks/report.py`` makes the Markdown tables and the PNG plot
from it, so a table is never edited by hand.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

#: Distributions whose versions a result records (those installed).
PACKAGES = ("lasagne-bn", "pytensor", "numpy", "numba", "jax", "torch", "flax")


def _versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _commit() -> str | None:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=RESULTS.parent,
            capture_output=True,
            text=True,
            check=True,
        )
    except (OSError, subprocess.CalledProcessError):
        return None
    return out.stdout.strip() or None


def context(load: str | None = None) -> dict:
    """What a reader needs to trust a figure: versions, machine, command, load."""
    try:
        loadavg = os.getloadavg()
    except OSError:
        loadavg = None
    return {
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": _commit(),
        "command": " ".join(["python", *sys.argv]),
        "machine": {"cpu": _cpu(), "cores": os.cpu_count(), "system": platform.platform()},
        "versions": _versions(),
        "load": load or (f"load average {loadavg[0]:.2f}" if loadavg else "unknown"),
    }


def write(name: str, records: list[dict], load: str | None = None, path=None) -> Path:
    """Write ``records`` with the run's context to ``results/<name>.json``."""
    target = Path(path) if path else RESULTS / f"{name}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    payload = {"benchmark": name, **context(load), "records": records}
    target.write_text(json.dumps(payload, indent=1) + "\n")
    return target
