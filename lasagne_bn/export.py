"""A network as pure JAX functions: export, data-parallel training, one jitted step.

:func:`export` turns a network (its output layer or layers) into an
:class:`ExportedModel`: its parameters and state as dicts of arrays, and
``apply(params, state, *inputs, train=..., rng=...) -> (outputs, new_state)``,
a pure function that ``jax.jit``, ``jax.grad`` and ``jax.vmap`` transform.
It is PyTensor's own JAX lowering of the network's graph (the graph that
``pytensor.function(..., mode="JAX")`` would run), called directly: no
per-call conversion of inputs, no shared variables, nothing placed on a
device behind your back.  :meth:`ExportedModel.write_back` puts trained
values back into the network, so :mod:`lasagne_bn_compat.io` saves them in the legacy
formats.  ``jax.grad`` of ``apply`` runs PyTensor's gradient graph of the
network, lowered the same way (``export(..., gradients='jax')`` lets JAX
differentiate the forward pass instead).

Data parallelism is JAX's: shard the batch over a ``jax.sharding.Mesh`` and
``jax.jit`` computes every batch-norm statistic over the global batch; under
``shard_map`` / ``pmap``, ``export(..., axis_name='batch')`` makes the
statistics (and their gradients) sums over that mapped axis, as Flax's
``BatchNorm(axis_name=...)`` does.

>>> import numpy as np
>>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
>>> l_in = InputLayer((None, 4))
>>> net = batch_norm(DenseLayer(l_in, 3, name="fc"))
>>> model = export(net)
>>> sorted(model.params), sorted(model.state)
(['fc.W', 'fc_bn.beta', 'fc_bn.gamma'], ['fc_bn.inv_std', 'fc_bn.mean'])
>>> y, new_state = model.apply(model.params, model.state, np.ones((2, 4), "float32"), train=True)
>>> y.shape
(2, 3)
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jax
import numpy as np
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.replace import clone_replace
from pytensor.graph.traversal import graph_inputs
from pytensor.tensor.elemwise import CAReduce
from pytensor.tensor.random.type import RandomType

if TYPE_CHECKING:
    from typing import Any

    from lasagne_bn.layers.base import Layer

__all__ = ["ExportedModel", "export", "train_step"]

#: How ``apply`` is differentiated in reverse mode (see :func:`export`).
GRADIENTS = ("pytensor", "jax")


def _unique_names(variables: Sequence, what: str) -> list[str]:
    """Each variable's name, made unique by a ``#k`` suffix where names repeat."""
    names = [v.name or what for v in variables]
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        if names.count(name) > 1:
            seen[name] = seen.get(name, 0) + 1
            name = f"{name}#{seen[name]}"
        unique.append(name)
    return unique


@dataclass
class _Compiled:
    fn: Callable  # the jitted JAX function of (inputs..., graph state...)
    order: list  # ('param' | 'state' | 'rng', name) for each graph state input
    n_outputs: int
    updated: list  # state names whose new value follows the outputs, in order


