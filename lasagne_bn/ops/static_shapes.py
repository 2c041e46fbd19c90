"""JAX mode: shape arithmetic evaluated while tracing, so it stays static.

Under ``jax.jit`` every array shape is a concrete number, but PyTensor's JAX
backend computes with shapes as traced values: ``x[:, :n + 1]`` with
``n = x.shape[1]``, ``pt.zeros((x.shape[0], 8))``, ``pt.arange(y.shape[0])``,
the gradient of ``pt.pad`` or of a concatenation all end in JAX refusing a
traced slice bound or size (``IndexError: Slice entries must be static
integers``).  Legacy code builds such graphs everywhere (ResNet shortcuts
that subsample and zero-pad, ``T.arange(y.shape[0])`` in losses).

A first rewrite (``lasagne_bn_jax_inline_ofg``; both are registered by
:func:`lasagne_bn.ops.rewrites.ensure_registered`, not at import) inlines ``OpFromGraph``
nodes, so that shape arithmetic inside them (``pt.pad`` and its gradient)
is visible.  The rewrite ``lasagne_bn_jax_static_shapes`` (JAX mode only) finds each
value computed from shapes and constants alone (scalars, and shape
vectors) and replaces it with one :class:`StaticShapeExpr` node, whose JAX
implementation evaluates the expression with NumPy on the concrete shapes
while JAX traces the function.  The result is a NumPy value, which JAX
treats as a constant.

>>> import numpy as np, pytensor, pytensor.tensor as pt
>>> x = pt.matrix("x")
>>> f = pytensor.function([x], x[:, : x.shape[1] - 1], mode="JAX")  # doctest: +SKIP
>>> f(np.ones((2, 3))).shape  # doctest: +SKIP
(2, 2)
"""

from __future__ import annotations

import numpy as np
from pytensor.compile import optdb
from pytensor.compile.builders import OpFromGraph
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.graph.fg import FunctionGraph
from pytensor.graph.op import Op
from pytensor.graph.rewriting.basic import GraphRewriter, dfs_rewriter, node_rewriter
from pytensor.scalar.basic import ScalarType
from pytensor.tensor.basic import Join, MakeVector, Split
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.rewriting.ofg import inline_ofg_node
from pytensor.tensor.shape import Shape, Shape_i
from pytensor.tensor.subtensor import Subtensor
from pytensor.tensor.type import TensorType

__all__ = ["StaticShapeExpr", "StaticShapeArithmetic"]

# Ops whose vector output is a shape-sized vector, not data: they may stay
# static with ndim 1.  Everything else must give scalars.
_VECTOR_OPS = (Shape, MakeVector, Subtensor, Join)


class StaticShapeExpr(Op):
    """Values computed from the shapes of ``inputs`` (never their data).

    ``fgraph`` takes the tensors whose shapes are used and returns the
    values; every backend evaluates it with the nodes' ``perform``.
    """

    __props__ = ()

    def __init__(self, fgraph: FunctionGraph):
        self.fgraph = fgraph

    def __eq__(self, other):
        return self is other

    def __hash__(self):
        return id(self)

    def __str__(self):
        return "StaticShapeExpr"

    def make_node(self, *inputs):
        if len(inputs) != len(self.fgraph.inputs):
            raise ValueError(
                f"StaticShapeExpr: expected {len(self.fgraph.inputs)} inputs, got {len(inputs)}"
            )
        return Apply(self, list(inputs), [o.type() for o in self.fgraph.outputs])

    def evaluate(self, shapes):
        """The outputs as NumPy values, given the inputs' shapes."""
        values: dict[Variable, object] = {}
        for var, shape, inner in zip(self.fgraph.inputs, shapes, self.fgraph.inputs, strict=True):
            # A zero-strided stand-in of the right shape: Shape ops only read .shape.
            values[var] = np.broadcast_to(np.zeros((), dtype=inner.type.dtype), tuple(shape))
        for node in self.fgraph.toposort():
            args = [v.data if isinstance(v, Constant) else values[v] for v in node.inputs]
            storage = [[None] for _ in node.outputs]
            node.op.perform(node, args, storage)
            for out, cell in zip(node.outputs, storage, strict=True):
                values[out] = cell[0]
        results = []
        for out in self.fgraph.outputs:
            value = out.data if isinstance(out, Constant) else values[out]
            if isinstance(out.type, ScalarType):
                results.append(np.dtype(out.type.dtype).type(value))
            else:
                results.append(np.asarray(value, dtype=out.type.dtype))
        return results

    def perform(self, node, inputs, output_storage):
        for cell, value in zip(
            output_storage, self.evaluate([x.shape for x in inputs]), strict=True
        ):
            cell[0] = value


def _is_static_node(node, static) -> bool:
    op = node.op
    if isinstance(op, Shape | Shape_i):
        return True
    if isinstance(op, StaticShapeExpr):
        return False
    if not all(isinstance(v, Constant) or v in static for v in node.inputs):
        return False
    if not node.inputs:
        return False
    for out in node.outputs:
        if isinstance(out.type, ScalarType):
            continue
        if not isinstance(out.type, TensorType):
            return False
        if out.type.ndim == 0 or (out.type.ndim == 1 and isinstance(op, _VECTOR_OPS)):
            continue
        return False
    return True


