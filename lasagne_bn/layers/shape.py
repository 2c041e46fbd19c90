"""Layers that change the shape of their input without computing anything.

:class:`FlattenLayer`, :class:`ReshapeLayer`, :class:`DimshuffleLayer`,
:class:`PadLayer` and :class:`SliceLayer`, as in ``lasagne.layers.shape``.

>>> from lasagne_bn.layers import InputLayer, ReshapeLayer, FlattenLayer
>>> l_in = InputLayer((None, 100, 20))
>>> ReshapeLayer(l_in, ([0], [1], 5, -1)).output_shape
(None, 100, 5, 4)
>>> FlattenLayer(l_in).output_shape
(None, 2000)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt
from pytensor.graph.basic import Variable

from lasagne_bn.layers.base import Layer
from lasagne_bn.theano_extensions import padding
from lasagne_bn.utils import int_types

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any

    from lasagne_bn._typing import Incoming

__all__ = [
    "DimshuffleLayer",
    "FlattenLayer",
    "PadLayer",
    "ReshapeLayer",
    "SliceLayer",
    "dimshuffle",
    "flatten",
    "pad",
    "reshape",
]


class FlattenLayer(Layer):
    """Flattens all trailing axes, keeping ``outdim - 1`` leading ones.

    Parameters
    ----------
    incoming : Layer or tuple
    outdim : int
        Number of output dimensions (at least 1, at most the input's).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l_in = InputLayer((None, 3, 4, 5))
    >>> FlattenLayer(l_in).output_shape, FlattenLayer(l_in, outdim=3).output_shape
    ((None, 60), (None, 3, 20))
    """

    def __init__(self, incoming: Incoming, outdim: int = 2, **kwargs: Any) -> None:
        super().__init__(incoming, **kwargs)
        if isinstance(outdim, bool) or not isinstance(outdim, int_types):
            raise TypeError(f"outdim={outdim!r} must be an int")
        if outdim < 1:
            raise ValueError(f"outdim must be > 0, was {outdim}")
        # outdim against the input's ndim is checked where the shape is used:
        # as in Lasagne, the incoming layer's shape is not read here.
        self.outdim = int(outdim)

    def get_output_shape_for(self, input_shape):
        if self.outdim > len(input_shape):
            raise ValueError(
                f"outdim={self.outdim} is more than the {len(input_shape)} input dimensions "
                f"(input_shape={tuple(input_shape)!r})"
            )
        to_flatten = input_shape[self.outdim - 1 :]
        flattened = None if any(s is None for s in to_flatten) else int(np.prod(to_flatten))
        return tuple(input_shape[: self.outdim - 1]) + (flattened,)

    def get_output_for(self, input, **kwargs):
        return pt.flatten(input, self.outdim)


flatten = FlattenLayer


class ReshapeLayer(Layer):
    """Reshapes its input to ``shape``.

    Each entry of ``shape`` is

    - a positive int: that size;
    - ``-1``: the size that keeps the total (at most one);
    - ``[i]`` (a one-element list): the size of input axis ``i``
      (``[0]`` keeps the batch size whatever it is);
    - a symbolic scalar: that size, known when the graph runs.

    Raises
    ------
    ValueError
        For an entry of another kind, or when the known sizes cannot match.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> ReshapeLayer(InputLayer((None, 6)), ([0], 2, 3)).output_shape
    (None, 2, 3)
    """

    def __init__(
        self, incoming: Incoming, shape: Sequence[int | list[int] | Variable], **kwargs: Any
    ) -> None:
        super().__init__(incoming, **kwargs)
        shape = tuple(shape)
        for s in shape:
            if isinstance(s, int_types) and not isinstance(s, bool):
                if s == 0 or s < -1:
                    raise ValueError(f"`shape` integers must be positive or -1; got {shape!r}")
            elif isinstance(s, list):
                if len(s) != 1 or not isinstance(s[0], int_types) or s[0] < 0:
                    raise ValueError(
                        "`shape` input references must be single-element lists of int >= 0; "
                        f"got {s!r} in {shape!r}"
                    )
            elif isinstance(s, Variable):
                if s.ndim != 0:
                    raise ValueError(
                        "A symbolic variable in a shape specification must be a scalar, but "
                        f"had {s.ndim} dimensions"
                    )
            else:
                raise ValueError(
                    f"`shape` must be a tuple of int and/or [int]; got {s!r} in {shape!r}"
                )
        if sum(1 for s in shape if isinstance(s, int_types) and s == -1) > 1:
            raise ValueError(f"`shape` cannot contain multiple -1; got {shape!r}")
        self.shape = shape
        # check now that the shape fits the input
        self.get_output_shape_for(self.input_shape)

    def get_output_shape_for(self, input_shape, **kwargs):
        # symbolic sizes (e.g. from ``x.shape``) are unknown here
        input_shape = tuple(None if isinstance(s, Variable) else s for s in input_shape)
        output_shape = list(self.shape)
        masked_input_shape = list(input_shape)
        masked_output_shape = list(output_shape)
        for dim, o in enumerate(output_shape):
            if isinstance(o, list):
                if o[0] >= len(input_shape):
                    raise ValueError(
                        f"specification contains [{o[0]}], but input shape has "
                        f"{len(input_shape)} dimensions only"
                    )
                output_shape[dim] = input_shape[o[0]]
                masked_output_shape[dim] = input_shape[o[0]]
                # an unknown size copied from the input cancels out of the totals
                if input_shape[o[0]] is None and masked_input_shape[o[0]] is None:
                    masked_input_shape[o[0]] = 1
                    masked_output_shape[dim] = 1
        for dim, o in enumerate(output_shape):
            if isinstance(o, Variable):
                output_shape[dim] = None
                masked_output_shape[dim] = None
        input_size = (
            None
            if any(x is None for x in masked_input_shape)
            else int(np.prod(masked_input_shape))
        )
        output_size = (
            None
            if any(x is None for x in masked_output_shape)
            else int(np.prod(masked_output_shape))
        )
        if -1 in [o for o in output_shape if not isinstance(o, Variable)]:
            dim = next(
                i for i, o in enumerate(output_shape) if not isinstance(o, Variable) and o == -1
            )
            if input_size is None or output_size is None:
                output_shape[dim] = None
                output_size = None
            else:
                output_size *= -1
                output_shape[dim] = input_size // output_size
                output_size *= output_shape[dim]
        if input_size is not None and output_size is not None and input_size != output_size:
            raise ValueError(
                f"{tuple(input_shape)} cannot be reshaped to specification {self.shape}. "
                "The total size mismatches."
            )
        return tuple(output_shape)

    def get_output_for(self, input, **kwargs):
        output_shape = list(self.shape)
        for dim, o in enumerate(output_shape):
            if isinstance(o, list):
                output_shape[dim] = input.shape[o[0]]
        return input.reshape(tuple(output_shape))


reshape = ReshapeLayer


class DimshuffleLayer(Layer):
    """Permutes axes and inserts broadcastable ones, like ``tensor.dimshuffle``.

    Parameters
    ----------
    incoming : Layer or tuple
    pattern : tuple of int or 'x'
        Input axis for each output axis; ``'x'`` inserts a size-1 axis.
        Input axes left out must have size 1 (or unknown size).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> DimshuffleLayer(InputLayer((2, 3, 1)), (1, 'x', 0)).output_shape
    (3, 1, 2)
    """

    def __init__(self, incoming: Incoming, pattern: Sequence[int | str], **kwargs: Any) -> None:
        super().__init__(incoming, **kwargs)
        used_dims = set()
        for p in pattern:
            if isinstance(p, int_types) and not isinstance(p, bool):
                if p in used_dims:
                    raise ValueError(f"pattern contains dimension {p} more than once")
                used_dims.add(p)
            elif p == "x":
                pass
            else:
                raise ValueError(
                    f"pattern should only contain dimension indices or 'x', not {p!r}"
                )
        self.pattern = tuple(pattern)
        self.get_output_shape_for(self.input_shape)

    def get_output_shape_for(self, input_shape):
        output_shape = []
        dims_used = [False] * len(input_shape)
        for p in self.pattern:
            if p == "x":
                output_shape.append(1)
                continue
            if p < 0 or p >= len(input_shape):
                raise ValueError(
                    f"pattern contains {p}, but input shape has {len(input_shape)} dimensions only"
                )
            output_shape.append(input_shape[p])
            dims_used[p] = True
        for i, (size, used) in enumerate(zip(input_shape, dims_used, strict=True)):
            if not used and size != 1 and size is not None:
                raise ValueError(
                    f"pattern attempted to collapse dimension {i} of size {size}; dimensions "
                    "with size != 1/None are not broadcastable and cannot be collapsed"
                )
        return tuple(output_shape)

    def get_output_for(self, input, **kwargs):
        # Input axes left out must be broadcastable for dimshuffle to drop them.
        dropped = [i for i in range(input.ndim) if i not in self.pattern]
        unknown = [i for i in dropped if input.type.shape[i] != 1]
        if unknown:
            input = pt.specify_broadcastable(input, *unknown)
        return input.dimshuffle(*self.pattern)


dimshuffle = DimshuffleLayer


class PadLayer(Layer):
    """Pads the axes after the first ``batch_ndim`` ones with the constant ``val``.

    Parameters
    ----------
    incoming : Layer or tuple
    width : int, sequence of int, or sequence of (int, int)
        An int pads every such axis by that much on both sides; a sequence
        gives one width per axis (from axis ``batch_ndim`` on), as an int
        (both sides) or a ``(before, after)`` pair.
    val : float or scalar tensor
        The padding value.
    batch_ndim : int
        Number of leading axes left alone (2 for ``(batch, channels, ...)``).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> PadLayer(InputLayer((None, 3, 10, 10)), width=[(1, 2), 3]).output_shape
    (None, 3, 13, 16)
    """

    def __init__(
        self,
        incoming: Incoming,
        width: int | Sequence[int | tuple[int, int]],
        val: float = 0,
        batch_ndim: int = 2,
        **kwargs: Any,
    ) -> None:
        super().__init__(incoming, **kwargs)
        if isinstance(batch_ndim, bool) or not isinstance(batch_ndim, int_types):
            raise TypeError(f"batch_ndim={batch_ndim!r} must be an int; layer name={self.name!r}")
        # the width's form is checked now; against the input's ndim (which
        # Lasagne did not read here) where the shape is used
        padding.pad_widths(width)
        self.width = width
        self.val = val
        self.batch_ndim = batch_ndim

    def get_output_shape_for(self, input_shape):
        n_axes = len(input_shape) - self.batch_ndim
        if n_axes < 0:
            raise ValueError(
                f"batch_ndim={self.batch_ndim} is more than the input's {len(input_shape)} "
                f"dimensions; layer name={self.name!r}"
            )
        pairs = padding._axis_pairs(self.width, n_axes)
        shape = list(input_shape)
        for k, (lo, hi) in enumerate(pairs):
            if shape[k + self.batch_ndim] is not None:
                shape[k + self.batch_ndim] += lo + hi
        return tuple(shape)

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        static = self.input_shape if _is_shape(self.input_shape) else None
        return padding.pad(input, self.width, self.val, self.batch_ndim, static_shape=static)


pad = PadLayer


def _is_shape(shape) -> bool:
    """Whether ``shape`` is a real shape tuple (and not, say, a mock's attribute)."""
    return isinstance(shape, tuple | list) and all(
        s is None or isinstance(s, int_types) for s in shape
    )


class SliceLayer(Layer):
    """Takes a slice (or one index) of its input along one axis.

    Parameters
    ----------
    incoming : Layer or tuple
    indices : int or slice
        An int drops the axis; a slice (or an array of indices) keeps it.
    axis : int
        The axis to slice (negative counts from the end).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> SliceLayer(InputLayer((None, 10)), slice(2, 5), axis=1).output_shape
    (None, 3)
    """

    def __init__(
        self, incoming: Incoming, indices: int | slice, axis: int = -1, **kwargs: Any
    ) -> None:
        super().__init__(incoming, **kwargs)
        self.slice = indices
        self.axis = axis

    def get_output_shape_for(self, input_shape):
        output_shape = list(input_shape)
        ndim = len(output_shape)
        if not -ndim <= self.axis < ndim:
            raise ValueError(f"axis={self.axis} is out of range for a {ndim}-dimensional input")
        if isinstance(self.slice, int_types):
            del output_shape[self.axis]
        elif input_shape[self.axis] is None:
            output_shape[self.axis] = None
        elif isinstance(self.slice, slice):
            output_shape[self.axis] = len(range(*self.slice.indices(input_shape[self.axis])))
        else:
            # an index array (advanced indexing) keeps the axis, one entry per index
            output_shape[self.axis] = len(np.atleast_1d(self.slice))
        return tuple(output_shape)

    def get_output_for(self, input, **kwargs):
        axis = self.axis
        if axis < 0:
            axis += input.ndim
        return input[(slice(None),) * axis + (self.slice,)]
