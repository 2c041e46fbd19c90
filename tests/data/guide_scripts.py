"""The migration guide's example files, for the tests and for the oracle scripts.

Each ``python`` block of migration_guide.md whose first line is ``# NAME.py``
is the file NAME.py.  The oracle scripts that run these files on the legacy
stack import this module without the test helpers, so it needs nothing but
the standard library.
"""

import os
import re

GUIDE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "migration_guide.md")


def python_blocks(text):
    """The ``python`` code blocks of a Markdown text."""
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def file_name(block):
    """``NAME.py`` if the block is the example file NAME.py, else None."""
    match = re.fullmatch(r"# (\w+\.py)", block.splitlines()[0])
    return match.group(1) if match else None


def guide_files():
    """The guide's example files: {name: text}."""
    with open(GUIDE) as f:
        blocks = python_blocks(f.read())
    return {file_name(b): b for b in blocks if file_name(b)}


def guide_script(name):
    """The text of the guide's example file ``name`` (``"keras_step.py"``)."""
    return guide_files()[name]
