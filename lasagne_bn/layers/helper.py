"""Functions that work on whole networks: outputs, shapes, parameters.

Names, arguments and results are those of ``lasagne.layers.helper``, plus
one addition for PyTensor 3: ``get_output(..., return_updates=True)``
returns the updates of layer state (batch-norm running averages, random
generator states) instead of attaching them as ``default_update``\\ s.

>>> import numpy as np, pytensor
>>> from lasagne_bn.layers import InputLayer, DenseLayer, get_output, get_all_params
>>> l_in = InputLayer((None, 4))
>>> l_out = DenseLayer(l_in, num_units=2)
>>> f = pytensor.function([l_in.input_var], get_output(l_out))
>>> f(np.ones((3, 4))).shape
(3, 2)
>>> [p.name for p in get_all_params(l_out)]
['W', 'b']
"""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from difflib import get_close_matches
from itertools import chain
from typing import TYPE_CHECKING
from warnings import warn

import numpy as np
from pytensor.compile.sharedvalue import SharedVariable

from lasagne_bn import utils
from lasagne_bn.ops.rewrites import ensure_registered

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from pytensor.graph.basic import Variable

    from lasagne_bn._typing import Shape, TensorLike
    from lasagne_bn.layers.base import Layer
    from lasagne_bn.layers.input import InputLayer

__all__ = [
    "collect_updates",
    "count_params",
    "describe_network",
    "get_all_layers",
    "get_all_param_values",
    "get_all_params",
    "get_output",
    "get_output_shape",
    "set_all_param_values",
]


# --------------------------------------------------------------------------
# explicit collection of state updates

_ACTIVE_UPDATES: ContextVar[OrderedDict | None] = ContextVar(
    "lasagne_bn_active_updates", default=None
)


@contextmanager
def collect_updates() -> Iterator[OrderedDict]:
    """Collect the state updates of the layer outputs built inside the block.

    While the block runs, layers that keep state (batch-norm running
    averages, dropout's random generators) put their updates into the
    yielded dictionary instead of attaching ``default_update``\\ s to
    shared variables.  Pass the dictionary to ``pytensor.function(...,
    updates=...)`` together with the parameter updates.
    ``get_output(..., return_updates=True)`` is a shortcut for this.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, BatchNormLayer, get_output
    >>> bn = BatchNormLayer(InputLayer((None, 3)))
    >>> with collect_updates() as updates:
    ...     out = get_output(bn)
    >>> [v.name for v in updates]
    ['mean', 'inv_std']
    """
    updates: OrderedDict = OrderedDict()
    token = _ACTIVE_UPDATES.set(updates)
    try:
        yield updates
    finally:
        _ACTIVE_UPDATES.reset(token)


def active_updates() -> OrderedDict | None:
    """The dictionary of the innermost :func:`collect_updates` block, or None.

    Layers call this to choose between an explicit update (inside a block)
    and Lasagne's ``default_update`` (outside).
    """
    return _ACTIVE_UPDATES.get()


def add_update(updates: OrderedDict, var: SharedVariable, expr) -> None:
    """Record ``var <- expr`` in ``updates``; a second update of ``var`` is an error."""
    if var in updates:
        raise ValueError(
            f"{var} would be updated twice in one set of updates; build all outputs of one "
            "function with a single get_output call (pass a list of layers)"
        )
    updates[var] = utils.match_type(expr, var.type, what=f"the update of {var}")


# --------------------------------------------------------------------------
# graph traversal


def get_all_layers(
    layer: Layer | Sequence[Layer], treat_as_input: Iterable[Layer] | None = None
) -> list:
    """All layers below (and including) the given layer(s), in topological order.

    Every layer comes after the layers feeding into it; otherwise the order
    is that of a depth-first walk over the inputs, first input first.

    Parameters
    ----------
    layer : Layer or list of Layer
        The output layer(s).
    treat_as_input : iterable of Layer, optional
        Layers whose inputs are not followed.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> l1 = InputLayer((None, 2)); l2 = DenseLayer(l1, 3); l3 = DenseLayer(l2, 1)
    >>> get_all_layers(l3) == [l1, l2, l3]
    True
    """
    try:
        queue = deque(layer)
    except TypeError:
        queue = deque([layer])
    seen = set()
    done = set()
    result = []
    if treat_as_input is not None:
        seen.update(treat_as_input)
    while queue:
        current = queue[0]
        if current is None:
            # a layer built from a shape tuple has no input layer
            queue.popleft()
        elif current not in seen:
            # first visit: its inputs go in front of it, to be emitted first
            seen.add(current)
            if hasattr(current, "input_layers"):
                queue.extendleft(reversed(current.input_layers))
            elif hasattr(current, "input_layer"):
                queue.appendleft(current.input_layer)
        else:
            # second visit (inputs done) or a cycle: emit it once
            queue.popleft()
            if current not in done:
                result.append(current)
                done.add(current)
    return result


