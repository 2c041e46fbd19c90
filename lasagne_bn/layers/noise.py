"""Layers that add noise in training: :class:`DropoutLayer`, :class:`GaussianNoiseLayer`.

Random numbers come from PyTensor 3's shared random generators
(``pytensor.tensor.random.shared_rng``; the older ``RandomStream`` is
deprecated in 3.0.7).  Every output expression gets its own generator,
seeded from the layer's seed, which comes from
:func:`lasagne_bn.random.get_rng`.  The generator's state advances after
each call of a compiled function: through a ``default_update`` (Lasagne's
way), or through the updates that ``get_output(..., return_updates=True)``
returns.

>>> from lasagne_bn.layers import InputLayer, DropoutLayer
>>> l = DropoutLayer(InputLayer((None, 10)), p=0.2)
>>> l.p, l.rescale, l.shared_axes
(0.2, True, ())
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytensor.tensor.random.basic as ptrb
from pytensor.graph.basic import Variable
from pytensor.tensor.random.variable import shared_rng

from lasagne_bn import utils
from lasagne_bn.layers.base import Layer
from lasagne_bn.layers.helper import active_updates, add_update
from lasagne_bn.random import get_rng

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from lasagne_bn._typing import Incoming

__all__ = [
    "DropoutLayer",
    "GaussianNoiseLayer",
    "dropout",
    "dropout_channels",
    "dropout_locations",
    "spatial_dropout",
]

_SEED_HIGH = 2147462579  # the bound Lasagne draws layer seeds below


class _RandomSource:
    """Hands out one fresh shared generator per draw, all derived from one seed."""

    def __init__(self, seed: int):
        self.seed = seed
        self._seeds = np.random.SeedSequence(seed)

    def draw(self, rv, *args, size, dtype, name: str):
        """A random tensor from ``rv(*args, size=size)`` and its generator's update."""
        (child,) = self._seeds.spawn(1)
        rng = shared_rng(seed=child, name=f"{name}.rng")
        next_rng, value = rv(*args, size=size, rng=rng, dtype=dtype, return_next_rng=True)
        updates = active_updates()
        if updates is not None:
            add_update(updates, rng, next_rng)
        else:
            utils.set_default_update(rng, next_rng)
        return value


def _complete_random_state(layer) -> None:
    """A layer pickled by Lasagne kept a Theano stream (``_srng``): a fresh source instead."""
    if "_random" not in layer.__dict__:
        layer.__dict__.pop("_srng", None)
        layer._random = _RandomSource(int(get_rng().randint(1, _SEED_HIGH)))


def _check_probability(p, name: str, layer_name):
    if isinstance(p, Variable):
        if p.ndim != 0:
            raise ValueError(f"{name} must be a scalar; got a {p.ndim}-d tensor")
        return p
    if not isinstance(p, numbers.Real) or not 0 <= p < 1:
        raise ValueError(
            f"{name}={p!r} must be a probability in [0, 1); layer name={layer_name!r}"
        )
    return p


