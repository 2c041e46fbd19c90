"""NanGuardMode that names the layer where a NaN (or inf) first appeared.

PyTensor's :class:`~pytensor.compile.debug.nanguardmode.NanGuardMode` checks
every value a compiled function computes and stops at the first NaN, inf or
huge value, saying "... in an input of the graph" or printing the node.
Lasagne users debug by layer: :func:`lasagne_bn.layers.get_output` tags the
variables each layer builds (and its parameters) with that layer, the tags
travel into the compiled graph with the variables, and this mode puts the
layer (``name`` and class, and the parameter when it was one) in the first
line of the error, PyTensor's report after it.

>>> import numpy as np, pytensor
>>> from lasagne_bn.layers import InputLayer, DenseLayer, get_output
>>> l_in = InputLayer((None, 2))
>>> net = DenseLayer(l_in, 2, name="fc", W=np.full((2, 2), np.nan, "float32"))
>>> f = pytensor.function([l_in.input_var], get_output(net), mode=NanGuardMode())
>>> try:
...     f(np.ones((1, 2), "float32"))
... except AssertionError as error:
...     print(str(error).splitlines()[0])
NaN detected in parameter fc.W of layer 'fc' (DenseLayer), the first non-finite value
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytensor.compile.debug.nanguardmode import NanGuardMode as _PyTensorNanGuardMode
from pytensor.graph.traversal import ancestors

if TYPE_CHECKING:
    from typing import Any

    from pytensor.graph.basic import Variable

    from lasagne_bn.layers.base import Layer

__all__ = ["LAYER_TAG", "NanGuardMode", "layer_of"]

#: The tag attribute holding ``(position, layer)``: the layer that built the
#: variable (or owns the parameter), and its position in ``get_all_layers``.
LAYER_TAG = "lasagne_bn_layer"


def _tagged(variable):
    return getattr(getattr(variable, "tag", None), LAYER_TAG, None)


def layer_of(variable: Variable) -> tuple[int, Layer] | None:
    """``(position, layer)`` of the layer that built ``variable``, or None.

    A variable the rewrites made (a fused elementwise node) carries no tag:
    its layer is the latest one among the tagged variables it is computed
    from (what it computes comes after all of them).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, get_output
    >>> net = DenseLayer(InputLayer((None, 2)), 3, name='fc')
    >>> position, layer = layer_of(get_output(net))
    >>> position, layer.name
    (1, 'fc')
    >>> layer_of(net.input_layer.input_var) is None
    True
    """
    tag = _tagged(variable)
    if tag is not None:
        return tag
    found = [t for t in map(_tagged, ancestors([variable])) if t is not None]
    return max(found, key=lambda t: t[0]) if found else None


def _describe(variable, what: str) -> str | None:
    tag = layer_of(variable)
    if tag is None:
        return None
    layer = tag[1]
    where = f"layer {layer.name!r} ({type(layer).__name__})"
    if _tagged(variable) is None:
        return (
            f"{what} detected in a value the rewrites fused, computed from {where} (or in "
            "the layers after it: NanGuardMode(optimizer=None) names the exact one)"
        )
    if variable in getattr(layer, "params", {}):
        return f"{what} detected in parameter {variable.name} of {where}"
    return f"{what} detected in the output of {where}"


def _located(error: AssertionError, variable) -> AssertionError:
    text = str(error)
    what = next((w for w in ("NaN", "Inf", "Big value") if text.startswith(w)), "NaN")
    line = _describe(variable, what)
    if line is None:
        return error
    return AssertionError(f"{line}, the first non-finite value\n{text}")


class NanGuardMode(_PyTensorNanGuardMode):
    """PyTensor's NanGuardMode; its error names the lasagne_bn layer, first.

    Same parameters as PyTensor's (``nan_is_error``, ``inf_is_error``,
    ``big_is_error``, ``optimizer``).  Graphs not built by
    :func:`~lasagne_bn.layers.get_output` get PyTensor's error unchanged.

    Examples
    --------
    >>> from pytensor.compile.mode import Mode
    >>> mode = NanGuardMode(nan_is_error=True, inf_is_error=True, big_is_error=False)
    >>> isinstance(mode, Mode)
    True
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        linker = self.linker
        check, check_input = linker.callback, linker.callback_input

        def callback(node, thunk, storage_map, compute_map):
            try:
                check(node, thunk, storage_map, compute_map)
            except AssertionError as error:
                bad = [v for v in node.outputs if compute_map[v][0] and _bad(storage_map[v][0])]
                raise _located(error, bad[0] if bad else node.outputs[0]) from None

        def callback_input(var, value):
            try:
                check_input(var, value)
            except AssertionError as error:
                raise _located(error, var) from None

        linker.callback, linker.callback_input = callback, callback_input


def _bad(value) -> bool:
    import numpy as np

    try:
        array = np.asarray(value)
        return array.dtype.kind in "fc" and not bool(np.all(np.isfinite(array)))
    except Exception:
        return False
