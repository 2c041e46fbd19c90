"""Legacy Lasagne checkpoints: read, check, load into a network, write.

The formats Lasagne users wrote, all read by :func:`read_checkpoint` (the
format is recognised from the file's first bytes):

``'npz'``
    ``np.savez(f, *lasagne.layers.get_all_param_values(net))``: arrays
    ``arr_0 ... arr_N`` (other names are kept, in file order).
``'pickle'``
    ``pickle.dump(get_all_param_values(net), f, protocol=2)`` (or any
    protocol), from Python 2 too (latin-1 NumPy data); also a single
    ``np.save``\\ d object array holding that list (``'npy'``).
``'model-zoo'``
    A pickled dict with the values under ``'param values'``, as the Lasagne
    model zoo (Recipes) shipped them, with entries such as ``'mean value'``
    and ``'synset words'`` (kept as :attr:`Checkpoint.extras`).
``'network'``
    A pickle of whole Lasagne network objects (``pickle.dump(l_out, f)``),
    with Theano shared variables (CPU, ``theano.sandbox.cuda`` or
    ``theano.gpuarray``) inside: rebuilt as a lasagne_bn network.

gzip-compressed files (``model.pkl.gz``) are read too.

Pickles are read with an allow-list (:mod:`lasagne_bn_compat._pickle`): a pickle that
names anything else (``os.system``, ``builtins.eval`` ...) is refused with
:class:`UnsafePickleError` before anything could run; Theano and Lasagne
need not be installed.  :func:`load_params` checks the count, shape and
dtype of every array before it changes any parameter, so a failed load
leaves the network as it was.

Batch-norm statistics: Lasagne files hold ``inv_std``.  Loading into a
network whose :class:`~lasagne_bn.layers.BatchNormLayer`\\ s store ``var``
converts them (``stat_storage='inv_std'``, the default, says what the file
holds); :func:`save_params` writes ``inv_std`` by default, so the files stay
readable by Lasagne itself.  See :mod:`lasagne_bn.layers.bn_storage`.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import reprlib
import stat
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from lasagne_bn._files import atomic_write, resolve_target
from lasagne_bn_compat._pickle import (
    CheckpointError,
    LegacyNetworkError,
    LegacyObject,
    Rebuilder,
    SafeUnpickler,
    UnsafePickleError,
    check_pickle_nesting,
    contains_layers,
    dumps_protocol2,
    is_layer_stand_in,
    pickled_param_values,
    warn_notes,
)

if TYPE_CHECKING:
    from typing import Any, BinaryIO

    from lasagne_bn.layers.base import Layer

__all__ = [
    "FORMATS",
    "MAX_BYTES",
    "STAT_RECORD",
    "WRITE_FORMATS",
    "AMBIGUOUS",
    "ArrayInfo",
    "Checkpoint",
    "CheckpointError",
    "LegacyFormatError",
    "LegacyNetworkError",
    "NonFiniteWarning",
    "UnsafePickleError",
    "guess_bn_roles",
    "inspect_checkpoint",
    "load_network",
    "load_params",
    "read_checkpoint",
    "save_params",
    "write_values",
]

#: Formats :func:`read_checkpoint` recognises.
FORMATS = ("npz", "npy", "pickle", "model-zoo", "network")
#: Formats :func:`save_params` writes.
WRITE_FORMATS = ("npz", "pickle", "model-zoo")
#: Keys under which pickled dicts hold the parameter values.
VALUE_KEYS = ("param values", "param_values", "params", "values")


#: The most bytes a checkpoint may decompress to (gzip, or the arrays of an
#: .npz), and the largest array a header may declare: a file claiming more is
#: refused before anything that large is allocated.  The largest models of
#: the Lasagne model zoo hold about 0.6 GB; pass ``max_bytes=`` for more.
MAX_BYTES = 2 * 1024**3


class LegacyFormatError(CheckpointError):
    """A file that is not (or no longer) a complete checkpoint in a supported format.

    Examples
    --------
    >>> import io
    >>> try:
    ...     read_checkpoint(io.BytesIO(b''))
    ... except LegacyFormatError as error:
    ...     print(isinstance(error, CheckpointError), isinstance(error, ValueError))
    True True
    """


#: Where a file lasagne_bn writes says which statistics it holds: an .npz
#: member (a 0-d string array, no pickle) or a key of the pickled dict.  Only
#: files holding ``var`` carry it: ``inv_std`` files stay exactly Lasagne's.
STAT_RECORD = "__lasagne_bn_statistics__"


def _record_json(stat_storage: str, indices: Sequence[int]) -> str:
    return json.dumps({"stat_storage": stat_storage, "stat_indices": [int(i) for i in indices]})


def _parse_record(text, where: str, n_values: int) -> tuple[str, list]:
    try:
        record = json.loads(str(text))
        storage, indices = record["stat_storage"], record["stat_indices"]
        ok = storage in ("var", "inv_std") and all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_values for i in indices
        )
    except (ValueError, TypeError, KeyError):
        ok = False
    if not ok:
        raise LegacyFormatError(f"{where}: its {STAT_RECORD} record is corrupt ({text!r:.80})")
    return storage, list(indices)


def _too_large(where: str, what: str, max_bytes: int) -> LegacyFormatError:
    return LegacyFormatError(
        f"{where}: {what}, more than the limit of {max_bytes:,} bytes; refused before "
        "reading it (pass max_bytes= to raise the limit for a file you trust)"
    )


#: Reads and decompression go in steps of this many bytes: memory follows
#: what a file holds, never the limit (a ``read(max_bytes + 1)`` makes Python
#: allocate the whole limit first, which fails under ``ulimit -v``).
_STEP = 1 << 20


def _out_of_memory(where: str, what: str) -> LegacyFormatError:
    return LegacyFormatError(
        f"{where}: {what}, more than this process can allocate (an address-space limit such "
        "as ulimit -v?); refused"
    )


def _inflate(f, where: str, max_bytes: int) -> bytes:
    """gunzip the stream ``f`` in steps, refusing output beyond ``max_bytes`` (gzip bombs)."""
    import zlib

    inflater = zlib.decompressobj(wbits=31)  # gzip header and trailer
    out: list[bytes] = []
    total = 0
    try:
        while not inflater.eof:
            chunk = inflater.unconsumed_tail or f.read(_STEP)
            if not chunk:
                raise LegacyFormatError(f"{where} is a truncated gzip file")
            piece = inflater.decompress(chunk, min(_STEP, max_bytes + 1 - total))
            out.append(piece)
            total += len(piece)
            if total > max_bytes:
                raise _too_large(where, "it decompresses to", max_bytes)
        return b"".join(out)
    except zlib.error as exc:
        raise LegacyFormatError(f"{where} is a corrupt gzip file ({exc})") from None
    except MemoryError:
        out.clear()
        raise _out_of_memory(where, f"it decompresses to more than {total:,} bytes") from None


@dataclass
class Checkpoint:
    """What a checkpoint file holds.

    Attributes
    ----------
    format : str
        One of :data:`FORMATS`.
    values : list of numpy.ndarray
        The parameter values, in the network's ``get_all_params`` order.
    names : list of str
        A name per value: ``arr_<i>`` (npz), the dict key, the parameter
        name (pickled networks), or ``'[i]'``.
    extras : dict
        Model-zoo entries besides the values (``'mean value'`` ...).
    network : object or None
        For ``'network'`` files: the rebuilt lasagne_bn layer (or whatever
        structure of layers was pickled); None from :func:`load_params`,
        which reads the values without rebuilding the network.
    source : str
        The path (or ``'<file object>'``).
    stat_storage : 'var', 'inv_std' or None
        What the file's batch-norm statistics are, when the file says so
        (files lasagne_bn writes with ``var`` statistics carry a record;
        legacy files do not, and hold ``inv_std``).
    stat_indices : list of int or None
        Where those statistics sit in ``values``, with ``stat_storage``.

    Examples
    --------
    >>> checkpoint = Checkpoint('npz', [np.zeros(2)], names=['arr_0'])
    >>> checkpoint.format, checkpoint.names, checkpoint.network is None
    ('npz', ['arr_0'], True)
    """

    format: str
    values: list
    names: list = field(default_factory=list)
    extras: dict = field(default_factory=dict)
    network: object = None
    source: str = ""
    stat_storage: str | None = None
    stat_indices: list | None = None


# --------------------------------------------------------------------------
# reading


def _check_network(network, what: str = "network") -> None:
    from lasagne_bn.layers import Layer

    layers = network if isinstance(network, list | tuple) else [network]
    if not layers or not all(isinstance(layer, Layer) for layer in layers):
        raise TypeError(
            f"{what}={network!r} ({type(network).__name__}) must be a lasagne_bn layer or a "
            "list of layers (the network's output layer(s))"
        )


def _check_classes(classes) -> None:
    if classes is not None and not isinstance(classes, Mapping):
        raise TypeError(
            f"classes={classes!r} must be a mapping from 'module.Name' to a class, or None"
        )


def _read_chunks(f, max_bytes: int, where: str) -> bytes:
    """All of ``f`` (at most ``max_bytes``), read in steps."""
    chunks, total = [], 0
    while True:
        chunk = f.read(min(_STEP, max_bytes + 1 - total))
        if not isinstance(chunk, bytes | bytearray):
            raise TypeError("source must be opened in binary mode ('rb')")
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        total += len(chunk)
        if total > max_bytes:
            raise _too_large(where, "the file is larger", max_bytes)


@contextlib.contextmanager
def _open_source(source, max_bytes: int):
    """``(stream, where, size)``: a seekable binary stream of the file, its name and length.

    A regular file is read where it lies (its size from ``fstat``, refused
    when over ``max_bytes`` before anything is read); a pipe, a device or a
    file object is read in steps into memory, up to ``max_bytes``.
    """
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        try:
            f = open(path, "rb")  # noqa: SIM115 (closed below, after the caller's reading)
        except IsADirectoryError:
            raise LegacyFormatError(f"{path!r} is a directory, not a checkpoint file") from None
        with f:
            info = os.fstat(f.fileno())
            if stat.S_ISREG(info.st_mode):
                if info.st_size > max_bytes:
                    raise _too_large(path, "the file is larger", max_bytes)
                yield f, path, info.st_size
            else:
                data = _read_chunks(f, max_bytes, path)
                yield io.BytesIO(data), path, len(data)
    elif hasattr(source, "read"):
        where = getattr(source, "name", "<file object>")
        if not isinstance(where, str):
            where = "<file object>"
        data = _read_chunks(source, max_bytes, where)
        yield io.BytesIO(data), where, len(data)
    else:
        raise TypeError(
            f"source={source!r} ({type(source).__name__}) must be a path or a binary file object"
        )


def _read_exact(f, n: int) -> bytes:
    """``n`` bytes of ``f`` (fewer at its end), read in steps: ``f.read(n)`` would allocate n."""
    chunks, left = [], n
    while left > 0:
        chunk = f.read(min(_STEP, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _sniff(data: bytes) -> str:
    if data[:4] in (b"PK\x03\x04", b"PK\x05\x06"):
        return "npz"
    if data[:6] == b"\x93NUMPY":
        return "npy"
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    return "pickle"


def _unpickle(data: bytes, where: str, classes) -> object:
    try:
        try:
            check_pickle_nesting(data)
        except CheckpointError as exc:
            raise LegacyFormatError(f"{where}: {exc}") from None
        return SafeUnpickler(io.BytesIO(data), classes=classes).load()
    except UnsafePickleError as exc:
        raise UnsafePickleError(f"{where}: {exc}") from None
    except CheckpointError:
        raise
    except MemoryError:
        raise _out_of_memory(where, "it declares an object larger") from None
    except Exception as exc:
        # Only allow-listed callables run while unpickling; whatever they or
        # the unpickler make of corrupt bytes (EOFError, OverflowError,
        # UnicodeDecodeError, MemoryError ...) means the same to the user.
        raise LegacyFormatError(
            f"{where} is truncated or not a pickle ({type(exc).__name__}: {exc})"
        ) from None


def _read_npy(f, where: str, classes, size: int) -> np.ndarray:
    """The array of the .npy stream ``f`` of ``size`` bytes (as declared: it may hold fewer).

    The array is allocated once, as its header declares (once that fits in
    what follows), and filled in steps: the file is never held in memory
    beside it.
    """
    start = f.tell()
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        else:
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
    except Exception as exc:  # numpy parses the header as a Python literal: any error
        raise LegacyFormatError(f"{where} has no valid .npy header ({exc})") from None
    if not all(isinstance(d, int) and d >= 0 for d in shape):
        raise LegacyFormatError(f"{where} has no valid .npy header (shape {shape!r})")
    follow = max(size - (f.tell() - start), 0)
    if dtype.hasobject:
        array = _unpickle(_read_exact(f, follow), where, classes)
        if not isinstance(array, np.ndarray):
            raise LegacyFormatError(f"{where} holds a {type(array).__name__}, not an array")
        return array
    # Python ints: a crafted (2**32, 2**32) header must not wrap around in int64
    count = math.prod(shape)
    nbytes = count * dtype.itemsize
    if nbytes > follow:
        raise LegacyFormatError(
            f"{where} is truncated: its header declares a {dtype} array of shape {shape} "
            f"({nbytes:,} bytes) but {follow:,} bytes follow"
        )
    try:
        array = np.empty(count, dtype=dtype)
    except MemoryError:
        raise _out_of_memory(
            where, f"its header declares a {dtype} array of shape {shape} ({nbytes:,} bytes)"
        ) from None
    raw = memoryview(array.view(np.uint8) if nbytes else np.empty(0, np.uint8))
    done = 0
    while done < nbytes:
        chunk = f.read(min(_STEP, nbytes - done))
        if not chunk:
            raise LegacyFormatError(
                f"{where} is truncated: its header declares a {dtype} array of shape {shape} "
                f"({nbytes:,} bytes) but {done:,} bytes follow"
            )
        raw[done : done + len(chunk)] = chunk
        done += len(chunk)
    return array.reshape(shape, order="F" if fortran else "C")


_ARR = re.compile(r"arr_(\d+)\Z")


def _read_npz(f, where: str, classes, max_bytes: int) -> tuple[list, list, object]:
    """The arrays of the .npz stream ``f``, each read from its member in steps."""
    try:
        archive = zipfile.ZipFile(f)
        members = [i for i in archive.infolist() if i.filename.endswith(".npy")]
        declared = sum(i.file_size for i in members)
        if declared > max_bytes:
            raise _too_large(where, f"its arrays declare {declared:,} bytes", max_bytes)
        # zipfile stops each member at its declared size, so the declared
        # sizes, within max_bytes, bound what is read
        arrays = {}
        for info in members:
            name = info.filename[:-4]
            with archive.open(info) as member:
                arrays[name] = _read_npy(member, f"{where}[{name}]", classes, info.file_size)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        OSError,
        ValueError,
        NotImplementedError,  # a compression method zipfile lacks
        RuntimeError,  # zipfile: an encrypted member
    ) as exc:
        if isinstance(exc, LegacyFormatError | UnsafePickleError):
            raise
        raise LegacyFormatError(f"{where} is truncated or not an .npz file ({exc})") from None
    record = arrays.pop(STAT_RECORD, None)
    names = list(arrays)
    numbered = [_ARR.match(n) for n in names]
    if names and all(numbered):
        order = sorted(int(m.group(1)) for m in numbered)
        if order != list(range(len(order))):
            missing = sorted(set(range(order[-1] + 1)) - set(order))
            raise LegacyFormatError(
                f"{where} holds arr_0 .. arr_{order[-1]} with arr_{missing[0]} missing"
            )
        names = [f"arr_{i}" for i in order]
    return [arrays[n] for n in names], names, record


def _as_values(obj, where: str) -> list | None:
    """``obj`` as a list of arrays, or None if it is not a sequence of arrays."""
    if isinstance(obj, np.ndarray) and obj.dtype.hasobject and obj.ndim == 1:
        obj = list(obj)
    if not isinstance(obj, list | tuple):
        return None
    values = []
    for i, value in enumerate(obj):
        if isinstance(value, np.ndarray | np.generic | int | float | complex):
            value = np.asarray(value)
            if value.dtype.hasobject:
                raise LegacyFormatError(f"{where}: value {i} is an object array, not numbers")
            values.append(value)
        else:
            raise LegacyFormatError(
                f"{where}: value {i} is a {type(value).__name__}, not an array"
            )
    return values


def _interpret(obj, where: str, classes, file_bytes: int = 0, rebuild: bool = True) -> Checkpoint:
    """Recognise what an unpickled object is.

    Pickled layers are rebuilt as a lasagne_bn network, unless ``rebuild``
    is false and their parameter values can be read from the pickle as they
    are (:func:`lasagne_bn_compat._pickle.pickled_param_values`).  A rebuilt network
    may initialize parameters the pickle lacks up to the file's size (at
    least 1 MiB), never more: a pickled ``num_units=10**11`` is refused,
    not allocated.
    """
    if contains_layers(obj):
        if not rebuild:
            read = pickled_param_values(_find_layers(obj, is_layer_stand_in))
            if read is not None:
                return Checkpoint("network", *read)
        rebuilder = Rebuilder(classes, max_new_bytes=max(file_bytes, 2**20))
        try:
            network = rebuilder.convert(obj, "network")
        except LegacyNetworkError as exc:
            raise LegacyNetworkError(f"{where}: {exc}") from None
        except CheckpointError:
            raise
        except Exception as exc:
            # the pickle's attributes are anything the file says: whatever a
            # layer constructor makes of them, it is a network we cannot rebuild
            raise LegacyNetworkError(
                f"{where}: the pickled network cannot be rebuilt ({type(exc).__name__}: {exc})"
            ) from None
        warn_notes(rebuilder.notes)
        from lasagne_bn.layers import get_all_params

        layers = _find_layers(network)
        params = get_all_params(layers) if layers else []
        return Checkpoint(
            "network",
            [np.array(p.get_value()) for p in params],
            [str(p.name) for p in params],
            network=network,
        )
    if isinstance(obj, Mapping):
        for key in VALUE_KEYS:
            if key in obj:
                values = _as_values(obj[key], f"{where}[{key!r}]")
                if values is None:
                    raise LegacyFormatError(
                        f"{where}[{key!r}] is a {type(obj[key]).__name__}, not a list of arrays"
                    )
                extras = {k: v for k, v in obj.items() if k != key}
                if any(isinstance(v, LegacyObject) for v in extras.values()):
                    raise LegacyFormatError(
                        f"{where} holds Theano/Lasagne objects besides {key!r}"
                    )
                return Checkpoint(
                    "model-zoo", values, [f"{key}[{i}]" for i in range(len(values))], extras
                )
        if obj and all(isinstance(v, np.ndarray) for v in obj.values()):
            return Checkpoint("pickle", list(obj.values()), [str(k) for k in obj])
        keys = ", ".join(reprlib.repr(k) for k in list(obj)[:5])  # keys may nest deeply
        raise LegacyFormatError(
            f"{where} holds a dict with keys {keys}; expected the values under one of "
            f"{', '.join(map(repr, VALUE_KEYS))}"
        )
    values = _as_values(obj, where)
    if values is None:
        raise LegacyFormatError(
            f"{where} holds a {type(obj).__name__}; expected a list of arrays, a dict with "
            "'param values', or Lasagne layers"
        )
    return Checkpoint("pickle", values, [f"[{i}]" for i in range(len(values))])


def _find_layers(obj, is_layer=None) -> list:
    """The layers in ``obj`` and its lists, tuples and mapping values, in order, each once.

    ``is_layer`` tells what a layer is (default: a lasagne_bn layer).
    """
    if is_layer is None:
        from lasagne_bn.layers import Layer

        def is_layer(item):
            return isinstance(item, Layer)

    found, seen, stack = [], set(), [obj]
    while stack:  # no recursion: containers may nest deeply
        item = stack.pop()
        if id(item) in seen:
            continue
        if is_layer(item):
            seen.add(id(item))
            found.append(item)
        elif isinstance(item, Mapping | list | tuple):
            seen.add(id(item))
            stack.extend(reversed(list(item.values() if isinstance(item, Mapping) else item)))
    return found


def read_checkpoint(
    source: str | os.PathLike | BinaryIO,
    *,
    classes: Mapping | None = None,
    max_bytes: int = MAX_BYTES,
) -> Checkpoint:
    """Read a legacy checkpoint file (any of :data:`FORMATS`, gzipped or not).

    Parameters
    ----------
    source : str, os.PathLike or binary file
    classes : mapping, optional
        ``'module.Name' -> class`` entries to trust when unpickling: your
        own layer classes in pickled networks (rebuilt like Lasagne's).
    max_bytes : int
        The most bytes the file may decompress to, and the largest array
        it may declare (default :data:`MAX_BYTES`, 2 GiB).

    Raises
    ------
    LegacyFormatError
        For an empty, truncated or corrupt file, or one that holds something
        else than parameter values or layers.
    UnsafePickleError
        If a pickle names a global off the allow-list (nothing was run).

    Examples
    --------
    >>> import io
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, np.ones((3, 2)), np.zeros(2))
    >>> checkpoint = read_checkpoint(io.BytesIO(buffer.getvalue()))
    >>> checkpoint.format, checkpoint.names, [v.shape for v in checkpoint.values]
    ('npz', ['arr_0', 'arr_1'], [(3, 2), (2,)])
    """
    return _read(source, classes, max_bytes)


def _read(source, classes, max_bytes: int, rebuild: bool = True) -> Checkpoint:
    """:func:`read_checkpoint`; a pickled network is only rebuilt with ``rebuild``."""
    _check_classes(classes)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"max_bytes={max_bytes!r} must be a positive int")
    with _open_source(source, max_bytes) as (f, where, size):
        kind = _sniff(f.read(6))
        f.seek(0)
        if kind == "gzip":
            data = _inflate(f, where, max_bytes)
            f, size, kind = io.BytesIO(data), len(data), _sniff(data[:6])
            del data  # the stream holds it
        if not size:
            raise LegacyFormatError(f"{where} is empty")
        if kind == "npz":
            values, names, record = _read_npz(f, where, classes, max_bytes)
            checkpoint = Checkpoint("npz", values, names)
            if record is not None:
                checkpoint.extras[STAT_RECORD] = np.asarray(record)[()]
        elif kind == "npy":
            array = _read_npy(f, where, classes, size)
            values = _as_values(array, where) if array.dtype.hasobject else [array]
            checkpoint = Checkpoint("npy", values, [f"[{i}]" for i in range(len(values))])
        else:
            obj = _unpickle(_read_exact(f, size), where, classes)
            checkpoint = _interpret(obj, where, classes, size, rebuild)
    checkpoint.source = where
    record = checkpoint.extras.pop(STAT_RECORD, None)
    if record is not None:
        checkpoint.stat_storage, checkpoint.stat_indices = _parse_record(
            record, where, len(checkpoint.values)
        )
        if checkpoint.format == "model-zoo" and not checkpoint.extras:
            checkpoint.format = "pickle"  # a pickled list that carries a record
    return checkpoint


def load_network(
    source: str | os.PathLike | BinaryIO,
    *,
    classes: Mapping | None = None,
    max_bytes: int = MAX_BYTES,
) -> Any:
    """Rebuild a pickled Lasagne network as a lasagne_bn network.

    Returns what was pickled (usually the output layer; a list or dict of
    layers stays a list or dict), with every Lasagne layer rebuilt by the
    lasagne_bn class of the same name from its pickled attributes and
    parameter values.  Tied parameters stay tied; parameters keep their
    order and tags.

    Raises
    ------
    LegacyFormatError
        If the file holds parameter values only (build the network and use
        :func:`load_params`), or is not a readable pickle.
    LegacyNetworkError
        If a layer cannot be rebuilt (a layer class lasagne_bn lacks...).
    UnsafePickleError
        If the pickle names a global off the allow-list.

    Examples
    --------
    A network pickle comes from Lasagne (``pickle.dump(network, f)``); a file of
    parameter values only is refused, with what to do instead:

    >>> import io
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, np.ones((3, 2)))
    >>> try:
    ...     load_network(io.BytesIO(buffer.getvalue()))
    ... except LegacyFormatError as error:
    ...     print(str(error).split(': ')[-1])
    build the network and use lasagne_bn_compat.io.load_params
    """
    checkpoint = read_checkpoint(source, classes=classes, max_bytes=max_bytes)
    if checkpoint.format != "network":
        raise LegacyFormatError(
            f"{checkpoint.source} holds parameter values ({checkpoint.format} format), not a "
            "network: build the network and use lasagne_bn_compat.io.load_params"
        )
    return checkpoint.network


# --------------------------------------------------------------------------
# loading into a network


def _match_by_name(params, checkpoint: Checkpoint):
    """Values reordered to ``params`` when the file's names are exactly the parameter names."""
    names = [p.name for p in params]
    if checkpoint.format not in ("npz", "pickle") or any(n is None for n in names):
        return None
    if len(set(names)) != len(names) or set(names) != set(checkpoint.names):
        return None
    if names == list(checkpoint.names):
        return None
    by_name = dict(zip(checkpoint.names, checkpoint.values, strict=True))
    return [by_name[n] for n in names]


