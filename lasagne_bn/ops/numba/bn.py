"""Numba registrations for the batch-norm Ops (the default backend).

Each Apply node gets a small generated wrapper that checks shapes and
scalars, views the input as ``(outer, channels, inner)`` and calls the
fused kernels of :mod:`lasagne_bn.ops.numba.bn_kernels`.  Nothing here falls
back to object mode.

float16: the wrappers hand float16 buffers to the kernels as their uint16
bits, and the kernels convert each element to float64 on load and round
once on store, in integer code.  Numba itself has no CPU data model for
float16 (PyTensor's Numba backend rejects any float16 graph with
``NotImplementedError: float16``): compiling one of our float16 nodes calls
:func:`lasagne_bn.ops.numba.float16.enable_numba_float16` first, so the
graph around it can pass float16 arrays.  The kernel module is imported
(and its kernels compiled) only when a node is first compiled.
"""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
from pytensor.link.numba.dispatch.basic import numba_njit, register_funcify_and_cache_key

from lasagne_bn.ops import validation
from lasagne_bn.ops.bn import (
    BatchNormApply,
    BatchNormInference,
    BatchNormTrain,
    BatchNormTrainGrad,
    running_average_update,
)
from lasagne_bn.ops.layout import channel_block, kept_axes
from lasagne_bn.ops.numba._codegen import EntryPoints, source_version
from lasagne_bn.ops.numba.float16 import enable_numba_float16, needs_float16
from lasagne_bn.ops.validation import (
    EPSILON,
    RULES,
    RUNNING_AVERAGE_FACTOR,
    Range,
    RangeCheck,
)

# The validation rules are generated into the wrappers: their source is part
# of the version too.
_HERE = Path(__file__)
KERNEL_VERSION = source_version(_HERE.with_name("bn_kernels.py"), _HERE, validation.__file__)
ENTRY_POINTS = EntryPoints(
    "lasagne_bn.ops.numba.bn_kernels",
    KERNEL_VERSION,
    lambda kernels, name, dtype: kernels.entry_signature(name, dtype),
)


# --------------------------------------------------------------------------
# source generation


def _views(node_name: str, ndim: int, axes: tuple[int, ...], names: list[str]) -> list[str]:
    """Lines that define contiguous 3-D views ``<name>3`` and sizes A, C, B.

    Kept axes that are not adjacent are transposed to the front first; the
    matching ``restore`` line puts outputs back in order.
    """
    block = channel_block(axes, ndim)
    lines = []
    if block is None:
        kept = kept_axes(axes, ndim)
        perm = kept + tuple(axes)
        for n in names:
            lines.append(f"{n}c = np.ascontiguousarray({n}.transpose({perm!r}))")
        k0, k1 = 0, len(kept)
    else:
        for n in names:
            lines.append(f"{n}c = np.ascontiguousarray({n})")
        k0, k1 = block
    ref = names[0] + "c"

    def prod(lo, hi):
        return " * ".join([f"{ref}.shape[{i}]" for i in range(lo, hi)]) or "1"

    lines.append(f"A = {prod(0, k0)}")
    lines.append(f"C = {prod(k0, k1)}")
    lines.append(f"B = {prod(k1, ndim)}")
    for n in names:
        lines.append(f"{n}3 = {n}c.reshape((A, C, B))")
    return lines


def _restore(ndim: int, axes: tuple[int, ...], src: str, dst: str, like: str) -> list[str]:
    """Lines that reshape a 3-D result back to the input's layout."""
    if channel_block(axes, ndim) is not None:
        return [f"{dst} = {src}.reshape({like}.shape)"]
    kept = kept_axes(axes, ndim)
    perm = kept + tuple(axes)
    inverse = tuple(int(i) for i in np.argsort(perm))
    return [f"{dst} = np.ascontiguousarray({src}.reshape({like}c.shape).transpose({inverse!r}))"]


