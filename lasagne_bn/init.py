"""Parameter initializers, with the names, arguments and defaults of ``lasagne.init``.

An initializer is a callable that takes a shape and returns a NumPy array
of dtype ``floatX``; layers call it through
:func:`lasagne_bn.utils.create_param`.  Random ones draw from
:func:`lasagne_bn.random.get_rng`.

>>> import numpy as np
>>> from lasagne_bn.init import Constant, GlorotUniform
>>> Constant(0.5)((2,)).tolist()
[0.5, 0.5]
>>> GlorotUniform()((100, 50)).shape
(100, 50)
"""

from __future__ import annotations

import numpy as np

from lasagne_bn.random import get_rng
from lasagne_bn.utils import floatX

__all__ = [
    "Constant",
    "Glorot",
    "GlorotNormal",
    "GlorotUniform",
    "He",
    "HeNormal",
    "HeUniform",
    "Initializer",
    "Normal",
    "Orthogonal",
    "Sparse",
    "Uniform",
]


def _relu_gain(gain):
    # Lasagne accepts the string 'relu' for the gain sqrt(2).
    return np.sqrt(2) if gain == "relu" else gain


class Initializer:
    """Base class: subclasses implement :meth:`sample`.

    Examples
    --------
    >>> class Ones(Initializer):
    ...     def sample(self, shape):
    ...         return np.ones(shape)
    >>> Ones()((2,)).tolist()
    [1.0, 1.0]
    """

    def __call__(self, shape) -> np.ndarray:
        """Same as :meth:`sample`."""
        return self.sample(shape)

    def sample(self, shape) -> np.ndarray:
        """An array of the given shape with initial values."""
        raise NotImplementedError()


class Normal(Initializer):
    """Samples from a normal distribution ``N(mean, std**2)``.

    Examples
    --------
    >>> Normal(std=0.0, mean=2.0)((2,)).tolist()
    [2.0, 2.0]
    """

    def __init__(self, std: float = 0.01, mean: float = 0.0) -> None:
        self.std = std
        self.mean = mean

    def sample(self, shape):
        return floatX(get_rng().normal(self.mean, self.std, size=shape))


class Uniform(Initializer):
    """Samples uniformly from ``range``.

    Parameters
    ----------
    range : float or (float, float)
        ``(low, high)``, or a number ``r`` meaning ``(-r, r)``.
    std : float, optional
        If given, the range is chosen to give this standard deviation
        around ``mean`` (``range`` is then ignored).
    mean : float
        Centre of the range when ``std`` is given.

    Examples
    --------
    >>> v = Uniform((2.0, 3.0))((100,))
    >>> bool(v.min() >= 2.0 and v.max() < 3.0)
    True
    """

    def __init__(
        self,
        range: float | tuple[float, float] = 0.01,
        std: float | None = None,
        mean: float = 0.0,
    ) -> None:
        if std is not None:
            a = mean - np.sqrt(3) * std
            b = mean + np.sqrt(3) * std
        else:
            try:
                a, b = range
            except TypeError:
                a, b = -range, range
        self.range = (a, b)

    def sample(self, shape):
        return floatX(get_rng().uniform(low=self.range[0], high=self.range[1], size=shape))


class Glorot(Initializer):
    """Glorot (Xavier) initialization with a given distribution.

    The standard deviation is ``gain * sqrt(2 / ((fan_in + fan_out) *
    receptive_field_size))``, where fan-in and fan-out are the first two
    sizes of the shape (for ``c01b``, the first and the last) and the
    receptive field is the product of the others.

    Parameters
    ----------
    initializer : class
        :class:`Normal` or :class:`Uniform` (called with ``std=``).
    gain : float or 'relu'
        Scale factor; ``'relu'`` means ``sqrt(2)``.
    c01b : bool
        Weights in cuda-convnet's ``c01b`` layout (4-d only).

    Examples
    --------
    >>> init = Glorot(Normal, gain='relu')
    >>> init.initializer is Normal, round(float(init.gain), 4)
    (True, 1.4142)
    >>> w = init((300, 100))
    >>> w.shape, bool(abs(w.std() - np.sqrt(2) * np.sqrt(2 / 400)) < 0.005)
    ((300, 100), True)
    """

    def __init__(
        self, initializer: type[Initializer], gain: float | str = 1.0, c01b: bool = False
    ) -> None:
        self.initializer = initializer
        self.gain = _relu_gain(gain)
        self.c01b = c01b

    def sample(self, shape):
        if self.c01b:
            if len(shape) != 4:
                raise RuntimeError("If c01b is True, only shapes of length 4 are accepted")
            n1, n2 = shape[0], shape[3]
            receptive_field_size = shape[1] * shape[2]
        else:
            if len(shape) < 2:
                raise RuntimeError("This initializer only works with shapes of length >= 2")
            n1, n2 = shape[:2]
            receptive_field_size = np.prod(shape[2:])
        std = self.gain * np.sqrt(2.0 / ((n1 + n2) * receptive_field_size))
        return self.initializer(std=std).sample(shape)


