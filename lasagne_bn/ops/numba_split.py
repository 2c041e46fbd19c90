"""Compile big graphs in the default (Numba) mode in pieces.

PyTensor 3.0.7's Numba linker turns the whole function graph into one
Python function and jits it: Numba links every node's code into one LLVM
module and optimizes that module as a whole.  Memory and time grow faster
than the graph: a ResNet-50 training step (about a thousand nodes) went past
8 GB of address space inside llvmlite, where Theano needed 1.3 GB.

This module's rewrite (``lasagne_bn_numba_split``, Numba mode only, last of
all rewrites, inside :func:`graph_splitting` only: experimental) cuts a big
graph that holds ``lasagne_bn`` Ops into consecutive pieces of the final
node order.  Each piece becomes one
:class:`NumbaGraphPiece` node, compiled as its own Numba function (its own
LLVM module, cached on disk under PyTensor's key for the piece) and called
from the whole-graph function through Numba's object mode.  Peak compile
memory then follows the biggest piece, not the whole graph; a call costs a
few microseconds per piece, which a graph this size does not notice.  Small
graphs (under :data:`MIN_GRAPH_WEIGHT`) and graphs without our Ops are left
exactly as PyTensor compiles them.

The pieces run their nodes in the order PyTensor scheduled them, and each
piece declares which of its inputs it destroys or returns views of, so the
in-place updates and aliasing checks that PyTensor already made still hold.

>>> import pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops.numba_split import graph_weight
>>> x = pt.vector("x")
>>> f = pytensor.function([x], pt.exp(x) + 1)
>>> graph_weight(f.maker.fgraph) < MIN_GRAPH_WEIGHT   # small: compiled whole, as before
True
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from contextvars import ContextVar
from hashlib import sha256
from pathlib import Path

import numba
import numpy as np
from pytensor import config
from pytensor.compile import optdb
from pytensor.compile.ops import DeepCopyOp, deep_copy_op
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.features import Feature
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.scalar.basic import ScalarType
from pytensor.tensor.elemwise import DimShuffle, Elemwise
from pytensor.tensor.type import DenseTensorType, TensorType

__all__ = [
    "MAX_PIECE_WEIGHT",
    "MIN_GRAPH_WEIGHT",
    "NumbaGraphPiece",
    "SplitLargeNumbaGraph",
    "graph_splitting",
    "graph_weight",
]

# Weights approximate how much LLVM code a node brings (see ``node_weight``).
# A graph lighter than MIN_GRAPH_WEIGHT is compiled whole, as PyTensor does;
# a heavier one is cut into pieces of at most MAX_PIECE_WEIGHT.
MIN_GRAPH_WEIGHT = 400
MAX_PIECE_WEIGHT = 120

_log = logging.getLogger(__name__)

# Keys the pieces' disk cache: an edit here must never load an old piece.
_SOURCE_VERSION = sha256(Path(__file__).read_bytes()).hexdigest()[:16]

_TOKEN_TYPE = TensorType("int8", shape=())

_CHEAP_OPS = (DimShuffle, DeepCopyOp)


def node_weight(node: Apply) -> int:
    """Rough code size of a node: elementwise kernels count per scalar op."""
    op = node.op
    if isinstance(op, _CHEAP_OPS):
        return 0
    if isinstance(op, Elemwise):
        inner = getattr(op.scalar_op, "fgraph", None)
        n_scalar = len(inner.apply_nodes) if inner is not None else 1
        return 2 + n_scalar // 4
    return 2


def graph_weight(fgraph: FunctionGraph) -> int:
    """The sum of :func:`node_weight` over ``fgraph``."""
    return sum(node_weight(node) for node in fgraph.apply_nodes)


def _is_ours(node: Apply) -> bool:
    return type(node.op).__module__.startswith("lasagne_bn.")


def _crossable(var: Variable) -> bool:
    """Whether a value of ``var``'s type can cross Numba's object-mode boundary."""
    return isinstance(var.type, DenseTensorType | ScalarType)


def _pieceable(node: Apply) -> bool:
    return all(_crossable(v) for v in (*node.inputs, *node.outputs)) and not isinstance(
        node.op, NumbaGraphPiece
    )


class _FixedOrder(Feature):
    """Makes ``FunctionGraph.toposort`` return the nodes in one given order."""

    def __init__(self, order):
        self.order = order

    def orderings(self, fgraph, ordered=True):
        return {b: [a] for a, b in zip(self.order, self.order[1:], strict=False)}


class _Carry:
    """Values one piece leaves for later pieces of the same function.

    They stay Python objects between pieces: passing hundreds of arrays
    through Numba's object-mode boundary costs seconds and gigabytes of
    compile time, and a training graph's backward pass needs hundreds of
    forward values.  A compiled function is not re-entrant while a call
    runs (as PyTensor's own storage is not).
    """

    def __init__(self):
        self.values: dict[int, object] = {}


class NumbaGraphPiece(Op):
    """A consecutive piece of a compiled graph, run as one separately compiled function.

    Parameters
    ----------
    fgraph
        The piece: its inputs are the graph inputs it reads, then the values
        earlier pieces left in ``carry``; its outputs are the values it
        returns, then those it leaves in ``carry``.
    n_real, n_returned
        How many of ``fgraph``'s inputs and outputs are real node inputs
        and outputs (the rest go through ``carry``).
    carry, in_keys, out_keys, release_keys
        The store, the keys of the carried inputs and outputs, and the keys
        this piece is the last reader of.
    has_token
        The node takes the previous piece's token as its last input (every
        piece returns one last): pieces run in the order they were cut.
    view_map, destroy_map
        Which real inputs the returned outputs view or destroy.
    """

    def __init__(
        self,
        fgraph,
        n_real,
        n_returned,
        carry,
        in_keys,
        out_keys,
        release_keys,
        has_token,
        view_map=None,
        destroy_map=None,
    ):
        self.fgraph = fgraph
        self.n_real = n_real
        self.n_returned = n_returned
        self.carry = carry
        self.in_keys = tuple(in_keys)
        self.out_keys = tuple(out_keys)
        self.release_keys = tuple(release_keys)
        self.has_token = has_token
        self.view_map = view_map or {}
        self.destroy_map = destroy_map or {}
        # The piece reads every view of a buffer it destroys before destroying
        # it: its nodes run in the order PyTensor's destroy handler checked.
        n_inputs = n_real + int(has_token)
        destroyed = {j for positions in self.destroy_map.values() for j in positions}
        self.destroyhandler_tolerate_aliased = [
            (j, i) for j in sorted(destroyed) for i in range(n_inputs) if i != j
        ]
        self._compiled = None

    def __str__(self):
        return f"NumbaGraphPiece{{{len(self.fgraph.apply_nodes)} nodes}}"

    def make_node(self, *inputs):
        n_inputs = self.n_real + int(self.has_token)
        if len(inputs) != n_inputs:
            raise ValueError(f"NumbaGraphPiece: expected {n_inputs} inputs, got {len(inputs)}")
        for var, inner in zip(inputs, self.fgraph.inputs[: self.n_real], strict=False):
            if var.type != inner.type:
                raise TypeError(
                    f"NumbaGraphPiece: input {var} has type {var.type}, expected {inner.type}"
                )
        returned = [o.type() for o in self.fgraph.outputs[: self.n_returned]]
        return Apply(self, list(inputs), [*returned, _TOKEN_TYPE()])

    def compiled(self):
        """The piece as a Python-callable Numba function (compiled on its first call)."""
        if self._compiled is None:
            self._compiled = _jit_piece(self.fgraph)
        return self._compiled

    def run(self, inputs):
        """The returned outputs and the token, given the real inputs."""
        values = self.carry.values
        carried = [values[key] for key in self.in_keys]
        results = self.compiled()(*inputs[: self.n_real], *carried)
        for key, value in zip(self.out_keys, results[self.n_returned :], strict=True):
            values[key] = value
        for key in self.release_keys:
            values.pop(key, None)
        return (*results[: self.n_returned], np.zeros((), dtype="int8"))

    def perform(self, node, inputs, output_storage):
        for storage, value in zip(output_storage, self.run(inputs), strict=True):
            storage[0] = value


# One Numba function per node cache key, for the whole process: nodes that
# PyTensor gives the same key (the same Op, props and types: a ResNet repeats
# a few dozen kinds of node hundreds of times) share one compiled function
# instead of each loading or compiling its own copy.
_NODE_FUNCTIONS: dict[str, object] = {}


def _node_function(op, node, **kwargs):
    from pytensor.link.numba.dispatch.basic import numba_funcify_ensure_cache

    func, key = numba_funcify_ensure_cache(op, node=node, **kwargs)
    if key is None:
        return func, None
    full_key = f"{key}_fastmath{int(config.numba__fastmath)}"
    return _NODE_FUNCTIONS.setdefault(full_key, func), key


def _jit_piece(fgraph):
    """Jit ``fgraph`` as PyTensor's Numba linker would, sharing node functions by key."""
    from pytensor.link.numba.cache import compile_numba_function_src
    from pytensor.link.numba.dispatch.basic import (
        cache_key_for_constant,
        numba_njit,
        numba_typify,
    )
    from pytensor.link.utils import fgraph_to_python

    order = fgraph.toposort()
    coords: dict[Variable, tuple] = {v: (0, i) for i, v in enumerate(fgraph.inputs)}
    coords |= {out: (i, j) for i, n in enumerate(order, 1) for j, out in enumerate(n.outputs)}
    keys: list = []
    cacheable = [True]

    def convert(op, *args, node, **kwargs):
        func, key = _node_function(op, node, **kwargs)
        if key is None:
            cacheable[0] = False
        else:
            keys.append((tuple(coords[v] for v in node.inputs), key))
        return func

    def typify(value, variable, **kwargs):
        if isinstance(variable, Constant):
            coords[variable] = (-1, cache_key_for_constant(value))
        return numba_typify(value, variable=variable, **kwargs)

    py_func = fgraph_to_python(
        fgraph,
        op_conversion_fn=convert,
        type_conversion_fn=typify,
        order=order,
        fgraph_name="lasagne_bn_graph_piece",
    )
    body = numba_njit(py_func)
    key = None
    if cacheable[0]:
        parts = ("lasagne_bn_graph_piece", _SOURCE_VERSION, keys, len(fgraph.inputs))
        parts += (tuple(coords[o] for o in fgraph.outputs), int(config.numba__fastmath))
        key = sha256(repr(parts).encode()).hexdigest()
    wrapper = compile_numba_function_src(
        "def lasagne_bn_graph_piece(*args):\n    return body(*args)\n",
        "lasagne_bn_graph_piece",
        # This module's globals: Numba rebuilds a cached function's
        # environment by importing the module named there.
        global_env=globals() | {"body": body},
        cache_key=key,
    )
    return numba_njit(wrapper, final_function=True, cache=key is not None)


