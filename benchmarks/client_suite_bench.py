"""Real clients of Theano, their own tests unchanged, here and on legacy Theano: results and time.

Old code often reached Theano and Lasagne through a library built on them,
and those libraries' own tests are the strictest check that unchanged legacy
code runs.  Two clients:

- **keras**: Keras 2.2.4 on ``KERAS_BACKEND=theano`` (its
  ``BatchNormalization`` calls ``T.nnet.bn.batch_normalization_train/test``),
  ``tests/keras/backend/backend_test.py`` of the release's source archive,
  downloaded with its pure-Python dependencies (pip, from the package
  registry);
- **nolearn**: nolearn 0.6.1's ``nolearn/lasagne/tests`` (a scikit-learn
  style wrapper on Lasagne), from a checkout of the release (``git clone
  https://github.com/dnouri/nolearn && git -C nolearn checkout 0.6.1``: the
  release's archive on the registry leaves those tests out), given with
  ``--nolearn-source``; its dependencies ``tabulate``, ``mock`` and
  ``pydotplus`` come from the registry.

For each, the script runs the tests through ``lasagne-bn run -m pytest``
with empty PyTensor and Numba caches (cold), one process; with
``--legacy-python`` and ``--legacy-lasagne`` (the recipe in
``../shared/LEGACY_ORACLE.md``) it runs the same files on Theano 1.0.5 with
an empty Theano compile directory.  It writes one row per client and stack
(passed, failed, skipped, wall seconds) and the tests that pass on legacy
Theano but not here.

Both stacks get the same stand-ins, from a ``sitecustomize`` module in the
scratch folder, for what Python and scikit-learn removed since: the
``collections.Iterable`` family of aliases (Python 3.10), and for nolearn
``sklearn.cross_validation`` and ``sklearn.grid_search`` (scikit-learn
0.20; the old call signatures on today's classes), ``fetch_mldata``'s
MNIST (its server is gone: 70,000 28x28 images made from scikit-learn's
bundled 8x8 digits, scaled 3x and shifted) and ``load_boston`` (removed in
1.2: a seeded linear problem of its shape).  The migration guide says which
of these a user needs.

Usage::

    python benchmarks/client_suite_bench.py --nolearn-source ~/src/nolearn \\
        --legacy-python /work/legacy/venv/bin/python --legacy-lasagne /work/legacy/lasagne
    python benchmarks/client_suite_bench.py --client keras -k test_linear_operations \\
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
NOLEARN = "0.6.1"
KERAS_DEPENDENCIES = [f"keras=={KERAS}", "keras_applications==1.0.8", "keras_preprocessing==1.1.2"]
KERAS_DEPENDENCIES += ["six", "pyyaml"]
NOLEARN_DEPENDENCIES = ["tabulate", "mock", "pydotplus"]
# nolearn's visualisation tests import matplotlib, which this package's
# environment has; the legacy one gets a release that builds on its NumPy 1.
LEGACY_PLOTTING = ["matplotlib<3.8", "contourpy<1.2", "cycler", "fonttools", "kiwisolver"]
LEGACY_PLOTTING += ["pillow", "pyparsing", "python-dateutil", "packaging"]

ALIASES = """\
# Python 3.10 removed these aliases; Keras 2.2.4 and nolearn 0.6.1 import them
# from collections.
import collections
import collections.abc

for _name in ("Iterable", "Mapping", "MutableMapping", "Sequence", "Callable"):
    setattr(collections, _name, getattr(collections.abc, _name))
"""

SKLEARN_STAND_INS = """

def _old_folds(new_class, stratified):
    # sklearn.cross_validation's KFold(n, n_folds) and StratifiedKFold(y,
    # n_folds): lists of (train, test) index pairs, from today's classes.
    def folds(n_or_y, n_folds=3, shuffle=False, random_state=None):
        import numpy as np

        y = np.asarray(n_or_y) if stratified else np.zeros(n_or_y)
        splitter = new_class(int(n_folds), shuffle=shuffle, random_state=random_state)
        return list(splitter.split(np.zeros(len(y)), y))

    return folds