class ExportedModel:
    """A network as pure JAX functions over explicit parameter and state dicts.

    Attributes
    ----------
    params : dict of str to numpy.ndarray
        The trainable parameters, by name (``'fc.W'``; repeated names get
        ``'#2'``, ``'#3'`` ...), as their current values.
    state : dict of str to array
        Everything else the network keeps: batch-norm running averages, and
        ``'rng'`` (a JAX PRNG key) when the network draws random numbers
        (dropout, noise) in training.
    input_layers, output_layers : list of Layer

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> model = ExportedModel(batch_norm(DenseLayer(InputLayer((None, 3)), 2, name='fc')))
    >>> sorted(model.params), sorted(model.state)
    (['fc.W', 'fc_bn.beta', 'fc_bn.gamma'], ['fc_bn.inv_std', 'fc_bn.mean'])
    >>> [layer.name for layer in model.output_layers], model.params['fc.W'].shape
    (['fc_bn_nonlin'], (3, 2))
    """

    def __init__(
        self,
        output_layers: Layer | Sequence[Layer],
        axis_name: str | None = None,
        seed: int = 0,
        gradients: str = "pytensor",
    ) -> None:
        if gradients not in GRADIENTS:
            raise ValueError(
                f"export: gradients={gradients!r}; expected one of {', '.join(GRADIENTS)}"
            )
        self.gradients = gradients
        from lasagne_bn.layers import InputLayer, get_all_layers, get_all_params

        self.single_output = not isinstance(output_layers, list | tuple)
        self.output_layers = [output_layers] if self.single_output else list(output_layers)
        layers = get_all_layers(self.output_layers)
        self.input_layers = [layer for layer in layers if isinstance(layer, InputLayer)]
        self.axis_name = axis_name
        all_params = get_all_params(self.output_layers)
        trainable = {id(p) for p in get_all_params(self.output_layers, trainable=True)}
        names = _unique_names(all_params, "param")
        self._shared = dict(zip(names, all_params, strict=True))
        self._kind = {
            n: ("param" if id(p) in trainable else "state") for n, p in self._shared.items()
        }
        self._compiled: dict[bool, _Compiled] = {}
        self._seed = seed

    # -- values --------------------------------------------------------------

    @property
    def params(self) -> dict:
        return {n: p.get_value() for n, p in self._shared.items() if self._kind[n] == "param"}

    @property
    def state(self) -> dict:
        state = {n: p.get_value() for n, p in self._shared.items() if self._kind[n] == "state"}
        if self._uses_rng():
            state["rng"] = jax.random.PRNGKey(self._seed)
        return state

    def write_back(self, params: dict | None = None, state: dict | None = None) -> None:
        """Put values into the network's shared variables (all checked before any is set).

        Raises
        ------
        KeyError
            For a name the network has no parameter of.
        ValueError
            For a value of another shape than the parameter's.
        """
        values = {**(params or {}), **{k: v for k, v in (state or {}).items() if k != "rng"}}
        checked = {}
        for name, value in values.items():
            if name not in self._shared:
                raise KeyError(f"write_back: the network has no parameter {name!r}")
            shared = self._shared[name]
            array = np.array(value, dtype=shared.dtype)  # a writable host copy
            if array.shape != shared.get_value(borrow=True).shape:
                raise ValueError(
                    f"write_back: {name!r} has shape {array.shape}; the parameter has "
                    f"{shared.get_value(borrow=True).shape}"
                )
            checked[name] = array
        for name, array in checked.items():
            self._shared[name].set_value(array)

    # -- the functions ---------------------------------------------------------

    def _uses_rng(self) -> bool:
        return any(kind == "rng" for kind, _ in self._compile(True).order)

    def _compile(self, train: bool) -> _Compiled:
        if train in self._compiled:
            return self._compiled[train]
        import pytensor

        import lasagne_bn.ops.jax.bn as bn_jax
        from lasagne_bn.layers import get_output

        outputs, updates = get_output(
            self.output_layers, deterministic=not train, return_updates=True
        )
        if not train:
            updates = {}
        by_var = {id(p): n for n, p in self._shared.items()}
        targets = list(updates)
        roots = [
            v for v in graph_inputs([*outputs, *updates.values()]) if isinstance(v, SharedVariable)
        ]
        order, placeholders = [], {}
        for i, var in enumerate(roots):
            if isinstance(var.type, RandomType):
                order.append(("rng", f"rng{i}"))
            elif id(var) in by_var:
                name = by_var[id(var)]
                order.append((self._kind[name], name))
            else:
                raise ValueError(
                    f"the network's graph reads the shared variable {var} that is not one of "
                    "its parameters; export cannot make it an input"
                )
            placeholders[var] = var.type()
        new_values = [updates[t] for t in targets if not isinstance(t.type, RandomType)]
        updated = [by_var[id(t)] for t in targets if not isinstance(t.type, RandomType)]
        graph = clone_replace([*outputs, *new_values], replace=placeholders)
        inputs = [layer.input_var for layer in self.input_layers]
        axis_name = self.axis_name

        def context():
            return bn_jax.mapped_axis(axis_name) if axis_name else contextlib.nullcontext()

        fn_inputs = [*inputs, *placeholders.values()]
        with context():
            function = pytensor.function(fn_inputs, graph, mode="JAX", on_unused_input="ignore")
        fn = function.vm.jit_fn
        if self.gradients == "pytensor":
            fn = _with_pytensor_gradient(fn, fn_inputs, graph, context)
        compiled = _Compiled(fn, order, len(outputs), updated)
        self._compiled[train] = compiled
        return compiled

    def apply(self, params: dict, state: dict, *inputs, train: bool = False, rng=None):
        """The network's output(s) and its new state; pure, so JAX can transform it.

        Parameters
        ----------
        params, state : dict
            As :attr:`params` and :attr:`state` (any pytree leaves JAX
            accepts: NumPy or JAX arrays, tracers).
        *inputs : array
            One per input layer, in :attr:`input_layers` order.
        train : bool
            False: ``deterministic=True`` (batch norm uses the running
            averages, no dropout), state returned unchanged.  True: batch
            statistics, updated running averages, dropout.
        rng : JAX PRNG key, optional
            The key for dropout and noise in training; by default
            ``state['rng']``, which the new state then advances.

        Returns
        -------
        (outputs, new_state)
            ``outputs`` a single array for a single output layer, else a list.
        """
        if len(inputs) != len(self.input_layers):
            raise TypeError(
                f"apply takes {len(self.input_layers)} input(s) (one per input layer), "
                f"got {len(inputs)}"
            )
        compiled = self._compile(bool(train))
        new_state = dict(state)
        key = rng
        if key is None and any(kind == "rng" for kind, _ in compiled.order):
            if "rng" not in state:
                raise ValueError("apply(train=True) needs rng= or state['rng'] for dropout")
            key, new_state["rng"] = jax.random.split(state["rng"])
        args = list(inputs)
        for i, (kind, name) in enumerate(compiled.order):
            if kind == "rng":
                args.append({"jax_state": jax.random.fold_in(key, i)})
            else:
                args.append((params if kind == "param" else state)[name])
        results = compiled.fn(*args)
        outputs = list(results[: compiled.n_outputs])
        for name, value in zip(compiled.updated, results[compiled.n_outputs :], strict=True):
            new_state[name] = value
        return (outputs[0] if self.single_output else outputs), new_state


