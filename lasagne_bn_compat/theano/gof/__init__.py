"""``theano.gof``: PyTensor's ``pytensor.graph`` under Theano's module names.

``theano.gof.graph``, ``.op``, ``.type``, ``.fg``, ``.link`` ... are the
PyTensor modules they became; ``theano.gof.utils`` adds Theano's
``scratchpad`` (PyTensor's ``Scratchpad``), ``theano.gof.graph``
``is_same_graph`` and Theano's traversal names.  ``COp``, ``ParamsType``,
``Generic`` ... are PyTensor's (from ``pytensor.link.c``); ``PureOp`` is
``Op``, ``LocalOptimizer`` / ``local_optimizer`` are ``NodeRewriter`` /
``node_rewriter``; ``Variable(type)`` needs no owner, as in Theano.
"""

from __future__ import annotations

from pytensor.graph import *  # noqa: F403
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import NodeRewriter, node_rewriter
from pytensor.graph.utils import MissingInputError  # noqa: F401
from pytensor.link.c.op import COp  # noqa: F401
from pytensor.link.c.params_type import ParamsType  # noqa: F401
from pytensor.link.c.type import CType, EnumList, Generic, generic  # noqa: F401
from pytensor.utils import hash_from_code  # noqa: F401

from lasagne_bn_compat._names import delegate
from lasagne_bn_compat.theano._pickled import Variable  # noqa: F401

# Theano's names for what PyTensor renamed
PureOp = Op
LocalOptimizer = NodeRewriter
local_optimizer = node_rewriter

_SUBMODULES = {
    "graph": "lasagne_bn_compat.theano.gof.graph",
    "op": "pytensor.graph.op",
    "type": "pytensor.graph.type",
    "fg": "pytensor.graph.fg",
    "opt": "pytensor.graph.rewriting.basic",
    "link": "pytensor.link.basic",
    "utils": "lasagne_bn_compat.theano.gof.utils",
    "toolbox": "pytensor.graph.features",
    "destroyhandler": "pytensor.graph.destroyhandler",
    "params_type": "pytensor.link.c.params_type",
    "cc": "pytensor.link.c.basic",
    "vm": "pytensor.link.vm",
}

__getattr__ = delegate("pytensor.graph", "theano.gof", submodules=_SUBMODULES)
