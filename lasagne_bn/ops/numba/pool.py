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

from typing import NamedTuple

from lasagne_bn.ops.numba._codegen import array_entries, check, dims
from lasagne_bn.ops.pool import (
    AveragePoolGrad,
    DynamicPool,
    MaxPoolGrad,
    MaxPoolGradGrad,
    Pool,
)

ENTRY_POINTS = array_entries(__file__, "pool_kernels")

# The kernels' mode numbers (pool_kernels.MAX, SUM, AVG_INC, AVG_EXC).
_MODE_CODES = {
    "max": 0,
    "sum": 1,
    "average_inc_pad": 2,
    "average_exc_pad": 3,
}

_AXES = ("d", "h", "w")  # the kernels' three pooled axes; 2-D pooling has d = 1
_OUT = ("od", "oh", "ow")


class _Kernel(NamedTuple):
    """How a wrapper calls one kernel (one per DynamicPool kind)."""

    name: str  # the entry point
    args: list[str]  # the wrapper's array arguments
    checks: list[tuple[str, str, tuple[str, ...]]]  # (what, argument, expected pooled sizes)
    reads: list[str]  # the arrays the kernel reads
    result: tuple[str, str, str]  # name, NumPy allocator, shape ("pooled": the output's)
    guard: str  # the array whose emptiness skips the call


_KINDS = {
    "pool": _Kernel("pool_forward", ["x"], [], ["x"], ("out", "empty", "pooled"), "out"),
    "max_grad": _Kernel(
        "max_pool_grad",
        ["x", "maxout", "gz"],
        [("maxout", "maxout", _OUT), ("the output gradient", "gz", _OUT)],
        ["x", "gz"],
        ("gx", "zeros", "x.shape"),
        "gz",
    ),
    "max_grad_grad": _Kernel(
        "max_pool_grad_grad",
        ["x", "maxout", "ggx"],
        [("maxout", "maxout", _OUT), ("the second-order gradient", "ggx", _AXES)],
        ["x", "ggx"],
        ("out", "zeros", "pooled"),
        "out",
    ),
    "average_grad": _Kernel(
        "average_pool_grad",
        ["x", "gz"],
        [("the output gradient", "gz", _OUT)],
        ["gz"],
        ("gx", "zeros", "x.shape"),
        "gz",
    ),
}


def _padded3(values, fill):
    """Per-axis values for the kernels' three pooled axes (leading ``fill``)."""
    return (fill,) * (3 - len(values)) + tuple(values)


def _size_lines(op, ndim: int, ws, st, pad) -> list[str]:
    """Lines defining ``d, h, w``, ``od, oh, ow``, ``planes``, ``lead`` and ``dims``.

    ``ws``, ``st``, ``pad``: per pooled axis (three), ints or run-time expressions.
    """
    nd = op.nd
    lines = [
        f"{a} = x.shape[{ndim - 3 + k}]" if k >= 3 - nd else f"{a} = 1"
        for k, a in enumerate(_AXES)
    ]
    for k, axis in enumerate(_AXES):
        name, v, w, s = f"o{axis}", f"({axis} + 2 * {pad[k]})", ws[k], st[k]
        full = f"{name} = ({v} - 1) // {s} + 1"
        part = f"{name} = max(0, ({v} - 1 - {w} + {s}) // {s}) + 1"
        if op.ignore_border:
            lines.append(f"{name} = max(0, ({v} - {w}) // {s} + 1)")
        elif not isinstance(w, str):  # static windows: the formula is known now
            lines.append(full if s >= w else part)
        else:
            lines += [f"if {s} >= {w}:", f"    {full}", "else:", f"    {part}"]
    lead = [f"x.shape[{i}]" for i in range(ndim - nd)]
    lines.append("lead = (" + "".join(f"{s}, " for s in lead) + ")")
    lines.append("planes = " + (" * ".join(lead) if lead else "1"))
    values = ["planes", *_AXES, *_OUT, *ws, *st, *pad, _MODE_CODES[op.mode]]
    return lines + dims([str(v) for v in values])


def _kernel_lines(op, ndim: int, kind: str, where: str) -> list[str]:
    """Lines that check the other inputs, allocate the result and call the kernel."""
    kernel, _, checks, inputs, (result, alloc, shape), guard = _KINDS[kind]
    nd = op.nd
    lines = []
    for what, var, sizes in checks:
        conds = [f"{var}.shape[{i}] != x.shape[{i}]" for i in range(ndim - nd)]
        conds += [f"{var}.shape[{ndim - nd + i}] != {s}" for i, s in enumerate(sizes[3 - nd :])]
        lines.append(
            check(" or ".join(conds), f"{where}: {what} does not have the expected shape")
        )
    if shape == "pooled":  # lead plus the pooled sizes of the real axes
        shape = "lead + (" + "".join(f"{s}, " for s in _OUT[3 - nd :]) + ")"
    pointers = ", ".join([f"{a}c.ctypes" for a in inputs] + [f"{result}.ctypes", "dims.ctypes"])
    return [
        *[f"{a}c = np.ascontiguousarray({a})" for a in inputs],
        f"{result} = np.{alloc}({shape}, dtype=x.dtype)",
        f"if {guard}.size > 0:",
        f"    {kernel}_fn({pointers})",
        f"return {result}",
    ]


def _register_static(op_class, kind: str, what: str):
    @ENTRY_POINTS.register(op_class)
    def build(op, node):
        ndim = node.inputs[0].ndim
        ws, st, pad = (_padded3(v, f) for v, f in ((op.ws, 1), (op.stride, 1), (op.pad, 0)))
        body = _size_lines(op, ndim, ws, st, pad) + _kernel_lines(op, ndim, kind, f"{what}: {op}")
        kernel = _KINDS[kind]
        return f"{kernel.name}_{op.nd}d", body, kernel.args, kernel.name


_register_static(Pool, "pool", "pooling")
_register_static(MaxPoolGrad, "max_grad", "max pool gradient")
_register_static(MaxPoolGradGrad, "max_grad_grad", "max pool second-order gradient")
_register_static(AveragePoolGrad, "average_grad", "average pool gradient")


@ENTRY_POINTS.register(DynamicPool)
def _dynamic_pool(op, node):
    """Windows known only at run time: the same kernels, sizes computed in the wrapper."""
    nd, ndim = op.nd, node.inputs[0].ndim
    where = f"pooling: {op}"
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
    ws, st, pad = ([f"{v}3[{k}]" for k in range(3)] for v in "wsp")
    lines += _size_lines(op, ndim, ws, st, pad) + _kernel_lines(op, ndim, op.kind, where)
    kernel = _KINDS[op.kind]
    return f"dynamic_{kernel.name}_{nd}d", lines, [*kernel.args, "ws", "st", "pd"], kernel.name
