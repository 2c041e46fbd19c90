"""``import theano``: Theano 1.0's top-level names on PyTensor 3.

Most names are PyTensor's own objects (``theano.grad is pytensor.grad``).
The differences:

- ``theano.function`` is :func:`pytensor.function` behind a hook that
  ``lasagne-bn run`` uses to say when the first compile begins.
- ``theano.shared`` makes shared variables with
  :func:`lasagne_bn.utils.portable_shared`'s storage, so one set of
  parameters works under every backend in one process, and accepts
  Theano's ``broadcastable=`` (as a static shape).
- ``theano.config`` is PyTensor's configuration under Theano's option names
  (:mod:`lasagne_bn_compat.theano._config`); ``theano.config.device`` is ``'cpu'``.
- ``theano.clone``, ``theano.Param``, ``theano.OrderedUpdates``,
  ``theano.gof``, ``theano.scan_module`` ... are the PyTensor pieces they
  became.
- ``theano.sandbox.cuda`` raises an ``ImportError`` that says to use the
  JAX mode; ``theano.gpuarray`` imports as on a machine without a GPU
  (``pygpu_activated`` is False), as Theano 1.0's did.
"""

from __future__ import annotations

from collections import OrderedDict as _OrderedDict

import numpy as _np
import pytensor as _pytensor
import pytensor.gradient as _gradient
from pytensor import In, Mode, OpFromGraph, Out, dprint, grad
from pytensor import function as _pt_function
from pytensor.compile import ProfileStats, SymbolicInput, SymbolicOutput, get_mode
from pytensor.compile.ops import wrap_py as as_op  # PyTensor's as_op: a deprecated alias
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph import Apply, Constant, FunctionGraph, Op, Type
from pytensor.graph.replace import clone_replace as _clone_replace
from pytensor.printing import debugprint, pp, pprint
from pytensor.scan import foldl, foldr, map, reduce, scan  # noqa: A004
from pytensor.tensor import dot, get_underlying_scalar_constant_value

from lasagne_bn_compat._names import lazy_submodules, missing_names
from lasagne_bn_compat.theano._config import config
from lasagne_bn_compat.theano._pickled import TensorType, Variable  # noqa: F811  (Theano's constructors)

__version__ = "1.0.5+lasagnebn"
version = __version__

OrderedUpdates = _OrderedDict


change_flags = config.change_flags
subgraph_grad = _gradient.subgraph_grad
get_scalar_constant_value = get_underlying_scalar_constant_value

__all__ = [
    "Apply",
    "Constant",
    "FunctionGraph",
    "In",
    "Mode",
    "Op",
    "OpFromGraph",
    "OrderedUpdates",
    "Out",
    "Param",
    "ProfileStats",
    "SharedVariable",
    "SymbolicInput",
    "SymbolicOutput",
    "TensorType",
    "Type",
    "Variable",
    "as_op",
    "change_flags",
    "clone",
    "config",
    "debugprint",
    "dot",
    "dprint",
    "foldl",
    "foldr",
    "function",
    "get_mode",
    "get_scalar_constant_value",
    "grad",
    "map",
    "pp",
    "pprint",
    "reduce",
    "scan",
    "shared",
    "subgraph_grad",
]


def shared(value, name=None, strict=False, allow_downcast=None, **kwargs):
    """``theano.shared``: ``pytensor.shared``, taking ``broadcastable=``, with portable storage.

    ``broadcastable=(True, False)`` becomes the static shape ``(1, None)``.
    Tensor values get the storage of :func:`lasagne_bn.utils.portable_shared`:
    whatever backend updates the variable (JAX included), it keeps a
    writable NumPy array, so functions compiled for other backends can use
    it next.
    """
    broadcastable = kwargs.pop("broadcastable", None)
    if broadcastable is not None and "shape" not in kwargs:
        kwargs["shape"] = tuple(1 if b else None for b in broadcastable)
    var = _pytensor.shared(
        value, name=name, strict=strict, allow_downcast=allow_downcast, **kwargs
    )
    if isinstance(value, _np.ndarray | _np.generic | int | float):
        from lasagne_bn.utils import _HostStorage

        container = var.container
        container.storage = _HostStorage(container.storage)
        container.storage[0] = container.storage[0]
    return var


#: Called once, before the first ``theano.function`` compiles (``lasagne-bn run``
#: sets it to say on stderr that compiling has begun); None: nothing is said.
on_first_compile = None


