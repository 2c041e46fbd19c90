"""JAX's persistent compilation cache for the test session, as Numba and PyTensor keep theirs.

Without it every run compiles each jitted function again, which was most of a
warm run's JAX time.  The cache holds XLA executables keyed on the program, the
backend and JAX's flags, so a stale entry is never loaded.  A cache directory
the caller set (``JAX_COMPILATION_CACHE_DIR``) wins.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE = Path(__file__).resolve().parent.parent / ".test-cache" / "jax"


def use_jax_cache() -> str:
    """Set JAX's cache variables unless the caller did; say where the cache is.

    Must run before JAX is imported: it reads them once, at import.
    """
    os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(CACHE))
    # Cache every compilation: the tests' small programs each compile in well
    # under JAX's default threshold of one second.
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return f"JAX cache in {os.environ['JAX_COMPILATION_CACHE_DIR']}"
