"""The README's "After training" snippets run as written, in order, in one namespace."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"## {title}")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def test_after_training_snippets_run(capsys):
    blocks = re.findall(r"```python\n(.*?)```", section("After training"), flags=re.S)
    assert len(blocks) >= 2
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    assert "recompute_bn_stats" in namespace and "lint" in namespace
    assert capsys.readouterr().out == ""  # the demo network has no lint findings
