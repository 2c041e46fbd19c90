"""The compile modes every numerics test runs under (DESIGN §5)."""

from __future__ import annotations

from pytensor.compile.mode import Mode, get_default_mode

# PyTensor's default mode (Numba), as a user of the package gets it, taken
# when this module is first imported (conftest.py imports it before any test
# runs): the default tier runs the tests that name no mode in FAST_COMPILE
# (conftest.py), and a test's "default" or "numba" must still mean this one.
DEFAULT_MODE = get_default_mode()

# "default" is PyTensor 3's default mode (Numba); "py" is the python linker
# with no rewrites at all; "cvm" and "c" are the C backends.
MODE_NAMES = ["default", "fast_compile", "py", "cvm", "c", "jax"]

# The convolution and pooling tests' modes: their C code is tested in
# tests/ops/test_conv_c.py and test_pool_c.py (mode "C" against perform),
# which keeps the broad parametrised suites from compiling each case twice.
MODE_NAMES_WITHOUT_C = [name for name in MODE_NAMES if name != "c"]


def mode_for(name: str):
    """The ``mode`` argument for ``pytensor.function``."""
    if name == "default":
        return DEFAULT_MODE
    if name == "py":
        return Mode(linker="py", optimizer=None)
    return name.upper()


# The layer tests' modes: the four DESIGN §5 requires for numerics.
LAYER_MODES = {
    "numba": DEFAULT_MODE,
    "fast_compile": "FAST_COMPILE",
    "py": Mode(linker="py", optimizer=None),
    "jax": "JAX",
}


def mode_params():
    """``pytest.param``\\ s for LAYER_MODES (ids: numba, fast_compile, py, jax)."""
    import pytest

    return [pytest.param(mode, id=name) for name, mode in LAYER_MODES.items()]


def one_compiled_backend(cases, mode_names, numba_cases):
    """``(case, mode_name)`` params: every case in every mode, with one compiled CPU
    backend per case in the default tier.

    Both compiled CPU backends run their batch-norm code on the same
    ``(outer, channels, inner)`` view of any layout (the kernels are shared;
    what a layout changes is the graph around them, compiled anew for each).
    So in the default tier a case in ``numba_cases`` runs in the default
    (Numba) mode and the others in the C VM (mode ``C`` repeats the C VM; see
    ``conftest.py``), each with the python linker and JAX; the other compiled
    backend's runs of it are marked ``slow`` and wait for the full tier.
    """
    import pytest

    params = []
    for case in cases:
        for mode_name in mode_names:
            repeated = (mode_name == "default" and case not in numba_cases) or (
                mode_name in ("cvm", "c") and case in numba_cases
            )
            marks = [pytest.mark.slow] if repeated else []
            params.append(pytest.param(case, mode_name, marks=marks, id=f"{case}-{mode_name}"))
    return params


def modes_c_tested_elsewhere(mode_names):
    """``mode_names`` with the C VM's run marked ``slow`` (full tier only), for the
    broad convolution and pooling matrices whose C code
    ``tests/ops/test_conv_c.py`` and ``test_pool_c.py`` check case by case
    against the NumPy reference in the default tier."""
    import pytest

    return [pytest.param(m, marks=pytest.mark.slow) if m == "cvm" else m for m in mode_names]