def _numba_funcify_piece(op, node, **kwargs):
    from pytensor.link.numba.dispatch.basic import get_numba_type, numba_njit

    outputs_type = numba.types.Tuple([get_numba_type(o.type) for o in node.outputs])
    run = op.run

    @numba_njit
    def piece(*inputs):
        with numba.objmode(ret=outputs_type):
            ret = run(inputs)
        return ret

    return piece, None


def _register_numba() -> None:
    from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

    register_funcify_and_cache_key(NumbaGraphPiece)(_numba_funcify_piece)


_register_numba()


# --------------------------------------------------------------------------
# the rewrite


def _alias_roots(nodes, inputs):
    """Map every variable of ``nodes`` to the piece input it aliases, or to itself.

    Also returns ``{input index: the last variable that aliases it after being
    destroyed in place}`` for the inputs the piece destroys.
    """
    root: dict[Variable, object] = {v: ("input", j) for j, v in enumerate(inputs)}
    destroyed: dict[int, Variable] = {}
    for node in nodes:
        aliased = {**node.op.view_map, **node.op.destroy_map}
        for k, out in enumerate(node.outputs):
            if aliased.get(k):
                source = node.inputs[aliased[k][0]]
                root[out] = root.get(source, source)
            else:
                root[out] = out
        for k, positions in node.op.destroy_map.items():
            for i in positions:
                r = root.get(node.inputs[i], node.inputs[i])
                if isinstance(r, tuple):
                    destroyed[r[1]] = node.outputs[k]
    return root, destroyed