def _file_storage(checkpoint: Checkpoint, stat_storage: str | None, stats: list) -> str:
    """What the file's statistics are; a record contradicting the call or network is refused."""
    if checkpoint.stat_storage is not None:
        if stat_storage not in (None, checkpoint.stat_storage):
            raise ValueError(
                f"{checkpoint.source} records that its batch-norm statistics are "
                f"{checkpoint.stat_storage}, but stat_storage={stat_storage!r} was given; no "
                "parameter was changed"
            )
        ours = [i for i, _ in stats]
        if checkpoint.stat_indices != ours:
            raise ValueError(
                f"{checkpoint.source} holds batch-norm statistics at arrays "
                f"{checkpoint.stat_indices}, but the network's are parameters {ours}: it was "
                "saved from another architecture; no parameter was changed"
            )
    return stat_storage or checkpoint.stat_storage or "inv_std"


def _prepare_value(i: int, param, value, allow_downcast: bool) -> np.ndarray:
    """``value`` checked against ``param`` (shape, dtype) and cast to its dtype: the one cast."""
    value = np.asarray(value)
    have = param.get_value(borrow=True)
    if value.shape != have.shape:
        raise ValueError(
            f"value {i} has shape {value.shape} but parameter {i} ({param.name}) has shape "
            f"{have.shape}; no parameter was changed"
        )
    target = np.dtype(param.dtype)
    if value.dtype.kind not in "biuf":
        raise TypeError(
            f"value {i} has dtype {value.dtype}; parameter {i} ({param.name}) holds {target}; "
            "no parameter was changed"
        )
    if not np.can_cast(value.dtype, target, "safe") and not allow_downcast:
        raise TypeError(
            f"value {i} has dtype {value.dtype}, which parameter {i} ({param.name}, {target}) "
            "cannot hold without loss; pass allow_downcast=True to cast it; no parameter was "
            "changed"
        )
    with np.errstate(over="ignore", invalid="ignore"):  # said by _warn_non_finite instead
        return value.astype(target, copy=False)


