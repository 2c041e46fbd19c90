"""Sphinx configuration of the lasagne_bn documentation (``sphinx-build -W docs OUT``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

project = "lasagne_bn"
author = "the lasagne_bn authors"
copyright = "2026, the lasagne_bn authors"
release = "0.1.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
myst_heading_anchors = 3
autosummary_generate = True
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "signature"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
# The docstrings name PyTensor, NumPy and JAX objects that this site does not
# document; a reference it cannot resolve stays plain text.
nitpicky = False
suppress_warnings = ["myst.xref_missing", "ref.python"]
html_theme = "alabaster"
html_title = "lasagne_bn"
html_static_path = ["_static"]


def _plot(app) -> None:
    """The performance plot, made from the benchmark's JSON on every build."""
    subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "report.py"),
            str(ROOT / "benchmarks" / "results" / "bn_bench.json"),
            "--md",
            str(Path(app.srcdir) / "_static" / "bn_bench_table.md"),
            "--png",
            str(Path(app.srcdir) / "_static" / "bn_bench.png"),
        ],
        check=True,
    )


def setup(app) -> None:
    app.connect("builder-inited", _plot)
