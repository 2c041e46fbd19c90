"""``theano.sparse``: PyTensor's sparse module, with Theano's ``mul``, ``sub`` and ``SparseType``.

PyTensor's ``pytensor.sparse.mul`` / ``sub`` are deprecated aliases of
``multiply`` / ``subtract`` (they warn on every call); here they are those.
``SparseType`` is PyTensor's ``SparseTensorType`` (the same arguments).
``theano.sparse.basic`` holds what PyTensor split into ``basic`` and
``math``; other submodules are PyTensor's.
"""

from __future__ import annotations

from pytensor.sparse import *  # noqa: F403
from pytensor.sparse import multiply as mul  # noqa: F401
from pytensor.sparse import subtract as sub  # noqa: F401
from pytensor.sparse.type import SparseTensorType as SparseType  # noqa: F401

from lasagne_bn_compat._names import delegate

__getattr__ = delegate("pytensor.sparse", "theano.sparse")

# after the star import, which binds PyTensor's own ``basic``
from lasagne_bn_compat.theano.sparse import basic  # noqa: E402, F401, F811