def _stat_shape_expr(ndim: int, axes: tuple[int, ...], ref: str) -> str:
    items = ["1" if i in axes else f"{ref}.shape[{i}]" for i in range(ndim)]
    return "(" + ", ".join(items) + ("," if ndim == 1 else "") + ")"


def _check_lines(op_name: str, names: list[str]) -> list[str]:
    return [
        f"if {n}.shape != st_shape:\n"
        f"        raise ValueError('{op_name}: {n} does not have the statistics shape "
        "(size 1 on the normalized axes, the input size elsewhere)')"
        for n in names
    ]


#: The rules the generated wrappers check, by index (``_raise_out_of_range``).
_RULES = tuple(RULES.values())


@numba_njit
def _raise_out_of_range(index, value):
    # The error is raised in Python, by the rule itself: nopython code cannot
    # format the value, and an exception with run-time arguments does not
    # survive PyTensor's on-disk cache.  This function is a module-level one
    # (not generated source) so that its object-mode block does survive it.
    with numba.objmode():
        _RULES[index].check(value)


def _scalar_check(rule: Range, var: str) -> list[str]:
    """Lines that refuse a bad scalar ``var``: the rule's own test, then its own error."""
    return [
        f"if not {rule.source(var)}:\n        _raise_out_of_range({_RULES.index(rule)}, {var})"
    ]


def _m_check(op_name: str) -> list[str]:
    return [
        "if A * B < 1:\n"
        f"        raise ValueError('{op_name}: training needs at least 1 value per statistic "
        "(m >= 1); got m = 0')"
    ]


def _vec(name: str) -> str:
    return f"np.ascontiguousarray({name}).reshape(C).astype(np.float64)"


def _compile(
    name: str,
    body: list[str],
    args: list[str],
    kernels: tuple[str, ...] = (),
    dtype: str = "float64",
):
    env = {
        "_raise_out_of_range": _raise_out_of_range,
        "running_average_update": running_average_update,
    }
    return ENTRY_POINTS.compile(name, body, args, kernels, dtype, env)


def _dtype(var) -> str:
    return f"np.{var.type.dtype}"


def _ptr(name: str, dtype: str) -> str:
    """The kernel argument for array ``name``: float16 goes as its uint16 bits."""
    return f"{name}.view(np.uint16).ctypes" if dtype == "float16" else f"{name}.ctypes"


def _prepare(node) -> str:
    """The input dtype the kernels are compiled for; float16 support on when needed."""
    if needs_float16(node):
        enable_numba_float16()
    return node.inputs[0].type.dtype


# --------------------------------------------------------------------------
# registrations


@register_funcify_and_cache_key(BatchNormTrain)
def numba_funcify_BatchNormTrain(op, node, **kwargs):
    dtype = _prepare(node)
    axes, ndim = op.axes, node.inputs[0].ndim
    running = len(node.inputs) > 4
    name = str(op)
    st = _dtype(node.outputs[1])
    args = ["x", "gamma", "beta", "epsilon"] + (["factor", "rmean", "rvar"] if running else [])
    body = ["eps = epsilon.item()", *_scalar_check(EPSILON, "eps")]
    body += _views(name, ndim, axes, ["x"])
    body += _m_check(name)
    body.append(f"st_shape = {_stat_shape_expr(ndim, axes, 'x')}")
    body += _check_lines(name, ["gamma", "beta"] + (["rmean", "rvar"] if running else []))
    body += [
        "out3 = np.empty((A, C, B), dtype=x.dtype)",
        "stats = np.empty((3, C))",
        f"g64 = {_vec('gamma')}",
        f"b64 = {_vec('beta')}",
        f"train_forward_fn({_ptr('x3', dtype)}, A, C, B, g64.ctypes, b64.ctypes, eps, "
        f"{_ptr('out3', dtype)}, stats.ctypes)",
        "mean = stats[0].copy()",
        "invstd = stats[1].copy()",
        "var = stats[2].copy()",
    ]
    body += _restore(ndim, axes, "out3", "out", "x")
    body += [
        f"mean_o = mean.astype({st}).reshape(st_shape)",
        f"invstd_o = invstd.astype({st}).reshape(st_shape)",
    ]
    if running:
        body += ["f = factor.item()", *_scalar_check(RUNNING_AVERAGE_FACTOR, "f")]
        # On (C,) vectors: n-d broadcasting expressions cost seconds to compile.
        body += [
            "m = A * B",
            # m == 1: an infinite factor and a NaN running variance, as Theano gave.
            "unb = m / (m - 1.0) if m > 1 else np.inf",
            f"rm = running_average_update({_vec('rmean')}, mean, f)"
            f".astype({st}).reshape(st_shape)",
            f"rv = running_average_update({_vec('rvar')}, var * unb, f)"
            f".astype({st}).reshape(st_shape)",
            "return out, mean_o, invstd_o, rm, rv",
        ]
    else:
        body.append("return out, mean_o, invstd_o")
    key = ENTRY_POINTS.key(op, node, body)
    return _compile("batch_norm_train", body, args, ("train_forward",), dtype), key


