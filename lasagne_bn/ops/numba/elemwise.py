"""Large elementwise nodes of a node-by-node program, split over the kernel threads.

PyTensor's Numba ``Elemwise`` loop runs on one thread.  In a training step
that :class:`~lasagne_bn.ops.numba.linker.NumbaNodeLinker` runs node by node,
the activations, their gradients and the optimizer's updates are a tenth of
the step (a DCGAN: 12 ms of 160), done with the second core idle.  The node
function built here cuts the outputs' first axis into slabs, a run of them
per thread, and runs PyTensor's own loop for the node on each slab, inside
Numba's ``prange``: the same pool as the batch-norm and convolution kernels (a worker still
spinning after a convolution takes its slab at once; a Python helper thread
competed with it and lost), the same per-call policy (:mod:`.threads`, family
``'elemwise'``: one thread for a small output or a busy machine), and the
same scalar code on every element, so the same bits as one call.

The slab loop is PyTensor's loop for a copy of the node whose every output is
computed in place: into the output's own input where the node already
overwrites one, otherwise into a fresh array passed as an extra input that
the scalar expression ignores.

When every input is either the output's full shape or a single value (an
optimizer's update, an activation, a learning rate), and at run time every
array is C-contiguous, the slabs are runs of the flattened arrays and the
loop is PyTensor's for a one-dimensional copy of the node
(:func:`flat_node`): its loop nest over four axes ran the innermost one
(4 elements for a 4x4 filter) at a fraction of the vector speed, so an Adam
update of a (256, 128, 4, 4) filter bank took 3.4x as long (2.28 against
0.68 ms) as over the same elements in one dimension.

Only nodes whose values are all float32 or float64 and whose outputs are not
broadcastable on their first axis are split (an integer expression may raise,
and an exception inside a parallel region cannot be reported as it should;
float16 goes through this package's own Numba support, kept off the pool).

>>> import pytensor, pytensor.tensor as pt
>>> from lasagne_bn.ops.numba.elemwise import slab_node
>>> x = pt.matrix("x")
>>> slab_node(pt.tanh(x + 1).owner).op.destroy_map
{0: [0]}
"""

from __future__ import annotations

from typing import Any

import numba
import numpy as np
import pytensor.scalar as ps
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic
from numba.np.arrayobj import populate_array
from pytensor.graph.basic import Apply
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.type import TensorType

from lasagne_bn.ops.numba.threads import (
    ELEMWISE,
    ensure_symbols,
    enter_threads,
    set_num_threads,
)

__all__ = ["splittable", "slab_node", "flat_node", "split_source"]

# Slabs per call: Numba's prange hands each thread a run of consecutive
# slabs, so several per thread balance the load, each one call of PyTensor's
# loop.  (Numba's own thread count cannot be read in a parallel function
# that is cached: its declaration clashes with the one the parallel region
# links.)
MAX_SLABS = 64
# ... and at least this many elements per slab of the flattened arrays
MIN_FLAT_SLAB = 1024
# Nodes whose split function would take more arrays than this (inputs,
# outputs and a buffer per output not computed in place) are left to
# PyTensor's loop: LLVM's time on the parallel function grows much faster
# than the operand count.  Cold compiles of one fused update node (``p + x`` for k shared
# vectors, one output each), split against not split: 5 operands 1.6 s, 17
# 3.8 s, 25 4.1 / 2.2 s, 49 8.2 / 2.6 s, 141 over 240 / 18 s (2026-11-29).
# An optimizer's update of one parameter has about ten.
MAX_SPLIT_OPERANDS = 32


def _fresh_outputs(node: Apply) -> list[int]:
    """The outputs ``node`` does not compute in place: each gets a buffer input."""
    return [k for k in range(len(node.outputs)) if k not in node.op.inplace_pattern]


def splittable(node: Apply) -> bool:
    """Whether :func:`split_source` can build a split node function for ``node``."""
    op = node.op
    if type(op) is not Elemwise:
        return False
    outs = node.outputs
    if len(node.inputs) + len(outs) + len(_fresh_outputs(node)) > MAX_SPLIT_OPERANDS:
        return False
    ndim = outs[0].type.ndim
    if ndim == 0 or any(o.type.ndim != ndim or o.type.broadcastable[0] for o in outs):
        return False
    values = [*node.inputs, *outs]
    return all(getattr(v.type, "dtype", "") in ("float32", "float64") for v in values)


def slab_node(node: Apply) -> Apply:
    """A copy of the Elemwise ``node`` computing every output in place.

    Its inputs are one buffer per output the node does not already compute
    in place (in output order), then the node's own inputs.
    """
    op = node.op
    fresh = _fresh_outputs(node)
    if not fresh:
        return node
    scalar = op.scalar_op
    if isinstance(scalar, ps.Composite):
        inner_in, inner_out = list(scalar.inputs), list(scalar.outputs)
    else:
        inner_in = [ps.get_scalar_type(i.type.dtype)() for i in node.inputs]
        inner_out = scalar.make_node(*inner_in).outputs
    buffers = [ps.get_scalar_type(node.outputs[k].type.dtype)() for k in fresh]
    composite = ps.Composite(buffers + inner_in, inner_out)
    pattern = {k: j for j, k in enumerate(fresh)}
    pattern.update({k: i + len(fresh) for k, i in op.inplace_pattern.items()})
    buffer_vars = [node.outputs[k].type() for k in fresh]
    return Elemwise(composite, inplace_pattern=pattern).make_node(*buffer_vars, *node.inputs)


def _flattenable(node: Apply) -> bool:
    """Every input the output's full shape or one value, in two or more dimensions."""
    ndim = node.outputs[0].type.ndim
    if ndim < 2 or any(any(o.type.broadcastable) for o in node.outputs):
        return False
    return all(all(i.type.broadcastable) or not any(i.type.broadcastable) for i in node.inputs)


