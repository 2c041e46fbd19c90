"""The layer base classes: :class:`Layer` (one input) and :class:`MergeLayer`.

A layer owns parameters (shared variables or expressions, each with a set
of tags) and knows how to turn an input expression into an output
expression (:meth:`Layer.get_output_for`) and an input shape into an
output shape (:meth:`Layer.get_output_shape_for`).  Shapes are tuples of
ints, with ``None`` for sizes unknown until the graph runs.

>>> from lasagne_bn.layers import InputLayer, DenseLayer
>>> l = DenseLayer(InputLayer((None, 4)), num_units=3, name='fc')
>>> l.output_shape
(None, 3)
>>> [p.name for p in l.get_params()], [p.name for p in l.get_params(regularizable=True)]
(['fc.W', 'fc.b'], ['fc.W'])
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from pytensor.graph.basic import Variable

from lasagne_bn import utils

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lasagne_bn._typing import Incoming

__all__ = ["Layer", "MergeLayer"]


def _check_shape(shape, what: str, name) -> tuple:
    """A shape as a tuple of positive ints or None, or a ValueError that says what is wrong."""
    try:
        shape = tuple(shape)
    except TypeError:
        raise TypeError(
            f"{what}={shape!r} must be a tuple of ints (or None for unknown sizes); "
            f"layer name={name!r}"
        ) from None
    for s in shape:
        if s is not None and not isinstance(s, utils.int_types):
            raise TypeError(
                f"{what}={shape!r} must contain only ints or None, not {type(s).__name__}; "
                f"layer name={name!r}"
            )
    if any(s is not None and s <= 0 for s in shape):
        raise ValueError(
            f"Cannot create Layer with a non-positive {what} dimension. {what}={shape!r}, "
            f"name={name!r}"
        )
    return tuple(None if s is None else int(s) for s in shape)


def _concrete_output_shape(layer, shape) -> tuple:
    """``shape``, checked to hold ints and Nones only (as Lasagne requires)."""
    if any(isinstance(s, Variable) for s in shape):
        raise ValueError(
            f"{type(layer).__name__} returned a symbolic output shape from its "
            f"get_output_shape_for() method: {shape!r}. This is not allowed; shapes must "
            "be tuples of integers for fixed-size dimensions and Nones for variable "
            "dimensions."
        )
    return shape


class Layer:
    """Base class of layers with a single input.

    Subclasses override :meth:`get_output_for` and, if they change the
    shape, :meth:`get_output_shape_for`; they create parameters with
    :meth:`add_param`.

    Parameters
    ----------
    incoming : Layer or tuple
        The layer feeding into this one, or the expected input shape.
    name : str, optional
        Name of the layer; parameter names are prefixed with it.

    Examples
    --------
    >>> from lasagne_bn.layers import Layer
    >>> l = Layer((None, 3), name='base')
    >>> l.input_shape, l.output_shape, l.get_params()
    ((None, 3), (None, 3), [])
    """

    def __init__(self, incoming: Incoming, name: str | None = None) -> None:
        if isinstance(incoming, tuple | list):
            self.input_shape = _check_shape(incoming, "input_shape", name)
            self.input_layer = None
        elif hasattr(incoming, "output_shape"):
            self.input_shape = _check_shape(incoming.output_shape, "input_shape", name)
            self.input_layer = incoming
        else:
            raise TypeError(
                f"incoming={incoming!r} ({type(incoming).__name__}) must be a Layer or a "
                f"shape tuple; layer name={name!r}"
            )
        self.name = name
        self.params: OrderedDict = OrderedDict()
        self.get_output_kwargs: list[str] = []

    @property
    def output_shape(self) -> tuple:
        """The output shape for this layer's ``input_shape``."""
        return _concrete_output_shape(self, self.get_output_shape_for(self.input_shape))

    def get_params(self, unwrap_shared: bool = True, **tags) -> list:
        """The layer's parameters, optionally filtered by tags.

        Parameters
        ----------
        unwrap_shared : bool
            Return the shared variables that parameter *expressions* depend
            on, instead of the expressions themselves.
        **tags
            ``tag=True`` keeps only parameters that have the tag,
            ``tag=False`` only those that do not.

        Examples
        --------
        >>> from lasagne_bn.layers import InputLayer, BatchNormLayer
        >>> bn = BatchNormLayer(InputLayer((None, 3)))
        >>> [p.name for p in bn.get_params(trainable=True)]
        ['beta', 'gamma']
        """
        result = list(self.params.keys())
        only = {tag for tag, value in tags.items() if value}
        if only:
            result = [p for p in result if not (only - self.params[p])]
        exclude = {tag for tag, value in tags.items() if not value}
        if exclude:
            result = [p for p in result if not (self.params[p] & exclude)]
        if unwrap_shared:
            return utils.collect_shared_vars(result)
        return result

    def get_output_shape_for(self, input_shape):
        """The output shape for a given input shape (the same, unless overridden)."""
        return input_shape

    def __setstate__(self, state):
        """Restore a pickled layer: lasagne_bn's own, or one pickled by Lasagne master.

        Lasagne's layers pickle the same attributes except a few lasagne_bn
        added; :meth:`_complete_state` gives them their defaults, so a
        network loaded with a plain ``pickle.load`` (through ``lasagne_bn_compat``) runs.
        """
        self.__dict__.update(state)
        self.__dict__.setdefault("get_output_kwargs", [])
        self._complete_state()

    def _complete_state(self) -> None:
        """Give attributes a Lasagne-pickled layer lacks their defaults (subclasses extend it)."""

    def get_output_for(self, input, **kwargs):
        """The output expression for a given input expression.

        Keyword arguments are the ones passed to
        :func:`lasagne_bn.layers.get_output`; layers pick those they know
        (``deterministic``, ``batch_norm_use_averages`` ...) and ignore the
        rest.
        """
        raise NotImplementedError

    def add_param(self, spec, shape, name: str | None = None, **tags):
        """Create a parameter (see :func:`lasagne_bn.utils.create_param`) and register it.

        The name is prefixed with the layer's name (``"layer.W"``).  Tags
        ``trainable`` and ``regularizable`` default to True; any other tag
        given as True (``batch_norm_stat=True``) is stored too.

        Returns
        -------
        The shared variable or expression.
        """
        if name is not None and self.name is not None:
            name = f"{self.name}.{name}"
        param = utils.create_param(spec, shape, name)
        tags["trainable"] = tags.get("trainable", True)
        tags["regularizable"] = tags.get("regularizable", True)
        self.params[param] = {tag for tag, value in tags.items() if value}
        return param

    def __repr__(self) -> str:
        name = "" if getattr(self, "name", None) is None else f" {self.name!r}"
        try:
            shape = f" output_shape={self.output_shape}"
        except Exception:  # a repr must not fail, e.g. inside an error message
            shape = ""
        return f"<{type(self).__name__}{name}{shape}>"


