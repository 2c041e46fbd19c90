"""float16 in the default (Numba) mode: turned on when a float16 node is compiled.

Numba has no CPU data model for float16, so PyTensor's Numba backend rejects
every float16 graph (``NotImplementedError: float16``): a jitted function
cannot even take a float16 array.  :func:`enable_numba_float16` gives Numba
one, for ``types.float16`` only (LLVM ``half``; float32 and float64 keep
Numba's own model, and Numba's table of models per type class is left as
it is), and lets LLVM's float16 conversion libcalls resolve.

That is a process-wide change to Numba, so importing :mod:`lasagne_bn`
never makes it.  Our Numba registrations call it when they compile a node
with float16 inputs or outputs (a float16 graph holding one of our Ops
compiles in the default mode, as before); call it yourself to compile
float16 graphs that hold none of them.  The batch-norm kernels themselves
do not compute in ``half``: they get float16 buffers as their uint16 bits
and convert each element in integer code
(:func:`lasagne_bn.ops.numba.bn_kernels.half_bits_to_float64`,
:func:`~lasagne_bn.ops.numba.bn_kernels.float64_to_half_bits`), rounding
once on store.

>>> enable_numba_float16()      # idempotent
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading

__all__ = ["enable_numba_float16", "numba_float16_enabled"]

_lock = threading.Lock()
_enabled: list[bool] = []

# LLVM lowers these conversions to libcalls (double -> half always; the
# float ones without F16C); GCC >= 12's libgcc_s has them.
HALF_LIBCALLS = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2")


def numba_float16_enabled() -> bool:
    """Whether :func:`enable_numba_float16` ran in this process."""
    return bool(_enabled)


def _link_half_conversions() -> None:
    """Let LLVM's float16 conversion libcalls resolve, where they are not already."""
    from llvmlite import binding as llvm

    path = ctypes.util.find_library("gcc_s")
    if path is None:
        return
    try:
        lib = ctypes.CDLL(path)
    except OSError:
        return
    for name in HALF_LIBCALLS:
        if llvm.address_of_symbol(name):
            continue  # already resolvable (the process links them, or someone added them)
        symbol = getattr(lib, name, None)
        if symbol is not None:
            llvm.add_symbol(name, ctypes.cast(symbol, ctypes.c_void_p).value)


def enable_numba_float16() -> bool:
    """Let Numba compile functions that take, compute with or return float16.

    Process-wide and idempotent: ``types.float16`` gets the data model LLVM
    ``half`` in Numba's default data-model manager (nothing else changes
    there), and LLVM's float16 conversion functions are linked from
    ``libgcc_s``.  Returns True.

    Examples
    --------
    >>> from numba.core import types
    >>> from numba.core.datamodel import default_manager
    >>> _ = enable_numba_float16()
    >>> str(default_manager.lookup(types.float16).get_value_type())
    'half'
    """
    if _enabled:
        return True
    with _lock:
        if _enabled:
            return True
        from llvmlite import ir
        from numba.core import types
        from numba.core.datamodel import default_manager, models

        try:
            default_manager.lookup(types.float16)
        except NotImplementedError:
            # Only the float16 instance: the manager's model of the Float
            # class (float32, float64) stays Numba's own.
            default_manager._cache[types.float16] = models.PrimitiveModel(
                default_manager, types.float16, ir.HalfType()
            )
        _link_half_conversions()
        _enabled.append(True)
    return True


def needs_float16(node) -> bool:
    """Whether ``node`` has a float16 input or output."""
    return any(getattr(v.type, "dtype", "") == "float16" for v in (*node.inputs, *node.outputs))