def _build_pieces(fgraph, pieces):
    """The piece nodes for ``pieces`` (lists of nodes) and the ``(old, new)`` pairs."""
    piece_of = {node: k for k, nodes in enumerate(pieces) for node in nodes}
    carry = _Carry()
    keys: dict[Variable, int] = {}
    last_reader: dict[Variable, int] = {}
    specs = []
    for k, nodes in enumerate(pieces):
        inside = set(nodes)
        produced = {out for node in nodes for out in node.outputs}
        real, carried = [], []
        for node in nodes:
            for var in node.inputs:
                if var in produced or isinstance(var, Constant):
                    continue
                if var.owner is not None and var.owner in piece_of:
                    if var not in carried:
                        carried.append(var)
                        last_reader[var] = k
                elif var not in real:
                    real.append(var)
        returned, stored = [], []
        for node in nodes:
            for out in node.outputs:
                outside = [c for c, _ in fgraph.clients[out] if c == "output" or c not in inside]
                if any(c == "output" or c not in piece_of for c in outside):
                    returned.append(out)
                if any(c != "output" and c in piece_of for c in outside):
                    stored.append(out)
                    keys[out] = len(keys)
        specs.append((nodes, real, carried, returned, stored))

    replacements = []
    token = None
    for k, (nodes, real, carried, returned, stored) in enumerate(specs):
        root, destroyed = _alias_roots(nodes, real)
        n_used = len(returned)
        returned = returned + [a for a in destroyed.values() if a not in returned]

        memo: dict[Variable, Variable] = {}
        inner_inputs = []
        for var in (*real, *carried):
            new = var.type()
            new.name = var.name
            memo[var] = new
            inner_inputs.append(new)
        inner_order = []
        for node in nodes:
            new_node = node.clone_with_new_inputs([memo.get(v, v) for v in node.inputs])
            memo.update(zip(node.outputs, new_node.outputs, strict=True))
            inner_order.append(new_node)
        inner_returned = [memo[out] for out in returned]
        # Returned outputs on one buffer made inside the piece: PyTensor can
        # no longer see that they alias, so a function output gets a copy.
        seen_roots: set = set()
        for i, out in enumerate(returned):
            r = root[out]
            if isinstance(r, tuple):
                continue
            if r in seen_roots and any(c == "output" for c, _ in fgraph.clients[out]):
                inner_returned[i] = deep_copy_op(inner_returned[i])
                inner_order.append(inner_returned[i].owner)
            seen_roots.add(r)
        view_map, destroy_map = {}, {}
        for i, out in enumerate(returned):
            r = root[out]
            if isinstance(r, tuple) and inner_returned[i] is memo[out]:
                if destroyed.get(r[1]) is out:
                    destroy_map[i] = [r[1]]
                else:
                    view_map[i] = [r[1]]
        inner = FunctionGraph(
            inner_inputs,
            inner_returned + [memo[out] for out in stored],
            clone=False,
            features=[_FixedOrder(inner_order)],
        )
        op = NumbaGraphPiece(
            inner,
            n_real=len(real),
            n_returned=len(returned),
            carry=carry,
            in_keys=[keys[v] for v in carried],
            out_keys=[keys[v] for v in stored],
            release_keys=[keys[v] for v in carried if last_reader[v] == k],
            has_token=token is not None,
            view_map=view_map,
            destroy_map=destroy_map,
        )
        outputs = op(*real, *([token] if token is not None else []), return_list=True)
        token = outputs[-1]
        for old, new in zip(returned[:n_used], outputs, strict=False):
            new.name = old.name
            replacements.append((old, new))
    return replacements


