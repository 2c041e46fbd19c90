"""The compile modes every numerics test runs under (DESIGN §5)."""

from __future__ import annotations

from pytensor.compile.mode import Mode

# "default" is PyTensor 3's default mode (Numba); "py" is the python linker
# with no rewrites at all; "cvm" and "c" are the C backends.
MODE_NAMES = ["default", "fast_compile", "py", "cvm", "c", "jax"]

# The convolution and pooling tests' modes: their C code is tested in
# tests/ops/test_conv_c.py and test_pool_c.py (mode "C" against perform),
# which keeps the broad parametrised suites from compiling each case twice.
MODE_NAMES_WITHOUT_C = [name for name in MODE_NAMES if name != "c"]


def mode_for(name: str):
    """The ``mode`` argument for ``pytensor.function`` (None: the default)."""
    if name == "default":
        return None
    if name == "py":
        return Mode(linker="py", optimizer=None)
    return name.upper()


# The layer tests' modes: the four DESIGN §5 requires for numerics.
LAYER_MODES = {
    "numba": None,  # the default mode
    "fast_compile": "FAST_COMPILE",
    "py": Mode(linker="py", optimizer=None),
    "jax": "JAX",
}


def mode_params():
    """``pytest.param``\\ s for LAYER_MODES (ids: numba, fast_compile, py, jax)."""
    import pytest

    return [pytest.param(mode, id=name) for name, mode in LAYER_MODES.items()]
