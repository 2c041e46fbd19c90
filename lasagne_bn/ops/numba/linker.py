"""The default (Numba) mode for big graphs: bounded compile memory and time.

PyTensor's Numba linker turns a whole function graph into one Python function
and jits it.  What makes a training function of a big network fail is not
the number of nodes but the number of values that cross that function's
boundary: every input and every output (a training step reads and returns
each parameter, each momentum buffer and each running average).  Numba's
code for a function's arguments and returned tuple grows quadratically with
their number (reference counting walks the whole tuple at each element),
so a few hundred of them take minutes and gigabytes to compile (the whole
training functions' compile times and peak memory are in
``benchmarks/results/compile_bench.md``); a ResNet-50 step has about 430 of
each, and no rewrite of the graph can change that number.

:class:`NumbaNodeLinker` keeps PyTensor's whole-graph compile for ordinary
graphs and, past :data:`MAX_WHOLE_INTERFACE` values crossing or
:data:`MAX_WHOLE_NODES` nodes, compiles each *node* as its own small Numba
function (one per distinct node: nodes with the same PyTensor cache key and
constants share one, cached on disk under that key) and runs them in order
from Python, freeing each intermediate value after its last use.  Memory and
time then follow the largest node, not the graph; a call costs a few
microseconds per node, which a graph of this size does not notice.  The
values, the in-place updates and the order are exactly those of the
whole-graph function: the same node functions run on the same buffers.

>>> import pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops.numba.linker import big_graph_mode
>>> x = pt.vector("x")
>>> f = pytensor.function([x], pt.exp(x) + 1, mode=big_graph_mode())
>>> float(f([0.0])[0])
2.0

``lasagne_bn_compat``'s ``theano.function`` compiles with this mode when the user named
no other; :func:`use_by_default` makes it the default of ``pytensor.function``
too (an explicit, process-wide choice this package never makes on import).
"""

from __future__ import annotations

import functools
from hashlib import sha256
from typing import Any

import pytensor
from pytensor import config
from pytensor.compile.mode import Mode, get_default_mode
from pytensor.graph.basic import Constant
from pytensor.link.numba.linker import NumbaLinker

__all__ = [
    "MAX_WHOLE_INTERFACE",
    "MAX_WHOLE_NODES",
    "NumbaNodeLinker",
    "big_graph_mode",
    "compiles_per_node",
    "use_by_default",
]

#: Inputs plus outputs above which a graph is compiled node by node.  Below
#: it, the quadratic boundary code costs a few seconds at most.
MAX_WHOLE_INTERFACE = 128
#: Nodes above which a graph is compiled node by node (one LLVM module per
#: node instead of one module linking all of them).
MAX_WHOLE_NODES = 1000

#: Whether large elementwise nodes are split over the kernel threads
#: (:mod:`lasagne_bn.ops.numba.elemwise`); read when a node is compiled.
SPLIT_ELEMWISE = True

# One compiled function per node key for the whole process: a ResNet-50
# step has about a thousand nodes but a few dozen distinct ones.
_NODE_FUNCTIONS: dict[str, Any] = {}


@functools.cache
def _split_version() -> str:
    """A digest of :mod:`.elemwise`'s source: an edit there retires cached split nodes."""
    from lasagne_bn.ops.numba import elemwise
    from lasagne_bn.ops.numba._codegen import source_version

    return source_version(elemwise.__file__)


def compiles_per_node(fgraph, max_interface: int | None = None, max_nodes: int | None = None):
    """Whether :class:`NumbaNodeLinker` compiles ``fgraph`` node by node."""
    max_interface = MAX_WHOLE_INTERFACE if max_interface is None else max_interface
    max_nodes = MAX_WHOLE_NODES if max_nodes is None else max_nodes
    interface = len(fgraph.inputs) + len(fgraph.outputs)
    return interface > max_interface or len(fgraph.apply_nodes) > max_nodes


