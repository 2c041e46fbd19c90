"""The default backend: Numba kernels and their PyTensor registrations.

One module per Op family registers its Ops with PyTensor's Numba dispatch
(``bn``, ``conv``, ``pool``, ``statistics``, ``matmul``); the kernels they call
live in the matching ``*_kernels`` modules (``matmul``: the convolution
kernels' GEMM engine; :mod:`.conv_blas_kernels` is their portable twin,
chosen by :mod:`.portable`) and are compiled the first time a node needs
them.  Shared plumbing: :mod:`.jit` (the kernels' ``njit``: no copy
compiled per constant argument), :mod:`._codegen` (generated wrappers, C
entry points, cache keys), :mod:`.threads` (per-call thread counts, in
Numba's thread pool, the only one the kernels use), :mod:`.blas` (SciPy's
BLAS for the portable kernels), :mod:`.float16`,
:mod:`.linker` (the per-node linker for very large graphs) and
:mod:`.elemwise` (its large elementwise nodes on the kernel threads).

Importing this package registers the Ops and changes nothing else in the
process (no kernel is compiled, no global Numba state is touched).
"""

from lasagne_bn.ops.compiled_perform import set_node_compiler
from lasagne_bn.ops.numba import bn, conv, matmul, pool, statistics  # noqa: F401  (registrations)


def _compile_node(node):
    """The node's Numba function, for ``perform`` in the unoptimized modes."""
    from lasagne_bn.ops.numba.linker import _node_function  # PyTensor's linker, on first use

    return _node_function(node, {})


set_node_compiler(_compile_node)