class MergeLayer(Layer):
    """Base class of layers with several inputs.

    :meth:`get_output_shape_for` gets a list of input shapes and
    :meth:`get_output_for` a list of input expressions.

    Parameters
    ----------
    incomings : sequence of Layer or tuple
        The layers feeding into this one, or their expected output shapes.
    name : str, optional
        Name of the layer.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, MergeLayer
    >>> m = MergeLayer([InputLayer((None, 2), name='a'), (None, 3)])
    >>> m.input_shapes, [type(l).__name__ for l in m.input_layers]
    ([(None, 2), (None, 3)], ['InputLayer', 'NoneType'])
    """

    def __init__(self, incomings: Sequence[Incoming], name: str | None = None) -> None:
        incomings = list(incomings)
        self.input_shapes = []
        self.input_layers = []
        for i, incoming in enumerate(incomings):
            if isinstance(incoming, tuple | list):
                self.input_shapes.append(_check_shape(incoming, f"input_shapes[{i}]", name))
                self.input_layers.append(None)
            elif hasattr(incoming, "output_shape"):
                self.input_shapes.append(incoming.output_shape)
                self.input_layers.append(incoming)
            else:
                raise TypeError(
                    f"incomings[{i}]={incoming!r} ({type(incoming).__name__}) must be a "
                    f"Layer or a shape tuple; layer name={name!r}"
                )
        self.name = name
        self.params = OrderedDict()
        self.get_output_kwargs = []

    @property
    def output_shape(self) -> tuple:
        return _concrete_output_shape(self, self.get_output_shape_for(self.input_shapes))

    def get_output_shape_for(self, input_shapes):
        """The output shape for a list of input shapes."""
        raise NotImplementedError

    def get_output_for(self, inputs, **kwargs):
        """The output expression for a list of input expressions."""
        raise NotImplementedError
