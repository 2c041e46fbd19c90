"""Numba registrations for the pooling Ops (the default backend).

Each Apply node gets a small generated wrapper (the code generation and C
entry points of :mod:`lasagne_bn.ops.numba._codegen`): it computes the pooled
shape, checks the other inputs against it, allocates the output and calls a
kernel of :mod:`lasagne_bn.ops.numba.pool_kernels`.  2-D pooling runs the
3-D kernels with a depth of 1.  :class:`DynamicPool` (windows known only
at run time; constant windows are rewritten to the static Ops first) runs
the same kernels with sizes computed by its wrapper.  float16 graphs run
the NumPy ``perform`` in object mode.  The kernel module is imported (and
its kernels compiled) only when a pooling node is first compiled.
"""

from __future__ import annotations

from pathlib import Path

from pytensor.link.numba.dispatch.basic import register_funcify_and_cache_key

from lasagne_bn.ops.numba._codegen import (
    array_entries,
    check,
    dims,
    float16_fallback,
    node_key,
    source_version,
)
from lasagne_bn.ops.numba.float16 import needs_float16
from lasagne_bn.ops.pool import (
    AveragePoolGrad,
    DynamicPool,
    MaxPoolGrad,
    MaxPoolGradGrad,
    Pool,
)

_HERE = Path(__file__)
KERNEL_VERSION = source_version(_HERE.with_name("pool_kernels.py"), _HERE)
ENTRY_POINTS = array_entries("lasagne_bn.ops.numba.pool_kernels", KERNEL_VERSION)


def _compile(fname: str, body: list[str], args: list[str], kernel: str, dtype: str):
    return ENTRY_POINTS.compile(fname, body, args, (kernel,), dtype)


def _key(op, node) -> str:
    return node_key(op, node, KERNEL_VERSION)


# The kernels' mode numbers (pool_kernels.MAX, SUM, AVG_INC, AVG_EXC).
_MODE_CODES = {
    "max": 0,
    "sum": 1,
    "average_inc_pad": 2,
    "average_exc_pad": 3,
}

_AXES = ("d", "h", "w")  # the kernels' three pooled axes; 2-D pooling has d = 1


def _padded3(values, fill):
    """Per-axis values for the kernels' three pooled axes (leading ``fill``)."""
    return (fill,) * (3 - len(values)) + tuple(values)


def _pool_out_lines(op, ndim: int) -> list[str]:
    """Lines defining ``d, h, w``, ``od, oh, ow``, ``planes`` and ``lead`` (shape of ``x``)."""
    nd = op.nd
    lines = []
    for k, axis in enumerate(_AXES):
        i = k - (3 - nd)
        lines.append(f"{axis} = x.shape[{ndim - nd + i}]" if i >= 0 else f"{axis} = 1")
    ws, st, pad = (_padded3(v, f) for v, f in ((op.ws, 1), (op.stride, 1), (op.pad, 0)))
    for k, axis in enumerate(_AXES):
        name, v = f"o{axis}", f"({axis} + {2 * pad[k]})"
        if op.ignore_border:
            lines.append(f"{name} = max(0, ({v} - {ws[k]}) // {st[k]} + 1)")
        elif st[k] >= ws[k]:
            lines.append(f"{name} = ({v} - 1) // {st[k]} + 1")
        else:
            lines.append(f"{name} = max(0, ({v} - 1 - {ws[k]} + {st[k]}) // {st[k]}) + 1")
    lead = [f"x.shape[{i}]" for i in range(ndim - nd)]
    lines.append("lead = (" + "".join(f"{s}, " for s in lead) + ")")
    lines.append("planes = " + (" * ".join(lead) if lead else "1"))
    return lines


def _out_shape(op) -> str:
    """The pooled shape: ``lead`` plus the pooled sizes of the real axes."""
    sizes = ["od", "oh", "ow"][3 - op.nd :]
    return "lead + (" + "".join(f"{s}, " for s in sizes) + ")"


def _pool_dims(op) -> list[str]:
    values = ["planes", "d", "h", "w", "od", "oh", "ow"]
    values += _padded3(op.ws, 1) + _padded3(op.stride, 1) + _padded3(op.pad, 0)
    values.append(_MODE_CODES[op.mode])
    return dims([str(v) for v in values])


def _shape_check(what: str, var: str, op, ndim: int, sizes: list[str], where: str) -> str:
    nd = op.nd
    conds = [f"{var}.shape[{i}] != x.shape[{i}]" for i in range(ndim - nd)]
    conds += [f"{var}.shape[{ndim - nd + i}] != {s}" for i, s in enumerate(sizes[3 - nd :])]
    return check(" or ".join(conds), f"{where}: {what} does not have the expected shape")