class NonFiniteWarning(RuntimeWarning):
    """A parameter was loaded with inf or NaN values (from the file, or from a downcast).

    Examples
    --------
    >>> import io, warnings
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> net = DenseLayer(InputLayer((None, 1)), 1)
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, np.full((1, 1), np.nan), np.zeros(1))
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter('always')
    ...     _ = load_params(net, io.BytesIO(buffer.getvalue()))
    >>> [w.category.__name__ for w in caught]
    ['NonFiniteWarning']
    """


def _warn_non_finite(where: str, i: int, param, value: np.ndarray, ready: np.ndarray) -> None:
    """Say so when a loaded parameter holds non-finite values: never load them silently."""
    if ready.dtype.kind not in "fc":
        return
    bad = ready.size - int(np.count_nonzero(np.isfinite(ready)))
    if not bad:
        return
    had = value.size - int(np.count_nonzero(np.isfinite(value))) if value.dtype.kind in "fc" else 0
    what = f"{where}: value {i} ({param.name})"
    if bad > had:
        message = (
            f"{what}: {bad - had:,} value(s) beyond {ready.dtype}'s range became inf when cast "
            f"from {value.dtype} (allow_downcast=True); the parameter holds them as inf"
        )
    else:
        message = f"{what} holds {bad:,} non-finite value(s) (inf or nan), as the file does"
    import warnings

    warnings.warn(message, NonFiniteWarning, stacklevel=3)