@register_funcify_and_cache_key(BatchNormTrainGrad)
def numba_funcify_BatchNormTrainGrad(op, node, **kwargs):
    dtype = _prepare(node)
    axes, ndim = op.axes, node.inputs[0].ndim
    with_stat_grads = len(node.inputs) > 5
    name = str(op)
    st = _dtype(node.outputs[1])
    params = ["gamma", "mean", "invstd"] + (["g_mean", "g_var"] if with_stat_grads else [])
    body = _views(name, ndim, axes, ["x", "dy"])
    body += _m_check(name)
    body += [
        "if dy.shape != x.shape:\n"
        f"        raise ValueError('{name}: the output gradient does not have the input shape')",
        f"st_shape = {_stat_shape_expr(ndim, axes, 'x')}",
    ]
    body += _check_lines(name, params)
    body += ["dx3 = np.empty((A, C, B), dtype=x.dtype)", "stats = np.zeros((7, C))"]
    body += [f"stats[{row}] = {_vec(p)}" for row, p in enumerate(params)]
    body += [
        f"train_backward_fn({_ptr('x3', dtype)}, {_ptr('dy3', dtype)}, A, C, B, stats.ctypes, "
        f"{_ptr('dx3', dtype)})",
        "dgamma = stats[5].copy()",
        "dbeta = stats[6].copy()",
    ]
    body += _restore(ndim, axes, "dx3", "dx", "x")
    body.append(
        f"return dx, dgamma.astype({st}).reshape(st_shape), dbeta.astype({st}).reshape(st_shape)"
    )
    key = ENTRY_POINTS.key(op, node, body)
    args = ["x", "dy", *params]
    return _compile("batch_norm_train_grad", body, args, ("train_backward",), dtype), key


@register_funcify_and_cache_key(BatchNormInference)
def numba_funcify_BatchNormInference(op, node, **kwargs):
    dtype = _prepare(node)
    axes, ndim = op.axes, node.inputs[0].ndim
    name = str(op)
    body = ["eps = epsilon.item()", *_scalar_check(EPSILON, "eps")]
    body += _views(name, ndim, axes, ["x"])
    body.append(f"st_shape = {_stat_shape_expr(ndim, axes, 'x')}")
    body += _check_lines(name, ["gamma", "beta", "mean", "var"])
    body += [
        "out3 = np.empty((A, C, B), dtype=x.dtype)",
        "stats = np.empty((4, C))",
        f"stats[0] = {_vec('gamma')}",
        f"stats[1] = {_vec('beta')}",
        f"stats[2] = {_vec('mean')}",
        f"stats[3] = {_vec('var')}",
        f"inference_fn({_ptr('x3', dtype)}, A, C, B, stats.ctypes, eps, {_ptr('out3', dtype)})",
    ]
    body += _restore(ndim, axes, "out3", "out", "x")
    body.append("return out")
    args = ["x", "gamma", "beta", "mean", "var", "epsilon"]
    key = ENTRY_POINTS.key(op, node, body)
    return _compile("batch_norm_inference", body, args, ("inference",), dtype), key


