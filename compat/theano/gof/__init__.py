"""``theano.gof``: PyTensor's ``pytensor.graph`` under Theano's module names.

``theano.gof.graph``, ``.op``, ``.type``, ``.fg``, ``.link`` ... are the
PyTensor modules they became; ``theano.gof.utils`` adds Theano's
``scratchpad`` (PyTensor's ``Scratchpad``).
"""

from __future__ import annotations

from pytensor.graph import *  # noqa: F403

from compat._names import delegate

_SUBMODULES = {
    "graph": "pytensor.graph.basic",
    "op": "pytensor.graph.op",
    "type": "pytensor.graph.type",
    "fg": "pytensor.graph.fg",
    "opt": "pytensor.graph.rewriting.basic",
    "link": "pytensor.link.basic",
    "utils": "compat.theano.gof.utils",
    "toolbox": "pytensor.graph.features",
    "destroyhandler": "pytensor.graph.destroyhandler",
    "params_type": "pytensor.link.c.params_type",
    "cc": "pytensor.link.c.basic",
    "vm": "pytensor.link.vm",
}

__getattr__ = delegate("pytensor.graph", "theano.gof", submodules=_SUBMODULES)
