"""``perform`` through the node's Numba kernels: the unoptimized modes at compiled speed.

``FAST_COMPILE`` and the python linker (``Mode(linker='py', optimizer=None)``)
call each Op's ``perform``; the batch-norm Ops' NumPy ``perform`` makes several
passes with full-size temporaries, which the compiled kernels avoid.  Here
``perform`` calls the same Numba function the default mode compiles for the
node (one per distinct node, compiled on first use and cached on disk, see
:mod:`lasagne_bn.ops.numba.linker`), so every mode computes with the same
kernels.  The NumPy implementation stays the reference: it runs when the Numba
function cannot be built, and whenever the Numba call raises (so a bad input
gets the NumPy path's error message), and inside :func:`numpy_perform`.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops import batch_normalization_test
>>> from lasagne_bn.ops.compiled_perform import numpy_perform
>>> x = pt.matrix("x")
>>> y = batch_normalization_test(x, np.ones(3), np.zeros(3), np.zeros(3), np.ones(3))
>>> f = pytensor.function([x], y, mode="FAST_COMPILE")
>>> with numpy_perform():          # the NumPy reference, e.g. to compare against
...     ref = f(np.ones((2, 3)))
>>> bool(np.allclose(f(np.ones((2, 3))), ref))
True
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import contextmanager

from pytensor.graph.basic import Apply, Constant

__all__ = ["compiled_perform", "numpy_perform", "set_node_compiler"]

_state = threading.local()


def _enabled() -> bool:
    return getattr(_state, "enabled", True)


@contextmanager
def numpy_perform():
    """Within the block (this thread), ``perform`` runs the NumPy reference."""
    previous = _enabled()
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = previous


_compile_node: Callable[[Apply], Callable] | None = None


def set_node_compiler(compile_node: Callable[[Apply], Callable]) -> None:
    """``compile_node(node)`` makes a node's Python-callable Numba function; the Numba
    backend (:mod:`lasagne_bn.ops.numba`) sets it when imported."""
    global _compile_node
    _compile_node = compile_node


def _function(node: Apply):
    """The node's Numba function (Python-callable), or None when there is none."""
    cached = getattr(node.tag, "lasagne_bn_compiled", False)
    if cached is not False:
        return cached
    fn = None
    try:
        from pytensor.link.numba.dispatch.basic import numba_funcify

        # Only Ops with their own Numba implementation: PyTensor's fallback
        # for the others wraps ``perform`` itself.
        own = numba_funcify.dispatch(type(node.op)) is not numba_funcify.dispatch(object)
        if own and _compile_node is not None:
            fn = _compile_node(node)
    except Exception:  # no Numba implementation for these types: NumPy it is
        fn = None
    node.tag.lasagne_bn_compiled = fn
    return fn


def compiled_perform(node: Apply, inputs, output_storage) -> bool:
    """Compute ``node`` with its Numba function into ``output_storage``; False if not done.

    False (nothing written) when disabled, when the node has no Numba
    function, or when the call raised: the caller then runs its NumPy code.
    """
    if not _enabled():
        return False
    fn = _function(node)
    if fn is None:
        return False
    args = [v for v, var in zip(inputs, node.inputs, strict=True) if not isinstance(var, Constant)]
    try:
        result = fn(*args)
    except Exception:
        return False
    if len(output_storage) == 1:
        output_storage[0][0] = result
    else:
        for storage, value in zip(output_storage, result, strict=True):
            storage[0] = value
    return True