def _node_function(node, storage_map):
    """A Python-callable Numba function computing ``node`` from its non-constant inputs.

    Constants are bound inside, as the whole-graph function has them: they
    are compile-time values there too.
    """
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import (
        cache_key_for_constant,
        numba_funcify_ensure_cache,
        numba_njit,
        numba_typify,
    )

    from lasagne_bn.ops.numba.elemwise import flat_node, slab_node, split_source, splittable

    split = SPLIT_ELEMWISE and splittable(node)
    # a split node runs PyTensor's loop for its in-place copy, slab by slab
    target = slab_node(node) if split else node
    func, key = numba_funcify_ensure_cache(target.op, node=target, storage_map=storage_map)
    env: dict[str, Any] = {"slab_impl" if split else "node_impl": func}
    flat = flat_node(node) if split else None
    if flat is not None:
        # ... or, on C-contiguous arrays, its one-dimensional copy's loop
        flat_func, flat_key = numba_funcify_ensure_cache(flat.op, node=flat)
        env["flat_impl"] = flat_func
        key = None if key is None or flat_key is None else (key, flat_key)
    params, args, const_keys = [], [], []
    for i, var in enumerate(node.inputs):
        if isinstance(var, Constant):
            value = numba_typify(var.data, variable=var)
            env[f"c{i}"] = value
            args.append(f"c{i}")
            const_keys.append((i, cache_key_for_constant(value)))
        else:
            params.append(f"i{i}")
            args.append(f"i{i}")
    if split:
        src, split_env = split_source(node, params, args, flat is not None)
        env |= split_env
    else:
        call = f"node_impl({', '.join(args)})"
        src = f"def lasagne_bn_node({', '.join(params)}):\n    return {call}\n"
    full_key = None
    if key is not None:
        # __name__: a cached function's environment names this module, so a
        # key from before a rename must not be served.
        parts = (key, tuple(const_keys), len(node.inputs), int(config.numba__fastmath), __name__)
        if split:
            # the split function compiles in elemwise.py's flat-view
            # intrinsic, which its source only names
            parts += ("split", src, _split_version())
        full_key = "lasagne_bn_node_" + sha256(repr(parts).encode()).hexdigest()
        if full_key in _NODE_FUNCTIONS:
            return _NODE_FUNCTIONS[full_key]
    wrapper = compile_numba_function_src(
        src,
        "lasagne_bn_node",
        # This module's globals: Numba rebuilds a cached function's
        # environment by importing the module named there.
        global_env=globals() | env,
        cache_key=full_key,
    )
    jitted = numba_njit(wrapper, final_function=True, cache=full_key is not None, parallel=split)
    if full_key is not None:
        _NODE_FUNCTIONS[full_key] = jitted
    return jitted


class _NodeProgram:
    """The graph as a list of node calls over one list of values, run from Python."""

    def __init__(self, fgraph, order, storage_map):
        index = {var: i for i, var in enumerate(fgraph.inputs)}
        steps = []
        for node in order:
            for out in node.outputs:
                index[out] = len(index)
            ins = tuple(index[v] for v in node.inputs if not isinstance(v, Constant))
            outs = tuple(index[v] for v in node.outputs)
            steps.append([node, _node_function(node, storage_map), ins, outs, ()])
        # Drop each intermediate value after the last node that reads it, as
        # the whole-graph function's reference counting does.
        keep = {index[v] for v in fgraph.outputs if v in index}
        keep |= set(range(len(fgraph.inputs)))
        last_reader: dict[int, int] = {}
        for k, step in enumerate(steps):
            for i in step[2]:
                last_reader[i] = k
        for i, k in last_reader.items():
            if i not in keep:
                steps[k][4] += (i,)
        for step in steps:
            unread = tuple(o for o in step[3] if o not in last_reader and o not in keep)
            step[4] += unread
        self.fgraph = fgraph
        self.steps = [tuple(s) for s in steps]
        self.n_values = len(index)
        self.n_inputs = len(fgraph.inputs)
        self.outputs = []
        for var in fgraph.outputs:
            if isinstance(var, Constant):
                self.outputs.append(("constant", numba_typify_constant(var)))
            else:
                self.outputs.append(("value", index[var]))

    def __call__(self, *inputs):
        values: list = [*inputs, *([None] * (self.n_values - self.n_inputs))]
        for node, fn, ins, outs, frees in self.steps:
            try:
                result = fn(*[values[i] for i in ins])
            except Exception as exc:
                exc.add_note(f"lasagne_bn: raised computing node {node}")
                raise
            if len(outs) == 1:
                values[outs[0]] = result
            else:
                for o, v in zip(outs, result, strict=True):
                    values[o] = v
            for i in frees:
                values[i] = None
        return tuple(v if kind == "constant" else values[v] for kind, v in self.outputs)