def _is_float(var) -> bool:
    return getattr(var.type, "dtype", "").startswith(("float", "complex"))


def _with_pytensor_gradient(
    fn: Callable, inputs: list, outputs: list, context: Callable
) -> Callable:
    """``fn`` whose reverse-mode derivative is PyTensor's gradient graph, lowered to JAX.

    JAX's own autodiff of the lowered forward pass differentiates our Ops'
    JAX implementations line by line; PyTensor's gradient uses the Ops'
    gradient Ops (batch norm's one-pass backward, max pooling's gradient),
    as ``pytensor.function(mode="JAX")`` training does: equal values, less
    work.  The backward function is compiled the first time it is needed.
    Where PyTensor cannot build the gradient, JAX differentiates ``fn``.
    """
    import pytensor

    diff = [i for i, var in enumerate(inputs) if _is_float(var)]
    outs = [j for j, var in enumerate(outputs) if _is_float(var)]
    cotangents = [outputs[j].type() for j in outs]
    known: dict = {}
    for j, ct in zip(outs, cotangents, strict=True):
        known[outputs[j]] = ct if outputs[j] not in known else known[outputs[j]] + ct
    # The gradient's own constants get floatX: the network's precision, so a
    # float32 network's gradient holds no float64 (what GPUs want).
    float_dtypes = {var.type.dtype for var in [*inputs, *outputs] if _is_float(var)}
    precision = "float64" if "float64" in float_dtypes or not float_dtypes else "float32"
    try:
        with pytensor.config.change_flags(floatX=precision):
            grads = pytensor.grad(
                None,
                [inputs[i] for i in diff],
                known_grads=known,
                disconnected_inputs="ignore",
                return_disconnected="zero",
            )
    except Exception:  # an Op without a PyTensor gradient: JAX's autodiff still works
        return fn
    inputs, cotangents, grads = _accumulate_in(precision, inputs, cotangents, grads)

    @functools.cache
    def backward_fn():
        # Called while JAX traces: the linker turns constants into arrays,
        # which must be concrete ones, not tracers of this trace.
        flags = pytensor.config.change_flags(floatX=precision)
        with context(), flags, jax.ensure_compile_time_eval():
            compiled = pytensor.function(
                [*inputs, *cotangents], grads, mode="JAX", on_unused_input="ignore"
            )
        return compiled.vm.jit_fn

    @jax.custom_vjp
    def run(*args):
        return tuple(fn(*args))

    def run_fwd(*args):
        return tuple(fn(*args)), args

    def run_bwd(args, output_cotangents):
        values = backward_fn()(*args, *(output_cotangents[j] for j in outs))
        result: list = [None] * len(args)
        for i, value in zip(diff, values, strict=True):
            result[i] = value
        return tuple(result)

    run.defvjp(run_fwd, run_bwd)
    return run


