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

Importing this module registers the rewrite (``lasagne_bn.layers`` does).
"""

from __future__ import annotations

import pytensor.tensor as pt
from pytensor.compile import optdb
from pytensor.compile.sharedvalue import SharedVariable
from pytensor.graph.rewriting.basic import GraphRewriter

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
                # Two updates of one buffer: nothing sensible to merge into.
                continue
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
