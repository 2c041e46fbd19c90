"""``theano.gof.graph``: PyTensor's ``pytensor.graph.basic`` and ``.traversal``, Theano's names.

``inputs`` is ``graph_inputs``, ``variables`` ``vars_between``, ``ops``
``applys_between``; ``is_same_graph`` is ``equal_computations`` for two
variables; ``Variable(type)`` works without an owner, as in Theano.
"""

from __future__ import annotations

from pytensor.graph.basic import *  # noqa: F403
from pytensor.graph.basic import equal_computations
from pytensor.graph.traversal import (  # noqa: F401
    ancestors,
    applys_between,
    general_toposort,
    graph_inputs,
    io_toposort,
    orphans_between,
    vars_between,
)

from compat._names import delegate
from compat.theano._pickled import Variable  # noqa: F401

inputs = graph_inputs
variables = vars_between
ops = applys_between
orphans = orphans_between


def is_same_graph(var1, var2, givens=None) -> bool:
    """Whether ``var1`` and ``var2`` compute the same thing.

    ``givens`` maps variables of ``var1``'s graph to variables of ``var2``'s
    that count as equal.

    >>> import pytensor.tensor as pt
    >>> x = pt.vector('x')
    >>> is_same_graph(x.mean(), x.mean()), is_same_graph(x.mean(), x.sum())
    (True, False)
    """
    givens = dict(givens or {})
    return equal_computations([var1], [var2], list(givens), list(givens.values()))


__getattr__ = delegate("pytensor.graph.basic", "theano.gof.graph")
