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
from lasagne_bn.ops import numba_pool_kernels as pool_kernels
from lasagne_bn.ops.conv import Conv2d, Conv2dGradInputs, Conv2dGradWeights
from lasagne_bn.ops.pool import AveragePool2dGrad, MaxPool2dGrad, MaxPool2dGradGrad, Pool2d

# PyTensor caches each compiled graph under our key, *with the kernels linked
# in*: a key that missed a kernel change would keep running the old kernels.
# So the key hashes the source of this module and of the kernels.
KERNEL_VERSION = sha256(
    b"".join(Path(f).read_bytes() for f in (kernels.__file__, pool_kernels.__file__, __file__))
).hexdigest()[:16]


GRAD_WEIGHT_TASKS = 8  # partial filter-gradient sums (load balance over threads)


def _compile(name: str, body: list[str], args: list[str]):
    src = f"def {name}({', '.join(args)}):\n" + "".join(f"    {line}\n" for line in body)
    env = {"np": np, "kernels": kernels, "pool_kernels": pool_kernels}
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


# --------------------------------------------------------------------------
# pooling


_MODE_CODES = {
    "max": pool_kernels.MAX,
    "sum": pool_kernels.SUM,
    "average_inc_pad": pool_kernels.AVG_INC,
    "average_exc_pad": pool_kernels.AVG_EXC,
}


def _pool_out_lines(op, ndim: int, ref: str) -> list[str]:
    """Lines defining ``h, w, oh, ow``, ``lead`` (the leading shape) and ``x3``-style views."""
    lines = [f"h = {ref}.shape[{ndim - 2}]", f"w = {ref}.shape[{ndim - 1}]"]
    for name, size, i in (("oh", "h", 0), ("ow", "w", 1)):
        ws, st, pad = op.ws[i], op.stride[i], op.pad[i]
        v = f"({size} + {2 * pad})"
        if op.ignore_border:
            lines.append(f"{name} = max(0, ({v} - {ws}) // {st} + 1)")
        elif st >= ws:
            lines.append(f"{name} = ({v} - 1) // {st} + 1")
        else:
            lines.append(f"{name} = max(0, ({v} - 1 - {ws} + {st}) // {st}) + 1")
    lead = ", ".join(f"{ref}.shape[{i}]" for i in range(ndim - 2))
    lines.append(f"lead = ({lead}{',' if ndim == 3 else ''})" if ndim > 2 else "lead = ()")
    return lines


def _pool_args(op) -> str:
    (wh, ww), (sh, sw), (ph, pw) = op.ws, op.stride, op.pad
    return f"{wh}, {ww}, {sh}, {sw}, {ph}, {pw}"


def _view3(name: str, rows: str, cols: str) -> str:
    return f"{name}3 = np.ascontiguousarray({name}).reshape((-1, {rows}, {cols}))"


def _shape_check(name: str, var: str, ndim: int, rows: str, cols: str, where: str) -> str:
    lead = " or ".join(f"{var}.shape[{i}] != x.shape[{i}]" for i in range(ndim - 2))
    cond = f"{var}.shape[{ndim - 2}] != {rows} or {var}.shape[{ndim - 1}] != {cols}"
    if lead:
        cond = f"{lead} or {cond}"
    return _check(cond, f"{where}: {name} does not have the expected shape")


@register_funcify_and_cache_key(Pool2d)
def numba_funcify_Pool2d(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    body = [
        *_pool_out_lines(op, ndim, "x"),
        _view3("x", "h", "w"),
        "out = np.empty(lead + (oh, ow), dtype=x.dtype)",
        "out3 = out.reshape((-1, oh, ow))",
        "if out.size > 0:",
        f"    pool_kernels.pool_forward(x3, out3, {_pool_args(op)}, {_MODE_CODES[op.mode]})",
        "return out",
    ]
    return _compile("pool_2d", body, ["x"]), _key(op, node)


@register_funcify_and_cache_key(MaxPool2dGrad)
def numba_funcify_MaxPool2dGrad(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"max pool gradient: {op}"
    body = [
        *_pool_out_lines(op, ndim, "x"),
        _shape_check("maxout", "maxout", ndim, "oh", "ow", where),
        _shape_check("the output gradient", "gz", ndim, "oh", "ow", where),
        _view3("x", "h", "w"),
        _view3("gz", "oh", "ow"),
        "gx = np.empty(x.shape, dtype=x.dtype)",
        "gx3 = gx.reshape((-1, h, w))",
        "if gz.size > 0:",
        f"    pool_kernels.max_pool_grad(x3, gz3, gx3, {_pool_args(op)})",
        "else:",
        "    gx3[:] = 0",
        "return gx",
    ]
    return _compile("max_pool_2d_grad", body, ["x", "maxout", "gz"]), _key(op, node)


@register_funcify_and_cache_key(MaxPool2dGradGrad)
def numba_funcify_MaxPool2dGradGrad(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"max pool second-order gradient: {op}"
    body = [
        *_pool_out_lines(op, ndim, "x"),
        _shape_check("maxout", "maxout", ndim, "oh", "ow", where),
        _shape_check("the second-order gradient", "ggx", ndim, "h", "w", where),
        _view3("x", "h", "w"),
        _view3("ggx", "h", "w"),
        "out = np.empty(lead + (oh, ow), dtype=x.dtype)",
        "out3 = out.reshape((-1, oh, ow))",
        "if out.size > 0:",
        f"    pool_kernels.max_pool_grad_grad(x3, ggx3, out3, {_pool_args(op)})",
        "return out",
    ]
    return _compile("max_pool_2d_grad_grad", body, ["x", "maxout", "ggx"]), _key(op, node)


@register_funcify_and_cache_key(AveragePool2dGrad)
def numba_funcify_AveragePool2dGrad(op, node, **kwargs):
    if _has_float16(node):
        return _fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"average pool gradient: {op}"
    body = [
        *_pool_out_lines(op, ndim, "x"),
        _shape_check("the output gradient", "gz", ndim, "oh", "ow", where),
        _view3("gz", "oh", "ow"),
        "gx = np.empty(x.shape, dtype=x.dtype)",
        "gx3 = gx.reshape((-1, h, w))",
        "if gz.size > 0:",
        f"    pool_kernels.average_pool_grad(gz3, gx3, {_pool_args(op)}, {_MODE_CODES[op.mode]})",
        "else:",
        "    gx3[:] = 0",
        "return gx",
    ]
    return _compile("average_pool_2d_grad", body, ["x", "gz"]), _key(op, node)
