"""C plumbing shared by the C implementations of our Ops (modes ``C`` and ``CVM``).

Each string here is one support-code block; the Ops return them as items of
their ``c_support_code`` list.  PyTensor's C linker adds a block once per
module however many Ops list it (it compares the strings), so an identical
helper needed by the batch-norm, convolution and pooling Ops of one graph
is defined once, where copies under one name would collide.

- :data:`OUTPUT_SUPPORT`: output allocation (``lbn_prepare_output``) and
  ``lbn_raise_from_python``, which raises a Python module's error (the
  NumPy reference's own message) from C;
- :data:`THREADS_SUPPORT`: ``lbn_max_threads()``, how many threads one call
  may start (``LASAGNE_BN_C_THREADS``, else the CPUs of the process's
  affinity mask, at most 4);
- :data:`BLAS_SUPPORT`: single and double precision GEMM, row-major, through
  the function pointers SciPy exports (``scipy.linalg.cython_blas``): no
  BLAS is linked, so the C code works wherever SciPy does, even where
  PyTensor found no BLAS (``blas__ldflags`` empty).

>>> from lasagne_bn.ops.c import common as c_common
>>> "lbn_gemm_f32" in c_common.BLAS_SUPPORT
True
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: Part of every user's ``c_code_cache_version``: a hash of this file.
C_COMMON_VERSION = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


OUTPUT_SUPPORT = r"""
#include <string.h>

/* Make *out a writable C-contiguous array of `dims` and `type`, reusing the
   previous one when it fits (as PyTensor's own C Ops do). */
static int lbn_prepare_output(PyArrayObject** out, int nd, const npy_intp* dims, int type)
{
    if (*out != NULL && PyArray_NDIM(*out) == nd && PyArray_TYPE(*out) == type
        && PyArray_IS_C_CONTIGUOUS(*out) && PyArray_ISWRITEABLE(*out)) {
        int same = 1;
        for (int i = 0; i < nd; ++i) same = same && PyArray_DIMS(*out)[i] == dims[i];
        if (same) return 0;
    }
    Py_XDECREF(*out);
    *out = (PyArrayObject*)PyArray_EMPTY(nd, (npy_intp*)dims, type, 0);
    return *out == NULL ? -1 : 0;
}

/* Call module.raise_like_perform(kind, props, *inputs), which runs the NumPy
   reference on the inputs the C code refused, so its error is the one raised.
   `props` is the Op's parameters as a Python literal. */
static void lbn_raise_from_python(const char* module_name, const char* kind, const char* props,
                                  PyObject** inputs, int n)
{
    PyObject* module = PyImport_ImportModule(module_name);
    PyObject* func = module ? PyObject_GetAttrString(module, "raise_like_perform") : NULL;
    PyObject* args = func ? PyTuple_New(n + 2) : NULL;
    if (args != NULL) {
        PyTuple_SET_ITEM(args, 0, PyUnicode_FromString(kind));
        PyTuple_SET_ITEM(args, 1, PyUnicode_FromString(props));
        for (int i = 0; i < n; ++i) {
            Py_INCREF(inputs[i]);
            PyTuple_SET_ITEM(args, i + 2, inputs[i]);
        }
        PyObject* r = PyObject_CallObject(func, args);
        Py_XDECREF(r);
        if (r != NULL)
            PyErr_Format(PyExc_RuntimeError,
                         "lasagne_bn %s: the C code refused inputs the NumPy reference accepts",
                         kind);
    }
    Py_XDECREF(args);
    Py_XDECREF(func);
    Py_XDECREF(module);
}
"""


THREADS_SUPPORT = r"""
#include <stdlib.h>
#include <pthread.h>
#include <sched.h>

/* Threads one large tensor may use: LASAGNE_BN_C_THREADS, else the CPUs in
   this process's affinity mask, at most 4 (read once per compiled module). */
static int lbn_max_threads(void)
{
    static int n = 0;
    if (n == 0) {
        int want = 0;
        const char* env = getenv("LASAGNE_BN_C_THREADS");
        if (env != NULL && env[0] != '\0') want = atoi(env);
        if (want < 1) {
            cpu_set_t set;
            want = 1;
            if (sched_getaffinity(0, sizeof(set), &set) == 0) want = CPU_COUNT(&set);
            if (want > 4) want = 4;
            if (want < 1) want = 1;
        }
        n = want;
    }
    return n;
}
"""


BLAS_SUPPORT = r"""
#include <limits.h>
/* Fortran (LP64) GEMM as scipy.linalg.cython_blas exports it. */
typedef void (*lbn_sgemm_t)(char*, char*, int*, int*, int*, float*, float*, int*, float*,
                            int*, float*, float*, int*);
typedef void (*lbn_dgemm_t)(char*, char*, int*, int*, int*, double*, double*, int*, double*,
                            int*, double*, double*, int*);
static lbn_sgemm_t lbn_sgemm_ptr = NULL;
static lbn_dgemm_t lbn_dgemm_ptr = NULL;