class StaticShapeArithmetic(GraphRewriter):
    """Replace shape-only computations with :class:`StaticShapeExpr` nodes."""

    def apply(self, fgraph):
        # Every JAX graph, not only those holding our Ops: the shape
        # arithmetic that fails is often inside PyTensor's own inner graphs
        # (the gradient of ``pt.pad`` is an OpFromGraph), and evaluating it
        # early changes no value.
        _register_jax()
        static: set[Variable] = set()
        for node in fgraph.toposort():
            if _is_static_node(node, static):
                static.update(node.outputs)
        # The values leaving the shape-only part of the graph.
        frontier = [
            var
            for var in static
            if var.owner is not None
            and not isinstance(var.owner.op, Shape | Shape_i)
            and any(_needs_static(client, static) for client, _ in fgraph.clients[var])
        ]
        replacements = []
        for var in frontier:
            leaves = []
            for node in _ancestor_nodes(var):
                if isinstance(node.op, Shape | Shape_i) and node.inputs[0] not in leaves:
                    leaves.append(node.inputs[0])
            inner = FunctionGraph(leaves, [var], clone=True)
            new = StaticShapeExpr(inner)(*leaves)
            if isinstance(new, list | tuple):
                new = new[0]
            new.name = var.name
            replacements.append((var, new))
        if replacements:
            fgraph.replace_all_validate(replacements, reason="lasagne_bn_jax_static_shapes")


def _needs_static(client, static) -> bool:
    """Whether ``client`` takes a shape-only value where JAX wants a concrete one.

    Elementwise arithmetic on data (``x / x.shape[0]``) works with traced
    values and is left alone; indexing, allocation, ``arange``, reshapes and
    splits are not.
    """
    if client == "output" or isinstance(client.op, Elemwise):
        return False
    return not all(o in static for o in client.outputs)


def _ancestor_nodes(var):
    seen, stack, nodes = set(), [var], []
    while stack:
        v = stack.pop()
        node = v.owner
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        if isinstance(node.op, Shape | Shape_i):
            continue
        stack.extend(node.inputs)
    return nodes


_registered = []


def _register_jax() -> None:
    """Register the JAX implementation (imports JAX: called from the JAX-only rewrite)."""
    if _registered:
        return
    from pytensor.link.jax.dispatch import jax_funcify

    @jax_funcify.register(StaticShapeExpr)
    def jax_funcify_StaticShapeExpr(op, node, **kwargs):
        single = len(node.outputs) == 1

        def static_shape_expr(*inputs):
            results = op.evaluate([x.shape for x in inputs])
            return results[0] if single else tuple(results)

        return static_shape_expr

    # PyTensor's JAX Split sums non-constant split sizes with jnp.cumsum,
    # which makes even our NumPy sizes traced (the gradient of a
    # concatenation with an input of unknown static width: T.concatenate
    # of a conditioning vector in DCGANs).  Sizes from a StaticShapeExpr
    # are concrete while tracing, so split with NumPy's cumsum.
    base_split = jax_funcify.dispatch(Split)

    @jax_funcify.register(Split)
    def jax_funcify_Split_static(op, node, **kwargs):
        _, axis_var, splits_var = node.inputs
        if not (
            isinstance(axis_var, Constant)
            and splits_var.owner is not None
            and isinstance(splits_var.owner.op, StaticShapeExpr)
        ):
            return base_split(op, node, **kwargs)
        axis = int(axis_var.data)

        def split(x, _axis, splits):
            import jax.numpy as jnp

            splits = np.asarray(splits)
            if len(splits) != op.len_splits:
                raise ValueError(f"Split: {len(splits)} split sizes for {op.len_splits} outputs")
            if (splits < 0).any() or splits.sum() != x.shape[axis]:
                raise ValueError(
                    f"Split: sizes {splits.tolist()} do not split axis {axis} of length "
                    f"{x.shape[axis]}"
                )
            return jnp.split(x, np.cumsum(splits[:-1]), axis=axis)

        return split

    _registered.append(True)


@node_rewriter([OpFromGraph])
def local_inline_ofg_for_jax(fgraph, node):
    """Inline every ``OpFromGraph`` (``pt.pad`` and its gradient are ones).

    Their inner graphs get shapes and pad widths as inputs, where neither
    constant folding nor the static-shape rewrite can see them; XLA fuses
    the inlined graph as well as the wrapped one.
    """
    return inline_ofg_node(node)


def register() -> None:
    """Add both rewrites to ``optdb`` (JAX mode only); see :mod:`lasagne_bn.ops.rewrites`."""
    # Before PyTensor's first merge and canonicalization, so the inlined
    # graphs are simplified (constants folded) like the rest.
    optdb.register(
        "lasagne_bn_jax_inline_ofg",
        dfs_rewriter(local_inline_ofg_for_jax),
        "jax",
        position=-0.005,
    )
    # After PyTensor's own JAX shape rewrites (100) and ours for convolutions.
    optdb.register("lasagne_bn_jax_static_shapes", StaticShapeArithmetic(), "jax", position=101)