class GlorotNormal(Glorot):
    """:class:`Glorot` with a normal distribution.

    Examples
    --------
    >>> init = GlorotNormal()
    >>> init.initializer is Normal, init((4, 3)).shape
    (True, (4, 3))
    """

    def __init__(self, gain: float | str = 1.0, c01b: bool = False) -> None:
        super().__init__(Normal, gain, c01b)


class GlorotUniform(Glorot):
    """:class:`Glorot` with a uniform distribution (the default for weights).

    Examples
    --------
    >>> v = GlorotUniform()((20, 30))
    >>> v.shape, bool(np.abs(v).max() <= np.sqrt(6 / 50))
    ((20, 30), True)
    """

    def __init__(self, gain: float | str = 1.0, c01b: bool = False) -> None:
        super().__init__(Uniform, gain, c01b)


class He(Initializer):
    """He initialization: standard deviation ``gain * sqrt(1 / fan_in)``.

    ``fan_in`` is ``shape[0]`` for 2-d weights, the product of all but the
    first size otherwise (for ``c01b``, of the first three).

    Examples
    --------
    >>> w = He(Normal, gain='relu')((1000, 50))
    >>> w.shape, bool(abs(w.std() - np.sqrt(2 / 1000)) < 1e-3)
    ((1000, 50), True)
    """

    def __init__(
        self, initializer: type[Initializer], gain: float | str = 1.0, c01b: bool = False
    ) -> None:
        self.initializer = initializer
        self.gain = _relu_gain(gain)
        self.c01b = c01b

    def sample(self, shape):
        if self.c01b:
            if len(shape) != 4:
                raise RuntimeError("If c01b is True, only shapes of length 4 are accepted")
            fan_in = np.prod(shape[:3])
        elif len(shape) == 2:
            fan_in = shape[0]
        elif len(shape) > 2:
            fan_in = np.prod(shape[1:])
        else:
            raise RuntimeError("This initializer only works with shapes of length >= 2")
        std = self.gain * np.sqrt(1.0 / fan_in)
        return self.initializer(std=std).sample(shape)


class HeNormal(He):
    """:class:`He` with a normal distribution.

    Examples
    --------
    >>> init = HeNormal()
    >>> init.initializer is Normal, init((4, 3)).shape
    (True, (4, 3))
    """

    def __init__(self, gain: float | str = 1.0, c01b: bool = False) -> None:
        super().__init__(Normal, gain, c01b)


class HeUniform(He):
    """:class:`He` with a uniform distribution.

    Examples
    --------
    >>> v = HeUniform()((100, 10))
    >>> v.shape, bool(np.abs(v).max() <= np.sqrt(3 / 100))
    ((100, 10), True)
    """

    def __init__(self, gain: float | str = 1.0, c01b: bool = False) -> None:
        super().__init__(Uniform, gain, c01b)


class Constant(Initializer):
    """Fills with a constant value.

    Examples
    --------
    >>> Constant()((2,)).tolist()
    [0.0, 0.0]
    """

    def __init__(self, val: float = 0.0) -> None:
        self.val = val

    def sample(self, shape):
        return floatX(np.ones(shape) * self.val)


class Sparse(Initializer):
    """2-d weights where each column has ``int(sparsity * rows)`` nonzero entries.

    The nonzero entries are drawn from ``N(0, std**2)``.

    Examples
    --------
    >>> w = Sparse(sparsity=0.5)((4, 3))
    >>> w.shape, (w != 0).sum(axis=0).tolist()
    ((4, 3), [2, 2, 2])
    """

    def __init__(self, sparsity: float = 0.1, std: float = 0.01) -> None:
        self.sparsity = sparsity
        self.std = std

    def sample(self, shape):
        if len(shape) != 2:
            raise RuntimeError("sparse initializer only works with shapes of length 2")
        w = floatX(np.zeros(shape))
        n_inputs, n_outputs = shape
        size = int(self.sparsity * n_inputs)
        for k in range(n_outputs):
            indices = np.arange(n_inputs)
            get_rng().shuffle(indices)
            w[indices[:size], k] = floatX(get_rng().normal(0.0, self.std, size=size))
        return w


class Orthogonal(Initializer):
    """A (semi-)orthogonal matrix, reshaped to ``shape``, times ``gain``.

    The matrix has ``shape[0]`` rows and ``prod(shape[1:])`` columns; it
    comes from the SVD of a standard normal matrix.

    Examples
    --------
    >>> q = Orthogonal()((3, 3))
    >>> bool(np.allclose(q @ q.T, np.eye(3), atol=1e-6))
    True
    """

    def __init__(self, gain: float | str = 1.0) -> None:
        self.gain = _relu_gain(gain)

    def sample(self, shape):
        if len(shape) < 2:
            raise RuntimeError("Only shapes of length 2 or more are supported.")
        flat_shape = (shape[0], int(np.prod(shape[1:])))
        a = get_rng().normal(0.0, 1.0, flat_shape)
        u, _, v = np.linalg.svd(a, full_matrices=False)
        q = u if u.shape == flat_shape else v
        return floatX(self.gain * q.reshape(shape))