def function(*args, **kwargs):
    """``theano.function``: PyTensor's :func:`pytensor.function`, same arguments.

    Where the call names no mode and PyTensor's default is its Numba mode,
    the function compiles with
    :class:`~lasagne_bn_compat.small_graphs.GraphSizeMode`: a graph
    of at most a hundred nodes runs without compiling (what builds hundreds
    of small functions, as Keras's backend does, pays no compile for each),
    and a bigger one compiles with
    :func:`lasagne_bn.ops.numba.linker.big_graph_mode`'s linker: the same
    rewrites and kernels, and graphs too big for one Numba function (a
    ResNet-50 training step) compiled node by node, as Theano compiled
    them, instead of exhausting memory.  ``mode='JAX'`` (named, or the
    default) compiles with :func:`lasagne_bn.ops.jax.linker.jax_mode`: the
    same mode, whose run-time argument checks raise our ``ValueError``.
    """
    global on_first_compile
    notice, on_first_compile = on_first_compile, None
    if notice is not None:
        notice()
    from lasagne_bn.ops.numba import linker as numba_linker
    from lasagne_bn.ops.rewrites import register_rewrites

    # Legacy graphs may hold none of our Ops (``T.arange(y.shape[0])`` under
    # JAX, Lasagne's aliased running averages built by hand): compiling
    # through theano.function registers all of our rewrites.
    register_rewrites()
    mode = kwargs.get("mode", args[2] if len(args) > 2 else None)
    chosen = None
    if mode is None and numba_linker.is_default_numba_mode(None):
        from lasagne_bn_compat.small_graphs import GraphSizeMode

        chosen = GraphSizeMode()
    elif _is_jax_mode_name(mode):
        # the same mode, whose run-time argument checks raise our ValueError
        # rather than JAX's CpuCallback error that holds it
        from lasagne_bn.ops.jax.linker import jax_mode

        chosen = jax_mode()
    if chosen is not None:
        if len(args) > 2:  # the mode given by position
            args = (*args[:2], chosen, *args[3:])
        else:
            kwargs["mode"] = chosen
    return _pt_function(*args, **kwargs)


def _is_jax_mode_name(mode) -> bool:
    """Whether ``mode`` (None: the configured default) names PyTensor's ``"JAX"`` mode."""
    if mode is None:
        mode = _pytensor.config.mode
    return isinstance(mode, str) and mode.upper() == "JAX"


def clone(output, replace=None, strict=True, share_inputs=True, copy_inputs=None):
    """``theano.clone``: ``output`` (a variable or list) with ``replace`` substituted.

    PyTensor's ``clone_replace``; ``copy_inputs`` (deprecated in Theano) is
    accepted and ignored.
    """
    return _clone_replace(output, replace=replace, strict=strict, share_inputs=share_inputs)


def Param(  # noqa: N802 - Theano's name
    variable,
    default=None,
    name=None,
    mutable=False,
    strict=False,
    allow_downcast=None,
    implicit=None,
    borrow=None,
):
    """Theano 0.x's ``Param``: PyTensor's :class:`~pytensor.In` with ``value=default``."""
    return In(
        variable,
        name=name,
        value=default,
        mutable=mutable,
        strict=strict,
        allow_downcast=allow_downcast,
        implicit=implicit,
        borrow=borrow,
    )


# Submodules legacy code reaches as attributes of ``theano`` (``theano.tensor``,
# ``theano.printing.pp`` ...) without importing them.
_SUBMODULES = {
    "tensor": "lasagne_bn_compat.theano.tensor",
    "gradient": "lasagne_bn_compat.theano.gradient",
    "sandbox": "lasagne_bn_compat.theano.sandbox",
    "printing": "pytensor.printing",
    "ifelse": "lasagne_bn_compat.theano.ifelse",
    "compile": "lasagne_bn_compat.theano.compile",
    "gof": "lasagne_bn_compat.theano.gof",
    "graph": "pytensor.graph",
    "scalar": "lasagne_bn_compat.theano.scalar",
    "sparse": "lasagne_bn_compat.theano.sparse",
    "scan_module": "pytensor.scan",
    "misc": "pytensor.misc",
    "gpuarray": "lasagne_bn_compat.theano.gpuarray",
}

_MISSING = {
    "sparse_grad": "use the gradient of theano.sparse ops (pytensor.sparse) directly",
    "function_dump": "use pytensor.compile.function_dump",
    "test": "Theano's test suite is not part of PyTensor",
}


__getattr__ = missing_names("theano", _MISSING, fallback=lazy_submodules(globals(), _SUBMODULES))

from lasagne_bn_compat.theano import tensor  # noqa: E402, F401  (``theano.tensor`` is always loaded)
