"""``theano.sandbox.rng_mrg``: ``MRG_RandomStreams`` on PyTensor's generators.

The draws have the distributions of Theano's MRG31k3p streams but other
numbers; ``MRG_RandomStreams`` is :class:`lasagne_bn_compat.theano._random.RandomStreams`.
"""

from __future__ import annotations

from lasagne_bn_compat.theano._pickled import inert_op
from lasagne_bn_compat.theano._random import RandomStreams as MRG_RandomStreams

__all__ = ["MRG_RandomStreams"]

#: Theano's MRG uniform Op: only loads from pickled graphs; draw with
#: MRG_RandomStreams.uniform.
mrg_uniform = inert_op(
    "theano.sandbox.rng_mrg.mrg_uniform", "draw with MRG_RandomStreams(seed).uniform(size)"
)
