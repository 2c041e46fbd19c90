"""Layers that merge several inputs: concatenation and elementwise merges.

>>> from lasagne_bn.layers import InputLayer, ConcatLayer, ElemwiseSumLayer
>>> a, b = InputLayer((None, 3)), InputLayer((None, 5))
>>> ConcatLayer([a, b]).output_shape
(None, 8)
>>> ElemwiseSumLayer([a, a], coeffs=[1, -1]).output_shape
(None, 3)
"""

from __future__ import annotations

import numbers
from typing import TYPE_CHECKING

import numpy as np
import pytensor.tensor as pt

from lasagne_bn.layers.base import MergeLayer
from lasagne_bn.utils import int_types

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from typing import Any

    from pytensor.graph.basic import Variable

    from lasagne_bn._typing import Incoming, Shape

__all__ = [
    "ConcatLayer",
    "ElemwiseMergeLayer",
    "ElemwiseSumLayer",
    "autocrop",
    "autocrop_array_shapes",
    "concat",
]

CROP_MODES = ("lower", "center", "upper")


def _check_cropping(cropping, ndim: int):
    if cropping is None:
        return None
    cropping = list(cropping)
    for cr in cropping:
        if cr is not None and cr not in CROP_MODES:
            raise ValueError(
                f"Unknown crop mode {cr!r}: expected None, 'lower', 'center' or 'upper'"
            )
    return cropping + [None] * (ndim - len(cropping))


def _first_known_sizes(input_shapes) -> tuple:
    """Per axis, the first known size among the shapes (which must have one ndim)."""
    ndims = {len(shape) for shape in input_shapes}
    if len(ndims) > 1:
        raise ValueError(
            "Mismatch: inputs have different numbers of dimensions; got "
            f"{[tuple(s) for s in input_shapes]}"
        )
    return tuple(
        next((s for s in sizes if s is not None), None)
        for sizes in zip(*input_shapes, strict=True)
    )


def autocrop(
    inputs: Sequence[Variable],
    cropping: Sequence[str | None] | None,
    static_shapes: Sequence[Shape] | None = None,
) -> list[Variable]:
    """Crop input expressions to a common size on the axes where ``cropping`` says so.

    Parameters
    ----------
    inputs : list of tensors
        All of the same ndim.
    cropping : None or list of None / 'lower' / 'center' / 'upper'
        Per axis: ``None`` leaves it; ``'lower'`` keeps the first, ``'upper'``
        the last, ``'center'`` the middle ``min(sizes)`` entries.
    static_shapes : list of tuples, optional
        Sizes known in advance (``None`` for unknown), e.g. a merge layer's
        ``input_shapes``; the inputs' static shapes are used as well.  Where
        all sizes on a cropped axis are known, the slices are constant,
        which JAX needs (it cannot slice with traced bounds).

    Examples
    --------
    >>> import numpy as np, pytensor.tensor as pt
    >>> a, b = pt.as_tensor(np.zeros((2, 5))), pt.as_tensor(np.zeros((2, 3)))
    >>> [x.eval().shape for x in autocrop([a, b], [None, 'center'])]
    [(2, 3), (2, 3)]
    """
    if cropping is None:
        return inputs
    ndim = inputs[0].ndim
    if not all(x.ndim == ndim for x in inputs):
        raise ValueError(
            f"Not all inputs are of the same dimensionality. Got {len(inputs)} inputs of "
            f"dimensionalities {[x.ndim for x in inputs]}."
        )
    cropping = _check_cropping(cropping, ndim)
    if static_shapes is None:
        static_shapes = [(None,) * ndim] * len(inputs)
    shapes = []
    for x, known in zip(inputs, static_shapes, strict=True):
        shapes.append(
            [
                k if k is not None else (t if t is not None else x.shape[d])
                for d, (k, t) in enumerate(zip(known, x.type.shape, strict=True))
            ]
        )
    slices_by_input = [[] for _ in inputs]
    for dim, cr in enumerate(cropping):
        if cr is None:
            for slices in slices_by_input:
                slices.append(slice(None))
            continue
        sizes = [shape[dim] for shape in shapes]
        if all(isinstance(s, int) for s in sizes):
            size = min(sizes)
        else:
            size = pt.min(pt.stack([pt.as_tensor_variable(s) for s in sizes]))
        if cr == "lower":
            for slices in slices_by_input:
                slices.append(slice(None, size))
        elif cr == "upper":
            for shape, slices in zip(shapes, slices_by_input, strict=True):
                # an explicit start (not -size) so a constant size stays constant
                slices.append(slice(shape[dim] - size, None))
        else:
            for shape, slices in zip(shapes, slices_by_input, strict=True):
                offset = (shape[dim] - size) // 2
                slices.append(slice(offset, offset + size))
    return [x[tuple(slices)] for x, slices in zip(inputs, slices_by_input, strict=True)]


