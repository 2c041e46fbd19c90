"""Plumbing every Numba registration shares: C entry points, wrappers, cache keys.

The kernels are exported as C-callable functions (``numba.cfunc``), one per
dtype, compiled on first use and cached on disk.  Each Apply node gets a
small generated wrapper (nopython source, checked and jitted by PyTensor's
Numba backend) that fetches an entry point's address once per process
(PyTensor's ``_call_cached_ptr``) and calls it.  Linking the kernels' IR
into every graph instead made each new ``pytensor.function`` re-optimize
them for seconds.

Cache keys hash the sources that generate the code (this module's too):
PyTensor keeps compiled graphs on disk under our keys, and a key that
missed an edit would keep serving the old code.

>>> from lasagne_bn.ops.numba._codegen import check
>>> print(check("n < 1", "x: empty"))
if n < 1:
        raise ValueError('x: empty')
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Sequence
from hashlib import sha256
from pathlib import Path

import numba
import numpy as np
from numba.core import types
from pytensor.link.numba.cache import _call_cached_ptr, compile_numba_function_src
from pytensor.link.numba.dispatch.basic import (
    generate_fallback_impl,
    numba_njit,
    register_funcify_and_cache_key,
)

from lasagne_bn.ops.numba.float16 import enable_numba_float16, needs_float16


def source_version(*paths: str | Path) -> str:
    """A short hash of the files' contents and of this module's (part of every cache key)."""
    paths = (*paths, __file__)  # this module writes part of every wrapper
    return sha256(b"".join(Path(p).read_bytes() for p in paths)).hexdigest()[:16]


def node_key(op, node, version: str, source: Sequence[str]) -> str:
    """The cache key of ``node``'s generated wrapper: Op, props, types, code and version.

    ``source`` is the wrapper's generated body: the code may depend on more
    than the types' dtypes and ndims (``BatchNormApply`` indexes a scalar
    parameter at 0), so two nodes share a cached wrapper only when their
    code is the same, and nodes whose code is the same share it whatever
    their static shapes.
    """
    parts = (
        type(op).__name__,
        repr(op._props_dict()),
        tuple((i.type.dtype, i.type.ndim) for i in node.inputs),
        tuple((o.type.dtype, o.type.ndim) for o in node.outputs),
        tuple(source),
        version,
    )
    return sha256(repr(parts).encode()).hexdigest()


def array_entry_signature(n_arrays: int, dtype: str):
    """``int32(T*, ..., int64*)``: ``n_arrays`` arrays of ``dtype``, then a parameter vector."""
    ptr = types.CPointer(numba.from_dtype(np.dtype(dtype)))
    return types.int32(*([ptr] * n_arrays), types.CPointer(types.int64))


class EntryPoints:
    """The C entry points of one kernel module, compiled per dtype on first use.

    Parameters
    ----------
    module : str
        The kernel module's dotted name; imported (and its kernels compiled)
        only when a node first needs an entry point.
    version : str
        The hash of the sources behind the entry points and their wrappers.
    signature : callable
        ``signature(kernels_module, name, dtype)``, the entry point's Numba
        signature.

    The kernel module lists its entry points in ``ENTRIES`` (name: a tuple
    whose first item is the Python function) and may set ``FASTMATH``, the
    Numba ``fastmath`` flags they are compiled with.
    """

    def __init__(self, module: str, version: str, signature: Callable) -> None:
        self.module = module
        self.version = version
        self._signature = signature

    def kernels(self):
        """The kernel module (imported on first use)."""
        return importlib.import_module(self.module)

    def signature(self, name: str, dtype: str):
        return self._signature(self.kernels(), name, dtype)

    def key(self, op, node, source: Sequence[str]) -> str:
        """``node``'s cache key (:func:`node_key` with this version)."""
        return node_key(op, node, self.version, source)

    @functools.cache  # noqa: B019  (a few module-level instances, alive for the process)
    def address(self, name: str, dtype: str) -> int:
        """Compile (or load from the disk cache) entry point ``name`` for ``dtype``."""
        kernels = self.kernels()
        fastmath = getattr(kernels, "FASTMATH", False)
        cfunc = numba.cfunc(self.signature(name, dtype), cache=True, fastmath=fastmath)
        return cfunc(kernels.ENTRIES[name][0]).address

    def pointer_getter(self, name: str, dtype: str):
        """A jitted function returning the entry point's address (Python runs once)."""
        address = functools.partial(self.address, name, dtype)

        @numba_njit
        def get_pointer():
            with numba.objmode(ptr=types.intp):
                ptr = address()
            return ptr

        return get_pointer

    def compile(
        self,
        fname: str,
        body: list[str],
        args: list[str],
        kernels: tuple[str, ...] = (),
        dtype: str = "float64",
        env: dict | None = None,
    ):
        """Jit a generated wrapper; PyTensor caches it inside the whole graph's function.

        Each name in ``kernels`` becomes a local function ``<name>_fn`` in the
        wrapper, calling that entry point through its cached pointer.
        """
        namespace = {"np": np, "_call_cached_ptr": _call_cached_ptr, **(env or {})}
        prologue = []
        for kernel in kernels:
            namespace[f"{kernel}_ptr"] = self.pointer_getter(kernel, dtype)
            namespace[f"{kernel}_type"] = types.FunctionType(self.signature(kernel, dtype))
            prologue.append(
                f"{kernel}_fn = _call_cached_ptr(get_ptr_func={kernel}_ptr, "
                f"func_type_ref={kernel}_type, "
                f"unique_func_name_lit='lasagne_bn_{kernel}_{dtype}_v{self.version}')"
            )
        src = f"def {fname}({', '.join(args)}):\n" + "".join(
            f"    {line}\n" for line in prologue + body
        )
        # fastmath=False, unlike PyTensor's default: with it the optimizer chose
        # per compile whether ``(x - m) * s + t`` became one FMA, and a wrapper
        # just compiled and the same wrapper loaded from the disk cache gave
        # different last bits (see bn_kernels.FASTMATH).
        return numba_njit(
            compile_numba_function_src(src, fname, global_env=namespace), fastmath=False
        )

    def register(self, op_class):
        """Decorator: ``build(op, node) -> (fname, body, args, kernel)`` makes ``op_class``'s
        wrapper, compiled for the output dtype; float16 nodes run the NumPy ``perform``.
        """

        def decorate(build):
            @register_funcify_and_cache_key(op_class)
            def funcify(op, node, **kwargs):
                if needs_float16(node):
                    return float16_fallback(op, node, kwargs)
                fname, body, args, kernel = build(op, node)
                dtype = node.outputs[0].type.dtype
                return self.compile(fname, body, args, (kernel,), dtype), self.key(op, node, body)

            return build

        return decorate


