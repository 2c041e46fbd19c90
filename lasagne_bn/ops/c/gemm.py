"""Matrix products with C code where PyTensor found no BLAS (opt-in, for mode ``C``).

PyTensor's C-backend rewrites turn ``x @ w`` into ``Dot22`` (and
``Dot22Scalar``), whose C code needs a BLAS to link to; without one
(``blas__ldflags`` empty, as with a pip install) they have none, so mode
``C`` cannot compile a ``DenseLayer`` at all, and ``CVM`` runs them in
Python.  :class:`ScipyDot22` computes the same product in C through
SciPy's BLAS function pointers (:data:`lasagne_bn.ops.c.common.BLAS_SUPPORT`),
and the rewrites tagged ``lasagne_bn_scipy_gemm`` swap it in; they also
inline ``Softmax`` / ``LogSoftmax`` (PyTensor 3 wraps their elementwise
graphs in one Op that has no C code either), so a classifier compiles.  The
rewrite is registered (under its own tag only) when :func:`c_mode` is first
called, so nothing changes unless a mode asks for it (and it leaves the
graph alone where PyTensor has a BLAS):

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops.c.gemm import c_mode
>>> x, w = pt.matrix("x"), pt.matrix("w")
>>> f = pytensor.function([x, w], x @ w, mode=c_mode())  # mode "C" with the rewrite
>>> f(np.ones((2, 3)), np.ones((3, 4)))[0]
array([3., 3., 3., 3.])
"""

from __future__ import annotations

import numpy as np
import pytensor
from pytensor.compile import optdb
from pytensor.graph.basic import Apply
from pytensor.graph.rewriting.basic import dfs_rewriter, node_rewriter
from pytensor.link.c.op import COp
from pytensor.tensor.blas import Dot22, Dot22Scalar
from pytensor.tensor.rewriting.ofg import inline_ofg_node
from pytensor.tensor.special import LogSoftmax, Softmax
from pytensor.tensor.type import TensorType

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.c import common as c_common
from lasagne_bn.ops.rewrites import define_group

__all__ = ["REWRITE_TAG", "ScipyDot22", "c_mode"]

#: The tag that includes the rewrite: ``get_mode("C").including(REWRITE_TAG)``.
REWRITE_TAG = "lasagne_bn_scipy_gemm"

C_CODE_VERSION = c_common.code_version(__file__)