def get_output(
    layer_or_layers: Layer | Sequence[Layer],
    inputs: TensorLike | Mapping[Layer | InputLayer, TensorLike] | None = None,
    return_updates: bool = False,
    **kwargs: Any,
) -> Variable | list[Variable] | tuple:
    """The output expression(s) of the given layer(s).

    Parameters
    ----------
    layer_or_layers : Layer or list of Layer
        The layer(s) whose output to compute.
    inputs : None, expression, or dict
        ``None`` uses each :class:`InputLayer`'s ``input_var``; a single
        expression (or array) replaces the network's only input; a dict
        maps layers (any layers, not only inputs) to expressions, which are
        used instead of those layers' outputs.
    return_updates : bool
        If True, return ``(outputs, updates)``: the layers' state updates
        (batch-norm running averages, dropout generator states) come back
        as an ordered dict for ``pytensor.function(updates=...)``, and no
        ``default_update`` is attached.  If False (Lasagne's behaviour),
        state is updated through ``default_update``\\ s, which PyTensor
        applies in any function whose graph contains the output.
    **kwargs
        Passed to every layer's ``get_output_for`` (``deterministic=True``,
        ``batch_norm_use_averages=...``); a keyword no layer accepts gives
        a warning.

    Returns
    -------
    expression or list of expressions, or ``(outputs, updates)``

    Examples
    --------
    >>> import pytensor
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> l_in = InputLayer((None, 4))
    >>> net = batch_norm(DenseLayer(l_in, 3))
    >>> out, updates = get_output(net, return_updates=True)
    >>> f = pytensor.function([l_in.input_var], out, updates=updates)
    """
    # Our rewrites (JAX static shapes, aliased running averages), once per process.
    ensure_registered("jax", "aliasing")
    if return_updates:
        with collect_updates() as updates:
            outputs = _get_output(layer_or_layers, inputs, kwargs)
        return outputs, updates
    return _get_output(layer_or_layers, inputs, kwargs)


def _tag_with_layer(output, layer_inputs, layer, position: int) -> None:
    """Tag what ``layer`` built (its output, the variables before it, its parameters).

    :class:`lasagne_bn.nan_guard.NanGuardMode` names the layer from the tag
    (:data:`lasagne_bn.nan_guard.LAYER_TAG`); the first layer to build or
    own a variable keeps it.
    """
    from pytensor.graph.basic import Variable
    from pytensor.graph.traversal import ancestors

    tag = (position, layer)
    inputs = layer_inputs if isinstance(layer_inputs, list) else [layer_inputs]
    stop = [v for v in inputs if isinstance(v, Variable)]
    outputs = output if isinstance(output, list | tuple) else [output]
    built = [v for v in outputs if isinstance(v, Variable)]
    for var in [*ancestors(built, blockers=stop), *layer.params]:
        if getattr(var, "tag", None) is not None and not hasattr(var.tag, "lasagne_bn_layer"):
            if var in stop:
                continue
            var.tag.lasagne_bn_layer = tag


def _get_output(layer_or_layers, inputs, kwargs):
    from lasagne_bn.layers.base import Layer, MergeLayer
    from lasagne_bn.layers.input import InputLayer

    if isinstance(inputs, dict):
        for key in inputs:
            if key is not None and not isinstance(key, Layer):
                raise TypeError(
                    f"The inputs dictionary keys must be lasagne_bn layers, not "
                    f"{type(key).__name__} ({key!r})"
                )
    accepted_kwargs = {"deterministic"}
    treat_as_input = list(inputs.keys()) if isinstance(inputs, dict) else []
    all_layers = get_all_layers(layer_or_layers, treat_as_input)
    all_outputs = {
        layer: layer.input_var
        for layer in all_layers
        if isinstance(layer, InputLayer) and layer not in treat_as_input
    }
    if isinstance(inputs, dict):
        all_outputs.update(
            (layer, utils.as_theano_expression(expr)) for layer, expr in inputs.items()
        )
    elif inputs is not None:
        if len(all_outputs) > 1:
            raise ValueError(
                "get_output() was called with a single input expression on a network with "
                f"{len(all_outputs)} input layers; pass a dictionary mapping input layers to "
                "expressions instead"
            )
        for input_layer in all_outputs:
            all_outputs[input_layer] = utils.as_theano_expression(inputs)
    for layer in all_layers:
        if layer in all_outputs:
            continue
        try:
            if isinstance(layer, MergeLayer):
                layer_inputs = [all_outputs[il] for il in layer.input_layers]
            else:
                layer_inputs = all_outputs[layer.input_layer]
        except KeyError:
            raise ValueError(
                f"get_output() was called without an input expression for the free-floating "
                f"layer {layer!r}; pass a dictionary mapping this layer to an input expression"
            ) from None
        all_outputs[layer] = layer.get_output_for(layer_inputs, **kwargs)
        _tag_with_layer(all_outputs[layer], layer_inputs, layer, all_layers.index(layer))
        try:
            accepted_kwargs |= set(utils.inspect_kwargs(layer.get_output_for))
        except (TypeError, ValueError):
            pass
        accepted_kwargs |= set(getattr(layer, "get_output_kwargs", ()))
    unused = set(kwargs) - accepted_kwargs
    if unused:
        suggestions = []
        for kwarg in sorted(unused):
            close = get_close_matches(kwarg, accepted_kwargs)
            suggestions.append(f"{kwarg} (perhaps you meant {close[0]})" if close else kwarg)
        warn(
            "get_output() was called with unused kwargs:\n\t" + "\n\t".join(suggestions),
            stacklevel=3,
        )
    try:
        return [all_outputs[layer] for layer in layer_or_layers]
    except TypeError:
        return all_outputs[layer_or_layers]


