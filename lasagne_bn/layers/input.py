"""The network input: :class:`InputLayer`.

>>> from lasagne_bn.layers import InputLayer
>>> l = InputLayer((None, 3, 32, 32), name='img')
>>> l.input_var.name, l.input_var.type.shape
('img.input', (None, None, None, None))
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

import pytensor
from pytensor.graph.basic import Variable
from pytensor.tensor.type import TensorType

from lasagne_bn.layers.base import Layer, _check_shape

if TYPE_CHECKING:
    from typing import Any

    from lasagne_bn._typing import Shape

__all__ = ["InputLayer"]


class InputLayer(Layer):
    """The input of a network: holds a symbolic variable and its expected shape.

    Parameters
    ----------
    shape : tuple of int or None
        Expected input shape; ``None`` for sizes that may vary (usually the
        batch size).
    input_var : tensor, optional
        The variable that represents the input.  By default a new tensor of
        dtype ``floatX`` with ``len(shape)`` dimensions is made; as in
        Lasagne, sizes of 1 are made broadcastable and the others are left
        unknown, so the same graph accepts other sizes.
    name : str, optional
        Name of the layer (the variable is then called ``"<name>.input"``).

    Examples
    --------
    >>> import pytensor.tensor as pt
    >>> InputLayer((None, 4), input_var=pt.matrix('x')).input_var.name
    'x'
    """

    def __init__(
        self,
        shape: Shape,
        input_var: Variable | None = None,
        name: str | None = None,
        **kwargs: Any,
    ) -> None:
        self.shape = _check_shape(shape, "shape", name)
        ndim = len(self.shape)
        if input_var is None:
            var_type = TensorType(
                pytensor.config.floatX, shape=tuple(1 if s == 1 else None for s in self.shape)
            )
            input_var = var_type(f"{name}.input" if name is not None else "input")
        else:
            if not isinstance(input_var, Variable):
                raise TypeError(
                    f"input_var={input_var!r} ({type(input_var).__name__}) must be a "
                    "PyTensor variable"
                )
            if input_var.ndim != ndim:
                raise ValueError(f"shape has {ndim} dimensions, but variable has {input_var.ndim}")
            static = input_var.type.shape
            for axis, (s, v) in enumerate(zip(self.shape, static, strict=True)):
                if s is not None and v is not None and s != v:
                    raise ValueError(
                        f"shape={self.shape} disagrees with input_var's static shape {static} "
                        f"on axis {axis}"
                    )
        self.input_var = input_var
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []

    @Layer.output_shape.getter
    def output_shape(self):
        return self.shape
