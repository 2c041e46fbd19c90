"""Run unchanged Theano / Lasagne code on PyTensor 3 and lasagne_bn.

>>> import lasagne_bn_compat
>>> lasagne_bn_compat.install()
>>> import theano, theano.tensor as T, lasagne
>>> from theano.tensor.nnet import bn
>>> import lasagne_bn.ops
>>> bn.batch_normalization_train is lasagne_bn.ops.batch_normalization_train
True
>>> lasagne.layers.DenseLayer.__module__
'lasagne_bn.layers.dense'
>>> lasagne_bn_compat.uninstall()

After :func:`install`, ``import theano`` gives the shim package
:mod:`lasagne_bn_compat.theano` (PyTensor's names, plus the Theano names PyTensor
renamed or dropped), ``import lasagne`` gives :mod:`lasagne_bn_compat.lasagne`
(lasagne_bn's modules under Lasagne's names), and every submodule old code
imports resolves the same way (see :mod:`lasagne_bn_compat._finder`).  Names with no
counterpart (``theano.sandbox.cuda``, ``lasagne.layers.dnn``, ...) fail with
an ``ImportError`` / ``AttributeError`` that says what to use instead.

:mod:`lasagne_bn_compat.io` reads and writes the checkpoint formats Lasagne users
wrote; ``lasagne-bn run SCRIPT`` runs a legacy script with the shims
installed.  Nothing in :mod:`lasagne_bn` imports this package.
"""

from __future__ import annotations

import os
import sys
import threading

from lasagne_bn_compat._finder import ROOTS, LegacyFinder
from lasagne_bn_compat._flags import import_pytensor_with
from lasagne_bn_compat._names import LegacyNameError

__all__ = ["LegacyNameError", "install", "is_installed", "uninstall"]

_lock = threading.Lock()
_finder: LegacyFinder | None = None


def _legacy_keys() -> list[str]:
    return [
        name
        for name in sys.modules
        if any(name == root or name.startswith(root + ".") for root in ROOTS)
    ]


def _ours(module) -> bool:
    name = getattr(module, "__name__", None) or ""
    return name.partition(".")[0] in ("lasagne_bn_compat", "pytensor", "lasagne_bn")


def is_installed() -> bool:
    """Whether :func:`install` is in effect."""
    return _finder is not None and _finder in sys.meta_path


def install(*, theano_flags: str | None = None) -> None:
    """Make ``import theano`` and ``import lasagne`` resolve to this package's shims.

    Idempotent, except that a second call applies its ``theano_flags``.
    While installed, ``if variable:`` is true for a tensor variable as in
    Theano (only the result of ``<``, ``<=``, ``>``, ``>=`` raises), where
    PyTensor raises for every variable (:mod:`lasagne_bn_compat.theano._truth`).
    Call it before the legacy code imports ``theano`` or ``lasagne``, and
    before anything imports PyTensor if the flags hold options PyTensor
    reads only at import (``optimizer``, ``base_compiledir``, ...).

    Parameters
    ----------
    theano_flags : str, optional
        Theano-style flags (``"floatX=float32,mode=FAST_COMPILE"``) applied to
        ``pytensor.config``; by default the ``THEANO_FLAGS`` environment
        variable, as Theano read it.  Options PyTensor does not have
        (``device=cuda``, ``lib.cnmem``, ...) are ignored with one warning
        that says why.

    Raises
    ------
    RuntimeError
        If a real ``theano`` or ``lasagne`` package is already imported in
        this process (the shims cannot replace modules that code already
        holds).
    """
    global _finder
    if theano_flags is not None and not isinstance(theano_flags, str):
        raise TypeError(
            f"theano_flags={theano_flags!r} must be a str like 'floatX=float32' (or None for "
            "the THEANO_FLAGS environment variable)"
        )
    with _lock:
        if is_installed():
            _apply_flags(theano_flags)  # a second call with other flags applies them
            return
        foreign = [name for name in _legacy_keys() if not _ours(sys.modules[name])]
        if foreign:
            raise RuntimeError(
                f"the real {foreign[0].partition('.')[0]!r} package is already imported "
                f"({', '.join(sorted(foreign)[:3])}); call lasagne_bn_compat.install() "
                "before anything "
                "imports theano or lasagne"
            )
        for name in _legacy_keys():  # left over from an earlier install
            del sys.modules[name]
        _finder = LegacyFinder()
        sys.meta_path.insert(0, _finder)
    _apply_flags(theano_flags)
    from lasagne_bn_compat.theano import _truth

    _truth.enable()


def _apply_flags(theano_flags: str | None) -> None:
    flags = os.environ.get("THEANO_FLAGS", "") if theano_flags is None else theano_flags
    if "pytensor" not in sys.modules:
        import_pytensor_with(flags)
    from lasagne_bn_compat.theano._config import apply_theano_flags

    apply_theano_flags(flags)


def uninstall() -> None:
    """Undo :func:`install`: ``theano`` / ``lasagne`` imports fail (or find the real ones) again.

    Removes the finder and every ``theano*`` / ``lasagne*`` entry it put in
    ``sys.modules`` (:func:`install` refuses to run when a real Theano or
    Lasagne was imported, so there is nothing else to put back).
    Objects that legacy code already created keep working (they are
    lasagne_bn / PyTensor objects); their truth value is PyTensor's again.
    Configuration changes made through
    ``THEANO_FLAGS`` stay.
    """
    global _finder
    with _lock:
        if _finder is None:
            return
        while _finder in sys.meta_path:
            sys.meta_path.remove(_finder)
        for name in _legacy_keys():
            del sys.modules[name]
        _finder = None
        from lasagne_bn_compat.theano import _truth

        _truth.disable()