def numba_typify_constant(var):
    from pytensor.link.numba.dispatch.basic import numba_typify

    return numba_typify(var.data, variable=var)


class NumbaNodeLinker(NumbaLinker):
    """PyTensor's Numba linker that compiles big graphs node by node.

    Parameters
    ----------
    max_interface, max_nodes
        Past either (inputs plus outputs, nodes), the graph is compiled node
        by node; ``None``: :data:`MAX_WHOLE_INTERFACE`, :data:`MAX_WHOLE_NODES`.
    allow_gc, schedule
        As for PyTensor's linkers.
    """

    def __init__(
        self,
        allow_gc: bool | None = None,
        schedule=None,
        max_interface: int | None = None,
        max_nodes: int | None = None,
    ):
        super().__init__(allow_gc=allow_gc, schedule=schedule)
        for name, value in (("max_interface", max_interface), ("max_nodes", max_nodes)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise TypeError(f"NumbaNodeLinker: {name} must be an int or None, got {value!r}")
        self.max_interface = max_interface
        self.max_nodes = max_nodes

    def accept(self, fgraph, no_recycling=None, profile=None):
        if self.fgraph is not None and self.fgraph is not fgraph:
            clone = type(self)(
                allow_gc=self.allow_gc,
                max_interface=self.max_interface,
                max_nodes=self.max_nodes,
            )
            return clone.accept(fgraph, no_recycling, profile)
        return super().accept(fgraph, no_recycling, profile)

    def per_node(self, fgraph) -> bool:
        """Whether ``fgraph`` is compiled node by node."""
        return compiles_per_node(fgraph, self.max_interface, self.max_nodes)

    def fgraph_convert(self, fgraph, order=None, storage_map=None, **kwargs):
        if not self.per_node(fgraph):
            return super().fgraph_convert(fgraph, order=order, storage_map=storage_map, **kwargs)
        return _NodeProgram(fgraph, order or fgraph.toposort(), storage_map or {}), None

    def jit_compile(self, fn_and_cache):
        fn, _ = fn_and_cache
        if isinstance(fn, _NodeProgram):
            return fn
        return super().jit_compile(fn_and_cache)


def big_graph_mode(optimizer=None) -> Mode:
    """The default mode's rewrites with :class:`NumbaNodeLinker`.

    Parameters
    ----------
    optimizer
        The rewrites; ``None``: the default mode's (so ``optimizer=None``
        in ``THEANO_FLAGS`` or ``pytensor.config`` still means no rewrites).
    """
    if optimizer is None:
        optimizer = get_default_mode().provided_optimizer
    return Mode(linker=NumbaNodeLinker(), optimizer=optimizer)


def is_default_numba_mode(mode) -> bool:
    """Whether ``mode`` (a ``pytensor.function`` argument) means PyTensor's default Numba mode."""
    if mode is None:
        mode = config.mode
        if isinstance(mode, str) and mode in ("Mode", "FAST_RUN"):
            return config.linker in ("auto", "numba")
    if isinstance(mode, str):
        return mode.upper() == "NUMBA"
    return False


def use_by_default() -> Mode:
    """Make :func:`big_graph_mode` the default mode of ``pytensor.function``.

    A process-wide choice (it sets ``pytensor.config.mode``), made only when
    called.  Returns the mode that was the default, to restore it with
    ``pytensor.config.mode = previous``.
    """
    previous = config.mode
    pytensor.config.mode = big_graph_mode()
    return previous