def flat_node(node: Apply) -> Apply | None:
    """:func:`slab_node` of ``node`` over one-dimensional arrays, or None.

    Only for a node whose every input is either the output's full shape or
    one value (broadcastable on every axis): there, computing over the
    flattened C-contiguous arrays is the same element-by-element work.
    """
    if not _flattenable(node):
        return None
    slab = slab_node(node)

    def flat(var):
        return TensorType(var.type.dtype, shape=(1 if all(var.type.broadcastable) else None,))()

    return Elemwise(slab.op.scalar_op, inplace_pattern=slab.op.inplace_pattern).make_node(
        *[flat(i) for i in slab.inputs]
    )


@intrinsic
def flat_view(typingctx, arr):
    """A one-dimensional C-contiguous view of all of the C-contiguous array ``arr``."""
    if not isinstance(arr, types.Array):
        return None
    ret = types.Array(arr.dtype, 1, "C")

    def codegen(context, builder, sig, args):
        src = context.make_array(sig.args[0])(context, builder, args[0])
        out = context.make_array(ret)(context, builder)
        itemsize = context.get_abi_sizeof(context.get_data_type(arr.dtype))
        populate_array(
            out,
            data=src.data,
            shape=cgutils.pack_array(builder, [src.nitems]),
            strides=cgutils.pack_array(builder, [context.get_constant(types.intp, itemsize)]),
            itemsize=context.get_constant(types.intp, itemsize),
            meminfo=src.meminfo,
            parent=src.parent,
        )
        value = out._getvalue()
        # the view holds a reference to the array's memory, as a slice does
        context.nrt.incref(builder, ret, value)
        return value

    return ret(arr), codegen


def split_source(
    node: Apply, params: list[str], args: list[str], flat: bool = False
) -> tuple[str, dict[str, Any]]:
    """The source of a split node function, and the names it needs besides ``slab_impl``.

    ``params``: the function's parameters (the non-constant inputs);
    ``args``: one expression per input of ``node`` (a parameter or a bound
    constant).  ``slab_impl`` must be PyTensor's Numba function for
    :func:`slab_node` of ``node`` and, with ``flat`` (the caller built
    :func:`flat_node` of ``node``), ``flat_impl`` the one for that node.
    """
    ensure_symbols()
    op = node.op
    outs = node.outputs
    ndim = outs[0].type.ndim
    fresh = _fresh_outputs(node)
    lines = [f"def lasagne_bn_node({', '.join(params)}):"]
    # the output shape: each axis from the first input not broadcastable there
    shape = []
    for d in range(ndim):
        owners = [a for a, i in zip(args, node.inputs, strict=True) if not i.type.broadcastable[d]]
        if not owners:
            shape.append("1")
            continue
        shape.append(f"{owners[0]}.shape[{d}]")
        for other in owners[1:]:
            lines.append(f"    if {other}.shape[{d}] != {owners[0]}.shape[{d}]:")
            lines.append(
                f"        raise ValueError('Elemwise: input shapes differ on axis {d} "
                "and neither is broadcastable there')"
            )
    out_names = []
    for k, out in enumerate(outs):
        if k in op.inplace_pattern:
            out_names.append(args[op.inplace_pattern[k]])
        else:
            name = f"o{k}"
            dims = ", ".join(shape) + ("," if ndim == 1 else "")
            lines.append(f"    {name} = np.empty(({dims}), dtype=np.{out.type.dtype})")
            out_names.append(name)
    slab_args = [out_names[k] for k in fresh] + list(args)
    slab_bc = [False] * len(fresh) + [i.type.broadcastable[0] for i in node.inputs]

    def call(lo: str, hi: str) -> str:
        parts = [a if bc else f"{a}[{lo}:{hi}]" for a, bc in zip(slab_args, slab_bc, strict=True)]
        return f"slab_impl({', '.join(parts)})"

    lines += [
        f"    n = {shape[0]}",
        f"    size = n * {'*'.join(['1', *shape[1:]])}",
        f"    previous = enter_threads(size * {len(outs)}, ELEMWISE)",
    ]
    body = "    "
    if flat:
        full = sorted({a for a, bc in zip(slab_args, slab_bc, strict=True) if not bc})
        contiguous = " and ".join(f"{a}.flags.c_contiguous" for a in full)
        lines.append(f"    if {contiguous}:")
        lines += [f"        f{j} = flat_view({a})" for j, a in enumerate(slab_args)]
        lines += [
            f"        slabs = max(1, min({MAX_SLABS}, size // {MIN_FLAT_SLAB}))",
            "        for t in prange(slabs):",
            "            lo = t * size // slabs",
            "            hi = (t + 1) * size // slabs",
            "            flat_impl("
            + ", ".join(f"f{j}" if bc else f"f{j}[lo:hi]" for j, bc in enumerate(slab_bc))
            + ")",
            "    else:",
        ]
        body = "        "
    lines += [
        f"{body}slabs = min(n, {MAX_SLABS})",
        f"{body}for t in prange(slabs):",
        f"{body}    lo = t * n // slabs",
        f"{body}    hi = (t + 1) * n // slabs",
        f"{body}    {call('lo', 'hi')}",
        "    set_num_threads(previous)",
    ]
    result = out_names[0] if len(outs) == 1 else f"({', '.join(out_names)})"
    lines.append(f"    return {result}")
    env = {
        "np": np,
        "prange": numba.prange,
        "enter_threads": enter_threads,
        "set_num_threads": set_num_threads,
        "ELEMWISE": ELEMWISE,
        "flat_view": flat_view,
    }
    return "\n".join(lines) + "\n", env