def _assign(params: list, values: list) -> None:
    """Set every parameter; values were checked and cast, so this cannot half-fail.

    Should setting one fail all the same (an interrupt), the ones already
    set get their old values back.
    """
    old = [p.get_value(borrow=True) for p in params]
    done = 0
    try:
        for p, v in zip(params, values, strict=True):
            p.set_value(v)
            done += 1
    except BaseException:
        for p, v in zip(params[:done], old, strict=False):
            p.set_value(v, borrow=True)
        raise


def load_params(
    network: Layer | Sequence[Layer],
    source: str | os.PathLike | BinaryIO,
    *,
    stat_storage: str | None = None,
    epsilon: float | None = None,
    allow_downcast: bool = False,
    classes: Mapping | None = None,
    max_bytes: int = MAX_BYTES,
    **tags: bool,
) -> Checkpoint:
    """Load a checkpoint's parameter values into ``network``, all or nothing.

    The values go to ``get_all_params(network, **tags)`` in order (for an
    ``.npz`` or pickled dict whose names are exactly the parameter names,
    by name).  Before any parameter changes, every value is checked: the
    count, each shape, each dtype (a lossy cast needs
    ``allow_downcast=True``), and the batch-norm statistics (converted to
    what each :class:`BatchNormLayer` stores).  Any problem raises and
    leaves every parameter as it was.

    Parameters
    ----------
    network : Layer or list of Layer
        The network to load into (lasagne_bn layers, or layers built
        through ``lasagne_bn_compat.install()``'s ``lasagne`` names).
    source : path or binary file
        Any format :func:`read_checkpoint` reads (a pickled network
        contributes its parameter values, read from the pickle without
        rebuilding the network: the returned checkpoint's ``network`` is
        None).
    stat_storage : 'inv_std', 'var' or None
        What the file's batch-norm statistics are: ``'inv_std'`` for every
        Lasagne file; ``'var'`` for files saved with ``stat_storage='var'``.
        None (default): what the file records (lasagne_bn's ``var`` files
        say so), else ``'inv_std'``.  A value that contradicts the file's
        record is refused.
    epsilon : float, optional
        Epsilon for the conversion instead of each layer's own.
    allow_downcast : bool
        Allow lossy dtype casts (float64 values into float32 parameters).
    classes, max_bytes
        See :func:`read_checkpoint`.
    **tags
        Filter the parameters as ``get_all_params`` does (they must be the
        ones the file was saved with).

    Returns
    -------
    Checkpoint
        What was read (values as in the file).

    Raises
    ------
    ValueError
        Wrong count or shape, or statistics that cannot be converted
        (:class:`LegacyFormatError` / :class:`UnsafePickleError` for the
        file itself).
    TypeError
        A value whose dtype the parameter cannot hold.

    Examples
    --------
    >>> import os, tempfile
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, 'net.npz')
    >>> save_params(DenseLayer(InputLayer((None, 3)), 2, b=np.full(2, 7.0)), path)
    >>> net = DenseLayer(InputLayer((None, 3)), 2)
    >>> load_params(net, path).format
    'npz'
    >>> net.b.get_value().tolist()
    [7.0, 7.0]
    >>> tmp.cleanup()
    """
    from lasagne_bn.layers.bn_storage import collect_params, convert_statistic

    _check_network(network)
    if stat_storage not in ("inv_std", "var", None):
        raise ValueError(
            f"stat_storage={stat_storage!r} is not known: expected 'inv_std' (Lasagne files), "
            "'var', or None (what the file records)"
        )
    # 1. collect: the parameters and where the statistics sit, once
    params, stats = collect_params(network, **tags)
    checkpoint = _read(source, classes, max_bytes, rebuild=False)
    # 2. validate and cast every value before anything changes
    stat_storage = _file_storage(checkpoint, stat_storage, stats)
    values = _match_by_name(params, checkpoint) or list(checkpoint.values)
    if len(values) != len(params):
        names = ", ".join(str(p.name) for p in params)
        raise ValueError(
            f"{checkpoint.source} holds {len(values)} arrays but the network has "
            f"{len(params)} parameters ({names}); no parameter was changed"
        )
    ready = [
        _prepare_value(i, p, v, allow_downcast)
        for i, (p, v) in enumerate(zip(params, values, strict=True))
    ]
    for i, layer in stats:
        try:
            ready[i] = convert_statistic(
                ready[i],
                layer,
                from_storage=stat_storage,
                to_storage=layer.stat_storage,
                epsilon=epsilon,
                name=f"value {i} ({params[i].name})",
            )
        except ValueError as exc:
            raise ValueError(f"{checkpoint.source}: {exc}; no parameter was changed") from exc
    # 3. assign (saying so first if a value is not finite)
    for i, (param, value) in enumerate(zip(params, values, strict=True)):
        _warn_non_finite(checkpoint.source, i, param, np.asarray(value), ready[i])
    _assign(params, ready)
    return checkpoint


