"""Word embeddings: :class:`EmbeddingLayer` looks integer ids up in a learned table.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> from lasagne_bn.layers import InputLayer, EmbeddingLayer, get_output
>>> ids = pt.imatrix()
>>> l = EmbeddingLayer(InputLayer((None, 2)), input_size=3, output_size=2,
...                    W=np.arange(6.0).reshape(3, 2))
>>> l.output_shape
(None, 2, 2)
>>> pytensor.function([ids], get_output(l, ids))(np.array([[2, 0]], dtype='int32')).tolist()
[[[4.0, 5.0], [0.0, 1.0]]]
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytensor.tensor as pt

from lasagne_bn import init
from lasagne_bn.layers.base import Layer

if TYPE_CHECKING:
    from typing import Any

    from lasagne_bn._typing import Incoming, ParamSpec

__all__ = ["EmbeddingLayer"]


class EmbeddingLayer(Layer):
    """Maps each integer id in the input to a row of the table ``W``.

    The output has the input's shape plus one trailing axis of size
    ``output_size``: ``output[..., :] = W[input[...], :]``.

    Parameters
    ----------
    incoming : Layer or tuple
        The layer (or shape) giving integer ids in ``[0, input_size)``.
    input_size : int
        Number of rows of ``W`` (the vocabulary size).
    output_size : int
        Length of each embedding vector.
    W : initializer, array or expression
        The ``(input_size, output_size)`` table, ``Normal()`` by default.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer
    >>> l = EmbeddingLayer(InputLayer((None, 7)), input_size=100, output_size=16)
    >>> l.output_shape, l.W.get_value().shape
    ((None, 7, 16), (100, 16))
    """

    def __init__(
        self,
        incoming: Incoming,
        input_size: int,
        output_size: int,
        W: ParamSpec = init.Normal(),
        **kwargs: Any,
    ) -> None:  # noqa: B008
        super().__init__(incoming, **kwargs)
        self.input_size = input_size
        self.output_size = output_size
        self.W = self.add_param(W, (input_size, output_size), name="W")

    def get_output_shape_for(self, input_shape):
        return tuple(input_shape) + (self.output_size,)

    def get_output_for(self, input, **kwargs):
        input = pt.as_tensor_variable(input)
        if not input.dtype.startswith(("int", "uint")):
            raise TypeError(
                f"EmbeddingLayer input has dtype {input.dtype}: expected integer ids in "
                f"[0, {self.input_size}); layer name={self.name!r}"
            )
        if input.ndim < 2:
            return self.W[input]
        # W[input] for 2-d or more ids, written as a lookup of the flat ids:
        # PyTensor rewrites the direct form into a reshape whose shape JAX
        # cannot read (a Join), and the jax mode fails to compile.
        rows = self.W[input.flatten()]
        shape = [input.shape[i] for i in range(input.ndim)] + [self.W.shape[-1]]
        return rows.reshape(shape, ndim=input.ndim + 1)
