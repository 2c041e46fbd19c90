"""Theano's random streams (``RandomStreams``, ``MRG_RandomStreams``) on PyTensor 3.

Each draw gets its own shared random generator, seeded from the stream's
seed; its state advances every time a compiled function that uses the draw
runs (through a ``default_update``, as Theano's streams worked).  The
numbers differ from Theano's (other generators), the distributions do not.
"""

from __future__ import annotations

import math

import numpy as np
import pytensor
import pytensor.tensor.random.basic as _rv
from pytensor.tensor.random.variable import shared_rng

from lasagne_bn import utils

__all__ = ["RandomStreams"]


class RandomStreams:
    """``RandomStreams(seed)``: symbolic random draws with Theano's method signatures.

    Methods take ``size`` first (a tuple or a symbolic shape), as Theano's
    did, and return tensors; ``ndim`` and ``nstreams`` are accepted and
    ignored.
    """

    def __init__(self, seed=12345):
        self.state_updates: list = []
        self.seed(seed)

    def __setstate__(self, state) -> None:
        """A stream pickled by Theano: reseeded from its seed; its pickled draws are dropped.

        Theano's streams kept the graphs of their draws (``state_updates``);
        they belong to functions that no longer exist, so a loaded stream
        starts afresh, as one made with the same seed.
        """
        state = state if isinstance(state, dict) else {}
        self.state_updates = []
        self.seed(state.get("default_instance_seed", 12345))

    def seed(self, seed=None) -> None:
        """Restart the seeds of the draws made from now on."""
        if seed is None:
            seed = int(np.random.default_rng().integers(2**30))
        if isinstance(seed, list | tuple | np.ndarray):  # MRG's 6-int state
            seed = [int(s) for s in np.ravel(seed)]
        self.default_instance_seed = seed
        self._seeds = np.random.SeedSequence(seed)

    def _draw(self, rv, *params, size, dtype):
        (child,) = self._seeds.spawn(1)
        rng = shared_rng(seed=child, name="rng")
        if size is not None and not isinstance(size, pytensor.graph.basic.Variable):
            size = tuple(size)
        next_rng, value = rv(*params, size=size, rng=rng, dtype=dtype, return_next_rng=True)
        utils.set_default_update(rng, next_rng)
        self.state_updates.append((rng, next_rng))
        return value

    @staticmethod
    def _float(dtype):
        return pytensor.config.floatX if dtype is None else dtype

    def uniform(self, size=None, low=0.0, high=1.0, ndim=None, dtype=None, nstreams=None, **kw):
        """Uniform numbers in ``[low, high)``."""
        return self._draw(_rv.uniform, low, high, size=size, dtype=self._float(dtype))

    def normal(
        self,
        size=None,
        avg=0.0,
        std=1.0,
        ndim=None,
        dtype=None,
        nstreams=None,
        truncate=False,
        **kw,
    ):
        """Normal numbers with mean ``avg`` and standard deviation ``std``.

        ``truncate=True`` (``MRG_RandomStreams``'): only values within two
        standard deviations of ``avg``, distributed as the normal is there.
        """
        dtype = self._float(dtype)
        if not truncate:
            return self._draw(_rv.normal, avg, std, size=size, dtype=dtype)
        # The inverse of the normal's CDF over the uniform numbers whose image
        # is [-2, 2): erf(sqrt(2)) bounds 2u - 1 there.
        bound = math.erf(math.sqrt(2.0))
        v = self._draw(_rv.uniform, -bound, bound, size=size, dtype=dtype)
        z = pytensor.tensor.clip(np.sqrt(2.0).astype(dtype) * pytensor.tensor.erfinv(v), -2, 2)
        return avg + std * z

    def binomial(self, size=None, n=1, p=0.5, ndim=None, dtype="int64", nstreams=None, **kw):
        """Binomial counts (``n=1``: Bernoulli draws with probability ``p``)."""
        value = self._draw(_rv.binomial, n, p, size=size, dtype="int64")
        return value if dtype == "int64" else pytensor.tensor.cast(value, dtype)

    def multinomial(
        self, size=None, n=1, pvals=None, ndim=None, dtype="int64", nstreams=None, **kw
    ):
        """One-hot (``n=1``) or count rows drawn from the rows of ``pvals``."""
        if pvals is None:
            raise TypeError("multinomial() needs pvals, the probabilities of each row")
        value = self._draw(_rv.multinomial, n, pvals, size=size, dtype="int64")
        return value if dtype == "int64" else pytensor.tensor.cast(value, dtype)

    def random_integers(self, size=None, low=0, high=1, ndim=None, dtype="int64"):
        """Integers in ``[low, high]`` (both included), as Theano's ``random_integers``."""
        return self._draw(_rv.integers, low, high + 1, size=size, dtype=dtype)

    def permutation(self, size=None, n=1, ndim=None, dtype="int64"):
        """A random permutation of ``range(n)`` (one; ``size`` must be None or ())."""
        if size not in (None, ()):
            raise ValueError(f"permutation(size={size!r}) supports only one permutation")
        return self._draw(_rv.permutation, n, size=None, dtype=dtype)