def get_output_shape(
    layer_or_layers: Layer | Sequence[Layer],
    input_shapes: Shape | Mapping[Layer, Shape] | None = None,
) -> Shape | list[Shape]:
    """The output shape(s) of the given layer(s), optionally for other input shapes.

    Parameters
    ----------
    layer_or_layers : Layer or list of Layer
    input_shapes : None, tuple, or dict
        ``None`` uses the shapes the layers were built for; a tuple replaces
        the only input layer's shape; a dict maps layers to shapes.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> l = DenseLayer(InputLayer((None, 4)), 3)
    >>> get_output_shape(l), get_output_shape(l, (7, 4))
    ((None, 3), (7, 3))
    """
    if input_shapes is None or input_shapes == {}:
        try:
            return [layer.output_shape for layer in layer_or_layers]
        except TypeError:
            return layer_or_layers.output_shape
    from lasagne_bn.layers.base import MergeLayer
    from lasagne_bn.layers.input import InputLayer

    treat_as_input = list(input_shapes.keys()) if isinstance(input_shapes, dict) else []
    all_layers = get_all_layers(layer_or_layers, treat_as_input)
    all_shapes = {
        layer: layer.shape
        for layer in all_layers
        if isinstance(layer, InputLayer) and layer not in treat_as_input
    }
    if isinstance(input_shapes, dict):
        all_shapes.update(input_shapes)
    else:
        if len(all_shapes) > 1:
            raise ValueError(
                "get_output_shape() was called with a single input shape on a network with "
                f"{len(all_shapes)} input layers; pass a dictionary of input shapes instead"
            )
        for input_layer in all_shapes:
            all_shapes[input_layer] = input_shapes
    for layer in all_layers:
        if layer not in all_shapes:
            if isinstance(layer, MergeLayer):
                shapes = [all_shapes[il] for il in layer.input_layers]
            else:
                shapes = all_shapes[layer.input_layer]
            all_shapes[layer] = layer.get_output_shape_for(shapes)
    try:
        return [all_shapes[layer] for layer in layer_or_layers]
    except TypeError:
        return all_shapes[layer_or_layers]


# --------------------------------------------------------------------------
# parameters


def get_all_params(
    layer: Layer | Sequence[Layer], unwrap_shared: bool = True, **tags: bool
) -> list:
    """The parameters of all layers below (and including) ``layer``, without repeats.

    The order is that of :func:`get_all_layers`, and within a layer the
    order of :meth:`Layer.get_params`.  Tags filter as in ``get_params``
    (``trainable=True``, ``regularizable=True``, ``batch_norm_stat=False``).

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 4)), 3, name='fc'))
    >>> [p.name for p in get_all_params(net)]
    ['fc.W', 'fc_bn.beta', 'fc_bn.gamma', 'fc_bn.mean', 'fc_bn.inv_std']
    >>> [p.name for p in get_all_params(net, trainable=True)]
    ['fc.W', 'fc_bn.beta', 'fc_bn.gamma']
    """
    layers = get_all_layers(layer)
    params = chain.from_iterable(
        lyr.get_params(unwrap_shared=unwrap_shared, **tags) for lyr in layers
    )
    return utils.unique(params)


def count_params(layer: Layer | Sequence[Layer], **tags: bool) -> int:
    """Total number of parameter values (scalars) in the network, filtered by tags.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> count_params(DenseLayer(InputLayer((None, 4)), 3))
    15
    """
    params = get_all_params(layer, **tags)
    return int(sum(int(np.prod(p.get_value(borrow=True).shape)) for p in params))