def autocrop_array_shapes(
    input_shapes: Sequence[Shape], cropping: Sequence[str | None] | None
) -> list[Shape]:
    """The shapes :func:`autocrop` would give, for shape tuples (None = unknown).

    Examples
    --------
    >>> autocrop_array_shapes([(2, 5), (2, 3)], [None, 'lower'])
    [(2, 3), (2, 3)]
    """
    if cropping is None:
        return input_shapes
    ndim = len(input_shapes[0])
    if not all(len(sh) == ndim for sh in input_shapes):
        raise ValueError(
            f"Not all inputs are of the same dimensionality. Got {len(input_shapes)} inputs of "
            f"dimensionalities {[len(sh) for sh in input_shapes]}."
        )
    cropping = _check_cropping(cropping, ndim)
    result = []
    for sizes, cr in zip(zip(*input_shapes, strict=True), cropping, strict=True):
        if cr is None:
            result.append(sizes)
        else:
            smallest = None if any(s is None for s in sizes) else min(sizes)
            result.append([smallest] * len(sizes))
    return [tuple(sh) for sh in zip(*result, strict=True)]


def _static_shapes(layer, inputs):
    """``layer.input_shapes`` where they are real shapes of ``inputs``' ndims, else None."""
    shapes = layer.input_shapes
    try:
        ok = len(shapes) == len(inputs) and all(
            isinstance(shape, tuple | list)
            and len(shape) == x.ndim
            and all(s is None or isinstance(s, int_types) for s in shape)
            for shape, x in zip(shapes, inputs, strict=True)
        )
    except TypeError:
        ok = False
    return [tuple(shape) for shape in shapes] if ok else None


def _fix_axis_sizes(inputs, static_shapes, cropping, axis: int):
    """Give the inputs their declared sizes along ``axis`` as static shapes.

    The gradient of a concatenation splits it by these sizes; JAX can only
    split by static ones.  Only done when every input's size is declared.
    """
    sizes = [shape[axis] for shape in static_shapes]
    if any(s is None for s in sizes) or (cropping is not None and cropping[axis] is not None):
        return inputs
    fixed = []
    for x, size in zip(inputs, sizes, strict=True):
        if x.type.shape[axis] is None:
            x = pt.specify_shape(
                x, tuple(size if d == axis % x.ndim else None for d in range(x.ndim))
            )
        fixed.append(x)
    return fixed


