"""``theano.gof.graph``: PyTensor's ``pytensor.graph.basic`` and ``.traversal``, Theano's names.

``inputs`` is ``graph_inputs``, ``variables`` ``vars_between``, ``ops``
``applys_between``; ``is_same_graph`` is ``equal_computations`` for two
variables; ``Variable(type)`` works without an owner, as in Theano.
"""

from __future__ import annotations

from pytensor.graph.basic import *  # noqa: F403
from pytensor.graph.basic import equal_computations
from pytensor.graph.replace import clone_replace
from pytensor.graph.rewriting.utils import rewrite_graph
from pytensor.graph.traversal import (  # noqa: F401
    ancestors,
    applys_between,
    general_toposort,
    graph_inputs,
    io_toposort,
    orphans_between,
    vars_between,
)

from lasagne_bn_compat._names import delegate
from lasagne_bn_compat.theano._pickled import Variable  # noqa: F401

inputs = graph_inputs
variables = vars_between
ops = applys_between
orphans = orphans_between


def is_same_graph(var1, var2, givens=None) -> bool:
    """Whether ``var1`` and ``var2`` compute the same thing.

    ``givens`` maps variables of ``var1``'s graph to the variables of
    ``var2``'s that stand for them.  Graphs that differ only in the form
    PyTensor builds (``x.mean()`` against ``x.sum() / x.shape[0]``) compare
    equal after PyTensor's canonicalization, as Theano's merged graphs did.

    >>> import pytensor.tensor as pt
    >>> x = pt.vector('x')
    >>> is_same_graph(x.mean(), x.mean()), is_same_graph(x.mean(), x.sum())
    (True, False)
    """
    if givens:
        var1 = clone_replace(var1, replace=dict(givens))
    if equal_computations([var1], [var2]):
        return True
    rewritten = rewrite_graph([var1, var2], include=("canonicalize",), clone=True)
    return equal_computations(rewritten[:1], rewritten[1:])


__getattr__ = delegate("pytensor.graph.basic", "theano.gof.graph")
