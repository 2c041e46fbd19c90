"""Every public name of Lasagne master resolves via lasagne_bn_compat, and the guide lists it."""

from __future__ import annotations

import importlib
import json

import pytest
from legacy_helpers import DATA, QUIET, ROOT, legacy  # noqa: F401

pytestmark = QUIET
NAMES = json.loads((DATA / "lasagne_master_names.json").read_text())
ALL = [(module, name) for module, names in NAMES.items() for name in names]


@pytest.mark.usefixtures("legacy")
@pytest.mark.parametrize("module", sorted(NAMES))
def test_every_name_of_the_module_resolves(module):
    mod = importlib.import_module(module)
    missing = [name for name in NAMES[module] if not hasattr(mod, name)]
    assert not missing, f"{module} lacks {missing}"


def test_the_guide_lists_every_name():
    text = (ROOT / "migration_guide.md").read_text()
    table = text[text.index("### Every Lasagne name") :]
    missing = [f"{m}.{n}" for m, n in ALL if f"`{n}`" not in table]
    assert not missing, missing
