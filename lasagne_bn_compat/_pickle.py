"""Reading legacy pickles without running them, and writing pickles old code can read.

Reading: :class:`SafeUnpickler` resolves the globals a pickle names through
an allow-list, never through imports:

- NumPy's array, dtype and scalar reconstruction (checked wrappers), the
  plain containers (``set``, ``OrderedDict`` ...) and ``_codecs.encode`` for
  latin-1 only (how Python 3 stores ``bytes`` in protocol 2);
- ``theano.sandbox.cuda`` / ``theano.gpuarray`` unpicklers, which give the
  NumPy array the GPU array was saved from;
- every other ``theano.*`` and ``lasagne.*`` name becomes an inert
  *stand-in* class (:class:`LegacyObject`): "calling" it records the
  arguments, restoring its state records the state, nothing of Theano or
  Lasagne runs (neither needs to be installed);
- classes the caller vouches for (``classes={'mymodule.MyLayer': MyLayer}``).

Anything else (``os.system``, ``builtins.eval``, ``subprocess.Popen``...)
raises :class:`UnsafePickleError` the moment the pickle names it, before it
could be called.  :class:`Rebuilder` then turns stand-ins of Lasagne layers
into lasagne_bn layers.

Writing: :func:`dumps_protocol2` writes lists / dicts of arrays as protocol-2
pickles that Python 2 and 3 with any NumPy (1.x names, ``numpy.core``) load
with a plain ``pickle.load``, like the files Lasagne users wrote.
"""

from __future__ import annotations

import _compat_pickle
import functools
import inspect
import io
import math
import numbers
import pickle
import struct
import warnings
from collections import OrderedDict
from collections.abc import Mapping

import numpy as np

__all__ = [
    "LegacyObject",
    "Rebuilder",
    "SafeUnpickler",
    "UnsafePickleError",
    "dumps_protocol2",
    "legacy_path",
    "legacy_state",
]


class CheckpointError(ValueError):
    """A checkpoint that cannot be read; its message is always one line.

    Messages quote what was found in the file, which can hold anything:
    line breaks are shown escaped and long quotes are cut.

    Examples
    --------
    >>> from lasagne_bn_compat.io import CheckpointError, LegacyFormatError, UnsafePickleError
    >>> [issubclass(e, CheckpointError) for e in (LegacyFormatError, UnsafePickleError)]
    [True, True]
    >>> len(str(CheckpointError('line one' + chr(10) + 'line two')).splitlines())
    1
    """

    MAX_CHARS = 600

    def __init__(self, message: object = "") -> None:
        text = str(message).replace("\r", "\\r").replace("\n", "\\n")
        if len(text) > self.MAX_CHARS:
            text = text[: self.MAX_CHARS - 3] + "..."
        super().__init__(text)


class UnsafePickleError(CheckpointError):
    """A pickle names a global that is not on the allow-list; nothing was executed.

    Examples
    --------
    >>> import io, pickle
    >>> from lasagne_bn_compat.io import read_checkpoint
    >>> try:
    ...     read_checkpoint(io.BytesIO(pickle.dumps(print)))
    ... except UnsafePickleError as error:
    ...     print('builtins.print' in str(error))
    True
    """


# --------------------------------------------------------------------------
# stand-ins


class LegacyObject:
    """Inert stand-in for an object of a Theano / Lasagne class.

    Subclasses are made per legacy class (:func:`stand_in`); ``legacy_path``
    is the class's full name.  Instances record what the pickle gave them.
    """

    legacy_path = "?"

    def __new__(cls, *args, **kwargs):
        obj = object.__new__(cls)
        obj.__dict__.update(_args=args, _kwargs=kwargs, _state=None, _items=[], _mapping={})
        return obj

    def __init__(self, *args, **kwargs):
        pass

    def __setstate__(self, state):
        self.__dict__["_state"] = state

    def __setitem__(self, key, value):  # dict subclasses
        self._mapping[key] = value

    def append(self, value):  # list subclasses
        self._items.append(value)

    def extend(self, values):
        self._items.extend(values)

    def __reduce_ex__(self, protocol):
        raise TypeError(f"a stand-in for {self.legacy_path} cannot be pickled again")

    def __repr__(self) -> str:
        return f"<legacy {self.legacy_path} object>"


_STAND_INS: dict[str, type] = {}


def stand_in(path: str) -> type:
    """The (cached) stand-in class for the legacy global ``path``."""
    cls = _STAND_INS.get(path)
    if cls is None:
        name = path.rpartition(".")[2] or path
        cls = type(name, (LegacyObject,), {"legacy_path": path, "__module__": __name__})
        _STAND_INS[path] = cls
    return cls


def legacy_path(obj) -> str | None:
    """The legacy class (or function) name a stand-in, or a stand-in class, stands for."""
    if isinstance(obj, type) and issubclass(obj, LegacyObject):
        return obj.legacy_path
    if isinstance(obj, LegacyObject):
        return obj.legacy_path
    return None


def legacy_state(obj: LegacyObject) -> dict:
    """The attribute dict a stand-in was given (``{}`` if none)."""
    state = obj._state
    if isinstance(state, tuple) and len(state) == 2:  # (dict, slot state)
        merged = dict(state[0] or {})
        merged.update(state[1] or {})
        return merged
    return dict(state) if isinstance(state, Mapping) else {}


# --------------------------------------------------------------------------
# the allow-list