class SplitLargeNumbaGraph(GraphRewriter):
    """Cut a big graph holding ``lasagne_bn`` Ops into separately compiled pieces."""

    def __init__(self, min_weight=None, max_piece_weight=None):
        super().__init__()
        self.min_weight = min_weight
        self.max_piece_weight = max_piece_weight

    def apply(self, fgraph):
        if not _ENABLED.get():
            return
        min_weight = MIN_GRAPH_WEIGHT if self.min_weight is None else self.min_weight
        max_piece = MAX_PIECE_WEIGHT if self.max_piece_weight is None else self.max_piece_weight
        if not any(_is_ours(node) for node in fgraph.apply_nodes):
            return
        if graph_weight(fgraph) < min_weight:
            return
        pieces, current, weight = [], [], 0
        for node in fgraph.toposort():
            if not _pieceable(node):
                if current:
                    pieces.append(current)
                current, weight = [], 0
                continue
            current.append(node)
            weight += node_weight(node)
            if weight >= max_piece:
                pieces.append(current)
                current, weight = [], 0
        if current:
            pieces.append(current)
        pieces = [nodes for nodes in pieces if len(nodes) > 1]
        if len(pieces) < 2:
            return
        replacements = _build_pieces(fgraph, pieces)
        try:
            fgraph.replace_all_validate(replacements, reason="lasagne_bn_numba_split")
        except Exception as exc:  # the destroy handler refused: compile the graph whole
            _log.debug("lasagne_bn_numba_split: graph kept whole: %s", exc)


_ENABLED: ContextVar[bool] = ContextVar("lasagne_bn_numba_split", default=False)
_REGISTERED = False


@contextmanager
def graph_splitting():
    """Compile the default-mode functions built inside the block in pieces (experimental).

    Off by default: it is exact (tested against ``FAST_COMPILE``) but has not
    yet shown that it keeps a ResNet-50 training function within memory, and a
    split function must not be called from two threads at once.  The rewrite
    is registered (Numba mode only, last of all rewrites) on first use.
    """
    global _REGISTERED
    if not _REGISTERED:
        optdb.register("lasagne_bn_numba_split", SplitLargeNumbaGraph(), "numba", position=1000)
        _REGISTERED = True
    token = _ENABLED.set(True)
    try:
        yield
    finally:
        _ENABLED.reset(token)