# --------------------------------------------------------------------------
# writing


def save_params(
    network: Layer | Sequence[Layer],
    path: str | os.PathLike,
    format: str = "npz",
    *,
    stat_storage: str | None = "inv_std",
    extras: Mapping | None = None,
    epsilon: float | None = None,
    **tags: bool,
) -> None:
    """Write ``network``'s parameter values in a legacy format.

    Parameters
    ----------
    network : Layer or list of Layer
    path : str or os.PathLike
        Written as given (no ``.npz`` is appended); replaced atomically.
    format : 'npz', 'pickle' or 'model-zoo'
        ``np.savez(f, *values)``; a protocol-2 pickle of the list; or a
        protocol-2 pickle of ``{'param values': values, **extras}``.  The
        pickles name NumPy 1.x's modules, so Python 2 and old NumPy load
        them with a plain ``pickle.load``.
    stat_storage : 'inv_std', 'var' or None
        How batch-norm statistics are written: ``'inv_std'`` (default,
        Lasagne's, readable by Lasagne), ``'var'``, or None (as each layer
        stores them).
    extras : mapping, optional
        Model-zoo entries besides the values (``{'mean value': ...,
        'synset words': [...]}``); only with ``format='model-zoo'``.
    epsilon : float, optional
        Epsilon for the conversion instead of each layer's own.
    **tags
        Filter the parameters as ``get_all_params`` does.

    Examples
    --------
    >>> import os, tempfile
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, 'net.npz')
    >>> save_params(DenseLayer(InputLayer((None, 3)), 2), path)
    >>> sorted(np.load(path).files)
    ['arr_0', 'arr_1']
    >>> tmp.cleanup()
    """
    from lasagne_bn.layers.bn_storage import collect_params, convert_statistic

    _check_network(network)
    _check_write_args(path, format, extras, "save_params")
    if stat_storage not in ("inv_std", "var", None):
        raise ValueError(
            f"stat_storage={stat_storage!r} is not known: expected 'inv_std', 'var' or None"
        )
    params, stats = collect_params(network, **tags)
    values = [p.get_value() for p in params]
    for i, layer in stats:
        values[i] = convert_statistic(
            values[i],
            layer,
            from_storage=layer.stat_storage,
            to_storage=stat_storage or layer.stat_storage,
            epsilon=epsilon,
            name=f"value {i} ({params[i].name})",
        )
    # the file records where its statistics are when all of them are var
    written = {stat_storage or layer.stat_storage for _, layer in stats}
    var_indices = [i for i, _ in stats] if written == {"var"} else None
    write_values(path, values, format, extras=extras, var_indices=var_indices)


