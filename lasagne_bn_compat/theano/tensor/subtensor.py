"""``theano.tensor.subtensor``: PyTensor's subtensor module with Theano's ``*subtensor1`` helpers.

Theano indexed a tensor's leading axis with an integer vector through
dedicated ``AdvancedSubtensor1`` Ops and the helpers ``advanced_subtensor1``,
``advanced_inc_subtensor1`` and ``advanced_set_subtensor1``.  PyTensor 3.3
folded those Ops into the general ``AdvancedSubtensor`` /
``AdvancedIncSubtensor`` (which keep the fast path) and deprecates the
helpers with a ``FutureWarning``; 3.0.x still has both.  The helpers here
build the same graph through the general functions on every supported
PyTensor, so legacy code gets no warning; every other name is PyTensor's.

Examples
--------
>>> import numpy as np, pytensor.tensor as pt
>>> from lasagne_bn_compat.theano.tensor import subtensor
>>> x, rows = pt.matrix("x"), pt.lvector("rows")
>>> y = subtensor.advanced_inc_subtensor1(x, pt.ones((2, 3)), rows)
>>> y.eval({x: np.zeros((3, 3), x.dtype), rows: [0, 0]})[0]
array([2., 2., 2.])
"""

from __future__ import annotations

from pytensor.tensor import subtensor as _subtensor

from lasagne_bn_compat._names import delegate

_MISSING = {
    "AdvancedSubtensor1": (
        "PyTensor 3.3 folded it into AdvancedSubtensor; build the graph with "
        "theano.tensor.subtensor.advanced_subtensor1(x, ilist) or x[ilist]"
    ),
    "AdvancedIncSubtensor1": (
        "PyTensor 3.3 folded it into AdvancedIncSubtensor; build the graph with "
        "theano.tensor.subtensor.advanced_inc_subtensor1 / advanced_set_subtensor1"
    ),
}


def advanced_subtensor1(x, ilist):
    """``x[ilist]``: the entries of ``x``'s leading axis at the integer vector ``ilist``."""
    return _subtensor.advanced_subtensor(x, ilist)


def advanced_inc_subtensor1(x, y, ilist):
    """``x`` with ``y`` added at the leading-axis positions ``ilist`` (repeats add up)."""
    return _subtensor.advanced_inc_subtensor(x, y, ilist)


def advanced_set_subtensor1(x, y, ilist):
    """``x`` with the leading-axis positions ``ilist`` set to ``y``."""
    return _subtensor.advanced_inc_subtensor(x, y, ilist, set_instead_of_inc=True)


__getattr__ = delegate("pytensor.tensor.subtensor", "theano.tensor.subtensor", _MISSING)
