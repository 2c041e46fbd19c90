"""Keras 2.2.4's Theano-backend tests, unchanged, here and on legacy Theano: results and time.

Keras 2 on ``KERAS_BACKEND=theano`` is a real client of Theano (its
``BatchNormalization`` calls ``T.nnet.bn.batch_normalization_train/test``),
and its own backend tests (``tests/keras/backend/backend_test.py`` of the
release's source archive) are the strictest check that unchanged code that
reached Theano through a library runs.  This script

1. downloads Keras 2.2.4's source archive (for its tests) and installs
   Keras with its pure-Python dependencies into a scratch folder (pip, from
   the package registry);
2. runs the backend tests through ``lasagne-bn run -m pytest`` with empty
   PyTensor and Numba caches (cold), one process;
3. with ``--legacy-python`` and ``--legacy-lasagne`` (the recipe in
   ``../shared/LEGACY_ORACLE.md``), runs the same files on Theano 1.0.5 with
   an empty Theano compile directory;

and writes one row per stack (passed, failed, skipped, wall seconds) and the
tests that pass on legacy Theano but not here (none, when all is well).

Python 3.10 removed the ``collections.Iterable`` family of aliases that
Keras 2.2.4 imports; both runs get them from a ``sitecustomize`` module in
the scratch folder (the migration guide says so for users).

Usage::

    python benchmarks/client_suite_bench.py \\
        --legacy-python /work/legacy/venv/bin/python --legacy-lasagne /work/legacy/lasagne
    python benchmarks/client_suite_bench.py -k test_linear_operations \\
        --json /tmp/clients.json                 # smoke test, this stack only
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

KERAS = "2.2.4"
DEPENDENCIES = [f"keras=={KERAS}", "keras_applications==1.0.8", "keras_preprocessing==1.1.2"]
DEPENDENCIES += ["six", "pyyaml"]
SUITE = "tests/keras/backend"

SITECUSTOMIZE = """\
# Python 3.10 removed these aliases; Keras 2.2.4 imports them from collections.
import collections
import collections.abc

for _name in ("Iterable", "Mapping", "MutableMapping", "Sequence", "Callable"):
    setattr(collections, _name, getattr(collections.abc, _name))
"""


def prepare(work: Path) -> Path:
    """Keras's backend tests and an import folder; returns the tests' folder."""
    pip = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    subprocess.run(
        [*pip, "download", f"keras=={KERAS}", "--no-deps", "--no-binary", ":all:", "-d", work],
        check=True,
    )
    (archive,) = work.glob("*eras-*.tar.gz")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if f"/{SUITE}/" in m.name]
        tar.extractall(work / "src", members=members, filter="data")
    (suite,) = (work / "src").glob(f"*/{SUITE}")
    deps = work / "deps"
    subprocess.run([*pip, "install", "--no-deps", "--target", deps, *DEPENDENCIES], check=True)
    (deps / "sitecustomize.py").write_text(SITECUSTOMIZE)
    return suite


def run_suite(suite: Path, python: list[str], env: dict, report: Path, select: str | None):
    """One run of the backend tests; its wall seconds and per-test outcomes."""
    command = [*python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    command += ["-o", "addopts=", f"--junitxml={report}", "backend_test.py"]
    if select:
        command += ["-k", select]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not report.exists():
        raise SystemExit(f"the run did not finish:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = case.get("name")
        if case.find("skipped") is not None:
            outcomes[name] = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = "failed"
        else:
            outcomes[name] = "passed"
    return wall, outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--legacy-python", help="the Python that has Theano 1.0.5")
    parser.add_argument("--legacy-lasagne", help="a Lasagne master checkout (PYTHONPATH)")
    parser.add_argument("-k", dest="select", help="only the tests pytest -k selects")
    parser.add_argument(
        "--json",
        default=None,
        help="where to write the table as JSON (default "
        "benchmarks/results/client_suite_bench.json)",
    )
    args = parser.parse_args(argv)
    if bool(args.legacy_python) != bool(args.legacy_lasagne):
        parser.error("--legacy-python and --legacy-lasagne go together")
    load = f"load average {os.getloadavg()[0]:.2f} at the start"
    lasagne_bn = shutil.which("lasagne-bn", path=os.path.dirname(sys.executable))
    if lasagne_bn is None:
        raise SystemExit("no lasagne-bn next to this Python: install the package first")
    records = []
    with tempfile.TemporaryDirectory(prefix="lbn-clients-") as tmp:
        work = Path(tmp)
        suite = prepare(work)
        base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTENSOR", "THEANO"))}
        base.update(HOME=str(work / "home"), KERAS_BACKEND="theano")
        runs = {}
        ours = dict(base, PYTHONPATH=str(work / "deps"), THEANO_FLAGS="floatX=float32")
        ours.update(
            PYTENSOR_FLAGS=f"base_compiledir={work}/pytensor", NUMBA_CACHE_DIR=f"{work}/numba"
        )
        runs["lasagne_bn"] = run_suite(
            suite, [lasagne_bn, "run"], ours, work / "ours.xml", args.select
        )
        if args.legacy_python:
            legacy = dict(base, PYTHONPATH=f"{work / 'deps'}{os.pathsep}{args.legacy_lasagne}")
            legacy["THEANO_FLAGS"] = (
                f"device=cpu,floatX=float32,blas.ldflags=,base_compiledir={work}/theano"
            )
            runs["theano_1.0.5"] = run_suite(
                suite, [args.legacy_python], legacy, work / "legacy.xml", args.select
            )
    table = f"Keras {KERAS} {SUITE}/backend_test.py, cold caches, one process each"
    for stack, (wall, outcomes) in runs.items():
        counts = {
            k: sum(v == k for v in outcomes.values()) for k in ("passed", "failed", "skipped")
        }
        records.append({"table": table, "stack": stack, **counts, "wall s": wall})
        print(f"{stack}: {counts} in {wall:.0f} s", flush=True)
    if "theano_1.0.5" in runs:
        here, legacy_outcomes = runs["lasagne_bn"][1], runs["theano_1.0.5"][1]
        lost = sorted(
            n for n, o in legacy_outcomes.items() if o == "passed" and here.get(n) != "passed"
        )
        gained = sorted(
            n for n, o in here.items() if o == "passed" and legacy_outcomes.get(n) != "passed"
        )
        ratio = runs["lasagne_bn"][0] / runs["theano_1.0.5"][0]
        records.append(
            {
                "table": "against legacy",
                "passes on legacy, not here": len(lost),
                "which": ", ".join(lost) or None,
                "passes here, not on legacy": len(gained),
                "wall time over legacy's": ratio,
            }
        )
        print(f"lost {lost}; gained {len(gained)}; time ratio {ratio:.2f}")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _results import write

    print(f"results: {write('client_suite_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