class ConcatLayer(MergeLayer):
    """Concatenates its inputs along ``axis``.

    Parameters
    ----------
    incomings : list of Layer or tuple
    axis : int
        The concatenation axis (negative counts from the end).
    cropping : None or list
        Crop the other axes to a common size first (see :func:`autocrop`);
        the entry for ``axis`` is ignored.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> a, b = InputLayer((None, 2, 5)), InputLayer((None, 3, 4))
    >>> ConcatLayer([a, b], cropping=[None, None, 'lower']).output_shape
    (None, 5, 4)
    >>> ConcatLayer([a, InputLayer((None, 2, 1))], axis=-1).output_shape
    (None, 2, 6)
    """

    def __init__(
        self,
        incomings: Sequence[Incoming],
        axis: int = 1,
        cropping: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(incomings, **kwargs)
        if isinstance(axis, bool) or not isinstance(axis, int_types):
            raise TypeError(f"axis={axis!r} must be an int")
        self.axis = int(axis)
        # As in Lasagne the inputs' shapes are not read here (they may be
        # unknown yet); the axis is checked against them where they are used.
        if cropping is not None:
            cropping = list(cropping)
            if -len(cropping) <= self.axis < len(cropping):
                cropping[self.axis] = None
        self.cropping = cropping

    def _cropping_for(self, ndim: int):
        """``cropping`` for ``ndim``-d inputs, never cropping the concatenation axis."""
        if not -ndim <= self.axis < ndim:
            raise ValueError(f"axis={self.axis} is out of range for {ndim}-dimensional inputs")
        if self.cropping is None:
            return None
        cropping = _check_cropping(self.cropping, ndim)
        cropping[self.axis % ndim] = None
        return cropping

    def get_output_shape_for(self, input_shapes):
        input_shapes = autocrop_array_shapes(
            input_shapes, self._cropping_for(len(input_shapes[0]))
        )
        output_shape = list(_first_known_sizes(input_shapes))
        axis = self.axis if self.axis >= 0 else len(output_shape) + self.axis

        def match(shape1, shape2):
            return len(shape1) == len(shape2) and all(
                i == axis or s1 is None or s2 is None or s1 == s2
                for i, (s1, s2) in enumerate(zip(shape1, shape2, strict=True))
            )

        if not all(match(shape, output_shape) for shape in input_shapes):
            raise ValueError(
                "Mismatch: input shapes must be the same except in the concatenation axis; "
                f"got {[tuple(s) for s in input_shapes]} with axis={self.axis}"
            )
        sizes = [shape[self.axis] for shape in input_shapes]
        output_shape[self.axis] = None if any(s is None for s in sizes) else sum(sizes)
        return tuple(output_shape)

    def get_output_for(self, inputs, **kwargs):
        inputs = [pt.as_tensor_variable(x) for x in inputs]
        cropping = self._cropping_for(inputs[0].ndim)
        static = _static_shapes(self, inputs)
        inputs = autocrop(inputs, cropping, static)
        if static is not None:
            inputs = _fix_axis_sizes(inputs, static, cropping, self.axis)
        return pt.concatenate(inputs, axis=self.axis)


concat = ConcatLayer


class ElemwiseMergeLayer(MergeLayer):
    """Merges its inputs with a binary elementwise function, left to right.

    Parameters
    ----------
    incomings : list of Layer or tuple
    merge_function : callable
        ``f(a, b)``, e.g. ``pytensor.tensor.maximum``.
    cropping : None or list
        See :func:`autocrop`.

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> from lasagne_bn.layers import InputLayer
    >>> l = ElemwiseMergeLayer([InputLayer((None, 4)), InputLayer((None, 4))], pt.maximum)
    >>> l.output_shape, l.merge_function is pt.maximum
    ((None, 4), True)
    """

    def __init__(
        self,
        incomings: Sequence[Incoming],
        merge_function: Callable[[Variable, Variable], Variable],
        cropping: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(incomings, **kwargs)
        if not callable(merge_function):
            raise TypeError(f"merge_function={merge_function!r} must be callable")
        self.merge_function = merge_function
        self.cropping = cropping

    def get_output_shape_for(self, input_shapes):
        input_shapes = autocrop_array_shapes(input_shapes, self.cropping)
        output_shape = _first_known_sizes(input_shapes)

        def match(shape1, shape2):
            return len(shape1) == len(shape2) and all(
                s1 is None or s2 is None or s1 == s2 for s1, s2 in zip(shape1, shape2, strict=True)
            )

        if not all(match(shape, output_shape) for shape in input_shapes):
            raise ValueError(
                "Mismatch: not all input shapes are the same; got "
                f"{[tuple(s) for s in input_shapes]}"
            )
        return output_shape

    def get_output_for(self, inputs, **kwargs):
        inputs = [pt.as_tensor_variable(x) for x in inputs]
        inputs = autocrop(inputs, self.cropping, _static_shapes(self, inputs))
        output = None
        for x in inputs:
            output = x if output is None else self.merge_function(output, x)
        return output


class ElemwiseSumLayer(ElemwiseMergeLayer):
    """Sums its inputs, each times a coefficient.

    Parameters
    ----------
    incomings : list of Layer or tuple
    coeffs : number or list
        One coefficient for all inputs, or one per input.  Numbers are
        cast to the input's dtype.
    cropping : None or list
        See :func:`autocrop`.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = ElemwiseSumLayer([InputLayer((None, 4)), InputLayer((None, 4))], coeffs=[1, -1])
    >>> l.output_shape, l.coeffs
    ((None, 4), [1, -1])
    """

    def __init__(
        self,
        incomings: Sequence[Incoming],
        coeffs: float | Sequence[float] = 1,
        cropping: Sequence[str | None] | None = None,
        **kwargs: Any,
    ) -> None:
        incomings = list(incomings)
        super().__init__(incomings, pt.add, cropping=cropping, **kwargs)
        if isinstance(coeffs, list | tuple):
            if len(coeffs) != len(incomings):
                raise ValueError(
                    f"Mismatch: got {len(coeffs)} coeffs for {len(incomings)} incomings"
                )
            coeffs = list(coeffs)
        else:
            coeffs = [coeffs] * len(incomings)
        self.coeffs = coeffs

    def get_output_for(self, inputs, **kwargs):
        scaled = []
        for coeff, x in zip(self.coeffs, inputs, strict=True):
            if isinstance(coeff, numbers.Number | np.number):
                if coeff == 1:
                    scaled.append(x)
                    continue
                coeff = pt.constant(coeff, dtype=x.dtype)
            scaled.append(x * coeff)
        return super().get_output_for(scaled, **kwargs)