class DropoutLayer(Layer):
    """Sets input values to zero with probability ``p`` in training.

    Parameters
    ----------
    incoming : Layer or tuple
    p : float or scalar tensor
        Probability of dropping a value, in ``[0, 1)``.
    rescale : bool
        Divide the kept values by ``1 - p``, so the expected output equals
        the input (and nothing needs rescaling at test time).
    shared_axes : tuple of int
        Axes along which one mask value is shared (for example ``(2, 3)``
        drops whole feature maps).

    Notes
    -----
    ``get_output(..., deterministic=True)`` (or ``p == 0``) returns the input
    unchanged.

    Examples
    --------
    >>> import numpy as np, pytensor
    >>> from lasagne_bn.layers import InputLayer, get_output
    >>> l_in = InputLayer((None, 1000))
    >>> l = DropoutLayer(l_in, p=0.5)
    >>> out, updates = get_output(l, return_updates=True)
    >>> f = pytensor.function([l_in.input_var], out, updates=updates)
    >>> y = f(np.ones((1, 1000)))
    >>> sorted(set(y.ravel().tolist()))
    [0.0, 2.0]
    """

    def __init__(
        self,
        incoming: Incoming,
        p: float = 0.5,
        rescale: bool = True,
        shared_axes: Sequence[int] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        self._random = _RandomSource(int(get_rng().randint(1, _SEED_HIGH)))
        self.p = _check_probability(p, "p", self.name)
        self.rescale = rescale
        ndim = len(self.input_shape)
        shared_axes = tuple(shared_axes)
        for a in shared_axes:
            if isinstance(a, bool) or not isinstance(a, utils.int_types) or not -ndim <= a < ndim:
                raise ValueError(
                    f"shared_axes={shared_axes!r} must be axes of the {ndim}-dimensional input"
                )
        self.shared_axes = shared_axes

    _complete_state = _complete_random_state

    def get_output_for(self, input, deterministic=False, **kwargs):
        if deterministic or (isinstance(self.p, numbers.Real) and self.p == 0):
            return input
        # Integer input is accepted, as in Lasagne: the probability and the
        # random draw stay floating point; the 0/1 mask takes the input's dtype.
        prob_dtype = input.dtype if input.dtype.startswith("float") else pytensor.config.floatX
        if isinstance(self.p, numbers.Real):
            retain_prob = pt.constant(1 - self.p, dtype=prob_dtype)
        else:
            retain_prob = pt.cast(1 - self.p, prob_dtype)
        if self.rescale:
            input = input / retain_prob
        mask_shape = self.input_shape
        if any(s is None for s in mask_shape):
            mask_shape = tuple(input.shape[i] for i in range(input.ndim))
        shared = tuple(a % input.ndim for a in self.shared_axes)
        if shared:
            mask_shape = tuple(1 if a in shared else s for a, s in enumerate(mask_shape))
        u = self._random.draw(
            ptrb.uniform, 0.0, 1.0, size=mask_shape, dtype=prob_dtype, name=self.name or "dropout"
        )
        mask = pt.cast(pt.lt(u, retain_prob), input.dtype)
        if shared:
            unknown = [a for a in shared if mask.type.shape[a] != 1]
            if unknown:
                mask = pt.specify_broadcastable(mask, *unknown)
        return input * mask


dropout = DropoutLayer


def dropout_channels(incoming: Incoming, *args: Any, **kwargs: Any) -> Layer:
    """Dropout of whole channels: a :class:`DropoutLayer` sharing the mask over axes 2, 3, ...

    Examples
    --------
    >>> l = dropout_channels((None, 8, 5, 5), p=0.2)
    >>> type(l).__name__, l.p, l.shared_axes
    ('DropoutLayer', 0.2, (2, 3))
    """
    ndim = len(getattr(incoming, "output_shape", incoming))
    kwargs["shared_axes"] = tuple(range(2, ndim))
    return DropoutLayer(incoming, *args, **kwargs)


spatial_dropout = dropout_channels


def dropout_locations(incoming: Incoming, *args: Any, **kwargs: Any) -> Layer:
    """Dropout of whole positions: a :class:`DropoutLayer` sharing the mask over axis 1.

    Examples
    --------
    >>> l = dropout_locations((None, 8, 5, 5), p=0.2)
    >>> type(l).__name__, l.p, l.shared_axes
    ('DropoutLayer', 0.2, (1,))
    """
    kwargs["shared_axes"] = (1,)
    return DropoutLayer(incoming, *args, **kwargs)


class GaussianNoiseLayer(Layer):
    """Adds zero-mean Gaussian noise of standard deviation ``sigma`` in training.

    Parameters
    ----------
    incoming : Layer or tuple
    sigma : float
        Standard deviation of the noise; 0 or ``deterministic=True`` adds none.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, get_output
    >>> l_in = InputLayer((None, 4))
    >>> l = GaussianNoiseLayer(l_in, sigma=0.5)
    >>> l.output_shape, l.sigma
    ((None, 4), 0.5)
    >>> get_output(l, deterministic=True) is l_in.input_var
    True
    """

    def __init__(self, incoming: Incoming, sigma: float = 0.1, **kwargs: Any) -> None:
        super().__init__(incoming, **kwargs)
        self._random = _RandomSource(int(get_rng().randint(1, _SEED_HIGH)))
        if isinstance(sigma, numbers.Real) and sigma < 0:
            raise ValueError(f"sigma={sigma!r} must be >= 0")
        self.sigma = sigma

    _complete_state = _complete_random_state

    def get_output_for(self, input, deterministic=False, **kwargs):
        if deterministic or (isinstance(self.sigma, numbers.Real) and self.sigma == 0):
            return input
        size = tuple(input.shape[i] for i in range(input.ndim))
        sigma = (
            pt.constant(self.sigma, dtype=input.dtype)
            if isinstance(self.sigma, numbers.Real)
            else self.sigma
        )
        noise = self._random.draw(
            ptrb.normal, 0.0, sigma, size=size, dtype=input.dtype, name=self.name or "noise"
        )
        return input + noise
