"""Shared fixtures for the layer tests: compilation modes and small helpers.

Numerics tests run in the modes DESIGN §5 requires: the default (Numba),
``FAST_COMPILE``, the python linker without rewrites, and JAX.  Compiled
functions are reused through module-scoped fixtures: the machine is small.
"""

from __future__ import annotations

import numpy as np
import pytest
from pytensor.compile.mode import Mode

MODES = {
    "numba": None,  # the default mode
    "fast_compile": "FAST_COMPILE",
    "py": Mode(linker="py", optimizer=None),
    "jax": "JAX",
}


def mode_params():
    """``pytest.param``\\ s for MODES, the JAX one skipped when JAX is missing."""
    params = []
    for name, mode in MODES.items():
        marks = []
        if name == "jax":
            try:
                import jax  # noqa: F401
            except ImportError:  # pragma: no cover - jax is a test dependency
                marks.append(pytest.mark.skip(reason="jax is not installed"))
        params.append(pytest.param(mode, id=name, marks=marks))
    return params


def pytest_configure(config):
    # PyTensor's JAX linker warns that it copies shared random generators;
    # Numba warns when a kernel holding constants cannot be cached on disk;
    # without BLAS, PyTensor's C backend warns that dot products are slow;
    # PyTensor's JAX backend drops shape assertions it cannot trace.
    for line in (
        "ignore:The RandomType SharedVariables:UserWarning",
        "ignore:Cannot cache compiled function",
        "ignore:PyTensor could not link to a BLAS installation:UserWarning",
        "ignore:Skipping Assert.*as JAX tracing would remove it:UserWarning",
    ):
        config.addinivalue_line("filterwarnings", line)


def rng(seed=0):
    return np.random.RandomState(seed)