def array_entries(registrations: str, kernels: str) -> EntryPoints:
    """The entry points of the sibling module ``kernels``, whose ``ENTRIES`` are
    ``(function, number of arrays)`` pairs, for the wrappers ``registrations``
    (a file) generates; both files are in the version.
    """
    version = source_version(Path(__file__).with_name(f"{kernels}.py"), registrations)
    return EntryPoints(
        f"{__package__}.{kernels}",
        version,
        lambda kernels, name, dtype: array_entry_signature(kernels.ENTRIES[name][1], dtype),
    )


def float16_fallback(op, node, kwargs):
    """The NumPy ``perform`` in object mode, for nodes the kernels do not take in float16."""
    enable_numba_float16()  # the graph around this node passes float16 arrays
    return generate_fallback_impl(op, node, **kwargs), None


def check(cond: str, message: str) -> str:
    """A generated ``if cond: raise ValueError(message)`` line (message safely quoted)."""
    return f"if {cond}:\n        raise ValueError({message!r})"


def dims(values: list[str]) -> list[str]:
    """Lines that fill the int64 parameter vector ``dims`` the entry points take."""
    lines = [f"dims = np.empty({len(values)}, dtype=np.int64)"]
    lines += [f"dims[{i}] = {v}" for i, v in enumerate(values)]
    return lines
