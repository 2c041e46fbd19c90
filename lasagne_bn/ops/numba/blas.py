"""Matrix products for the Numba kernels: SciPy's BLAS, one thread per call.

The portable convolution and matrix-product kernels (:mod:`.conv_blas_kernels`) split
their work over Numba's thread pool (``prange``) and hand each task's
products to the BLAS that SciPy ships and links (``scipy.linalg.cython_blas``,
the one PyTensor's C backend and Numba's ``np.dot`` use).  So that the two
pools do not fight, that BLAS runs one thread per call: importing this
module (which the portable kernels do when one is first compiled, never
:mod:`lasagne_bn` itself) sets SciPy's BLAS libraries to one thread through
threadpoolctl.  NumPy's own BLAS (a separate library in the
wheels) keeps its threads.

:func:`gemm` takes row-major operands as flat arrays with offsets and
leading dimensions, so the kernels pass views of their buffers without
copies.  The BLAS routines are reached through LLVM symbols registered at
import (their addresses come from SciPy's capsules),
so no address is baked into a kernel and the kernels stay cacheable on disk.

>>> import numpy as np
>>> from lasagne_bn.ops.numba.blas import gemm
>>> a = np.arange(6, dtype=np.float32)          # (2, 3), row-major
>>> b = np.ones(3 * 2, dtype=np.float32)        # (3, 2)
>>> c = np.zeros(4, dtype=np.float32)           # (2, 2)
>>> gemm(False, False, 2, 2, 3, a, 0, 3, b, 0, 2, 0.0, c, 0, 2)
>>> c
array([ 3.,  3., 12., 12.], dtype=float32)
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
from llvmlite import binding as llvm
from numba import types

from lasagne_bn.ops.numba.jit import njit

driver = njit(cache=True, nogil=True)

_SYMBOLS = {"sgemm": "lasagne_bn_blas_sgemm", "dgemm": "lasagne_bn_blas_dgemm"}


def _capsule_address(capsule: object) -> int:
    """The C pointer a ``PyCapsule`` holds."""
    get_name = ctypes.pythonapi.PyCapsule_GetName
    get_name.restype, get_name.argtypes = ctypes.c_char_p, [ctypes.py_object]
    get_pointer = ctypes.pythonapi.PyCapsule_GetPointer
    get_pointer.restype = ctypes.c_void_p
    get_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    return get_pointer(capsule, get_name(capsule))


def _scipy_blas_libraries(controller) -> list:
    """threadpoolctl's entries for the BLAS libraries SciPy ships (wheels: ``scipy.libs``,
    macOS: ``scipy/.dylibs``), or every BLAS when SciPy links a shared one (conda)."""
    import scipy

    root = os.path.dirname(os.path.dirname(os.path.abspath(scipy.__file__)))
    blas = [lib for lib in controller.lib_controllers if lib.user_api == "blas"]
    own = [
        lib
        for lib in blas
        if os.path.basename(os.path.dirname(lib.filepath)).startswith(("scipy.libs", ".dylibs"))
        and os.path.abspath(lib.filepath).startswith(root)
    ]
    return own or blas


def _register() -> None:
    """Register the BLAS symbols with LLVM and set SciPy's BLAS to one thread."""
    from scipy.linalg import cython_blas
    from threadpoolctl import ThreadpoolController

    for routine, symbol in _SYMBOLS.items():
        llvm.add_symbol(symbol, _capsule_address(cython_blas.__pyx_capi__[routine]))
    for lib in _scipy_blas_libraries(ThreadpoolController()):
        lib.set_num_threads(1)


# Fortran's xGEMM takes every argument by address; an address is passed as
# a pointer-sized integer (the same register on every 64-bit ABI).
_ADDRESS_ARGS = [types.intp] * 13
_sgemm = types.ExternalFunction(_SYMBOLS["sgemm"], types.void(*_ADDRESS_ARGS))
_dgemm = types.ExternalFunction(_SYMBOLS["dgemm"], types.void(*_ADDRESS_ARGS))

_N, _T = 78, 84  # 'N', 'T'


@driver
def gemm(ta, tb, m, n, k, a, a0, lda, b, b0, ldb, beta, c, c0, ldc):
    """``C = op(A) @ op(B) + beta * C`` for row-major matrices inside flat arrays.

    ``A`` starts at ``a[a0]`` with rows ``lda`` apart; it is ``(m, k)``, or
    ``(k, m)`` read transposed when ``ta``.  Likewise ``B`` (``(k, n)``, or
    ``(n, k)`` with ``tb``) and ``C`` (``(m, n)``, rows ``ldc`` apart).  One
    float dtype throughout (float32: ``sgemm``, float64: ``dgemm``).
    """
    if m <= 0 or n <= 0:
        return
    # Row-major C = A B is column-major C^T = B^T A^T: the operands swap.
    ints = np.empty(6, dtype=np.int32)
    ints[0], ints[1], ints[2] = n, m, k
    ints[3], ints[4], ints[5] = ldb, lda, ldc
    flags = np.empty(2, dtype=np.uint8)
    flags[0] = _T if tb else _N
    flags[1] = _T if ta else _N
    scale = np.empty(2, dtype=c.dtype)
    scale[0], scale[1] = 1, beta
    item = c.itemsize
    ip, sp, fp = ints.ctypes.data, scale.ctypes.data, flags.ctypes.data
    args = (
        fp, fp + 1, ip, ip + 4, ip + 8, sp,
        b.ctypes.data + b0 * item, ip + 12, a.ctypes.data + a0 * item, ip + 16,
        sp + item, c.ctypes.data + c0 * item, ip + 20,
    )  # fmt: skip
    if item == 4:
        _sgemm(*args)
    else:
        _dgemm(*args)
    _keep_alive(ints, flags, scale)


@driver
def _keep_alive(*arrays):
    """Nothing; a use after the BLAS call, before which Numba must not free ``arrays``
    (it frees a variable after its last use, and an address is not a use)."""


# Once per process (Python imports a module once): the symbols must be there
# before any kernel that calls gemm is compiled or loaded from the disk cache.
_register()
