"""A graph rewrite that makes memory-aliased shared variables safe in one function.

Lasagne keeps batch-norm running averages current with a *memory-aliased
clone* of each statistic (a second ``SharedVariable`` on the same
container) that carries the ``default_update``.  When one compiled
function reads the original *and* updates the clone (for example a
training output and a deterministic output compiled together), PyTensor
3.0.7 sees two unrelated inputs: its destroy handler lets the update be
computed in place into the shared buffer before the original is read, and
the Numba and CVM backends then return outputs computed from the *new*
statistics.

This rewrite runs first in every compilation mode that may introduce
in-place operations: among the function's inputs it finds shared variables
that share a container, and points every reader at the one variable that
is updated (or at the first one, if none is).  The graph then reads and
updates a single variable, and PyTensor orders the in-place update after
all reads, as it does for any ``updates={w: ...}``.

When one function holds *several* updated clones of one buffer (a GAN's
discriminator applied to real and to fake data: two training passes, each
with its running-average update), Theano 1.0's default mode applied the
updates one after the other, in place, in the order the function collected
the clones (the order of its inputs: depth-first through the outputs, so the
pass met first in the loss comes first).  The rewrite chains them the same
way: each later update reads the value the earlier ones produced, and every
clone's update slot receives the last value, so all modes agree.

Importing this module registers nothing: :func:`register` does, called the
first time a ``default_update`` is set through
:func:`lasagne_bn.utils.set_default_update` or a layer graph is built
(:func:`lasagne_bn.ops.rewrites.ensure_registered` with ``"aliasing"``).
"""

from __future__ import annotations

import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.rewriting.basic import GraphRewriter
from pytensor.graph.traversal import ancestors

from lasagne_bn.ops.rewrites import define_group

__all__ = ["MergeAliasedSharedInputs"]


class MergeAliasedSharedInputs(GraphRewriter):
    """Make all readers of one shared container read the same graph input."""

    def apply(self, fgraph):
        groups: dict[int, list] = {}
        for var in fgraph.inputs:
            if isinstance(var, SharedVariable):
                groups.setdefault(id(var.container), []).append(var)
        mapping = getattr(fgraph, "update_mapping", None) or {}
        updated_positions = set(mapping.values())
        for group in groups.values():
            if len(group) < 2:
                continue
            updated = [v for v in group if fgraph.inputs.index(v) in updated_positions]
            if len(updated) > 1:
                _chain_updates(fgraph, updated, mapping)
            keep = updated[0] if updated else group[0]
            for var in group:
                if var is keep or not fgraph.clients.get(var):
                    continue
                new = keep
                if not var.type.is_super(new.type):
                    # The original may know static sizes that the kept
                    # variable does not; readers keep what they knew.
                    new = pt.specify_shape(keep, var.type.shape)
                    if not var.type.is_super(new.type):
                        continue
                fgraph.replace(var, new, reason="merge_aliased_shared_inputs", import_missing=True)


def _rebuild_with(fgraph, output, old, new):
    """``output`` with ``old`` replaced by ``new``; only nodes between them are cloned."""
    needed = set(ancestors([output], blockers=[old]))
    if old not in needed:
        return output
    # Variables that depend on ``old`` (and lead to ``output``): walk its clients.
    depends = {old}
    stack = [old]
    while stack:
        for client, _ in fgraph.clients.get(stack.pop(), ()):
            if not hasattr(client, "outputs"):
                continue
            for out in client.outputs:
                if out in needed and out not in depends:
                    depends.add(out)
                    stack.append(out)
    memo = {old: new}
    for node in fgraph.toposort():
        if not any(out in depends for out in node.outputs):
            continue
        inputs = [memo.get(i, i) for i in node.inputs]
        clone = node.clone_with_new_inputs(inputs, strict=False)
        memo.update(zip(node.outputs, clone.outputs, strict=True))
    return memo[output]


def _chain_updates(fgraph, updated, mapping):
    """Apply several updates of one buffer one after the other, as Theano 1.0 did.

    ``updated`` are the clones in input order; each later update reads the
    result of the earlier ones, and every update slot gets the final value.
    """
    out_of = {inp: out for out, inp in mapping.items()}
    slots = [out_of[fgraph.inputs.index(var)] for var in updated]
    current = fgraph.outputs[slots[0]]
    for var, slot in zip(updated[1:], slots[1:], strict=True):
        current = _rebuild_with(fgraph, fgraph.outputs[slot], var, current)
    for slot in slots:
        if fgraph.outputs[slot] is not current:
            node, index = fgraph.get_output_client(slot)
            fgraph.change_node_input(
                node, index, current, reason="chain_aliased_updates", import_missing=True
            )


def register() -> None:
    """Add the rewrite to ``optdb`` (see :mod:`lasagne_bn.ops.rewrites`)."""
    optdb.register(
        "lasagne_bn_merge_aliased_shared",
        MergeAliasedSharedInputs(),
        "fast_run",
        "fast_compile",
        "minimum_compile",
        "jax",
        "numba",
        position=0.01,
    )


define_group("aliasing", (), register)
