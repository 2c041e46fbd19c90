"""Numba registration of :class:`lasagne_bn.ops.matmul.MatMul` (the default backend).

The generated wrapper checks the shapes, makes both operands C-contiguous
(a transposed view is copied, except beside a single column or row, where
the product is taken transposed) and calls
:func:`lasagne_bn.ops.numba.conv_kernels.matmul`, the convolution kernels'
GEMM engine, through its C entry point.
"""

from __future__ import annotations

from lasagne_bn.ops.matmul import MatMul
from lasagne_bn.ops.numba._codegen import array_entries, check, dims
from lasagne_bn.ops.numba.portable import kernels_module

ENTRY_POINTS = array_entries(__file__, kernels_module())


@ENTRY_POINTS.register(MatMul)
def _matmul(op, node):
    body = [
        "m, k = a.shape",
        "k2, n = b.shape",
        check("k2 != k", "MatMul: a.shape[1] does not match b.shape[0]"),
        "out = np.empty((m, n), dtype=a.dtype)",
        # A transposed operand of a product with one column (one row) is
        # multiplied as it lies: out.T = b.T @ a.T, and an (m, 1) result lies
        # in memory as (1, m).  Copying it instead (a dense layer's weight
        # gradient, X.T @ dy: (4096, 64) x (64, 1)) took 0.7 of the 0.8 ms.
        "rows, cols = m, n",
        "if n == 1 and m > 1 and not a.flags.c_contiguous and a.T.flags.c_contiguous:",
        "    lhs, rhs, rows, cols = np.ascontiguousarray(b), np.ascontiguousarray(a.T), 1, m",
        "elif m == 1 and n > 1 and not b.flags.c_contiguous and b.T.flags.c_contiguous:",
        "    lhs, rhs, rows, cols = np.ascontiguousarray(b.T), np.ascontiguousarray(a), n, 1",
        "else:",
        "    lhs, rhs = np.ascontiguousarray(a), np.ascontiguousarray(b)",
        *dims(["rows", "k", "cols"]),
        "if out.size > 0:",
        "    matmul_fn(lhs.ctypes, rhs.ctypes, out.ctypes, dims.ctypes)",
        "return out",
    ]
    return "matmul", body, ["a", "b"], "matmul"
