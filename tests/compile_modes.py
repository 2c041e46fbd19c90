"""The compile modes every numerics test runs under (DESIGN §5)."""

from __future__ import annotations

from pytensor.compile.mode import Mode

# "default" is PyTensor 3's default mode (Numba); "py" is the python linker
# with no rewrites at all; "cvm" and "c" are the C backends.
MODE_NAMES = ["default", "fast_compile", "py", "cvm", "c", "jax"]


def mode_for(name: str):
    """The ``mode`` argument for ``pytensor.function`` (None: the default)."""
    if name == "default":
        return None
    if name == "py":
        return Mode(linker="py", optimizer=None)
    return name.upper()
