"""The NumPy random generator that parameter initializers and layer seeds draw from.

Same interface as ``lasagne.random``: :func:`get_rng` and :func:`set_rng`.
Seeding it (``set_rng(np.random.RandomState(42))``) makes initial weights
and dropout streams reproducible.

>>> import numpy as np
>>> from lasagne_bn.random import get_rng, set_rng
>>> old = get_rng()
>>> set_rng(np.random.RandomState(0))
>>> int(get_rng().randint(10))
5
>>> set_rng(old)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from types import ModuleType

__all__ = ["get_rng", "set_rng"]

_rng = np.random


def get_rng() -> np.random.RandomState | ModuleType:
    """The current random generator (``numpy.random`` unless :func:`set_rng` was called).

    Examples
    --------
    >>> import numpy as np
    >>> old = get_rng()
    >>> set_rng(np.random.RandomState(1))
    >>> isinstance(get_rng(), np.random.RandomState)
    True
    >>> set_rng(old)
    """
    return _rng


def set_rng(new_rng: np.random.RandomState | ModuleType) -> None:
    """Replace the random generator used by initializers and layers.

    Parameters
    ----------
    new_rng : numpy.random.RandomState or the numpy.random module
        Must offer ``normal``, ``uniform``, ``randint`` and ``shuffle``.

    Examples
    --------
    >>> import numpy as np
    >>> from lasagne_bn.init import Normal
    >>> old = get_rng()
    >>> set_rng(np.random.RandomState(3))
    >>> a = Normal()((2,))
    >>> set_rng(np.random.RandomState(3))
    >>> bool((Normal()((2,)) == a).all())  # the same seed, the same initial values
    True
    >>> set_rng(old)
    """
    global _rng
    _rng = new_rng