def _contig(names: list[str]) -> list[str]:
    return [f"{n}c = np.ascontiguousarray({n})" for n in names]


_OUT = ["od", "oh", "ow"]
_IN = ["d", "h", "w"]


@register_funcify_and_cache_key(Pool)
def numba_funcify_Pool(op, node, **kwargs):
    if needs_float16(node):
        return float16_fallback(op, node, kwargs)
    body = [
        *_pool_out_lines(op, node.inputs[0].ndim),
        *_contig(["x"]),
        f"out = np.empty({_out_shape(op)}, dtype=x.dtype)",
        *_pool_dims(op),
        "if out.size > 0:",
        "    pool_forward_fn(xc.ctypes, out.ctypes, dims.ctypes)",
        "return out",
    ]
    dtype = node.outputs[0].type.dtype
    return _compile(f"pool_{op.nd}d", body, ["x"], "pool_forward", dtype), _key(op, node)


@register_funcify_and_cache_key(MaxPoolGrad)
def numba_funcify_MaxPoolGrad(op, node, **kwargs):
    if needs_float16(node):
        return float16_fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"max pool gradient: {op}"
    body = [
        *_pool_out_lines(op, ndim),
        _shape_check("maxout", "maxout", op, ndim, _OUT, where),
        _shape_check("the output gradient", "gz", op, ndim, _OUT, where),
        *_contig(["x", "gz"]),
        "gx = np.zeros(x.shape, dtype=x.dtype)",
        *_pool_dims(op),
        "if gz.size > 0:",
        "    max_pool_grad_fn(xc.ctypes, gzc.ctypes, gx.ctypes, dims.ctypes)",
        "return gx",
    ]
    dtype = node.outputs[0].type.dtype
    func = _compile(f"max_pool_{op.nd}d_grad", body, ["x", "maxout", "gz"], "max_pool_grad", dtype)
    return func, _key(op, node)


@register_funcify_and_cache_key(MaxPoolGradGrad)
def numba_funcify_MaxPoolGradGrad(op, node, **kwargs):
    if needs_float16(node):
        return float16_fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"max pool second-order gradient: {op}"
    body = [
        *_pool_out_lines(op, ndim),
        _shape_check("maxout", "maxout", op, ndim, _OUT, where),
        _shape_check("the second-order gradient", "ggx", op, ndim, _IN, where),
        *_contig(["x", "ggx"]),
        f"out = np.zeros({_out_shape(op)}, dtype=x.dtype)",
        *_pool_dims(op),
        "if out.size > 0:",
        "    max_pool_grad_grad_fn(xc.ctypes, ggxc.ctypes, out.ctypes, dims.ctypes)",
        "return out",
    ]
    dtype = node.outputs[0].type.dtype
    func = _compile(
        f"max_pool_{op.nd}d_grad_grad", body, ["x", "maxout", "ggx"], "max_pool_grad_grad", dtype
    )
    return func, _key(op, node)


@register_funcify_and_cache_key(AveragePoolGrad)
def numba_funcify_AveragePoolGrad(op, node, **kwargs):
    if needs_float16(node):
        return float16_fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"average pool gradient: {op}"
    body = [
        *_pool_out_lines(op, ndim),
        _shape_check("the output gradient", "gz", op, ndim, _OUT, where),
        *_contig(["gz"]),
        "gx = np.zeros(x.shape, dtype=x.dtype)",
        *_pool_dims(op),
        "if gz.size > 0:",
        "    average_pool_grad_fn(gzc.ctypes, gx.ctypes, dims.ctypes)",
        "return gx",
    ]
    dtype = node.outputs[0].type.dtype
    func = _compile(f"average_pool_{op.nd}d_grad", body, ["x", "gz"], "average_pool_grad", dtype)
    return func, _key(op, node)