def _fetch_mldata(name, **kwargs):
    # MNIST's shape and types (70,000 28x28 uint8 images, float labels) from
    # scikit-learn's bundled 8x8 digits, scaled 3x and shifted by 0-2 pixels.
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.utils import Bunch

    if name != "mnist-original":
        raise ValueError(f"no local stand-in for mldata {name!r}")
    digits = load_digits()
    rng = np.random.RandomState(0)
    pick = rng.randint(len(digits.target), size=70000)
    shifts = rng.randint(3, size=(70000, 2))
    big = np.kron(digits.images[pick], np.ones((3, 3))) * (255 / 16)
    images = np.zeros((70000, 28, 28), np.uint8)
    for r, c in set(map(tuple, shifts)):
        rows = np.flatnonzero((shifts[:, 0] == r) & (shifts[:, 1] == c))
        images[rows, r : r + 24, c : c + 24] = big[rows]
    return Bunch(data=images.reshape(70000, 784), target=digits.target[pick].astype(float))


def _load_boston(**kwargs):
    # Boston's shape (506 x 13 features, prices around 22): a seeded linear
    # problem with noise.
    import numpy as np
    from sklearn.utils import Bunch

    rng = np.random.RandomState(0)
    data = rng.gamma(2.0, 2.0, size=(506, 13))
    weights = rng.uniform(-1.0, 1.0, size=13)
    z = (data - data.mean(0)) / data.std(0)
    target = 22.0 + 3.0 * (z @ weights) + rng.normal(0.0, 1.0, 506)
    return Bunch(data=data, target=target)


def _stand_ins():
    # scikit-learn 0.20 removed sklearn.cross_validation and sklearn.grid_search,
    # fetch_mldata's server is gone, and 1.2 removed load_boston.
    import sys
    import types

    import sklearn.datasets
    from sklearn import model_selection

    cross_validation = types.ModuleType("sklearn.cross_validation")
    cross_validation.KFold = _old_folds(model_selection.KFold, stratified=False)
    cross_validation.StratifiedKFold = _old_folds(model_selection.StratifiedKFold, stratified=True)
    cross_validation.train_test_split = model_selection.train_test_split
    grid_search = types.ModuleType("sklearn.grid_search")
    grid_search.GridSearchCV = model_selection.GridSearchCV
    sys.modules.update({m.__name__: m for m in (cross_validation, grid_search)})
    sklearn.datasets.fetch_mldata = _fetch_mldata
    sklearn.datasets.load_boston = _load_boston


_stand_ins()
"""


def _pip(python: str = sys.executable) -> list[str]:
    return [python, "-m", "pip", "-q", "--disable-pip-version-check"]


def prepare_keras(work: Path) -> tuple[Path, list[str], list[Path]]:
    """Keras's backend tests: their folder, pytest's arguments, the import folders."""
    subprocess.run(
        [*_pip(), "download", f"keras=={KERAS}", "--no-deps", "--no-binary", ":all:", "-d", work],
        check=True,
    )
    (archive,) = work.glob("*eras-*.tar.gz")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if "/tests/keras/backend/" in m.name]
        tar.extractall(work / "src", members=members, filter="data")
    (suite,) = (work / "src").glob("*/tests/keras/backend")
    deps = work / "keras-deps"
    install = [*_pip(), "install", "--no-deps", "--target", deps, *KERAS_DEPENDENCIES]
    subprocess.run(install, check=True)
    (deps / "sitecustomize.py").write_text(ALIASES)
    return suite, ["backend_test.py"], [deps]


def prepare_nolearn(work: Path, source: Path) -> tuple[Path, list[str], list[Path]]:
    """nolearn's Lasagne tests, copied from a checkout of the release."""
    setup = source / "setup.py"
    text = setup.read_text() if setup.exists() else ""
    if f"version = '{NOLEARN}'" not in text or not (source / "nolearn/lasagne/tests").is_dir():
        raise SystemExit(f"--nolearn-source={source}: not a checkout of nolearn {NOLEARN}")
    suite = work / "nolearn-src"
    shutil.copytree(source / "nolearn", suite / "nolearn")
    deps = work / "nolearn-deps"
    install = [*_pip(), "install", "--no-deps", "--target", deps, *NOLEARN_DEPENDENCIES]
    subprocess.run(install, check=True)
    (deps / "sitecustomize.py").write_text(ALIASES + SKLEARN_STAND_INS)
    return suite, ["nolearn/lasagne/tests"], [deps]


