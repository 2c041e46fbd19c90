"""The Theano classes a pickled Lasagne network names, for a plain ``pickle.load``.

After :func:`lasagne_bn_compat.install`, ``pickle.load`` of a network pickled under
Theano 1.0 resolves ``theano.tensor.type.TensorType``,
``theano.tensor.sharedvar.TensorSharedVariable`` ... through the legacy
modules.  Theano's objects stored their attributes under Theano's names; the
classes here take that state and become the PyTensor object it describes
(the instance's class is then PyTensor's own, so nothing legacy stays in the
graph).  Called the Theano way (``TensorType('float32', (False, True))``)
they build the PyTensor object; ``isinstance`` with them accepts PyTensor's
objects, so legacy checks keep working.

Ops of a pickled *training graph* (the updates a ``DropoutLayer``'s MRG
stream kept) have no use once loaded; :func:`inert_op` makes classes that
load them as inert records, and refuse to be used.

Security: this is for pickles you trust, as any ``pickle.load`` is; for the
others ``lasagne_bn_compat.io.load_network`` reads through an allow-list.
"""

from __future__ import annotations

import numpy as np
from pytensor.graph.basic import Variable as _PtGraphVariable
from pytensor.graph.utils import MetaType
from pytensor.tensor.sharedvar import TensorSharedVariable as _PtShared
from pytensor.tensor.type import TensorType as _PtTensorType
from pytensor.tensor.variable import TensorConstant as _PtConstant
from pytensor.tensor.variable import TensorVariable as _PtVariable

from lasagne_bn_compat._names import no_counterpart

__all__ = [
    "TensorConstant",
    "TensorSharedVariable",
    "TensorType",
    "TensorVariable",
    "Variable",
    "inert_op",
]


class _Legacy(MetaType):
    """Metaclass: ``isinstance`` / ``issubclass`` with a legacy class test the PyTensor one."""

    # type's own checks (the MRO), not ABCMeta's: ABCMeta would ask every
    # subclass of the PyTensor class, this one included, and recurse.
    def __instancecheck__(cls, obj):
        if "__portable__" not in cls.__dict__:  # a user's subclass: the usual check
            return type.__instancecheck__(cls, obj)
        return type.__subclasscheck__(cls.__portable__, type(obj))

    def __subclasscheck__(cls, sub):
        if "__portable__" not in cls.__dict__:
            return type.__subclasscheck__(cls, sub)
        return isinstance(sub, type) and type.__subclasscheck__(cls.__portable__, sub)


def _shape(state: dict) -> tuple:
    if "shape" in state:
        return tuple(state["shape"])
    return tuple(1 if b else None for b in state.get("broadcastable", ()))


class TensorType(_PtTensorType, metaclass=_Legacy):
    """Theano's ``TensorType(dtype, broadcastable, name=None)``: PyTensor's ``TensorType``.

    >>> t = TensorType('float32', (False, True))
    >>> type(t).__module__, t.dtype, t.shape
    ('pytensor.tensor.type', 'float32', (None, 1))
    """

    __portable__ = _PtTensorType

    def __new__(cls, dtype=None, broadcastable=None, name=None, sparse_grad=False, **kwargs):
        if dtype is None and broadcastable is None and not kwargs:
            return object.__new__(cls)  # being unpickled: __setstate__ follows
        shape = kwargs.pop("shape", broadcastable)
        return _PtTensorType(dtype, shape=shape, name=name, **kwargs)

    def __setstate__(self, state):
        self.__class__ = _PtTensorType
        _PtTensorType.__init__(self, state["dtype"], shape=_shape(state), name=state.get("name"))


def _variable_state(obj, state: dict, cls) -> None:
    obj.__class__ = cls
    obj.__dict__.update(state)
    obj.__dict__.pop("_fn_cache", None)


class Variable(_PtGraphVariable, metaclass=_Legacy):
    """Theano's ``Variable(type, owner=None, index=None, name=None)``: PyTensor's ``Variable``.

    PyTensor requires ``owner``; Theano defaulted it to None (a free variable).
    """

    __portable__ = _PtGraphVariable

    def __new__(cls, type=None, owner=None, index=None, name=None):
        if (type is None and owner is None) or cls is not Variable:
            return object.__new__(cls)  # being unpickled, or a user's subclass
        return _PtGraphVariable(type, owner, index, name)

    def __init__(self, type=None, owner=None, index=None, name=None):
        # only a user's subclass gets here (Variable(...) returns PyTensor's)
        if type is not None or owner is not None:
            super().__init__(type, owner, index=index, name=name)

    def __setstate__(self, state):
        _variable_state(self, state, _PtGraphVariable)


class TensorVariable(_PtVariable, metaclass=_Legacy):
    """Theano's ``TensorVariable``: PyTensor's, also built as ``TensorVariable(type, ...)``."""

    __portable__ = _PtVariable

    def __new__(cls, type=None, owner=None, index=None, name=None):
        if type is None:
            return object.__new__(cls)
        return _PtVariable(type, owner, index, name)

    def __setstate__(self, state):
        _variable_state(self, state, _PtVariable)


class TensorConstant(_PtConstant, metaclass=_Legacy):
    """Theano's ``TensorConstant``: PyTensor's."""

    __portable__ = _PtConstant

    def __new__(cls, type=None, data=None, name=None):
        if type is None:
            return object.__new__(cls)
        return _PtConstant(type, data, name)

    def __setstate__(self, state):
        _variable_state(self, state, _PtConstant)


class TensorSharedVariable(_PtShared, metaclass=_Legacy):
    """Theano's ``TensorSharedVariable``: PyTensor's, with portable storage.

    The value stays in the pickled container, whose storage becomes
    :func:`lasagne_bn.utils.portable_shared`'s, so the variable works under
    every backend in one process.
    """

    __portable__ = _PtShared

    def __new__(cls, *args, **kwargs):
        if not args and not kwargs:
            return object.__new__(cls)
        return _PtShared(*args, **kwargs)

    def __setstate__(self, state):
        from lasagne_bn.utils import _HostStorage

        default_update = state.pop("default_update", None)
        _variable_state(self, state, _PtShared)
        self.__dict__.setdefault("_default_update", None)
        container = self.container
        if isinstance(container.storage[0], np.ndarray | np.generic) and not isinstance(
            container.storage, _HostStorage
        ):
            container.storage = _HostStorage(container.storage)
            container.storage[0] = container.storage[0]
        if default_update is not None:
            self.__dict__["_default_update"] = default_update


class _InertOp:
    """An Op of a pickled Theano graph, loaded as a record; it cannot be applied."""

    legacy_path = "?"
    advice = ""

    def __new__(cls, *args, **kwargs):
        if args or kwargs:
            raise TypeError(no_counterpart(cls.legacy_path, cls.advice))
        return object.__new__(cls)

    def __setstate__(self, state):
        self.__dict__.update(state if isinstance(state, dict) else {"_state": state})

    def __call__(self, *args, **kwargs):
        raise TypeError(no_counterpart(self.legacy_path, self.advice))

    def __repr__(self) -> str:
        return f"<pickled Theano op {self.legacy_path}>"


def inert_op(path: str, advice: str) -> type:
    """A class for the Theano Op ``path`` that only loads from pickles (see module doc)."""
    name = path.rpartition(".")[2]
    return type(name, (_InertOp,), {"legacy_path": path, "advice": advice, "__module__": __name__})
