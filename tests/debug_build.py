"""The default tier compiles a debug build: less optimization in Numba and the C compiler.

Most of a cold default-tier run is compiling, and much of a compilation is
LLVM's and the C compiler's optimizer; the tests' arrays are small, so less
optimized code runs them about as fast.  Numba runs at ``NUMBA_OPT=1`` (at 0,
LLVM's code generator takes longer over a big graph's unsimplified code than
the optimizer saves) and the C compiler at ``-O0``.  The operations are the
same, so each test keeps its reference and its tolerance; only whether a
compiler fuses a multiply and an add differs, so the few tests that compare
bits across two compilers are marked ``optimized_build`` and wait for the full
tier.  The full tier (``--full``, which CI runs) compiles what a user gets.

Numba's cache does not record the optimization level, so the debug kernels go
to a cache of their own (``DEBUG_CACHE``, or ``$NUMBA_CACHE_DIR/debug`` when
that is set): nothing the tests compile is ever loaded by a benchmark or a
user's script.  PyTensor's C cache keys on the compiler flags already.

A variable the caller set wins: ``NUMBA_OPT=3 python -m pytest`` runs the
default tier on the optimized kernels.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DEBUG_CACHE = Path(__file__).resolve().parent.parent / ".test-cache" / "numba-debug"


def _flag_names(pytensor_flags: str) -> set[str]:
    names = {item.split("=", 1)[0].strip() for item in pytensor_flags.split(",")}
    return {name.replace(".", "__") for name in names if name}


def use_debug_build() -> str:
    """Set the environment for a debug build (module docstring) and say what was set.

    Must run before Numba or PyTensor is imported in this process: both read their
    flags once, at import.  Child processes the tests start inherit the build.
    """
    if "numba" in sys.modules or "pytensor" in sys.modules:
        return "optimized build (Numba or PyTensor was imported before the test set-up)"
    said = []
    if "NUMBA_OPT" not in os.environ:
        os.environ["NUMBA_OPT"] = "1"
        user_cache = os.environ.get("NUMBA_CACHE_DIR")
        cache = Path(user_cache) / "debug" if user_cache else DEBUG_CACHE
        os.environ["NUMBA_CACHE_DIR"] = str(cache)
        said.append(f"Numba at NUMBA_OPT=1, cached in {cache}")
    flags = os.environ.get("PYTENSOR_FLAGS", "")
    if "gcc__cxxflags" not in _flag_names(flags):
        os.environ["PYTENSOR_FLAGS"] = ",".join(f for f in (flags, "gcc__cxxflags=-O0") if f)
        said.append("C at -O0")
    return "debug build: " + ("; ".join(said) if said else "none (the caller's flags)")