def run_suite(suite: Path, python: list[str], env: dict, report: Path, tests, select):
    """One run of a client's tests; its wall seconds and per-test outcomes."""
    command = [*python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore"]
    command += ["-o", "addopts=", f"--junitxml={report}", *tests]
    if select:
        command += ["-k", select]
    start = time.perf_counter()
    proc = subprocess.run(command, cwd=suite, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if not report.exists():
        raise SystemExit(f"the run did not finish:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname')}::{case.get('name')}"
        if case.find("skipped") is not None:
            outcomes[name] = "skipped"
        elif case.find("failure") is not None or case.find("error") is not None:
            outcomes[name] = "failed"
        else:
            outcomes[name] = "passed"
    return wall, outcomes


def run_client(client: str, work: Path, args, lasagne_bn: str) -> dict:
    """One client's tests on each stack: {stack: (wall seconds, outcomes)}."""
    if client == "keras":
        suite, tests, paths = prepare_keras(work)
    else:
        suite, tests, paths = prepare_nolearn(work, Path(args.nolearn_source).expanduser())
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PYTENSOR", "THEANO"))}
    base.update(HOME=str(work / "home"), KERAS_BACKEND="theano")
    runs = {}
    ours = dict(base, PYTHONPATH=os.pathsep.join(map(str, paths)), THEANO_FLAGS="floatX=float32")
    ours.update(PYTENSOR_FLAGS=f"base_compiledir={work}/pytensor", NUMBA_CACHE_DIR=f"{work}/numba")
    runs["lasagne_bn"] = run_suite(
        suite, [lasagne_bn, "run"], ours, work / "ours.xml", tests, args.select
    )
    if args.legacy_python:
        if client == "nolearn":
            plotting = work / "legacy-plotting"
            install = [*_pip(args.legacy_python), "install", "--no-deps", "--target", plotting]
            subprocess.run([*install, *LEGACY_PLOTTING], check=True)
            paths = [*paths, plotting]
        legacy = dict(base, PYTHONPATH=os.pathsep.join(map(str, [*paths, args.legacy_lasagne])))
        legacy["THEANO_FLAGS"] = (
            f"device=cpu,floatX=float32,blas.ldflags=,base_compiledir={work}/theano"
        )
        runs["theano_1.0.5"] = run_suite(
            suite, [args.legacy_python], legacy, work / "legacy.xml", tests, args.select
        )
    return runs


def compare(runs: dict, tests: str) -> dict:
    """The record of what passes on legacy and not here, and the time ratio."""
    here, legacy = runs["lasagne_bn"][1], runs["theano_1.0.5"][1]
    lost = sorted(n for n, o in legacy.items() if o == "passed" and here.get(n) != "passed")
    gained = sorted(n for n, o in here.items() if o == "passed" and legacy.get(n) != "passed")
    return {
        "table": "against legacy",
        "tests": tests,
        "passes on legacy, not here": len(lost),
        "which": ", ".join(n.rpartition(".")[2] for n in lost) or None,
        "passes here, not on legacy": len(gained),
        "wall time over legacy's": runs["lasagne_bn"][0] / runs["theano_1.0.5"][0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--client",
        choices=["keras", "nolearn", "all"],
        default="all",
        help="whose tests (default all; nolearn's need --nolearn-source)",
    )
    parser.add_argument("--nolearn-source", help=f"a checkout of nolearn {NOLEARN}")
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
    clients = ["keras", "nolearn"] if args.client == "all" else [args.client]
    if "nolearn" in clients and not args.nolearn_source:
        parser.error(f"nolearn's tests need --nolearn-source (a checkout of nolearn {NOLEARN})")
    load = f"load average {os.getloadavg()[0]:.2f} at the start"
    lasagne_bn = shutil.which("lasagne-bn", path=os.path.dirname(sys.executable))
    if lasagne_bn is None:
        raise SystemExit("no lasagne-bn next to this Python: install the package first")
    suites = {
        "keras": f"Keras {KERAS} tests/keras/backend/backend_test.py",
        "nolearn": f"nolearn {NOLEARN} nolearn/lasagne/tests",
    }
    records = []
    for client in clients:
        with tempfile.TemporaryDirectory(prefix=f"lbn-{client}-") as tmp:
            runs = run_client(client, Path(tmp), args, lasagne_bn)
        for stack, (wall, outcomes) in runs.items():
            counts = {
                k: sum(v == k for v in outcomes.values()) for k in ("passed", "failed", "skipped")
            }
            records.append(
                {
                    "table": "each client's tests, cold caches, one process each",
                    "tests": suites[client],
                    "stack": stack,
                    **counts,
                    "wall s": wall,
                }
            )
            print(f"{client}, {stack}: {counts} in {wall:.0f} s", flush=True)
        if "theano_1.0.5" in runs:
            records.append(compare(runs, suites[client]))
            print(f"{client}: {records[-1]}", flush=True)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _results import write

    print(f"results: {write('client_suite_bench', records, load=load, path=args.json)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