def _np_core(name: str):
    try:
        from numpy._core import multiarray, numeric
    except ImportError:  # pragma: no cover - NumPy 1.x
        from numpy.core import multiarray, numeric
    return getattr(multiarray if hasattr(multiarray, name) else numeric, name)


_reconstruct = _np_core("_reconstruct")
_scalar = _np_core("scalar")
_frombuffer = _np_core("_frombuffer")


def _is_array_class(cls) -> bool:
    return cls is np.ndarray


def _safe_reconstruct(subtype, shape, dtype):
    if not _is_array_class(subtype):
        raise UnsafePickleError(
            f"numpy's _reconstruct was asked to make a {subtype!r}; only numpy.ndarray is allowed"
        )
    return _reconstruct(np.ndarray, shape, dtype)


def _safe_scalar(dtype, data=None):
    if not isinstance(dtype, np.dtype):
        raise UnsafePickleError(f"numpy's scalar() was given {dtype!r}, not a numpy dtype")
    if dtype.hasobject:
        return data
    return _scalar(dtype, data)


def _canonical_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy itself makes for ``dtype``'s description (a pickle's state can
    set flags no description gives)."""
    if dtype.subdtype is not None:
        return np.dtype(dtype.subdtype)
    if dtype.fields is not None:
        # Names, offsets and itemsize as they are: ``descr`` would turn an
        # aligned struct's padding into fields, a different dtype in some NumPys.
        fields = [dtype.fields[name] for name in dtype.names]
        spec = {
            "names": list(dtype.names),
            "formats": [_canonical_dtype(field[0]) for field in fields],
            "offsets": [field[1] for field in fields],
            "itemsize": dtype.itemsize,
            "aligned": dtype.isalignedstruct,
        }
        if any(len(field) > 2 for field in fields):
            spec["titles"] = [field[2] if len(field) > 2 else None for field in fields]
        return np.dtype(spec)
    return np.dtype(dtype.str)


def _safe_frombuffer(buffer, dtype, shape, order):
    if not isinstance(dtype, np.dtype) or dtype.hasobject:
        raise UnsafePickleError(f"numpy's _frombuffer was given the dtype {dtype!r}")
    return _frombuffer(buffer, dtype, shape, order)


def _safe_encode(text, encoding="utf-8"):
    if not isinstance(text, str) or str(encoding).lower().replace("-", "") not in (
        "latin1",
        "iso88591",
    ):
        raise UnsafePickleError(
            f"_codecs.encode was called with encoding {encoding!r}; only latin-1 (how Python "
            "3 pickles bytes) is allowed"
        )
    return text.encode("latin-1")


def _safe_reconstructor(cls, base, state=None):
    if isinstance(cls, type) and issubclass(cls, LegacyObject):
        return cls.__new__(cls)
    raise UnsafePickleError(f"copyreg._reconstructor was asked to make a {cls!r}")


def _safe_newobj(cls, *args):
    if isinstance(cls, type) and issubclass(cls, LegacyObject):
        return cls.__new__(cls, *args)
    raise UnsafePickleError(f"copyreg.__newobj__ was asked to make a {cls!r}")


def _gpu_unpickler(path: str):
    def unpickle(npa, *context):
        if not isinstance(npa, np.ndarray):
            raise UnsafePickleError(f"{path} was given a {type(npa).__name__}, not an array")
        return npa

    unpickle.__name__ = path.rpartition(".")[2]
    return unpickle


_NUMERIC_TYPES = {
    t.__name__: t
    for t in (
        np.bool_,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint8,
        np.uint16,
        np.uint32,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.longdouble,
        np.complex64,
        np.complex128,
    )
}

_SAFE: dict[str, object] = {
    "builtins.set": set,
    "builtins.frozenset": frozenset,
    "builtins.list": list,
    "builtins.dict": dict,
    "builtins.tuple": tuple,
    "builtins.bytearray": bytearray,
    "builtins.complex": complex,
    "builtins.int": int,
    "builtins.long": int,
    "builtins.float": float,
    "builtins.str": str,
    "builtins.unicode": str,
    "builtins.bool": bool,
    "builtins.object": object,
    "collections.OrderedDict": OrderedDict,
    "_codecs.encode": _safe_encode,
    "copyreg._reconstructor": _safe_reconstructor,
    "copyreg.__newobj__": _safe_newobj,
    "numpy.ndarray": np.ndarray,
    "theano.sandbox.cuda.type.CudaNdarray_unpickler": _gpu_unpickler(
        "theano.sandbox.cuda.type.CudaNdarray_unpickler"
    ),
    "theano.gpuarray.type.GpuArray_unpickler": _gpu_unpickler(
        "theano.gpuarray.type.GpuArray_unpickler"
    ),
}
for _core in ("numpy.core", "numpy._core"):
    _SAFE[f"{_core}.multiarray._reconstruct"] = _safe_reconstruct
    _SAFE[f"{_core}.multiarray.scalar"] = _safe_scalar
    _SAFE[f"{_core}.numeric._frombuffer"] = _safe_frombuffer
for _name, _type in _NUMERIC_TYPES.items():
    _SAFE[f"numpy.{_name}"] = _type


def _python3_name(module: str, name: str) -> tuple[str, str]:
    """Python 2 names (``__builtin__``, ``copy_reg``, ``commands.Popen``) as Python 3 knows them.

    The same mapping ``pickle``'s ``fix_imports`` applies, so a refusal
    names the global that would really have been called.
    """
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


#: Legacy top-level packages whose globals become inert stand-ins (pylearn2:
#: the cuda-convnet ops a pickled ``Conv2DCCLayer`` / ``MaxPool2DCCLayer`` holds).
STAND_IN_ROOTS = ("theano", "lasagne", "pylearn2")


#: Modules whose names in a pickle mean it can run commands or code: never
#: suggested for allow-listing (a checkpoint has no reason to name them).
CODE_RUNNING_MODULES = frozenset(
    {
        "builtins", "__builtin__", "os", "posix", "nt", "subprocess", "sys", "shutil",
        "importlib", "runpy", "pickle", "_pickle", "marshal", "code", "codeop", "pty",
        "socket", "ctypes", "multiprocessing", "signal", "webbrowser", "platform",
        "commands", "popen2", "functools", "operator", "types", "inspect", "io", "_io",
        "pathlib", "tempfile", "glob", "site", "pydoc", "timeit", "cProfile", "profile",
        "pdb", "bdb", "trace", "threading", "_thread", "asyncio", "numpy.testing",
    }
)  # fmt: skip


def runs_code(path: str) -> bool:
    """Whether the global ``path`` ('module.Name') belongs to a module that can run code."""
    module = path.rpartition(".")[0]
    return any(module == m or module.startswith(m + ".") for m in CODE_RUNNING_MODULES)


def _allow_hint(path: str) -> str:
    if runs_code(path):
        return (
            f"{path} can run commands or code, which no checkpoint needs: the file may be "
            "malicious; do not allow it"
        )
    return (
        f"if it is a class of your own that you trust, pass classes={{{path!r}: TheClass}}, "
        f"or --allow-class {path} on the command line"
    )


class SafeUnpickler(pickle.Unpickler):
    """A ``pickle.Unpickler`` that resolves globals only through the allow-list.

    Parameters
    ----------
    file : binary file
    classes : mapping, optional
        Extra ``'module.Name' -> object`` entries the caller trusts (their
        own layer classes, say); used as they are.
    stand_in_roots : tuple of str
        Top-level packages whose globals become inert stand-ins.

    Loads with ``encoding='latin1'``, which Python 2 NumPy pickles need.
    """

    def __init__(self, file, *, classes: Mapping | None = None, stand_in_roots=STAND_IN_ROOTS):
        super().__init__(file, encoding="latin1")
        self._classes = dict(classes or {})
        self._roots = tuple(stand_in_roots)
        self._dtypes: list[np.dtype] = []

    def _dtype(self, obj, align=False, copy=True):
        # Always a copy: a pickle's BUILD then sets the state of a dtype of its
        # own, never of NumPy's shared float32 (which copy=False returns).
        dtype = np.dtype(obj, bool(align), True)
        self._dtypes.append(dtype)
        return dtype

    def load(self):
        """Unpickle, then refuse a dtype whose pickled state disagrees with its description.

        A crafted state can flag a float32 dtype as holding objects; NumPy then
        fails while freeing its arrays.  Such a dtype gets NumPy's own state back
        before anything is freed, and the load is refused.
        """
        try:
            return super().load()
        finally:
            crafted = []
            for dtype in self._dtypes:
                try:
                    canonical = _canonical_dtype(dtype)
                except (TypeError, ValueError):  # no description NumPy takes back
                    crafted.append(dtype)
                    continue
                if dtype.flags != canonical.flags:
                    crafted.append(dtype)
                    dtype.__setstate__(canonical.__reduce__()[2])
            self._dtypes.clear()
            if crafted:
                raise UnsafePickleError(
                    f"the pickle sets the state of a numpy dtype ({crafted[0]}) to flags "
                    "NumPy never gives it; refused"
                )

    def find_class(self, module: str, name: str):
        module, name = _python3_name(module, name)
        path = f"{module}.{name}"
        if path in self._classes:
            return self._classes[path]
        if path == "numpy.dtype":  # allowed, as a copy whose state load() checks
            return self._dtype
        if path in _SAFE:
            return _SAFE[path]
        if module.partition(".")[0] in self._roots:
            return stand_in(path)
        raise UnsafePickleError(
            f"the pickle refers to {path}, which is not on the allow-list of what a legacy "
            f"checkpoint may contain; refused, nothing was executed ({_allow_hint(path)})"
        )

    def persistent_load(self, pid):
        raise UnsafePickleError(f"the pickle uses a persistent id ({pid!r}); refused")


#: The deepest nesting of containers a checkpoint pickle may build: Python's
#: own C code (hashing, freeing) recurses into nested tuples and crashes the
#: process past about 10**5 levels, before any check of ours could run.
MAX_PICKLE_NESTING = 10_000

# opcodes whose popped items become children of the one object they push
_BUILDERS = {"TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "LIST", "DICT", "FROZENSET", "INST", "OBJ"}
# opcodes that add the popped items to the container left on the stack
_FILLERS = {"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"}


def check_pickle_nesting(data: bytes, limit: int = MAX_PICKLE_NESTING) -> None:
    """Refuse a pickle whose containers nest deeper than ``limit``, before unpickling it.

    Walks the opcodes (no object is made) and tracks how deep each value on
    the unpickler's stack nests.

    Raises
    ------
    CheckpointError
        If the nesting exceeds ``limit``.
    ValueError
        If the opcodes are malformed (the caller reports a corrupt file).
    """
    import pickletools

    stack: list[int] = []  # how deep each value on the unpickler's stack nests
    marks: list[int] = []
    memo: dict = {}
    deepest = 0
    for opcode, arg, _pos in pickletools.genops(data):
        name = opcode.name
        if name == "MARK":
            marks.append(len(stack))
            continue
        if name in ("PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"):
            memo[arg if name != "MEMOIZE" else len(memo)] = stack[-1] if stack else 0
            continue
        if pickletools.markobject in opcode.stack_before:
            start = marks.pop() if marks else 0
            popped, stack[start:] = stack[start:], []
        else:  # a filler keeps its container: it pops only the items
            n = len(opcode.stack_before) - (name in _FILLERS)
            popped = stack[len(stack) - n :] if n else []
            del stack[len(stack) - len(popped) :]
        if name in _FILLERS:  # the container stays on the stack, its items go into it
            if not stack:
                raise ValueError(f"{name} with no container on the stack")
            stack[-1] = max(stack[-1], max(popped, default=-1) + 1)
            depth = stack[-1]
        else:
            if name in ("GET", "BINGET", "LONG_BINGET"):
                depth = memo.get(arg, 0)
            elif popped and name in _BUILDERS | {"REDUCE", "NEWOBJ", "NEWOBJ_EX"}:
                depth = max(popped) + 1
            else:
                depth = 0
            stack.extend([depth] * len(opcode.stack_after))
        deepest = max(deepest, depth)
        if deepest > limit:
            raise CheckpointError(
                f"the pickle nests containers more than {limit} levels deep; refused before "
                "unpickling (Python itself crashes on such nesting)"
            )


def safe_loads(data: bytes, **kwargs):
    """Unpickle ``data`` with :class:`SafeUnpickler`."""
    return SafeUnpickler(io.BytesIO(data), **kwargs).load()


# --------------------------------------------------------------------------
# writing protocol-2 pickles for Python 2 / old NumPy


def _w_int(out: list, value: int) -> None:
    if 0 <= value < 256:
        out.append(b"K" + bytes([value]))
    elif 0 <= value < 65536:
        out.append(b"M" + struct.pack("<H", value))
    elif -(2**31) <= value < 2**31:
        out.append(b"J" + struct.pack("<i", value))
    else:
        raw = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
        out.append(b"\x8a" + bytes([len(raw)]) + raw)


def _w_str(out: list, text: str) -> None:
    raw = text.encode("utf-8")
    out.append(b"X" + struct.pack("<I", len(raw)) + raw)


def _w_bytes(out: list, raw: bytes) -> None:
    # Python 3's protocol-2 form for bytes: _codecs.encode(latin-1 text, 'latin1').
    # Python 2 loads it as str, Python 3 as bytes, without an encoding argument.
    out.append(b"c_codecs\nencode\n")
    _w_str(out, raw.decode("latin-1"))
    _w_str(out, "latin1")
    out.append(b"\x86R")


def _w_tuple(out: list, items) -> None:
    items = list(items)
    if not items:
        out.append(b")")
        return
    if len(items) > 3:
        out.append(b"(")
    for item in items:
        _w(out, item)
    out.append({1: b"\x85", 2: b"\x86", 3: b"\x87"}.get(len(items), b"t"))


def _w_dtype(out: list, dtype: np.dtype) -> None:
    if dtype.kind not in "biufc" or dtype.fields is not None or dtype.subdtype is not None:
        raise TypeError(f"cannot write arrays of dtype {dtype} in a legacy pickle")
    order = dtype.str[0] if dtype.itemsize > 1 else "|"
    out.append(b"cnumpy\ndtype\n")
    _w_tuple(out, [dtype.str[1:], False, True])
    out.append(b"R")
    _w_tuple(out, [3, order, None, None, None, -1, -1, 0])
    out.append(b"b")


def _w_array(out: list, array: np.ndarray) -> None:
    array = np.ascontiguousarray(array)
    out.append(b"cnumpy.core.multiarray\n_reconstruct\n")
    out.append(b"cnumpy\nndarray\n")
    _w_tuple(out, [0])
    _w_str(out, "b")
    out.append(b"\x87R")
    out.append(b"(")
    _w_int(out, 1)
    _w_tuple(out, list(array.shape))
    _w_dtype(out, array.dtype)
    out.append(b"\x89")  # not Fortran order
    _w_bytes(out, array.tobytes())
    out.append(b"tb")


def _w_scalar(out: list, value: np.generic) -> None:
    out.append(b"cnumpy.core.multiarray\nscalar\n")
    out.append(b"(")
    _w_dtype(out, value.dtype)
    _w_bytes(out, value.tobytes())
    out.append(b"tR")


def _w(out: list, obj) -> None:
    if obj is None:
        out.append(b"N")
    elif obj is True or obj is False:
        out.append(b"\x88" if obj else b"\x89")
    elif isinstance(obj, np.ndarray):
        _w_array(out, obj)
    elif isinstance(obj, np.generic):
        _w_scalar(out, obj)
    elif isinstance(obj, numbers.Integral):
        _w_int(out, int(obj))
    elif isinstance(obj, float):
        out.append(b"G" + struct.pack(">d", obj))
    elif isinstance(obj, str):
        _w_str(out, obj)
    elif isinstance(obj, bytes):
        _w_bytes(out, obj)
    elif isinstance(obj, list):
        out.append(b"]")
        if obj:
            out.append(b"(")
            for item in obj:
                _w(out, item)
            out.append(b"e")
    elif isinstance(obj, tuple):
        _w_tuple(out, obj)
    elif isinstance(obj, dict):
        out.append(b"}")
        if obj:
            out.append(b"(")
            for key, value in obj.items():
                _w(out, key)
                _w(out, value)
            out.append(b"u")
    else:
        raise TypeError(
            f"cannot write a {type(obj).__name__} in a legacy pickle; expected arrays, "
            "numbers, strings, lists, tuples and dicts"
        )


def dumps_protocol2(obj) -> bytes:
    """``obj`` (arrays, numbers, strings, lists, tuples, dicts) as a protocol-2 pickle.

    Arrays are written as NumPy 1.x did (``numpy.core.multiarray``), so
    Python 2 and old NumPy versions load the file with a plain
    ``pickle.load`` (Python 2 gets ``unicode`` strings).
    """
    out: list[bytes] = [b"\x80\x02"]
    _w(out, obj)
    out.append(b".")
    return b"".join(out)


# --------------------------------------------------------------------------
# rebuilding lasagne_bn networks from stand-ins


class LegacyNetworkError(CheckpointError):
    """A pickled network that cannot be rebuilt on lasagne_bn.

    Examples
    --------
    >>> from lasagne_bn_compat.io import CheckpointError
    >>> issubclass(LegacyNetworkError, CheckpointError)
    True
    >>> str(LegacyNetworkError("cannot rebuild lasagne.layers.Foo"))
    'cannot rebuild lasagne.layers.Foo'
    """


def _nonlinearity_targets() -> dict:
    from lasagne_bn import nonlinearities as nl
    from lasagne_bn_compat.theano.tensor import nnet

    table = {}
    for name in ("sigmoid", "softmax", "tanh", "rectify", "elu", "softplus", "linear"):
        table[f"lasagne.nonlinearities.{name}"] = getattr(nl, name)
    table["lasagne.nonlinearities.identity"] = nl.identity
    for module in ("theano.tensor.nnet", "theano.tensor.nnet.nnet", "theano.tensor.nnet.sigm"):
        for name in (
            "relu",
            "elu",
            "selu",
            "softmax",
            "logsoftmax",
            "softsign",
            "hard_sigmoid",
            "ultra_fast_sigmoid",
            "sigmoid",
            "softplus",
        ):
            table[f"{module}.{name}"] = getattr(nnet, name)
    return table


def _elemwise_targets() -> dict:
    import pytensor.tensor as pt

    from lasagne_bn.nonlinearities import identity

    return {
        "ScalarSigmoid": pt.sigmoid,
        "UltraFastScalarSigmoid": pt.sigmoid,
        "Tanh": pt.tanh,
        "ScalarSoftplus": pt.softplus,
        "Softplus": pt.softplus,
        "Exp": pt.exp,
        "Abs": pt.abs,
        "Identity": identity,
        # merge functions of ElemwiseMergeLayer (T.add, T.mul, T.maximum ...)
        "Add": pt.add,
        "Mul": pt.mul,
        "Sub": pt.sub,
        "Maximum": pt.maximum,
        "Minimum": pt.minimum,
    }


def _class_targets() -> dict:
    from lasagne_bn import init, nonlinearities

    table = {}
    for name in ("LeakyRectify", "ScaledTanH", "ScaledTanh", "SELU"):
        table[f"lasagne.nonlinearities.{name}"] = getattr(nonlinearities, name)
    for name in init.__all__:
        table[f"lasagne.init.{name}"] = getattr(init, name)
    return table


#: Constructor arguments that may be dropped (lasagne_bn's default then
#: applies) when their legacy value is a Theano function; a note says so.
SKIPPABLE_ARGUMENTS = frozenset({"convolution", "merge_function"})

#: Legacy values of those arguments that *are* lasagne_bn's default (no note).
DEFAULT_EQUIVALENTS = {
    "convolution": frozenset(
        {
            "theano.tensor.nnet.conv2d",
            "theano.tensor.nnet.abstract_conv.conv2d",
            "theano.tensor.nnet.conv3d",
            "theano.tensor.nnet.abstract_conv.conv3d",
            "lasagne.theano_extensions.conv.conv1d_mc0",
        }
    ),
}


#: Lasagne's GPU-only layer modules, whose classes lasagne_bn_compat provides under the
#: same names (on the portable layers).
GPU_LAYER_MODULES = ("dnn", "corrmm", "cuda_convnet")


def _layer_class(path: str):
    """The lasagne_bn (or shim) layer class for a ``lasagne.layers.*`` class path, or None."""
    if not path.startswith("lasagne.layers."):
        return None
    import importlib

    import lasagne_bn.layers as layers

    module, _, name = path.rpartition(".")
    source = layers
    gpu_module = module.rpartition(".")[2]
    if module == f"lasagne.layers.{gpu_module}" and gpu_module in GPU_LAYER_MODULES:
        source = importlib.import_module(f"lasagne_bn_compat.lasagne.layers.{gpu_module}")
    cls = getattr(source, name, None)
    if isinstance(cls, type) and issubclass(cls, layers.Layer):
        return cls
    return None


class Rebuilder:
    """Turns the stand-ins of an unpickled Lasagne network into lasagne_bn objects.

    Layers are rebuilt by calling lasagne_bn's constructor of the same name
    with the attributes the pickle holds (Lasagne keeps constructor
    arguments as attributes of the same names); parameters become new
    shared variables holding the pickled values (tied parameters stay
    tied); nonlinearities map to lasagne_bn's.  ``notes`` collects what was
    left out (``convolution=T.nnet.conv2d`` and the like).

    A file must not make the rebuild allocate what it does not hold: the
    layer graph is walked without recursion (deep networks load), cycles
    and values nested more than :attr:`MAX_NESTING` deep are refused, and
    initializers (a parameter the pickle left out, or pickled as
    ``lasagne.init.*``) may fill at most ``max_new_bytes`` in all.

    Parameters
    ----------
    classes : mapping, optional
        ``'module.Name' -> class`` for layer classes of the caller's own
        (rebuilt the same way).
    max_new_bytes : int
        The most bytes of parameters the rebuild may create with
        initializers, rather than take from the pickle.
    """

    #: How deeply values may nest inside one another (containers, layers held
    #: by attributes); a chain of layers through their inputs does not count.
    MAX_NESTING = 100

    def __init__(self, classes: Mapping | None = None, max_new_bytes: int = 2**20):
        self.classes = dict(classes or {})
        self.max_new_bytes = max_new_bytes
        self.memo: dict[int, object] = {}
        self._depth = 0
        self.notes: list[str] = []
        self._functions = _nonlinearity_targets()
        self._elemwise = _elemwise_targets()
        self._objects = _class_targets()

    # values --------------------------------------------------------------

    def convert(self, obj, where: str = "value"):
        """``obj`` with every stand-in inside replaced (raises for unconvertible ones)."""
        key = id(obj)
        if key in self.memo:
            result = self.memo[key]
            if result is _BUILDING:
                raise LegacyNetworkError(
                    f"{where}: the pickled {legacy_path(obj)} refers to itself; refused"
                )
            return result
        if self._depth >= self.MAX_NESTING:
            raise LegacyNetworkError(
                f"{where}: the pickle nests values more than {self.MAX_NESTING} deep; refused"
            )
        self._depth += 1
        try:
            result = self._convert(obj, where)
        finally:
            self._depth -= 1
        if isinstance(obj, LegacyObject | list | dict | set):
            self.memo[key] = result
        return result

    def _convert(self, obj, where):
        if isinstance(obj, type) and issubclass(obj, LegacyObject):
            target = self._functions.get(obj.legacy_path)
            if target is None:
                raise _Unconvertible(obj.legacy_path)
            return target
        if isinstance(obj, LegacyObject):
            return self._convert_object(obj, where)
        if isinstance(obj, OrderedDict):
            return OrderedDict(
                (self.convert(k, where), self.convert(v, where)) for k, v in obj.items()
            )
        if isinstance(obj, dict):
            return {self.convert(k, where): self.convert(v, where) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.convert(v, where) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.convert(v, where) for v in obj)
        if isinstance(obj, set | frozenset):
            return type(obj)(self.convert(v, where) for v in obj)
        return obj

    def _convert_object(self, obj: LegacyObject, where: str):
        path = obj.legacy_path
        if self._layer_cls(obj) is not None:
            return self._layer_graph(obj)
        if path.endswith("SharedVariable"):
            return self._shared(obj, where)
        if path in ("theano.tensor.var.TensorVariable", "theano.tensor.basic.TensorVariable"):
            return self._input_variable(obj)
        if path in self._objects:
            return self._construct(self._objects[path], legacy_state(obj), path)
        if path.endswith(".Elemwise"):
            scalar_op = legacy_state(obj).get("scalar_op")
            name = (legacy_path(scalar_op) or "").rpartition(".")[2]
            if name in self._elemwise:
                return self._elemwise[name]
        if path.startswith("lasagne.layers."):
            raise LegacyNetworkError(
                f"the pickle holds a {path}, which lasagne_bn does not have (pass "
                f"classes={{{path!r}: <a lasagne_bn layer class>}} to map it)"
            )
        raise _Unconvertible(path)

    def _shared(self, obj: LegacyObject, where: str):
        from lasagne_bn.utils import portable_shared

        value = shared_value(obj)
        if value is None:
            raise LegacyNetworkError(
                f"{where}: the pickled {obj.legacy_path} holds no array value"
            )
        return portable_shared(value, name=legacy_state(obj).get("name"), shape=value.shape)

    def _input_variable(self, obj: LegacyObject):
        import pytensor.tensor as pt

        state = legacy_state(obj)
        if state.get("owner") is not None:
            raise _Unconvertible("a Theano expression")
        type_state = (
            legacy_state(state["type"]) if isinstance(state.get("type"), LegacyObject) else {}
        )
        dtype = type_state.get("dtype", "floatX")
        broadcastable = tuple(type_state.get("broadcastable", ()))
        shape = tuple(1 if b else None for b in broadcastable)
        return pt.TensorType(dtype, shape=shape)(state.get("name"))

    # layers --------------------------------------------------------------

    def _layer_cls(self, obj):
        if not isinstance(obj, LegacyObject):
            return None
        return self.classes.get(obj.legacy_path) or _layer_class(obj.legacy_path)

    def _inputs(self, obj: LegacyObject) -> list:
        """The stand-ins of the layers feeding ``obj`` (as its pickled state names them)."""
        state = legacy_state(obj)
        if "input_layers" in state:
            found = state["input_layers"]
            found = list(found) if isinstance(found, list | tuple) else []
        else:
            found = [state.get("input_layer")]
        return [layer for layer in found if self._layer_cls(layer) is not None]

    def _layer_graph(self, root: LegacyObject):
        """Rebuild ``root`` and every layer feeding it, inputs first, without recursion.

        A network of thousands of layers in a chain rebuilds in constant
        stack depth; a layer that feeds itself (through any number of
        layers) is refused.
        """
        path_ids = {id(root)}
        stack = [(root, iter(self._inputs(root)))]
        while stack:
            obj, inputs = stack[-1]
            for layer in inputs:
                if id(layer) in self.memo:
                    continue
                if id(layer) in path_ids:
                    name = legacy_state(layer).get("name")
                    length = len(stack) - [id(o) for o, _ in stack].index(id(layer))
                    through = "" if length == 1 else f" through {length} layers"
                    raise LegacyNetworkError(
                        f"{layer.legacy_path} {name!r} is its own input{through}: a network "
                        "must not have cycles; refused"
                    )
                path_ids.add(id(layer))
                stack.append((layer, iter(self._inputs(layer))))
                break
            else:
                stack.pop()
                path_ids.discard(id(obj))
                self.memo[id(obj)] = self._layer(obj, self._layer_cls(obj))
        return self.memo[id(root)]

    def _construct(self, cls, state: dict, what: str, fixed: dict | None = None):
        """Call ``cls`` with the arguments its signature names, taken from ``state``."""
        from lasagne_bn.utils import initializer_hook

        signature = inspect.signature(cls.__init__)
        kwargs = dict(fixed or {})
        takes_kwargs = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
        for name, param in list(signature.parameters.items())[1:]:
            if name in kwargs or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                continue
            if name not in state:
                continue
            try:
                kwargs[name] = self.convert(state[name], f"{what}.{name}")
            except _Unconvertible as exc:
                if name in SKIPPABLE_ARGUMENTS and param.default is not param.empty:
                    if exc.path not in DEFAULT_EQUIVALENTS.get(name, ()):
                        self.notes.append(
                            f"{what}: {name}={exc.path} replaced by lasagne_bn's default"
                        )
                    continue
                raise LegacyNetworkError(
                    f"{what}: cannot rebuild argument {name!r} from the pickled {exc.path}"
                ) from None
        if (
            "name" in state
            and "name" not in kwargs
            and (takes_kwargs or "name" in signature.parameters)
        ):
            kwargs["name"] = state["name"]
        # Lasagne's conv layers take num_groups through **kwargs (BaseConvLayer's)
        if takes_kwargs and state.get("num_groups", 1) != 1 and "num_groups" not in kwargs:
            kwargs["num_groups"] = state["num_groups"]
        try:
            with initializer_hook(functools.partial(self._charge, what)):
                return cls(**kwargs)
        except LegacyNetworkError:
            raise
        except (TypeError, ValueError) as exc:
            raise LegacyNetworkError(
                f"{what}: {cls.__name__}(...) refused the pickled values: {exc}"
            ) from exc

    def _charge(self, what: str, shape: tuple, name: str | None) -> None:
        """Refuse a parameter the pickle does not hold, beyond what is left of the budget."""
        try:
            nbytes = math.prod(int(d) for d in shape) * 8  # float64, the widest filled
        except (TypeError, ValueError):  # not a shape: create_param says so
            return
        if nbytes > self.max_new_bytes:
            raise LegacyNetworkError(
                f"{what}: the pickle holds no value for parameter {name or '?'} of shape "
                f"{tuple(shape)}, and initializing it would allocate {nbytes:,} bytes, more "
                f"than the {self.max_new_bytes:,} a rebuild may add to what the file holds; "
                "refused"
            )
        self.max_new_bytes -= nbytes

    def _layer(self, obj: LegacyObject, cls):
        state = legacy_state(obj)
        what = f"{obj.legacy_path} {state.get('name')!r}"
        fixed = {}
        if "input_layers" in state or "input_shapes" in state:
            layers = state.get("input_layers") or []
            shapes = state.get("input_shapes") or []
            incomings = [
                self.convert(layer, what) if layer is not None else tuple(shape)
                for layer, shape in zip(layers, shapes, strict=False)
            ]
            if "incomings" in inspect.signature(cls.__init__).parameters:
                fixed["incomings"] = incomings
            else:
                fixed.update(_merged_incomings(state, incomings, what))
        elif "input_layer" in state or "input_shape" in state:
            layer = state.get("input_layer")
            fixed["incoming"] = (
                self.convert(layer, what) if layer is not None else tuple(state["input_shape"])
            )
        self.memo[id(obj)] = _BUILDING  # guards against cycles through other attributes
        layer = self._construct(cls, state, what, fixed)
        self._restore_param_order(layer, state, what)
        return layer

    def _restore_param_order(self, layer, state: dict, what: str) -> None:
        legacy_params = state.get("params")
        if not isinstance(legacy_params, Mapping):
            return
        mapped = []
        for param, tags in legacy_params.items():
            new = self.memo.get(id(param))
            if new is None:
                return
            mapped.append((new, set(tags or ())))
        if {id(p) for p, _ in mapped} != {id(p) for p in layer.params}:
            raise LegacyNetworkError(
                f"{what}: the rebuilt layer has the parameters "
                f"{[p.name for p in layer.params]}, the pickled one "
                f"{[getattr(p, 'name', p) for p, _ in mapped]}"
            )
        extra = {id(p): tags - {"trainable", "regularizable"} for p, tags in layer.params.items()}
        layer.params = OrderedDict((p, tags | extra[id(p)]) for p, tags in mapped)


_BUILDING = object()

#: Lasagne's recurrent layers are merge layers whose constructors take one
#: ``incoming`` and the optional extra inputs by keyword; the pickled state
#: says where each extra input sits in ``input_layers``.
_EXTRA_INCOMINGS = {
    "mask_incoming_index": "mask_input",
    "hid_init_incoming_index": "hid_init",
    "cell_init_incoming_index": "cell_init",
}


def _merged_incomings(state: dict, incomings: list, what: str) -> dict:
    """Constructor arguments of a merge layer that takes ``incoming`` (+ extra inputs)."""
    if not incomings:
        raise LegacyNetworkError(f"{what}: the pickled layer has no input layers")
    kwargs = {"incoming": incomings[0]}
    for index_name, argument in _EXTRA_INCOMINGS.items():
        index = state.get(index_name, -1)
        if isinstance(index, int) and 0 < index < len(incomings):
            kwargs[argument] = incomings[index]
    return kwargs


class _Unconvertible(Exception):
    def __init__(self, path: str):
        super().__init__(path)
        self.path = path


def _shared_array(obj):
    if not (isinstance(obj, LegacyObject) and obj.legacy_path.endswith("SharedVariable")):
        return None
    container = legacy_state(obj).get("container")
    if not isinstance(container, LegacyObject):
        return None
    storage = legacy_state(container).get("storage")
    if not isinstance(storage, list) or not storage:
        return None
    return storage[0] if isinstance(storage[0], np.ndarray | np.generic) else None


def shared_value(obj) -> np.ndarray | None:
    """A copy of the array a pickled Theano shared variable holds (None if it holds none)."""
    value = _shared_array(obj)
    return None if value is None else np.array(value)


def is_layer_stand_in(obj) -> bool:
    """Whether ``obj`` is the stand-in of a pickled ``lasagne.layers`` layer."""
    return isinstance(obj, LegacyObject) and obj.legacy_path.startswith("lasagne.layers.")


class _NotPlain(Exception):
    """A pickled network whose parameters only a rebuild can tell."""


class _PickledLayers:
    """Layer stand-ins seen as :func:`~lasagne_bn.layers.get_all_layers` walks layers.

    One view per stand-in; a view's inputs are made when the walk asks for
    them (no recursion: deep chains of layers are walked in constant depth).
    """

    def __init__(self):
        self.views: dict[int, _PickledLayer] = {}

    def view(self, obj):
        if obj is None:
            return None
        if not is_layer_stand_in(obj):
            raise _NotPlain
        if id(obj) not in self.views:
            self.views[id(obj)] = _PickledLayer(obj, self)
        return self.views[id(obj)]

    def all_params(self, outputs: list) -> list:
        """Lasagne's ``get_all_params(outputs)``, as stand-ins of shared variables."""
        from lasagne_bn.layers import get_all_layers

        params, seen = [], set()
        for layer in get_all_layers([self.view(obj) for obj in outputs]):
            for param in layer.params():
                if id(param) not in seen:
                    seen.add(id(param))
                    params.append(param)
        return params


