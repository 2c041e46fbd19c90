"""Type aliases of the public signatures.

Annotations only: the package's modules use ``from __future__ import annotations``,
so these strings are read by type checkers and documentation tools, never evaluated
when a layer is built.

>>> from lasagne_bn._typing import Incoming
>>> Incoming
'Layer | tuple[int | None, ...]'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeAlias

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np
    from pytensor.graph.basic import Variable

    from lasagne_bn.layers.base import Layer

#: A shape: sizes, ``None`` for a size not known in advance (the batch size, say).
Shape: TypeAlias = "tuple[int | None, ...]"
#: What a layer is built on: the layer below it, or the shape of an input.
Incoming: TypeAlias = "Layer | tuple[int | None, ...]"
#: A parameter's initial value: an initializer, an array, a shared variable or
#: expression, a callable ``shape -> array``, or None (no such parameter).
ParamSpec: TypeAlias = "Callable[..., np.ndarray] | np.ndarray | Variable | float | None"
#: An elementwise activation (None: the identity).
Nonlinearity: TypeAlias = "Callable[[Variable], Variable] | None"
#: What PyTensor turns into a tensor: a variable, an array or a number.
TensorLike: TypeAlias = "Variable | np.ndarray | float"
