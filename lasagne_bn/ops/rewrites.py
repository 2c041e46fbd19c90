"""Graph rewrites for our Ops, registered with PyTensor when first needed.

Importing :mod:`lasagne_bn` changes nothing in PyTensor's rewrite database
(``pytensor.compile.optdb``): every rewrite of this package is registered the
first time something that needs it is built, once per process.  The
rewrites come in groups, each defined (:func:`define_group`) by the module
that owns it when that module is imported, and :mod:`lasagne_bn.ops` imports
them all; this module is the registry and knows none of them:

- ``"jax"`` (any of our Ops, a layer graph, ``theano.function``), defined
  by the JAX backend's package (:mod:`lasagne_bn.ops.jax`):
  ``lasagne_bn_register_jax``, which imports :mod:`lasagne_bn.ops.jax.bn` (and
  so JAX) only when a function is first compiled in JAX mode, and the
  static-shape rewrites of :mod:`lasagne_bn.ops.static_shapes` (JAX mode only);
- ``"bn"`` (a batch-norm Op's ``make_node``): the tagged, off-by-default
  folding of :mod:`lasagne_bn.ops.bn_fold_rewrite`;
- ``"conv"`` (a convolution Op's ``make_node``): the JAX shape tuples of
  :mod:`lasagne_bn.ops.conv_rewrites`;
- ``"pool"`` (a pooling Op's ``make_node``): constant windows become static
  Ops (:mod:`lasagne_bn.ops.pool_rewrites`; canonicalize and specialize);
- ``"matmul"`` (with ``"bn"``, ``"conv"`` and ``"pool"``): in the Numba
  mode, ``Dot`` of two float matrices becomes
  :class:`lasagne_bn.ops.matmul.MatMul` in graphs with our kernels, so their
  products run in Numba's thread pool, not OpenBLAS's;
- ``"aliasing"`` (a ``default_update`` set through
  :func:`lasagne_bn.utils.set_default_update`, ``get_output`` of a layer):
  :mod:`lasagne_bn._aliasing`;
- ``"c_gemm"`` (:func:`lasagne_bn.ops.c.gemm.c_mode`): the opt-in, tagged
  rewrite that gives mode ``C`` matrix products where PyTensor has no BLAS.

Each rewrite only touches graphs that need it (our Op classes, JAX-mode
graphs, memory-aliased shared inputs), so registering one early changes no
other graph.  :func:`register_rewrites` registers them all, for graphs built
without our Ops that want the JAX static-shape rewrite (``x[:, :x.shape[1] - 1]``
under ``mode="JAX"``) or the aliased-input rewrite.

The C backends (``C``, ``CVM``) need no rewrite: the Ops have C code
(:mod:`lasagne_bn.ops.c.bn`), compiled loops that make fewer passes over
the data than a graph of plain PyTensor Ops, and no full-size temporaries.

>>> from lasagne_bn.ops.rewrites import ensure_registered, registered
>>> ensure_registered("bn")
>>> sorted(registered() & {"jax", "bn"})
['bn', 'jax']
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = [
    "GROUPS",
    "RegisteredOnUnpickle",
    "define_group",
    "ensure_registered",
    "register_rewrites",
    "registered",
]


#: group -> (groups it needs first, its registration); each module that owns a
#: group defines it with :func:`define_group` when imported (:mod:`lasagne_bn.ops`
#: imports them all), so this module knows none of them.
GROUPS: dict[str, tuple[tuple[str, ...], Callable[[], None]]] = {}


def define_group(name: str, needs: tuple[str, ...], register: Callable[[], None]) -> None:
    """Make ``register`` the registration of group ``name``, run after those of ``needs``."""
    GROUPS[name] = (tuple(needs), register)


_done: set[str] = set()
_lock = threading.RLock()


def ensure_registered(*groups: str) -> None:
    """Register the rewrites of ``groups`` (see the module docstring), once per process."""
    if _done.issuperset(groups):  # the common case: one set test per make_node
        return
    with _lock:
        for group in groups:
            if group in _done:
                continue
            if group not in GROUPS:
                raise ValueError(f"group={group!r}: expected one of {sorted(GROUPS)}")
            needs, register = GROUPS[group]
            ensure_registered(*needs)
            register()
            _done.add(group)


class RegisteredOnUnpickle:
    """Mixin for an Op whose ``make_node`` registers the rewrites of ``rewrite_group``.

    An unpickled graph (a pickled function) calls no ``make_node``, so
    unpickling the Op registers them instead.
    """

    rewrite_group: str

    def __setstate__(self, state):
        ensure_registered(self.rewrite_group)
        parent = getattr(super(), "__setstate__", None)
        if parent is None:
            self.__dict__.update(state)
        else:
            parent(state)


def register_rewrites() -> None:
    """Register every rewrite of this package now (all groups).

    Examples
    --------
    >>> from lasagne_bn.ops.rewrites import GROUPS, registered
    >>> register_rewrites()
    >>> registered() >= set(GROUPS)
    True
    """
    ensure_registered(*GROUPS)


def registered() -> set[str]:
    """The groups registered so far in this process."""
    return set(_done)