def _check_write_args(path, format: str, extras, caller: str) -> None:
    """The checks :func:`save_params` (before it converts) and :func:`write_values` share."""
    if format not in WRITE_FORMATS:
        raise ValueError(
            f"format={format!r} is not a format {caller} writes: expected one of "
            f"{', '.join(map(repr, WRITE_FORMATS))}"
        )
    if extras is not None and format != "model-zoo":
        raise ValueError(f"extras are only written with format='model-zoo', not {format!r}")
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path={path!r} must be a str or os.PathLike")
    resolve_target(path)  # an empty path or a directory: refused before any work


def write_values(
    path: str | os.PathLike,
    values: Sequence,
    format: str = "npz",
    *,
    extras: Mapping | None = None,
    var_indices: Sequence[int] | None = None,
) -> None:
    """Write a list of arrays in a legacy format (what :func:`save_params` does for a network).

    Parameters are as for :func:`save_params`; ``values`` are written as
    given (no batch-norm conversion).  ``var_indices``: the values that are
    batch-norm ``var`` statistics; the file then records it (an .npz member,
    or a key of a pickled dict: a ``'pickle'`` file becomes a dict with
    ``'param values'``), so that reading it as ``inv_std`` is refused.

    Examples
    --------
    >>> import os, pickle, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, 'values.pkl')
    >>> write_values(path, [np.ones((2, 2)), np.zeros(2)], format='pickle')
    >>> with open(path, 'rb') as f:
    ...     [v.shape for v in pickle.load(f)]
    [(2, 2), (2,)]
    >>> tmp.cleanup()
    """
    _check_write_args(path, format, extras, "write_values")
    values = [np.asarray(v) for v in values]
    record = None
    if var_indices:
        bad = [i for i in var_indices if not 0 <= int(i) < len(values)]
        if bad:
            raise ValueError(f"var_indices={list(var_indices)!r}: {bad} are not value indices")
        record = _record_json("var", var_indices)
    if format == "npz":
        members = {f"arr_{i}": v for i, v in enumerate(values)}
        if record is not None:
            members[STAT_RECORD] = np.array(record)
        atomic_write(path, lambda f: np.savez(f, **members))
        return
    extras = dict(extras or {})
    if "param values" in extras or STAT_RECORD in extras:
        raise ValueError(f"extras must not contain 'param values' or {STAT_RECORD!r}")
    if record is not None:
        extras[STAT_RECORD] = record
    if format == "pickle" and record is None:
        payload = dumps_protocol2(values)
    else:
        payload = dumps_protocol2({"param values": values, **extras})
    atomic_write(path, lambda f: f.write(payload))


