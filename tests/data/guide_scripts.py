"""The migration guide's example scripts, for the oracle scripts that run them on legacy Theano.

Each ``python`` block of migration_guide.md whose first line is ``# NAME.py``
is the file NAME.py.  The oracle scripts run on the legacy stack without
the test helpers (``tests/compat/legacy_helpers.guide_files`` reads the
same blocks for the tests), so this module needs nothing but the standard
library.
"""

import os
import re

GUIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "migration_guide.md")


def guide_script(name):
    """The text of the guide's example file ``name`` (``"keras_step.py"``)."""
    with open(GUIDE) as f:
        text = f.read()
    (block,) = [
        b
        for b in re.findall(r"```python\n(.*?)```", text, flags=re.S)
        if b.startswith(f"# {name}\n")
    ]
    return block
