"""Weight penalties, with the names and defaults of ``lasagne.regularization``.

>>> from lasagne_bn.layers import InputLayer, DenseLayer
>>> from lasagne_bn.regularization import regularize_network_params, l2
>>> import numpy as np
>>> net = DenseLayer(InputLayer((None, 3)), 2, W=np.ones((3, 2)), b=None)
>>> float(regularize_network_params(net, l2).eval())
6.0
"""

from __future__ import annotations

from types import MappingProxyType
from typing import TYPE_CHECKING

import pytensor.tensor as pt
from pytensor.tensor.variable import TensorVariable

from lasagne_bn import utils
from lasagne_bn.layers import Layer, get_all_params

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence
    from typing import Any

    from pytensor.graph.basic import Variable

__all__ = [
    "apply_penalty",
    "l1",
    "l2",
    "regularize_layer_params",
    "regularize_layer_params_weighted",
    "regularize_network_params",
]

# Lasagne's default tags, read-only so the default cannot be changed by accident.
_REGULARIZABLE = MappingProxyType({"regularizable": True})


def l1(x: Variable) -> TensorVariable:
    """Sum of absolute values.

    Examples
    --------
    >>> import numpy as np
    >>> float(l1(pt.as_tensor(np.array([-1.0, 2.0]))).eval(mode="FAST_COMPILE"))
    3.0
    """
    return pt.sum(abs(x))


def l2(x: Variable) -> TensorVariable:
    """Sum of squares (no 1/2 factor, as in Lasagne).

    Examples
    --------
    >>> import numpy as np
    >>> float(l2(pt.as_tensor(np.array([-1.0, 2.0]))).eval(mode="FAST_COMPILE"))
    5.0
    """
    return pt.sum(x**2)


def apply_penalty(
    tensor_or_tensors: Variable | Sequence[Variable],
    penalty: Callable[[Variable], Variable],
    **kwargs: Any,
) -> TensorVariable:
    """The penalty of one tensor, or the sum of the penalties of several.

    Examples
    --------
    >>> import numpy as np
    >>> a, b = pt.as_tensor(np.array([-1.0, 2.0])), pt.as_tensor(np.array([3.0]))
    >>> float(apply_penalty([a, b], l1).eval(mode="FAST_COMPILE"))
    6.0
    """
    try:
        return utils.sum_terms(penalty(x, **kwargs) for x in tensor_or_tensors)
    except (TypeError, ValueError):
        return penalty(tensor_or_tensors, **kwargs)


def regularize_layer_params(
    layer: Layer | Sequence[Layer],
    penalty: Callable[[Variable], Variable],
    tags: Mapping[str, bool] = _REGULARIZABLE,
    **kwargs: Any,
) -> TensorVariable:
    """Penalty of the parameters of one layer (or a list of layers), filtered by ``tags``.

    Examples
    --------
    >>> import numpy as np
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> layer = DenseLayer(InputLayer((None, 2)), 3, W=np.ones((2, 3)), b=np.ones(3))
    >>> float(regularize_layer_params(layer, l2).eval(mode="FAST_COMPILE"))  # W only, not b
    6.0
    """
    layers = [layer] if isinstance(layer, Layer) else layer
    params = []
    for lyr in layers:
        params += lyr.get_params(**tags)
    return apply_penalty(params, penalty, **kwargs)


def regularize_layer_params_weighted(
    layers: Mapping[Layer, float],
    penalty: Callable[[Variable], Variable],
    tags: Mapping[str, bool] = _REGULARIZABLE,
    **kwargs: Any,
) -> TensorVariable:
    """Weighted sum of per-layer penalties; ``layers`` maps each layer to its coefficient.

    Examples
    --------
    >>> import numpy as np
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> hidden = DenseLayer(InputLayer((None, 2)), 3, W=np.ones((2, 3)))
    >>> out = DenseLayer(hidden, 1, W=np.ones((3, 1)))
    >>> penalty = regularize_layer_params_weighted({hidden: 0.5, out: 2.0}, l2)
    >>> float(penalty.eval(mode="FAST_COMPILE"))  # 0.5 * 6 + 2 * 3
    9.0
    """
    return utils.sum_terms(
        coeff * apply_penalty(layer.get_params(**tags), penalty, **kwargs)
        for layer, coeff in layers.items()
    )


def regularize_network_params(
    layer: Layer | Sequence[Layer],
    penalty: Callable[[Variable], Variable],
    tags: Mapping[str, bool] = _REGULARIZABLE,
    **kwargs: Any,
) -> TensorVariable:
    """Penalty of all parameters of the network below ``layer``, filtered by ``tags``.

    Examples
    --------
    >>> import numpy as np
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> hidden = DenseLayer(InputLayer((None, 2)), 3, W=np.ones((2, 3)))
    >>> out = DenseLayer(hidden, 1, W=np.ones((3, 1)))
    >>> float(regularize_network_params(out, l1).eval(mode="FAST_COMPILE"))  # both W
    9.0
    """
    return apply_penalty(get_all_params(layer, **tags), penalty, **kwargs)
