"""What differs between the PyTensor releases we support (3.0.7 up to 3.4), in one place.

Every version-dependent choice in ``lasagne_bn`` and ``lasagne_bn_compat`` is made here,
by looking at what the installed PyTensor has, so the rest of the code is
written once, for both:

- :func:`compatible_infer_shape`: PyTensor 3.1.1 calls ``Op.infer_shape(node, shapes)``
  (3.0.x passed the ``fgraph`` first, and 3.1.1+ warns, once per Op class,
  about an ``infer_shape`` that still takes it).
- :data:`IFELSE_MODULES`: PyTensor 3.3.5 moved ``pytensor.ifelse`` to
  ``pytensor.conditional`` (the old module still imports, but warns for
  every name read from it).

Examples
--------
>>> from lasagne_bn._compat_pytensor import PYTENSOR_VERSION
>>> (3, 0, 7) <= PYTENSOR_VERSION < (3, 4, 0)
True
"""

from __future__ import annotations

import functools
import importlib.util
import re
from collections.abc import Callable
from typing import Any

import pytensor

__all__ = ["IFELSE_MODULES", "PYTENSOR_VERSION", "compatible_infer_shape"]


def _release(version: str) -> tuple[int, int, int]:
    # "3.3.7", "3.4.0.dev12+g1234", "3.1.1rc1": the leading three numbers.
    match = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", version)
    if match is None:
        raise ValueError(f"pytensor.__version__={version!r}: expected 'MAJOR.MINOR[.PATCH]...'")
    major, minor, patch = match.groups()
    return int(major), int(minor), int(patch or 0)


#: The installed PyTensor's (major, minor, patch).
PYTENSOR_VERSION: tuple[int, int, int] = _release(pytensor.__version__)

# 3.1.1 is the first release after 3.0.7 (there is no 3.1.0 on the index).
_INFER_SHAPE_TAKES_FGRAPH = PYTENSOR_VERSION < (3, 1, 1)

#: The modules that hold Theano's ``theano.ifelse`` names (``IfElse``,
#: ``ifelse``, its rewrites), in lookup order.
IFELSE_MODULES: tuple[str, ...] = (
    ("pytensor.conditional.op", "pytensor.conditional.rewriting")
    if importlib.util.find_spec("pytensor.conditional") is not None
    else ("pytensor.ifelse",)
)


def compatible_infer_shape(method: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``infer_shape(self, node, shapes)`` callable as the installed PyTensor calls it.

    Write an Op's ``infer_shape`` in PyTensor 3.1.1's form, without
    ``fgraph`` (no Op of ours reads it), and decorate it; on PyTensor 3.0.x
    the decorated method also accepts (and drops) the ``fgraph`` that
    PyTensor passes first.

    Examples
    --------
    >>> from pytensor.graph.op import Op
    >>> class Twice(Op):
    ...     @compatible_infer_shape
    ...     def infer_shape(self, node, shapes):
    ...         return [shapes[0]]
    """
    if not _INFER_SHAPE_TAKES_FGRAPH:
        return method

    @functools.wraps(method)
    def with_fgraph(self, fgraph, node, shapes):
        return method(self, node, shapes)

    return with_fgraph