# --------------------------------------------------------------------------
# inspecting


@dataclass
class ArrayInfo:
    """One array of a checkpoint, as :func:`inspect_checkpoint` reports it.

    Examples
    --------
    >>> import io
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, np.array([-1.0, 2.0]))
    >>> [info] = inspect_checkpoint(io.BytesIO(buffer.getvalue()))[1]
    >>> info.index, info.dtype, info.min, info.max
    (0, 'float64', -1.0, 2.0)
    """

    index: int
    name: str
    shape: tuple
    dtype: str
    min: float | None
    max: float | None
    role: str | None


_NAMED_ROLES = {
    "beta": "bn beta",
    "gamma": "bn gamma",
    "mean": "bn mean",
    "inv_std": "bn inv_std",
    "var": "bn var",
}


#: The role of arrays in a run of one shape that cannot be split into layers.
AMBIGUOUS = "ambiguous: bias or batch norm?"


def _positive(value) -> bool:
    value = np.asarray(value)
    return value.dtype.kind == "f" and bool(np.all(np.isfinite(value) & (value > 0)))


def _biased_batch_norm(values: Sequence, shapes: list, i: int) -> list | None:
    """Roles of a run of 5 arrays of one shape from ``values[i]``, when layer order tells them.

    After the weight of a layer whose outputs the run's shape counts, the
    run is either that layer's bias and a batch norm (``b, beta, gamma,
    mean, statistic``: the fifth is > 0) or a batch norm and a
    parameter-only layer such as a PReLU (``beta, gamma, mean, statistic,
    alpha``: the fourth is > 0).  Exactly one of them fitting tells; None
    where both or neither do, or where no such weight comes first.
    """
    if i == 0 or len(shapes[i]) != 1:
        return None
    weight, units = shapes[i - 1], shapes[i][0]
    # a dense layer's W is (inputs, units); a convolution's (units, channels, *kernel)
    if not (len(weight) == 2 and weight[1] == units) and not (
        len(weight) >= 3 and weight[0] == units
    ):
        return None
    bias_first = _positive(values[i + 4])
    extra_last = _positive(values[i + 3])
    if bias_first and not extra_last:
        return ["bias", "bn beta", "bn gamma", "bn mean", "bn inv_std or var"]
    if extra_last and not bias_first:
        return ["bn beta", "bn gamma", "bn mean", "bn inv_std or var", None]
    return None


def guess_bn_roles(values: Sequence, names: Sequence[str] | None = None) -> list[str | None]:
    """Which arrays look like BatchNormLayer parameters (``'bn beta'`` ..., ``'bias'`` or None).

    The heuristic, for values in ``get_all_params`` order:

    1. Named parameters (pickled networks, named files): names ending in
       ``.mean``, ``.inv_std`` or ``.var`` (or exactly ``mean``...) whose
       layer also has a ``.mean``, and that layer's ``.beta`` / ``.gamma``.
    2. Otherwise by position: a BatchNormLayer contributes ``beta, gamma,
       mean, inv_std`` (``beta`` or ``gamma`` left out when the layer has
       none), all of one shape, next to each other; arrays around them
       (weights) have other shapes.  A run of 4 consecutive arrays of one
       shape whose last is all finite and > 0 is taken as ``beta, gamma,
       mean, statistic``; a run of exactly 3 as ``beta or gamma, mean,
       statistic``; a run of 8, 12 ... as twos, threes ... of those fours.
       A run of 5 right after the weight of the layer it belongs to is
       that layer's bias (``'bias'``) and a batch norm, or a batch norm and
       a parameter-only layer (a PReLU's alpha), where the values tell
       which (the statistic is > 0, the mean of the other reading is not).
       Any other run (a run of 5 where nothing tells, 6, 7 ...) is
       marked :data:`AMBIGUOUS`: shapes cannot tell which are statistics.

    The statistic is called ``inv_std or var``: the values do not tell them
    apart (Lasagne files hold ``inv_std``).

    Examples
    --------
    >>> W, v = np.ones((2, 3)), np.ones(3)
    >>> guess_bn_roles([W, v, v, v, v])  # weights, then a batch norm's four arrays
    [None, 'bn beta', 'bn gamma', 'bn mean', 'bn inv_std or var']
    >>> guess_bn_roles([W, v, v], ['a.W', 'bn.mean', 'bn.var'])
    [None, 'bn mean', 'bn var']
    """
    n = len(values)
    roles: list[str | None] = [None] * n
    if names is not None and len(names) == n:
        groups: dict[str, dict[str, int]] = {}
        for i, name in enumerate(names):
            prefix, _, last = str(name).rpartition(".")
            if last in _NAMED_ROLES:
                groups.setdefault(prefix, {})[last] = i
        named = False
        for group in groups.values():
            if "mean" in group and ("inv_std" in group or "var" in group):
                for last, i in group.items():
                    roles[i] = _NAMED_ROLES[last]
                named = True
        if named:
            return roles
    shapes = [np.shape(v) for v in values]
    i = 0
    while i < n:
        j = i
        while j + 1 < n and shapes[j + 1] == shapes[i]:
            j += 1
        run = j - i + 1
        biased = _biased_batch_norm(values, shapes, i) if run == 5 else None
        if biased is not None:
            roles[i : j + 1] = biased
        elif shapes[i] != () and run >= 3 and run % 4 and run != 3:
            # a run of 5, 6, 7, 9 ...: a layer that kept its bias next to a
            # batch norm, or a batch norm without beta or gamma: which arrays
            # are which cannot be told from shapes, and a wrong guess would
            # silently break the model
            roles[i : j + 1] = [AMBIGUOUS] * run
        elif shapes[i] != () and run >= 3:
            chunks = [(s, min(4, j - s + 1)) for s in range(i, j + 1, 4)]
            for start, size in chunks:
                stat = np.asarray(values[start + size - 1])
                positive = stat.dtype.kind == "f" and bool(np.all(np.isfinite(stat) & (stat > 0)))
                if size == 4 and positive:
                    labels = ["bn beta", "bn gamma", "bn mean", "bn inv_std or var"]
                elif size == 3 and run == 3 and positive:
                    labels = ["bn beta or gamma", "bn mean", "bn inv_std or var"]
                else:
                    continue
                roles[start : start + size] = labels
        i = j + 1
    return roles


def inspect_checkpoint(
    source: str | os.PathLike | BinaryIO,
    *,
    classes: Mapping | None = None,
    max_bytes: int = MAX_BYTES,
) -> tuple[Checkpoint, list]:
    """Read a checkpoint and describe each array (see :func:`guess_bn_roles`).

    Returns ``(checkpoint, [ArrayInfo, ...])``.

    Examples
    --------
    >>> import io
    >>> W, v = np.ones((2, 3)), np.ones(3)
    >>> buffer = io.BytesIO()
    >>> np.savez(buffer, W, v, v, v, v)
    >>> checkpoint, infos = inspect_checkpoint(io.BytesIO(buffer.getvalue()))
    >>> [(info.name, info.shape, info.role) for info in infos[:2]]
    [('arr_0', (2, 3), None), ('arr_1', (3,), 'bn beta')]
    """
    checkpoint = read_checkpoint(source, classes=classes, max_bytes=max_bytes)
    names = checkpoint.names if checkpoint.format == "network" else None
    if (
        names is None
        and checkpoint.format == "npz"
        and not all(_ARR.match(n) for n in checkpoint.names)
    ):
        names = checkpoint.names
    roles = guess_bn_roles(checkpoint.values, names)
    for i in checkpoint.stat_indices or ():
        roles[i] = f"bn {checkpoint.stat_storage} (recorded in the file)"
    infos = []
    for i, (value, name, role) in enumerate(
        zip(checkpoint.values, checkpoint.names, roles, strict=True)
    ):
        finite = value.dtype.kind in "biuf" and value.size
        infos.append(
            ArrayInfo(
                i,
                name,
                tuple(value.shape),
                str(value.dtype),
                float(np.min(value)) if finite else None,
                float(np.max(value)) if finite else None,
                role,
            )
        )
    return checkpoint, infos
