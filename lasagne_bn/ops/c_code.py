"""The Ops' C code, looked up by Op class: the C backend registers it.

PyTensor's C linker asks each ``COp`` for its code (``c_code``,
``c_support_code``, ``c_headers``, ``c_libraries``,
``c_code_cache_version``).  Our Op classes take those methods from
:class:`RegisteredCCode`, which answers with what the C backend
(:mod:`lasagne_bn.ops.c`) registered for the class, or for a base class,
with :func:`register_c_code` when it was imported (:mod:`lasagne_bn.ops`
imports it).  So the Op modules never import backend code.  A class with
nothing registered has no C code (``MethodNotDefined``): ``CVM`` runs its
``perform``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

from pytensor.graph.utils import MethodNotDefined
from pytensor.link.c.op import COp

__all__ = ["CCode", "RegisteredCCode", "register_c_code"]


@dataclasses.dataclass(frozen=True)
class CCode:
    """One Op family's C code.

    ``code(op, node, name, inputs, outputs, sub)`` is the node's code
    (``COp.c_code`` with the Op first), ``support_code()`` the code shared
    by the family's nodes, ``version`` its cache version.
    """

    code: Callable[..., str]
    support_code: Callable[[], list[str] | str]
    version: object
    headers: Sequence[str] = ()
    libraries: Sequence[str] = ()


_REGISTRY: dict[type, CCode] = {}


def register_c_code(op_class: type, code: CCode) -> None:
    """Give ``op_class`` (and its subclasses, unless they have their own) ``code``."""
    _REGISTRY[op_class] = code


def c_code_of(op) -> CCode:
    """The C code registered for ``op``'s class or its nearest base class."""
    for cls in type(op).__mro__:
        if cls in _REGISTRY:
            return _REGISTRY[cls]
    raise MethodNotDefined(f"{type(op).__name__} has no C code registered")


class RegisteredCCode(COp):
    """``COp`` whose C code is the one registered for its class."""

    def c_support_code(self, **kwargs):
        return c_code_of(self).support_code()

    def c_headers(self, **kwargs):
        return list(c_code_of(self).headers)

    def c_libraries(self, **kwargs):
        return list(c_code_of(self).libraries)

    def c_code(self, node, name, inputs, outputs, sub):
        return c_code_of(self).code(self, node, name, inputs, outputs, sub)

    def c_code_cache_version(self):
        return (c_code_of(self).version,)
