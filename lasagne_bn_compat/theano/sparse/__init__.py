"""``theano.sparse``: PyTensor's sparse module, with Theano's ``mul`` and ``sub``.

PyTensor's ``pytensor.sparse.mul`` / ``sub`` are deprecated aliases of
``multiply`` / ``subtract`` (they warn on every call); here they are those.
Submodules (``theano.sparse.basic`` ...) are PyTensor's.
"""

from __future__ import annotations

from pytensor.sparse import *  # noqa: F403
from pytensor.sparse import multiply as mul  # noqa: F401
from pytensor.sparse import subtract as sub  # noqa: F401

from lasagne_bn_compat._names import delegate

__getattr__ = delegate("pytensor.sparse", "theano.sparse")