static void* lbn_blas_capsule(PyObject* capi, const char* name)
{
    PyObject* cap = PyDict_GetItemString(capi, name);  /* borrowed */
    if (cap == NULL) {
        PyErr_Format(PyExc_RuntimeError, "scipy.linalg.cython_blas exports no %s", name);
        return NULL;
    }
    return PyCapsule_GetPointer(cap, PyCapsule_GetName(cap));
}

/* Fetch the pointers once per module; -1 with a Python error on failure. */
static int lbn_blas_init(void)
{
    if (lbn_sgemm_ptr != NULL && lbn_dgemm_ptr != NULL) return 0;
    PyObject* m = PyImport_ImportModule("scipy.linalg.cython_blas");
    PyObject* capi = m ? PyObject_GetAttrString(m, "__pyx_capi__") : NULL;
    int ok = 0;
    if (capi != NULL && PyDict_Check(capi)) {
        lbn_sgemm_ptr = (lbn_sgemm_t)lbn_blas_capsule(capi, "sgemm");
        lbn_dgemm_ptr = lbn_sgemm_ptr ? (lbn_dgemm_t)lbn_blas_capsule(capi, "dgemm") : NULL;
        ok = lbn_sgemm_ptr != NULL && lbn_dgemm_ptr != NULL;
    } else if (capi != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "scipy.linalg.cython_blas.__pyx_capi__ is not a dict");
    }
    Py_XDECREF(capi);
    Py_XDECREF(m);
    if (!ok) { lbn_sgemm_ptr = NULL; lbn_dgemm_ptr = NULL; }
    return ok ? 0 : -1;
}

/* Columns per GEMM call that keep m * cols * k at most 2^18: OpenBLAS runs
   such a call on the calling thread.  A larger one it splits over its own
   threads, which spin between calls: on a loaded machine a convolution made
   of many such calls ran 25x slower.  0 when even 16 columns are too many. */
static npy_intp lbn_gemm_cols_single(npy_intp m, npy_intp k)
{
    const npy_intp mk = m * k > 0 ? m * k : 1;
    const npy_intp cols = ((npy_intp)1 << 18) / mk;
    return cols >= 16 ? cols : 0;
}

/* 1 if every size fits the LP64 BLAS's int, else 0 with a Python error. */
static int lbn_blas_fits(npy_intp a, npy_intp b, npy_intp c)
{
    if (a > INT_MAX || b > INT_MAX || c > INT_MAX) {
        PyErr_SetString(PyExc_ValueError,
                        "lasagne_bn C code: a matrix dimension exceeds the BLAS's 32-bit int");
        return 0;
    }
    return 1;
}

/* Row-major C (m x n) = alpha * op(A) op(B) + beta * C, op(X) = X or X^T
   ('N' / 'T'); lda, ldb, ldc are row strides.  A row-major matrix is its
   transpose in column-major order, so this is the Fortran C^T = op(B)^T op(A)^T. */
static void lbn_gemm_f32(char ta, char tb, npy_intp m, npy_intp n, npy_intp k, float alpha,
                         const float* A, npy_intp lda, const float* B, npy_intp ldb, float beta,
                         float* C, npy_intp ldc)
{
    int im = (int)m, in = (int)n, ik = (int)k, ia = (int)lda, ib = (int)ldb, ic = (int)ldc;
    if (m == 0 || n == 0) return;
    if (ia < 1) ia = 1;
    if (ib < 1) ib = 1;
    if (ic < 1) ic = 1;
    lbn_sgemm_ptr(&tb, &ta, &in, &im, &ik, &alpha, (float*)B, &ib, (float*)A, &ia, &beta, C, &ic);
}

static void lbn_gemm_f64(char ta, char tb, npy_intp m, npy_intp n, npy_intp k, double alpha,
                         const double* A, npy_intp lda, const double* B, npy_intp ldb,
                         double beta, double* C, npy_intp ldc)
{
    int im = (int)m, in = (int)n, ik = (int)k, ia = (int)lda, ib = (int)ldb, ic = (int)ldc;
    if (m == 0 || n == 0) return;
    if (ia < 1) ia = 1;
    if (ib < 1) ib = 1;
    if (ic < 1) ic = 1;
    lbn_dgemm_ptr(&tb, &ta, &in, &im, &ik, &alpha, (double*)B, &ib, (double*)A, &ia, &beta, C,
                  &ic);
}
"""


def dtype_code(dtype: str, what: str) -> str:
    """``NPY_FLOAT32``/``NPY_FLOAT64``; other dtypes (float16) have no C code.

    The ``NotImplementedError`` makes PyTensor's ``CVM`` run the node's
    ``perform`` instead.
    """
    if dtype == "float32":
        return "NPY_FLOAT32"
    if dtype == "float64":
        return "NPY_FLOAT64"
    raise NotImplementedError(f"lasagne_bn has no C code for {dtype} {what}")


def c_type(dtype: str) -> str:
    """The C element type of a float32/float64 array."""
    return "float" if dtype == "float32" else "double"