def _accumulate_in(precision: str, inputs: list, cotangents: list, grads: list):
    """The gradient graph with its sums accumulating in ``precision``.

    PyTensor's sums of float32 accumulate in float64 (the softmax and bias
    gradients have them); on accelerators float64 is slow or missing, so a
    float32 network's exported gradient sums in float32, as JAX's own
    autodiff and Flax do.
    """
    if precision == "float64":
        return inputs, cotangents, grads
    fgraph = FunctionGraph([*inputs, *cotangents], grads, clone=True)
    for node in fgraph.toposort():
        op = node.op
        if isinstance(op, CAReduce) and getattr(op, "acc_dtype", None) == "float64":
            if node.inputs[0].type.dtype != "float64" and node.outputs[0].type.dtype != "float64":
                summed = op.clone(acc_dtype=precision)(*node.inputs)
                fgraph.replace(node.outputs[0], summed, import_missing=True)
    n = len(inputs)
    return fgraph.inputs[:n], fgraph.inputs[n:], list(fgraph.outputs)


def export(
    layer_or_layers: Layer | Sequence[Layer],
    *,
    axis_name: str | None = None,
    seed: int = 0,
    gradients: str = "pytensor",
) -> ExportedModel:
    """Export a network to pure JAX functions (see :class:`ExportedModel`).

    Parameters
    ----------
    layer_or_layers : Layer or list of Layer
        The output layer(s); the network's input layers become ``apply``'s
        positional inputs.
    axis_name : str, optional
        Under ``shard_map`` / ``pmap`` over this axis name, batch-norm
        statistics in training are those of the whole mapped batch.
    seed : int
        Seed of ``state['rng']``, for networks that draw random numbers.
    gradients : {'pytensor', 'jax'}
        How ``jax.grad`` (reverse mode) differentiates ``apply``.
        ``'pytensor'`` (default): PyTensor's gradient graph of the network,
        lowered to JAX (the Ops' own backward passes, as
        ``pytensor.function(mode="JAX")`` training runs them; JAX can
        differentiate it again, for gradient penalties); forward mode
        (``jax.jvp``, ``jax.jacfwd``) is not available then.  ``'jax'``:
        JAX's autodiff of the lowered forward pass, forward mode included.

    Examples
    --------
    >>> from lasagne_bn.layers import InputLayer, DenseLayer
    >>> model = export(DenseLayer(InputLayer((None, 2)), 1))
    >>> sorted(model.params)
    ['W', 'b']
    """
    return ExportedModel(layer_or_layers, axis_name=axis_name, seed=seed, gradients=gradients)


def train_step(
    model: ExportedModel,
    loss_fn: Callable,
    optimizer: Any,
    *,
    has_aux: bool = False,
    jit: bool = True,
) -> Callable[..., tuple]:
    """One whole training step as one (jitted) function: forward, gradients, optimizer.

    Parameters
    ----------
    model : ExportedModel
    loss_fn : callable
        ``loss_fn(outputs, *targets) -> scalar`` (``-> (scalar, aux)`` with
        ``has_aux=True``: accuracy, say).
    optimizer : optax.GradientTransformation
        E.g. ``optax.adam(1e-3)``; its state comes from ``optimizer.init``.
    has_aux : bool
        Whether ``loss_fn`` also returns auxiliary values.
    jit : bool
        Return the step jitted (default) or as a plain function.

    Returns
    -------
    step : callable
        ``step(params, state, opt_state, *inputs_and_targets, rng=None) ->
        (params, state, opt_state, loss)`` (``aux`` last with ``has_aux``):
        the inputs (one per input layer) come first, then the targets.

    Examples
    --------
    >>> import optax, numpy as np
    >>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm
    >>> model = export(batch_norm(DenseLayer(InputLayer((None, 4)), 2)))
    >>> opt = optax.sgd(0.1)
    >>> step = train_step(model, lambda y, t: ((y - t) ** 2).mean(), opt)
    >>> params, state = model.params, model.state
    >>> opt_state = opt.init(params)
    >>> x, t = np.ones((8, 4), "float32"), np.zeros((8, 2), "float32")
    >>> params, state, opt_state, loss = step(params, state, opt_state, x, t)
    """
    import optax

    n_inputs = len(model.input_layers)

    def step(params, state, opt_state, *batch, rng=None):
        inputs, targets = batch[:n_inputs], batch[n_inputs:]

        def loss_of(p):
            outputs, new_state = model.apply(p, state, *inputs, train=True, rng=rng)
            value = loss_fn(outputs, *targets)
            loss, aux = value if has_aux else (value, None)
            return loss, (new_state, aux)

        (loss, (new_state, aux)), grads = jax.value_and_grad(loss_of, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        result = (optax.apply_updates(params, updates), new_state, opt_state, loss)
        return (*result, aux) if has_aux else result

    return jax.jit(step) if jit else step