@register_funcify_and_cache_key(BatchNormApply)
def numba_funcify_BatchNormApply(op, node, **kwargs):
    dtype = node.outputs[0].type.dtype
    args = ["x", "gamma", "beta", "mean", "std"]
    if needs_float16(node):
        enable_numba_float16()
        # No float16 arithmetic: compute in float32, round once.
        body = [f"{a}32 = {a}.astype(np.float32)" for a in args]
        body.append(f"return ((x32 - mean32) * (gamma32 / std32) + beta32).astype(np.{dtype})")
    else:
        body = _apply_loop(node, dtype)
        body.append(f"return ((x - mean) * (gamma / std) + beta).astype(np.{dtype})")
    key = ENTRY_POINTS.key(op, node, body)
    return _compile("batch_norm_apply", body, args), key


def _apply_loop(node, dtype: str) -> list[str]:
    """Per-channel loop lines for ``BatchNormApply`` over one channel layout.

    Numba runs the broadcasting expression over a 4-d input one element at
    a time through its index arithmetic (ten times slower than this loop
    on a ResNet's (128, 16, 32, 32) activations); the loop computes the same
    expression, ``(x - mean) * (gamma / std) + beta``, per channel.  Used
    when every parameter has the input's ndim and either the channels'
    broadcast pattern or none but broadcastable axes (a scalar: Lasagne's
    inference graph folds ``inv_std`` into ``gamma`` and passes ``std = 1``),
    and the kept axes are adjacent; otherwise (or when a per-channel
    parameter's size is not the channel count at run time) the expression
    runs.
    """
    x, *params = node.inputs
    if any(p.ndim != x.ndim for p in params):
        return []
    scalar = tuple(all(p.type.broadcastable) for p in params)
    patterns = {p.type.broadcastable for p, s in zip(params, scalar, strict=True) if not s}
    if len(patterns) != 1:
        return []
    (pattern,) = patterns
    axes = tuple(i for i, b in enumerate(pattern) if b)
    if not axes or channel_block(axes, x.ndim) is None:
        return []
    names = ["gamma", "beta", "mean", "std"]
    at = {n: "0" if s else "c" for n, s in zip(names, scalar, strict=True)}
    lines = _views("BatchNormApply", x.ndim, axes, ["x"])
    # Sizes checked for the scalars too: a wrapper must be right for any input.
    sizes = {"c": "C", "0": "1"}
    lines.append("if " + " and ".join(f"{n}.size == {sizes[at[n]]}" for n in names) + ":")
    body = [f"{n}1 = np.ascontiguousarray({n}).reshape({n}.size)" for n in names]
    body += [
        f"out3 = np.empty((A, C, B), dtype=np.{dtype})",
        "for a in range(A):",
        "    for c in range(C):",
        f"        m = mean1[{at['mean']}]",
        f"        s = gamma1[{at['gamma']}] / std1[{at['std']}]",
        f"        t = beta1[{at['beta']}]",
        "        for b in range(B):",
        "            out3[a, c, b] = (x3[a, c, b] - m) * s + t",
        "return out3.reshape(x.shape)",
    ]
    return lines + ["    " + line for line in body]


@register_funcify_and_cache_key(RangeCheck)
def numba_funcify_RangeCheck(op, node, **kwargs):
    body = ["v = float(x.item())", *_scalar_check(op.rule, "v"), "return x"]
    return _compile("range_check", body, ["x"]), ENTRY_POINTS.key(op, node, body)