def _dynamic_lines(op, ndim: int, where: str) -> list[str]:
    """Like :func:`_pool_out_lines` and :func:`_pool_dims`, from run-time ``ws, st, pd``."""
    nd = op.nd
    lines = [
        check(
            f"ws.shape[0] != {nd} or st.shape[0] != {nd} or pd.shape[0] != {nd}",
            f"{where}: ws, stride and pad need {nd} entries each",
        ),
        "w3 = np.ones(3, dtype=np.int64)",
        "s3 = np.ones(3, dtype=np.int64)",
        "p3 = np.zeros(3, dtype=np.int64)",
        f"w3[{3 - nd}:] = ws",
        f"s3[{3 - nd}:] = st",
        f"p3[{3 - nd}:] = pd",
        check("w3.min() < 1", f"{where}: ws must be >= 1"),
        check("s3.min() < 1", f"{where}: stride must be >= 1"),
        check("p3.min() < 0", f"{where}: pad must be >= 0"),
        check("(p3 >= w3).any()", f"{where}: pad must be smaller than the pooling window ws"),
    ]
    if not op.ignore_border:
        lines.append(check("p3.max() > 0", f"{where}: padding requires ignore_border=True"))
    for k, axis in enumerate(_AXES):
        i = k - (3 - nd)
        lines.append(f"{axis} = x.shape[{ndim - nd + i}]" if i >= 0 else f"{axis} = 1")
    for k, axis in enumerate(_AXES):
        name, v = f"o{axis}", f"({axis} + 2 * p3[{k}])"
        if op.ignore_border:
            lines.append(f"{name} = max(0, ({v} - w3[{k}]) // s3[{k}] + 1)")
        else:
            lines += [
                f"if s3[{k}] >= w3[{k}]:",
                f"    {name} = ({v} - 1) // s3[{k}] + 1",
                "else:",
                f"    {name} = max(0, ({v} - 1 - w3[{k}] + s3[{k}]) // s3[{k}]) + 1",
            ]
    lead = [f"x.shape[{i}]" for i in range(ndim - nd)]
    lines.append("lead = (" + "".join(f"{s}, " for s in lead) + ")")
    lines.append("planes = " + (" * ".join(lead) if lead else "1"))
    lines += [
        "dims = np.empty(17, dtype=np.int64)",
        "dims[0] = planes",
        "dims[1] = d",
        "dims[2] = h",
        "dims[3] = w",
        "dims[4] = od",
        "dims[5] = oh",
        "dims[6] = ow",
        "dims[7:10] = w3",
        "dims[10:13] = s3",
        "dims[13:16] = p3",
        f"dims[16] = {_MODE_CODES[op.mode]}",
    ]
    return lines


@register_funcify_and_cache_key(DynamicPool)
def numba_funcify_DynamicPool(op, node, **kwargs):
    """Windows known only at run time: the same kernels, sizes computed in the wrapper."""
    if needs_float16(node):
        return float16_fallback(op, node, kwargs)
    ndim = node.inputs[0].ndim
    where = f"pooling: {op}"
    head = _dynamic_lines(op, ndim, where)
    out_shape = _out_shape(op)
    if op.kind == "pool":
        args, kernel = ["x"], "pool_forward"
        body = [
            *_contig(["x"]),
            f"out = np.empty({out_shape}, dtype=x.dtype)",
            "if out.size > 0:",
            "    pool_forward_fn(xc.ctypes, out.ctypes, dims.ctypes)",
            "return out",
        ]
    elif op.kind == "max_grad":
        args, kernel = ["x", "maxout", "gz"], "max_pool_grad"
        body = [
            _shape_check("maxout", "maxout", op, ndim, _OUT, where),
            _shape_check("the output gradient", "gz", op, ndim, _OUT, where),
            *_contig(["x", "gz"]),
            "gx = np.zeros(x.shape, dtype=x.dtype)",
            "if gz.size > 0:",
            "    max_pool_grad_fn(xc.ctypes, gzc.ctypes, gx.ctypes, dims.ctypes)",
            "return gx",
        ]
    elif op.kind == "max_grad_grad":
        args, kernel = ["x", "maxout", "ggx"], "max_pool_grad_grad"
        body = [
            _shape_check("maxout", "maxout", op, ndim, _OUT, where),
            _shape_check("the second-order gradient", "ggx", op, ndim, _IN, where),
            *_contig(["x", "ggx"]),
            f"out = np.zeros({out_shape}, dtype=x.dtype)",
            "if out.size > 0:",
            "    max_pool_grad_grad_fn(xc.ctypes, ggxc.ctypes, out.ctypes, dims.ctypes)",
            "return out",
        ]
    else:
        args, kernel = ["x", "gz"], "average_pool_grad"
        body = [
            _shape_check("the output gradient", "gz", op, ndim, _OUT, where),
            *_contig(["gz"]),
            "gx = np.zeros(x.shape, dtype=x.dtype)",
            "if gz.size > 0:",
            "    average_pool_grad_fn(gzc.ctypes, gx.ctypes, dims.ctypes)",
            "return gx",
        ]
    dtype = node.outputs[0].type.dtype
    fname = f"dynamic_{kernel}_{op.nd}d"
    func = _compile(fname, head + body, [*args, "ws", "st", "pd"], kernel, dtype)
    return func, _key(op, node)
