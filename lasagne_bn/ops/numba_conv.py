"""Numba registrations for the convolution and pooling Ops (the default backend).

Each Apply node gets a small generated wrapper: it checks the shapes (the
same checks as the NumPy ``perform``), orients and reshapes the filters
into GEMM form and calls the drivers of
:mod:`lasagne_bn.ops.numba_conv_kernels`.  float16 graphs (no float16
arithmetic in Numba) run the NumPy ``perform`` in object mode.
"""

from __future__ import annotations

from hashlib import sha256
from pathlib import Path

import numpy as np
from pytensor.link.numba.cache import compile_numba_function_src
from pytensor.link.numba.dispatch.basic import (
    generate_fallback_impl,
    numba_njit,
    register_funcify_and_cache_key,
)

from lasagne_bn.ops import numba_conv_kernels as kernels
from lasagne_bn.ops.conv import Conv2d, Conv2dGradInputs, Conv2dGradWeights

# PyTensor caches each compiled graph under our key, *with the kernels linked
# in*: a key that missed a kernel change would keep running the old kernels.
# So the key hashes the source of this module and of the kernels.
KERNEL_VERSION = sha256(
    b"".join(Path(f).read_bytes() for f in (kernels.__file__, __file__))
).hexdigest()[:16]


GRAD_WEIGHT_TASKS = 8  # partial filter-gradient sums (load balance over threads)


def _compile(name: str, body: list[str], args: list[str]):
    src = f"def {name}({', '.join(args)}):\n" + "".join(f"    {line}\n" for line in body)
    env = {"np": np, "kernels": kernels}
    return numba_njit(compile_numba_function_src(src, name, global_env=env))


def _key(op, node) -> str:
    parts = (
        type(op).__name__,
        repr(op._props_dict()),
        tuple((i.type.dtype, i.type.ndim) for i in node.inputs),
        tuple((o.type.dtype, o.type.ndim) for o in node.outputs),
        KERNEL_VERSION,
    )
    return sha256(repr(parts).encode()).hexdigest()


def _has_float16(node) -> bool:
    return any(getattr(v.type, "dtype", "") == "float16" for v in (*node.inputs, *node.outputs))


def _fallback(op, node, kwargs):
    return generate_fallback_impl(op, node, **kwargs), None


# --------------------------------------------------------------------------
# convolution


def _check(cond: str, message: str) -> str:
    """A generated ``if cond: raise ValueError(message)`` line (message safely quoted)."""
    return f"if {cond}:\n        raise ValueError({message!r})"


def _pad_lines(op, where: str) -> list[str]:
    """Lines defining ``pt, pb, pl, pr`` from ``kh, kw`` (runtime filter sizes)."""
    dh, dw = op.filter_dilation
    mode = op.border_mode
    lines = [f"dkh = (kh - 1) * {dh} + 1", f"dkw = (kw - 1) * {dw} + 1"]
    if mode == "valid":
        lines.append("pt = 0; pb = 0; pl = 0; pr = 0")
    elif mode == "full":
        lines.append("pt = dkh - 1; pb = dkh - 1; pl = dkw - 1; pr = dkw - 1")
    elif mode == "half":
        lines.append("pt = dkh // 2; pb = dkh // 2; pl = dkw // 2; pr = dkw // 2")
    else:
        (a, b), (c, d) = mode
        lines.append(f"pt = {a}; pb = {b}; pl = {c}; pr = {d}")
    sh, sw = op.subsample
    lines += [
        f"ho = (h + pt + pb - dkh) // {sh} + 1",
        f"wo = (w + pl + pr - dkw) // {sw} + 1",
        _check(
            "ho < 1 or wo < 1",
            f"{where}: the input (plus padding) is smaller than the dilated filters: "
            "the output would be empty",
        ),
    ]
    return lines


def _group_lines(op, where: str) -> list[str]:
    g = op.num_groups
    return [
        _check(
            f"c != cg * {g}",
            f"{where}: the input channels do not match the filters: expected "
            f"channels == filters.shape[1] * num_groups ({g})",
        ),
        _check(
            f"f % {g} != 0",
            f"{where}: num_groups ({g}) does not divide the number of output channels "
            "(filters.shape[0])",
        ),
    ]


def _oriented(op) -> list[str]:
    wk = "wt[:, :, ::-1, ::-1]" if op.filter_flip else "wt"
    return [f"k = np.ascontiguousarray({wk})"]


def _call_args(op) -> str:
    sh, sw = op.subsample
    dh, dw = op.filter_dilation
    return f"{sh}, {sw}, {dh}, {dw}, pt, pb, pl, pr, {op.num_groups}"


@register_funcify_and_cache_key(Conv2d)
def numba_funcify_Conv2d(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    name = f"conv2d: {op}"
    body = [
        "n, c, h, w = x.shape",
        "f, cg, kh, kw = wt.shape",
        *_group_lines(op, name),
        *_pad_lines(op, name),
        *_oriented(op),
        "xc = np.ascontiguousarray(x)",
        "out = np.empty((n, f, ho, wo), dtype=x.dtype)",
        f"kernels.conv_forward(xc, k, out, {_call_args(op)})",
        "return out",
    ]
    return _compile("conv2d_forward", body, ["x", "wt"]), _key(op, node)


@register_funcify_and_cache_key(Conv2dGradInputs)
def numba_funcify_Conv2dGradInputs(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    name = f"conv2d_grad_wrt_inputs: {op}"
    g = op.num_groups
    body = [
        "h = shape[0]",
        "w = shape[1]",
        "n, f2, hy, wy = dy.shape",
        "f, cg, kh, kw = wt.shape",
        f"c = cg * {g}",
        _check("f2 != f", f"{name}: output_grad.shape[1] does not match filters.shape[0]"),
        *_group_lines(op, name),
        *_pad_lines(op, name),
        _check(
            "ho != hy or wo != wy",
            f"{name}: output_grad does not have the output shape that input_shape gives",
        ),
        *_oriented(op),
        "dyc = np.ascontiguousarray(dy)",
        "dx = np.empty((n, c, h, w), dtype=dy.dtype)",
        f"kernels.conv_grad_inputs(k, dyc, dx, {_call_args(op)})",
        "return dx",
    ]
    return _compile("conv2d_grad_inputs", body, ["wt", "dy", "shape"]), _key(op, node)


@register_funcify_and_cache_key(Conv2dGradWeights)
def numba_funcify_Conv2dGradWeights(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    name = f"conv2d_grad_wrt_weights: {op}"
    g = op.num_groups
    flip = "dk[:, :, ::-1, ::-1]" if op.filter_flip else "dk"
    body = [
        "kh = shape[0]",
        "kw = shape[1]",
        "n, c, h, w = x.shape",
        "n2, f, hy, wy = dy.shape",
        f"cg = c // {g}",
        _check("n2 != n", f"{name}: output_grad and input have different batch sizes"),
        *_group_lines(op, name),
        *_pad_lines(op, name),
        _check(
            "ho != hy or wo != wy",
            f"{name}: output_grad does not have the output shape that the input and "
            "filter_shape give",
        ),
        "xc = np.ascontiguousarray(x)",
        "dyc = np.ascontiguousarray(dy)",
        "dk = np.empty((f, cg, kh, kw), dtype=x.dtype)",
        f"kernels.conv_grad_weights(xc, dyc, dk, {_call_args(op)}, {GRAD_WEIGHT_TASKS})",
        f"return np.ascontiguousarray({flip})",
    ]
    return _compile("conv2d_grad_weights", body, ["x", "dy", "shape"]), _key(op, node)
