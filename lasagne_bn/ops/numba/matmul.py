"""Numba registration of :class:`lasagne_bn.ops.matmul.MatMul` (the default backend).

The generated wrapper checks the shapes, makes both operands C-contiguous
(a transposed view is copied) and calls
:func:`lasagne_bn.ops.numba.conv_kernels.matmul`, the convolution kernels'
GEMM engine, through its C entry point.
"""

from __future__ import annotations

from lasagne_bn.ops.matmul import MatMul
from lasagne_bn.ops.numba._codegen import array_entries, check, dims

ENTRY_POINTS = array_entries(__file__, "conv_kernels")


@ENTRY_POINTS.register(MatMul)
def _matmul(op, node):
    body = [
        "m, k = a.shape",
        "k2, n = b.shape",
        check("k2 != k", "MatMul: a.shape[1] does not match b.shape[0]"),
        "ac = np.ascontiguousarray(a)",
        "bc = np.ascontiguousarray(b)",
        "out = np.empty((m, n), dtype=a.dtype)",
        *dims(["m", "k", "n"]),
        "if out.size > 0:",
        "    matmul_fn(ac.ctypes, bc.ctypes, out.ctypes, dims.ctypes)",
        "return out",
    ]
    return "matmul", body, ["a", "b"], "matmul"