class _PickledLayer:
    def __init__(self, obj: LegacyObject, network: _PickledLayers):
        self.obj, self.network, self.state = obj, network, legacy_state(obj)

    def __getattr__(self, name: str):
        # what get_all_layers asks for: Lasagne's input_layers (merge layers) or input_layer
        if name == "input_layers" and "input_layers" in self.state:
            inputs = self.state["input_layers"]
            if not isinstance(inputs, list | tuple):
                raise _NotPlain
            return [self.network.view(layer) for layer in inputs]
        if name == "input_layer" and "input_layer" in self.state:
            return self.network.view(self.state["input_layer"])
        raise AttributeError(name)

    def params(self) -> list:
        """Its parameters as Lasagne's ``get_params()`` lists them."""
        own = self.state.get("params")
        if not isinstance(own, Mapping) or any(_shared_array(p) is None for p in own):
            raise _NotPlain  # expressions as parameters, or no parameter dict at all
        params = list(own)
        # Lasagne's CustomRecurrentLayer adds its sub-networks' parameters
        for key in ("input_to_hidden", "hidden_to_hidden"):
            if key in self.state:
                params += self.network.all_params([self.state[key]])
        return params


def pickled_param_values(layers: list) -> tuple[list, list] | None:
    """The values and names of the parameters of pickled Lasagne layers, read without rebuilding.

    ``layers`` are stand-ins of the pickled output layer(s); the result is
    in Lasagne's ``get_all_params`` order (what rebuilding the network and
    calling ``get_all_params`` gives).  None when only a rebuild can tell
    the parameters (a layer fed by something else than layers, a parameter
    that is a Theano expression, a layer with no parameter dict).
    """
    try:
        params = _PickledLayers().all_params(layers)
    except _NotPlain:
        return None
    return [shared_value(p) for p in params], [str(legacy_state(p).get("name")) for p in params]


def contains_layers(obj) -> bool:
    """Whether an unpickled object holds stand-ins of Lasagne layers in its containers.

    Walks lists, tuples and mapping values of any depth without recursion
    (each container once, so shared or self-containing ones end).
    """
    stack, seen = [obj], set()
    while stack:
        item = stack.pop()
        if isinstance(item, LegacyObject):
            if item.legacy_path.startswith("lasagne.layers."):
                return True
        elif isinstance(item, Mapping | list | tuple) and id(item) not in seen:
            seen.add(id(item))
            stack.extend(item.values() if isinstance(item, Mapping) else item)
    return False


def warn_notes(notes: list[str]) -> None:
    if notes:
        warnings.warn("rebuilt with lasagne_bn defaults: " + "; ".join(notes), stacklevel=3)
