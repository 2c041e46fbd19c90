"""Fixtures and helpers for the compat tests (imported by them; not a conftest).

A second ``conftest.py`` would shadow ``tests/layers/conftest.py`` for the
``from conftest import ...`` lines there, so the compat tests import these
names explicitly: ``from legacy_helpers import legacy, run_cli``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import compat

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
DATA = ROOT / "tests" / "data"


#: ``pytestmark`` for the compat test modules: warnings that are not theirs.
QUIET = [
    pytest.mark.filterwarnings("ignore:Cannot cache compiled function"),
    pytest.mark.filterwarnings("ignore:PyTensor could not link to a BLAS installation"),
]


@pytest.fixture(scope="module")
def legacy():
    """``compat.install()`` for the whole test module, undone afterwards."""
    compat.install(theano_flags="")
    try:
        yield compat
    finally:
        compat.uninstall()


ENTRY_POINTS = """\
[lasagne_bn.commands]
run = compat.cli:register_run
convert = compat.cli:register_convert
inspect = compat.cli:register_inspect
"""

# Runs lasagne_bn.cli.main as the installed ``lasagne-bn`` script would,
# skipping built-in subcommands whose modules this checkout does not have.
CLI_SHIM = """\
import importlib.util, sys
import lasagne_bn.cli as cli
cli.BUILTIN_COMMANDS = {
    name: spec for name, spec in cli.BUILTIN_COMMANDS.items()
    if importlib.util.find_spec(spec.partition(":")[0]) is not None
}
sys.exit(cli.main())
"""


def cli_env(tmp_path: Path, extra: dict | None = None) -> dict:
    """An environment in which ``lasagne_bn.commands`` entry points exist for this checkout.

    The pyproject registers them; until the package is reinstalled, a
    ``.dist-info`` folder on ``PYTHONPATH`` declares the same entry points,
    which ``importlib.metadata`` finds just as it finds installed ones.
    """
    dist = tmp_path / "ep" / "lasagne_bn_compat_entry_points-0.dist-info"
    dist.mkdir(parents=True, exist_ok=True)
    (dist / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lasagne-bn-compat-entry-points\nVersion: 0\n"
    )
    (dist / "entry_points.txt").write_text(ENTRY_POINTS)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(dist.parent)])
    env.pop("THEANO_FLAGS", None)
    env.update(extra or {})
    return env


def run_cli(args, tmp_path: Path, extra_env: dict | None = None, timeout: float = 300):
    """``lasagne-bn ARGS`` in a subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", CLI_SHIM, *map(str, args)],
        env=cli_env(tmp_path, extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )
