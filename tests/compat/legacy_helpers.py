"""Fixtures and helpers for the lasagne_bn_compat tests (imported by them; not a conftest).

A second ``conftest.py`` would shadow ``tests/layers/conftest.py`` for the
``from conftest import ...`` lines there, so the lasagne_bn_compat tests import these
names explicitly: ``from legacy_helpers import legacy, run_cli``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from data.guide_scripts import guide_files  # noqa: F401  (the tests import it from here)

import lasagne_bn_compat

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).resolve().parent / "scripts"
DATA = ROOT / "tests" / "data"


#: ``pytestmark`` for the lasagne_bn_compat test modules: warnings that are not theirs.
QUIET = [
    pytest.mark.filterwarnings("ignore:Cannot cache compiled function"),
    pytest.mark.filterwarnings("ignore:PyTensor could not link to a BLAS installation"),
    pytest.mark.filterwarnings("ignore:np.dot\\(\\) is faster on contiguous arrays"),
]


@pytest.fixture(scope="module")
def legacy():
    """``lasagne_bn_compat.install()`` for the whole test module, undone afterwards."""
    lasagne_bn_compat.install(theano_flags="")
    try:
        yield lasagne_bn_compat
    finally:
        lasagne_bn_compat.uninstall()


def cli_env(tmp_path: Path, extra: dict | None = None) -> dict:
    """The environment for ``lasagne-bn`` subprocesses: this checkout first.

    The ``run``/``convert``/``inspect`` subcommands come from the
    ``lasagne_bn.commands`` entry points that installing the package
    registers (README's set-up command).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT)
    env.pop("THEANO_FLAGS", None)
    env.update(extra or {})
    return env


def run_cli(args, tmp_path: Path, extra_env: dict | None = None, timeout: float = 300):
    """``lasagne-bn ARGS`` in a subprocess; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-m", "lasagne_bn", *map(str, args)],
        env=cli_env(tmp_path, extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=tmp_path,
    )


# --------------------------------------------------------------------------
# legacy file structures, written byte for byte


def py2_pickle(obj) -> bytes:
    """``obj`` as Python 2's cPickle wrote it with protocol 2 (NumPy 1.x arrays).

    Strings are Python 2 ``str`` (SHORT_BINSTRING / BINSTRING, raw bytes),
    arrays are ``numpy.core.multiarray._reconstruct`` + ``BUILD`` with the
    raw data as a ``str``, dtypes are ``numpy.dtype('f4', 0, 1)`` with
    NumPy's version-3 state, and every object is memoized with BINPUT, as
    cPickle did.  Supports dicts, lists, tuples, str, int, float and
    float/int ndarrays.  Python 3 needs ``encoding='latin1'`` to load it.
    """
    import struct

    import numpy as np

    out = [b"\x80\x02"]
    memo = [0]

    def put():
        out.append(b"q" + bytes([memo[0] % 256]))
        memo[0] += 1

    def pystr(raw: bytes):
        if len(raw) < 256:
            out.append(b"U" + bytes([len(raw)]) + raw)
        else:
            out.append(b"T" + struct.pack("<i", len(raw)) + raw)
        put()

    def integer(v):
        out.append(b"K" + bytes([v]) if 0 <= v < 256 else b"J" + struct.pack("<i", v))

    def dtype(dt):
        out.append(b"cnumpy\ndtype\n")
        put()
        pystr(dt.str[1:].encode())
        out.append(b"K\x00K\x01\x87R")
        put()
        out.append(b"(K\x03")
        pystr((dt.str[0] if dt.itemsize > 1 else "|").encode())
        out.append(b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb")

    def w(o):
        if isinstance(o, np.ndarray):
            out.append(b"cnumpy.core.multiarray\n_reconstruct\n")
            put()
            out.append(b"cnumpy\nndarray\n")
            put()
            out.append(b"K\x00\x85")
            pystr(b"b")
            out.append(b"\x87R")
            put()
            out.append(b"(K\x01")
            out.append(b"(")
            for s in o.shape:
                integer(s)
            out.append(b"t")
            dtype(o.dtype)
            out.append(b"\x89")
            pystr(np.ascontiguousarray(o).tobytes())
            out.append(b"tb")
        elif isinstance(o, str):
            pystr(o.encode("latin-1"))
        elif isinstance(o, bool):
            out.append(b"\x88" if o else b"\x89")
        elif isinstance(o, int):
            integer(o)
        elif isinstance(o, float):
            out.append(b"G" + struct.pack(">d", o))
        elif isinstance(o, list):
            out.append(b"]")
            put()
            out.append(b"(")
            for item in o:
                w(item)
            out.append(b"e")
        elif isinstance(o, tuple):
            out.append(b"(")
            for item in o:
                w(item)
            out.append(b"t")
            put()
        elif isinstance(o, dict):
            out.append(b"}")
            put()
            out.append(b"(")
            for k, v in o.items():
                w(k)
                w(v)
            out.append(b"u")
        else:
            raise TypeError(type(o))

    w(obj)
    out.append(b".")
    return b"".join(out)


class _Plain:
    """Base of the fake legacy classes: instances pickle their __dict__."""

    def __init__(self, **attrs):
        self.__dict__.update(attrs)


def _fake_module(name: str, saved: dict):
    """An empty module called ``name`` (and its parents) in sys.modules; ``saved`` undoes it."""
    import types

    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        sub = ".".join(parts[:i])
        if sub not in saved:
            saved[sub] = sys.modules.get(sub)
            sys.modules[sub] = types.ModuleType(sub)
    return sys.modules[name]


def legacy_network_pickle(values, *, gpu: str | None = None, protocol: int = 2) -> bytes:
    """Pickle bytes of a Lasagne network, written through classes with Lasagne's names.

    The network is ``InputLayer((None, 4)) -> batch_norm(DenseLayer(3)) ->
    DenseLayer(2, softmax)`` with parameters ``values`` (7 arrays, Lasagne's
    order), its objects laid out as Lasagne master and Theano 1.0 lay them
    out (the attributes the real oracle pickles hold).  ``gpu``:
    ``'cuda'`` stores the parameters as ``theano.sandbox.cuda``
    ``CudaNdarraySharedVariable``\\ s holding CudaNdarrays (pickled through
    ``CudaNdarray_unpickler``), ``'gpuarray'`` as ``GpuArraySharedVariable``\\ s
    (``GpuArray_unpickler``), None as CPU ``TensorSharedVariable``\\ s.
    """
    import copyreg
    import pickle
    from collections import OrderedDict

    saved: dict = {}
    made = {}

    def cls(path):
        module_name, _, name = path.rpartition(".")
        module = _fake_module(module_name, saved)
        if not hasattr(module, name):
            setattr(module, name, type(name, (_Plain,), {"__module__": module_name}))
        made[path] = getattr(module, name)
        return made[path]

    def func(path):
        module_name, _, name = path.rpartition(".")
        module = _fake_module(module_name, saved)

        def f(*args):
            return args[0] if args else None

        f.__module__, f.__name__, f.__qualname__ = module_name, name, name
        setattr(module, name, f)
        return f

    try:
        scratchpad = cls("theano.gof.utils.scratchpad")
        container_cls = cls("theano.gof.link.Container")
        tensor_type = cls("theano.tensor.type.TensorType")
        tensor_variable = cls("theano.tensor.var.TensorVariable")
        if gpu == "cuda":
            shared_cls = cls("theano.sandbox.cuda.var.CudaNdarraySharedVariable")
            type_cls = cls("theano.sandbox.cuda.type.CudaNdarrayType")
            unpickler = func("theano.sandbox.cuda.type.CudaNdarray_unpickler")
            device_array = type("CudaNdarray", (), {})
            copyreg.pickle(device_array, lambda a: (unpickler, (a.npa,)))
        elif gpu == "gpuarray":
            shared_cls = cls("theano.gpuarray.type.GpuArraySharedVariable")
            type_cls = cls("theano.gpuarray.type.GpuArrayType")
            unpickler = func("theano.gpuarray.type.GpuArray_unpickler")
            device_array = type("GpuArray", (), {})
            copyreg.pickle(device_array, lambda a: (unpickler, (a.npa, None)))
        else:
            shared_cls = cls("theano.tensor.sharedvar.TensorSharedVariable")
            type_cls = tensor_type
            device_array = None

        def shared(value, name):
            t = type_cls(
                dtype=str(value.dtype),
                broadcastable=(False,) * value.ndim,
                name=None,
                sparse_grad=False,
            )
            stored = value
            if device_array is not None:
                stored = device_array()
                stored.npa = value
            container = container_cls(
                type=t,
                name=name,
                storage=[stored],
                readonly=False,
                strict=False,
                allow_downcast=None,
            )
            return shared_cls(
                container=container,
                type=t,
                owner=None,
                index=None,
                name=name,
                tag=scratchpad(),
                auto_name="auto_1",
            )

        rectify = func("lasagne.nonlinearities.rectify")
        softmax = func("lasagne.nonlinearities.softmax")
        linear = func("lasagne.nonlinearities.linear")
        W1, beta, gamma, mean, inv_std, W2, b2 = (
            shared(v, n)
            for v, n in zip(
                values,
                [
                    "fc.W",
                    "fc_bn.beta",
                    "fc_bn.gamma",
                    "fc_bn.mean",
                    "fc_bn.inv_std",
                    "out.W",
                    "out.b",
                ],
                strict=True,
            )
        )
        input_var = tensor_variable(
            type=tensor_type(
                dtype="float32", broadcastable=(False, False), name=None, sparse_grad=False
            ),
            owner=None,
            index=None,
            name="in.input",
            tag=scratchpad(),
            auto_name="auto_0",
        )
        common = {"get_output_kwargs": []}
        l_in = cls("lasagne.layers.input.InputLayer")(
            input_var=input_var, shape=(None, 4), name="in", params=OrderedDict(), **common
        )
        fc = cls("lasagne.layers.dense.DenseLayer")(
            input_shape=(None, 4),
            input_layer=l_in,
            name="fc",
            params=OrderedDict([(W1, {"trainable", "regularizable"})]),
            nonlinearity=linear,
            num_units=3,
            num_leading_axes=1,
            W=W1,
            b=None,
            **common,
        )
        stat = {"batch_norm_stat"}
        bn = cls("lasagne.layers.normalization.BatchNormLayer")(
            input_shape=(None, 3),
            input_layer=fc,
            name="fc_bn",
            axes=(0,),
            epsilon=1e-4,
            alpha=0.1,
            beta=beta,
            gamma=gamma,
            mean=mean,
            inv_std=inv_std,
            params=OrderedDict(
                [
                    (beta, {"trainable"}),
                    (gamma, {"trainable", "regularizable"}),
                    (mean, stat),
                    (inv_std, stat),
                ]
            ),
            **common,
        )
        nl = cls("lasagne.layers.special.NonlinearityLayer")(
            input_shape=(None, 3),
            input_layer=bn,
            name="fc_bn_nonlin",
            params=OrderedDict(),
            nonlinearity=rectify,
            **common,
        )
        out = cls("lasagne.layers.dense.DenseLayer")(
            input_shape=(None, 3),
            input_layer=nl,
            name="out",
            params=OrderedDict([(W2, {"trainable", "regularizable"}), (b2, {"trainable"})]),
            nonlinearity=softmax,
            num_units=2,
            num_leading_axes=1,
            W=W2,
            b=b2,
            **common,
        )
        return pickle.dumps(out, protocol=protocol)
    finally:
        if device_array is not None:
            copyreg.dispatch_table.pop(device_array, None)
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


class LegacyNames:
    """Objects that pickle under Theano's and Lasagne's class names, for any network.

    Use as a context manager (the fake ``theano`` / ``lasagne`` modules live
    in ``sys.modules`` only inside it)::

        with LegacyNames() as names:
            l_in = names.layer("input.InputLayer", shape=(None, 4), input_var=names.input_var(2))
            fc = names.layer("dense.DenseLayer", l_in, num_units=3, W=names.shared(w, "W"))
            data = names.dumps(fc)

    ``layer`` fills in what every Lasagne layer pickles (``input_layer``,
    ``input_shape``, ``params``, ``name``, ``get_output_kwargs``); parameter
    attributes that are shared variables go into ``params``.
    """

    def __init__(self):
        self._saved: dict = {}

    def __enter__(self) -> LegacyNames:
        self._scratchpad = self.cls("theano.gof.utils.scratchpad")
        self._container = self.cls("theano.gof.link.Container")
        self._tensor_type = self.cls("theano.tensor.type.TensorType")
        self._shared_cls = self.cls("theano.tensor.sharedvar.TensorSharedVariable")
        self._variable = self.cls("theano.tensor.var.TensorVariable")
        return self

    def __exit__(self, *exc) -> None:
        for name, module in self._saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module

    def cls(self, path: str) -> type:
        module_name, _, name = path.rpartition(".")
        module = _fake_module(module_name, self._saved)
        if not hasattr(module, name):
            setattr(module, name, type(name, (_Plain,), {"__module__": module_name}))
        return getattr(module, name)

    def func(self, path: str):
        module_name, _, name = path.rpartition(".")
        module = _fake_module(module_name, self._saved)
        if not hasattr(module, name):

            def f(*args):
                return args[0] if args else None

            f.__module__, f.__name__, f.__qualname__ = module_name, name, name
            setattr(module, name, f)
        return getattr(module, name)

    def _type(self, dtype: str, ndim: int):
        return self._tensor_type(
            dtype=dtype, broadcastable=(False,) * ndim, name=None, sparse_grad=False
        )

    def shared(self, value, name: str):
        t = self._type(str(value.dtype), value.ndim)
        container = self._container(
            type=t, name=name, storage=[value], readonly=False, strict=False,
            allow_downcast=None,
        )  # fmt: skip
        return self._shared_cls(
            container=container, type=t, owner=None, index=None, name=name,
            tag=self._scratchpad(), auto_name="auto_1",
        )  # fmt: skip

    def input_var(self, ndim: int, name: str = "input"):
        return self._variable(
            type=self._type("float32", ndim), owner=None, index=None, name=name,
            tag=self._scratchpad(), auto_name="auto_0",
        )  # fmt: skip

    def layer(self, path: str, incoming=None, *, input_shape=None, **attrs):
        """A ``lasagne.layers.<path>`` object fed by ``incoming`` (a layer object or None).

        Pass ``input_shape`` where the rebuilt network needs it (a layer
        without ``incoming``); the rebuilder takes shapes from the input layers.
        """
        from collections import OrderedDict

        params = OrderedDict(
            (v, {"trainable"})
            for v in attrs.values()
            if isinstance(v, self._shared_cls)
        )  # fmt: skip
        attrs.setdefault("name", None)
        if path != "input.InputLayer":
            attrs.update(input_layer=incoming, input_shape=input_shape)
        obj = self.cls(f"lasagne.layers.{path}")(params=params, get_output_kwargs=[], **attrs)
        return obj

    @staticmethod
    def dumps(obj, protocol: int = 2) -> bytes:
        """``pickle.dumps`` with room for deep networks (as their owners had to make)."""
        import io
        import pickle

        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(max(limit, 100_000))
        try:
            # The pure-Python pickler: from Python 3.12 on, the C one stops at a
            # fixed C-stack depth that setrecursionlimit does not raise.
            buffer = io.BytesIO()
            pickle._Pickler(buffer, protocol=protocol).dump(obj)
            return buffer.getvalue()
        finally:
            sys.setrecursionlimit(limit)
