"""A matrix product for graphs that run our parallel kernels in the default mode.

PyTensor's Numba backend computes ``Dot`` in SciPy's OpenBLAS, whose worker
threads spin for a while after each call.  In a graph whose convolution and
batch-norm kernels run in Numba's thread pool, those spinning threads hold
the cores the next kernel wants: the kernels' thread policy
(:mod:`lasagne_bn.ops.numba.threads`) sees them as load and drops to one
thread, and forcing two threads against them doubled the time (a DCGAN
generator's inference: 48 ms, 31 ms with ``OPENBLAS_NUM_THREADS=1``).

:class:`MatMul` is ``numpy.dot`` of two float matrices (NumPy ``perform``);
its Numba implementation (:mod:`lasagne_bn.ops.numba.matmul`) runs on the
convolution kernels' GEMM engine, in Numba's thread pool, under the same
per-call thread policy.  The rewrite ``lasagne_bn_numba_matmul`` (Numba
mode only) swaps it in for ``Dot`` in graphs that contain one of our Numba
kernels, and leaves every other graph alone.

>>> import numpy as np
>>> import pytensor.tensor as pt
>>> a = pt.as_tensor(np.ones((2, 3), dtype="float32"))
>>> b = pt.as_tensor(np.ones((3, 4), dtype="float32"))
>>> MatMul()(a, b).eval()[0]
array([3., 3., 3., 3.], dtype=float32)
"""

from __future__ import annotations

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Apply
from pytensor.graph.features import ReplaceValidate
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.tensor.math import Dot

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.rewrites import RegisteredOnUnpickle, define_group, ensure_registered

FLOATS = ("float32", "float64")


class MatMul(RegisteredOnUnpickle, Op):
    """``a @ b`` for two matrices of the same float dtype (float32 or float64)."""

    __props__ = ()
    rewrite_group = "matmul"

    def make_node(self, a, b) -> Apply:
        ensure_registered(self.rewrite_group)
        a, b = pt.as_tensor_variable(a), pt.as_tensor_variable(b)
        for name, v in (("a", a), ("b", b)):
            if v.type.ndim != 2 or v.type.dtype not in FLOATS:
                raise TypeError(f"MatMul: {name}={v.type}: expected a float32 or float64 matrix")
        if a.type.dtype != b.type.dtype:
            raise TypeError(
                f"MatMul: a.dtype={a.type.dtype!r}, b.dtype={b.type.dtype!r}: expected one dtype"
            )
        out = pt.tensor(dtype=a.type.dtype, shape=(a.type.shape[0], b.type.shape[1]))
        return Apply(self, [a, b], [out])

    def perform(self, node, inputs, outputs):
        a, b = inputs
        if a.shape[1] != b.shape[0]:
            raise ValueError(
                f"MatMul: a.shape={a.shape}, b.shape={b.shape}: expected a.shape[1] == b.shape[0]"
            )
        outputs[0][0] = np.asarray(np.dot(a, b), dtype=node.outputs[0].type.dtype)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [(shapes[0][0], shapes[1][1])]

    def pullback(self, inputs, outputs, cotangents):
        a, b = inputs
        (gz,) = cotangents
        return [self(gz, b.T), self(a.T, gz)]


def _our_kernels(fgraph) -> bool:
    """Whether the graph runs one of our Numba-kernel Ops (convolution, pooling, norms)."""
    from lasagne_bn.ops.bn import BatchNormCOp
    from lasagne_bn.ops.conv import Conv, ConvGradInputs, ConvGradWeights
    from lasagne_bn.ops.pool import _PoolOp

    kinds = (BatchNormCOp, Conv, ConvGradInputs, ConvGradWeights, _PoolOp)
    return any(isinstance(node.op, kinds) for node in fgraph.apply_nodes)


class UseMatMul(GraphRewriter):
    """Every float ``Dot`` of two matrices becomes :class:`MatMul`, in graphs with our kernels."""

    def add_requirements(self, fgraph):
        fgraph.attach_feature(ReplaceValidate())

    def apply(self, fgraph):
        if not _our_kernels(fgraph):
            return
        for node in list(fgraph.toposort()):
            if not isinstance(node.op, Dot) or node not in fgraph.apply_nodes:
                continue
            a, b = node.inputs
            (out,) = node.outputs
            if (
                a.type.ndim == b.type.ndim == 2
                and a.type.dtype == b.type.dtype == out.type.dtype
                and out.type.dtype in FLOATS
            ):
                new = MatMul()(a, b)
                fgraph.replace_all_validate([(out, new)], reason="lasagne_bn_numba_matmul")


def register() -> None:
    """Add the rewrite to ``optdb`` for the Numba mode (see :mod:`lasagne_bn.ops.rewrites`)."""
    from pytensor.compile import optdb

    optdb.register("lasagne_bn_numba_matmul", UseMatMul(), "numba", position=48.9)


define_group("matmul", ("jax",), register)