class ScipyDot22(COp):
    """``(x, y[, a]) -> a * x @ y`` for float32/float64 matrices, GEMM from SciPy in C."""

    __props__ = ()

    def make_node(self, x, y, *scale):
        dtype = x.type.dtype
        if x.type.ndim != 2 or y.type.ndim != 2 or y.type.dtype != dtype:
            raise TypeError(f"ScipyDot22 needs two matrices of one dtype, got {x.type}, {y.type}")
        if dtype not in ("float32", "float64"):
            raise TypeError(f"ScipyDot22 needs float32 or float64 matrices, got {dtype}")
        if len(scale) > 1 or (scale and scale[0].type.ndim != 0):
            raise TypeError("ScipyDot22 takes at most one scalar scale")
        out = TensorType(dtype, shape=(x.type.shape[0], y.type.shape[1]))
        return Apply(self, [x, y, *scale], [out()])

    def perform(self, node, inputs, output_storage):
        x, y = inputs[:2]
        z = np.dot(x, y)
        if len(inputs) > 2:
            z = z * z.dtype.type(inputs[2])
        output_storage[0][0] = z.astype(x.dtype, copy=False)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [(shapes[0][0], shapes[1][1])]

    def c_support_code(self, **kwargs):
        return [c_common.OUTPUT_SUPPORT, c_common.BLAS_SUPPORT]

    def c_headers(self, **kwargs):
        return ["<limits.h>", "<string.h>"]

    def c_code_cache_version(self):
        return (C_CODE_VERSION,)

    def c_code(self, node, name, inputs, outputs, sub):
        dtype = node.outputs[0].type.dtype
        tnum = c_common.dtype_code(dtype, "matrix products")
        ctype = c_common.c_type(dtype)
        sfx = "f32" if dtype == "float32" else "f64"
        x, y = inputs[:2]
        alpha = "1"
        if len(inputs) > 2:
            sdtype = node.inputs[2].type.dtype
            alpha = f"(({ctype})*({c_common.c_type(sdtype)}*)PyArray_DATA({inputs[2]}))"
            if sdtype not in ("float32", "float64"):
                raise NotImplementedError(f"ScipyDot22 has no C code for a {sdtype} scale")
        (z,) = outputs
        fail = sub["fail"]
        return f"""
{{
    const npy_intp M = PyArray_DIMS({x})[0], K = PyArray_DIMS({x})[1];
    const npy_intp N = PyArray_DIMS({y})[1];
    PyArrayObject* a = NULL;
    PyArrayObject* b = NULL;
    npy_intp dims[2] = {{M, N}};
    if (PyArray_DIMS({y})[0] != K) {{
        PyErr_Format(PyExc_ValueError,
                     "matrix product: shapes (%ld, %ld) and (%ld, %ld) are not aligned",
                     (long)M, (long)K, (long)PyArray_DIMS({y})[0], (long)N);
        {fail}
    }}
    if (lbn_blas_init() || !lbn_blas_fits(M, N, K)
        || lbn_prepare_output(&{z}, 2, dims, {tnum})) {{
        {fail}
    }}
    a = (PyArrayObject*)PyArray_GETCONTIGUOUS({x});
    b = (PyArrayObject*)PyArray_GETCONTIGUOUS({y});
    if (a == NULL || b == NULL) {{
        Py_XDECREF(a);
        Py_XDECREF(b);
        {fail}
    }}
    if (K == 0) {{
        memset(PyArray_DATA({z}), 0, (size_t)(M * N) * sizeof({ctype}));
    }} else {{
        Py_BEGIN_ALLOW_THREADS
        lbn_gemm_{sfx}('N', 'N', M, N, K, {alpha}, ({ctype}*)PyArray_DATA(a), K,
                       ({ctype}*)PyArray_DATA(b), N, 0, ({ctype}*)PyArray_DATA({z}), N);
        Py_END_ALLOW_THREADS
    }}
    Py_DECREF(a);
    Py_DECREF(b);
}}
"""


@node_rewriter([Dot22, Dot22Scalar])
def local_dot22_to_scipy(fgraph, node):
    """``Dot22`` / ``Dot22Scalar`` -> :class:`ScipyDot22` when PyTensor has no BLAS."""
    if pytensor.config.blas__ldflags:
        return None
    if node.outputs[0].type.dtype not in ("float32", "float64"):
        return None
    return [ScipyDot22()(*node.inputs)]


@node_rewriter([Softmax, LogSoftmax])
def local_inline_softmax(fgraph, node):
    """``Softmax`` / ``LogSoftmax`` (one Op, no C code) -> their elementwise graph."""
    return inline_ofg_node(node)


def register() -> None:
    """Add the tagged rewrite to PyTensor's database (once: ``rewrites.ensure_registered``)."""
    # After PyTensor's BLAS rewrites (1.7, which make Dot22) and before
    # elementwise fusion (48), which then fuses the inlined softmax.
    optdb.register(
        "lasagne_bn_dot22_to_scipy",
        dfs_rewriter(local_dot22_to_scipy, local_inline_softmax),
        REWRITE_TAG,
        position=10.5,
    )


def c_mode(linker: str = "c"):
    """PyTensor's ``C`` mode (or ``linker='cvm'``) with the :class:`ScipyDot22` rewrite."""
    from pytensor.compile.mode import get_mode

    from lasagne_bn.ops.rewrites import ensure_registered

    ensure_registered("c_gemm")
    return get_mode(linker.upper()).including(REWRITE_TAG)


define_group("c_gemm", (), register)
