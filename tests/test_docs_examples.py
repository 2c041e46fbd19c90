"""Every example of the documentation pages (docs/*.md) runs as a doctest."""

from __future__ import annotations

import doctest
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Pages that compile networks in several modes or through JAX: seconds warm.
SLOW = {"ways_to_run.md", "lifecycle.md"}
PAGES = sorted(p.name for p in DOCS.glob("*.md") if ">>>" in p.read_text())


def test_pages_with_examples_are_found():
    assert {"getting_started.md", "safety.md"} | SLOW <= set(PAGES)


@pytest.mark.parametrize(
    "page", [pytest.param(p, marks=pytest.mark.slow) if p in SLOW else p for p in PAGES]
)
def test_page_examples_run(page):
    if page == "ways_to_run.md":
        pytest.importorskip("optax")
    result = doctest.testfile(
        str(DOCS / page), module_relative=False, optionflags=doctest.ELLIPSIS, verbose=False
    )
    assert result.attempted > 0 and result.failed == 0
