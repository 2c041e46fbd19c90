"""Keep large freed host buffers in the process, so the next step reuses them.

Every training step allocates its activations and gradients afresh and frees
them a moment later.  With glibc's default settings, arrays of a few MiB and
up are served by ``mmap`` and given back by ``munmap`` (or trimmed from the
heap top) on free, so each step faults every output page in again: the
kernel zeroes it, and on a virtual machine the host may have to back it
first.  Batch norm touches each value only a few times, so for it those
faults can cost as much as the arithmetic.  That is the allocator, not the
kernels: GPU frameworks avoid it with caching allocators, CPU users with
jemalloc or tcmalloc.

:func:`recycle_host_memory` sets glibc's mmap threshold and trim threshold
(``mallopt``) so freed buffers below the threshold stay in the heap and the
next step reuses them; the cost is that up to ``trim_threshold`` bytes of
freed memory stay resident instead of going back to the system.  It is a
process-wide setting, so it is made only when called: importing
``lasagne_bn`` never calls it (a library must not retune its host's
allocator).  An application opts in, as ``lasagne-bn demo`` and
``lasagne-bn bench`` do (``--no-recycle-memory`` turns it off there), and
:func:`user_configured_glibc` tells whether the user already set glibc's
allocator through the environment (``MALLOC_MMAP_THRESHOLD_``,
``MALLOC_TRIM_THRESHOLD_`` or a ``glibc.malloc`` tunable), which such an
application should leave alone.

>>> from lasagne_bn.ops.host_memory import recycle_host_memory
>>> recycle_host_memory()          # on Linux with glibc
True
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
MIB = 1 << 20

#: Environment variables through which a user (or glibc) already decides.
_USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    # musl and other C libraries have no mallopt: leave them alone.
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None


def recycle_host_memory(mmap_threshold: int = 256 * MIB, trim_threshold: int = 512 * MIB) -> bool:
    """Serve buffers below ``mmap_threshold`` bytes from the heap and keep them.

    Parameters
    ----------
    mmap_threshold : int
        Allocations of at least this many bytes still get their own ``mmap``
        (and go back to the system when freed).
    trim_threshold : int
        Freed memory at the top of the heap is returned to the system only
        beyond this many bytes.

    Returns
    -------
    bool
        Whether the setting took effect (False where the C library is not
        glibc).

    Examples
    --------
    >>> recycle_host_memory(mmap_threshold=64 * MIB, trim_threshold=128 * MIB)
    True
    """
    for name, value in (("mmap_threshold", mmap_threshold), ("trim_threshold", trim_threshold)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name}={value!r}: expected an int number of bytes")
        if not 0 < value < 2**31:
            raise ValueError(f"{name}={value}: expected a number of bytes in (0, 2**31)")
    libc = _glibc()
    if libc is None:
        return False
    ok = libc.mallopt(_M_MMAP_THRESHOLD, ctypes.c_int(mmap_threshold))
    ok &= libc.mallopt(_M_TRIM_THRESHOLD, ctypes.c_int(trim_threshold))
    return bool(ok)


def user_configured_glibc() -> bool:
    """True when the environment already sets glibc's allocator thresholds.

    >>> import os
    >>> user_configured_glibc() == ("MALLOC_TRIM_THRESHOLD_" in os.environ
    ...                             or "MALLOC_MMAP_THRESHOLD_" in os.environ
    ...                             or "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", ""))
    True
    """
    if any(name in os.environ for name in _USER_SETTINGS):
        return True
    return "glibc.malloc" in os.environ.get("GLIBC_TUNABLES", "")


def recycle_unless_configured() -> bool:
    """:func:`recycle_host_memory` with its defaults, unless :func:`user_configured_glibc`.

    What the ``lasagne-bn`` commands do by default.  Returns whether the
    setting was made.
    """
    return False if user_configured_glibc() else recycle_host_memory()
