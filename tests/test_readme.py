"""README.md stays short, and its Python examples run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_is_short():
    assert len(README.read_text().splitlines()) <= 200


def test_readme_examples_run(capsys):
    pytest.importorskip("jax")
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) == 3
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert capsys.readouterr().out.split() == ["True", "npz", "(32,", "10)"]