def describe_network(layer: Layer | Sequence[Layer], **tags: bool) -> str:
    """A table of the network: one line per layer with its output shape and parameter count.

    The layers come in the order of :func:`get_all_layers`.  The type
    column names the layer's class, with its nonlinearity where it has one
    that is not the identity.  A parameter shared by several layers is
    counted once, at the first layer that has it, so the last line's total
    is :func:`count_params` with the same ``tags`` (``trainable=True``
    counts only what training changes: batch-norm statistics are left out).

    Parameters
    ----------
    layer : Layer or list of Layer
        The output layer(s) of the network.
    **tags
        Filter the counted parameters, as in :func:`get_all_params`.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> net = batch_norm(DenseLayer(InputLayer((None, 4), name='in'), 3, name='fc'))
    >>> print(describe_network(net))
    name          type                        output shape  params
    in            InputLayer                  (None, 4)          0
    fc            DenseLayer                  (None, 3)         12
    fc_bn         BatchNormLayer              (None, 3)         12
    fc_bn_nonlin  NonlinearityLayer(rectify)  (None, 3)          0
    total                                                       24
    """
    seen: set = set()
    rows = [("name", "type", "output shape", "params")]
    total = 0
    for lyr in get_all_layers(layer):
        count = 0
        for param in lyr.get_params(**tags):
            if param not in seen:
                seen.add(param)
                count += int(np.prod(param.get_value(borrow=True).shape))
        total += count
        rows.append((lyr.name or "", _layer_type(lyr), str(lyr.output_shape), f"{count:,}"))
    rows.append(("total", "", "", f"{total:,}"))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    params_width = max(len(row[3]) for row in rows)
    lines = []
    for name, kind, shape, params in rows:
        cells = [name.ljust(widths[0]), kind.ljust(widths[1]), shape.ljust(widths[2])]
        lines.append(("  ".join(cells) + "  " + params.rjust(params_width)).rstrip())
    return "\n".join(lines)


def _layer_type(layer) -> str:
    """``DenseLayer(softmax)``: the class, and the nonlinearity unless it is the identity."""
    kind = type(layer).__name__
    nonlinearity = getattr(layer, "nonlinearity", None)
    if nonlinearity is None:
        return kind
    name = getattr(nonlinearity, "__name__", type(nonlinearity).__name__)
    return kind if name in ("linear", "identity") else f"{kind}({name})"


def get_all_param_values(layer: Layer | Sequence[Layer], **tags: bool) -> list[np.ndarray]:
    """Copies of the values of :func:`get_all_params`, in the same order.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> net = DenseLayer(InputLayer((None, 3)), 2)
    >>> [v.shape for v in get_all_param_values(net)]
    [(3, 2), (2,)]
    >>> [v.shape for v in get_all_param_values(net, regularizable=True)]
    [(3, 2)]
    """
    return [p.get_value() for p in get_all_params(layer, **tags)]


def set_all_param_values(
    layer: Layer | Sequence[Layer], values: Sequence[np.ndarray], **tags: bool
) -> None:
    """Set the values of :func:`get_all_params` (same order, same tags).

    Everything is checked before anything is set: with a wrong number of
    values, a wrong shape, or a value that cannot be stored in a parameter's
    dtype, a ``ValueError`` / ``TypeError`` names what is wrong and no
    parameter changes.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> l = DenseLayer(InputLayer((None, 4)), 3)
    >>> set_all_param_values(l, [np.zeros((4, 3)), np.ones(3)])
    >>> set_all_param_values(l, [np.zeros((4, 3))])
    Traceback (most recent call last):
    ...
    ValueError: mismatch: got 1 values to set 2 parameters (W, b)
    """
    params = get_all_params(layer, **tags)
    values = list(values)
    if len(params) != len(values):
        names = ", ".join(str(p.name) for p in params)
        raise ValueError(
            f"mismatch: got {len(values)} values to set {len(params)} parameters ({names})"
        )
    checked = []
    for i, (p, v) in enumerate(zip(params, values, strict=True)):
        have = p.get_value(borrow=True).shape
        shape = np.shape(v)
        if have != shape:
            raise ValueError(
                f"mismatch: parameter {i} ({p.name}) has shape {have!r} but value {i} to set "
                f"has shape {shape!r}; no parameter was changed"
            )
        container = p.container
        try:
            container.type.filter(
                np.asarray(v), strict=container.strict, allow_downcast=container.allow_downcast
            )
        except TypeError as exc:
            raise TypeError(
                f"value {i} cannot be stored in parameter {i} ({p.name}, type {p.type}): "
                f"{exc}; no parameter was changed"
            ) from exc
        checked.append((p, v))
    for p, v in checked:
        p.set_value(v)
