"""Numba registrations for the convolution Ops (the default backend).

Each Apply node gets a small generated wrapper: it checks the shapes (the
same checks as the NumPy ``perform``), orients the filters, allocates the
output and calls a kernel of :mod:`lasagne_bn.ops.numba.conv_kernels` through
its C entry point (:mod:`lasagne_bn.ops.numba._codegen`).  float16 graphs
run the NumPy ``perform`` in object mode (after
:func:`lasagne_bn.ops.numba.float16.enable_numba_float16`, which lets Numba
pass float16 arrays at all).  The kernel module is imported (and its
kernels compiled) only when a node is first compiled.
"""

from __future__ import annotations

from lasagne_bn.ops.conv import Conv, ConvGradInputs, ConvGradWeights
from lasagne_bn.ops.numba._codegen import array_entries, check, dims
from lasagne_bn.ops.numba.portable import kernels_module

ENTRY_POINTS = array_entries(__file__, kernels_module())

GRAD_WEIGHT_TASKS = 8  # partial filter-gradient sums (load balance over threads)


_SIZE = {2: ("h", "w"), 3: ("d", "h", "w")}
_KERN = {2: ("kh", "kw"), 3: ("kd", "kh", "kw")}
_OUT = {2: ("ho", "wo"), 3: ("zo", "ho", "wo")}
_TOP = {2: ("th", "tw"), 3: ("td", "th", "tw")}  # output_grad's sizes, checked against _OUT
_PADS = {2: (("pt", "pb"), ("pl", "pr")), 3: (("pf", "pk"), ("pt", "pb"), ("pl", "pr"))}
_ENTRY = {2: "conv", 3: "conv3d"}  # kernel entry-point prefixes


def _pad_lines(op, where: str) -> list[str]:
    """Lines defining the pads (``pt, pb, pl, pr``, 3-D: ``pf, pk``) and output sizes."""
    n = op.convdim
    mode = op.border_mode
    lines = []
    for axis in range(n):
        size, k, out = _SIZE[n][axis], _KERN[n][axis], _OUT[n][axis]
        lo, hi = _PADS[n][axis]
        dk = f"d{k}"
        lines.append(f"{dk} = ({k} - 1) * {op.filter_dilation[axis]} + 1")
        if mode == "valid":
            lines.append(f"{lo} = 0; {hi} = 0")
        elif mode == "full":
            lines.append(f"{lo} = {dk} - 1; {hi} = {dk} - 1")
        elif mode == "half":
            lines.append(f"{lo} = {dk} // 2; {hi} = {dk} // 2")
        else:
            a, b = mode[axis]
            lines.append(f"{lo} = {a}; {hi} = {b}")
        lines.append(f"{out} = ({size} + {lo} + {hi} - {dk}) // {op.subsample[axis]} + 1")
    lines.append(
        check(
            " or ".join(f"{o} < 1" for o in _OUT[n]),
            f"{where}: the input (plus padding) is smaller than the dilated filters: "
            "the output would be empty",
        )
    )
    return lines


def _group_lines(op, where: str) -> list[str]:
    g = op.num_groups
    return [
        check(
            f"c != cg * {g}",
            f"{where}: the input channels do not match the filters: expected "
            f"channels == filters.shape[1] * num_groups ({g})",
        ),
        check(
            f"f % {g} != 0",
            f"{where}: num_groups ({g}) does not divide the number of output channels "
            "(filters.shape[0])",
        ),
    ]


def _top_check(op, where: str, source: str) -> str:
    """The check that output_grad has the output shape (``_TOP`` against ``_OUT``)."""
    n = op.convdim
    return check(
        " or ".join(f"{o} != {t}" for o, t in zip(_OUT[n], _TOP[n], strict=True)),
        f"{where}: output_grad does not have the output shape that {source}",
    )


def _flipped(dst: str, src: str, n: int) -> list[str]:
    """Lines setting ``dst`` to a C-contiguous copy of ``src`` with its ``n`` spatial axes
    reversed.

    In a C-contiguous filter bank, reversing every spatial axis reverses each
    run of ``prod(kernel)`` elements; a loop over those runs (unsigned
    indices, which Numba does not test for wrap-around) took a fifth of
    ``np.ascontiguousarray`` of the reversed view (0.07 against 0.31 ms on a
    (256, 128, 4, 4) float32 bank), which every flipped convolution paid.
    """
    taps = " * ".join(f"{src}.shape[{2 + axis}]" for axis in range(n))
    return [
        f"_flip_src = np.ascontiguousarray({src}).reshape(-1)",
        f"{dst} = np.empty({src}.shape, dtype={src}.dtype)",
        f"_flip_dst = {dst}.reshape(-1)",
        f"_taps = np.uintp({taps})",
        "if _taps > 0:",
        "    for _run in range(np.uintp(_flip_src.size) // _taps):",
        "        _first = _run * _taps",
        "        _last = _first + _taps - np.uintp(1)",
        "        for _t in range(_taps):",
        "            _flip_dst[_first + _t] = _flip_src[_last - _t]",
    ]


def _oriented(op) -> list[str]:
    if op.filter_flip:
        return _flipped("k", "wt", op.convdim)
    return ["k = np.ascontiguousarray(wt)"]


def _conv_dims(op, *extra: int) -> list[str]:
    n = op.convdim
    values = ["n", "c", *_SIZE[n], "f", "cg", *_KERN[n], *_OUT[n]]
    values += [str(v) for v in (*op.subsample, *op.filter_dilation)]
    values += [p for pair in _PADS[n] for p in pair] + [str(v) for v in (op.num_groups, *extra)]
    return dims(values)


def _shapes(op) -> tuple[str, str, str, str]:
    """``x``'s and ``wt``'s shape unpackings, and the input and output shape tuples."""
    n = op.convdim
    size, kern, out = ", ".join(_SIZE[n]), ", ".join(_KERN[n]), ", ".join(_OUT[n])
    return f"n, c, {size}", f"f, cg, {kern}", f"(n, c, {size})", f"(n, f, {out})"


@ENTRY_POINTS.register(Conv)
def _conv(op, node):
    n = op.convdim
    name = f"conv{n}d: {op}"
    x_unpack, w_unpack, _, out_shape = _shapes(op)
    body = [
        f"{x_unpack} = x.shape",
        f"{w_unpack} = wt.shape",
        *_group_lines(op, name),
        *_pad_lines(op, name),
        *_oriented(op),
        "xc = np.ascontiguousarray(x)",
        f"out = np.empty({out_shape}, dtype=x.dtype)",
        *_conv_dims(op),
        "if out.size > 0:",
        f"    {_ENTRY[n]}_forward_fn(xc.ctypes, k.ctypes, out.ctypes, dims.ctypes)",
        "return out",
    ]
    return f"conv{n}d_forward", body, ["x", "wt"], f"{_ENTRY[n]}_forward"


@ENTRY_POINTS.register(ConvGradInputs)
def _conv_grad_inputs(op, node):
    n = op.convdim
    name = f"conv{n}d_grad_wrt_inputs: {op}"
    g = op.num_groups
    _, w_unpack, x_shape, _ = _shapes(op)
    body = [
        *[f"{v} = shape[{i}]" for i, v in enumerate(_SIZE[n])],
        f"n, f2, {', '.join(_TOP[n])} = dy.shape",
        f"{w_unpack} = wt.shape",
        f"c = cg * {g}",
        check("f2 != f", f"{name}: output_grad.shape[1] does not match filters.shape[0]"),
        *_group_lines(op, name),
        *_pad_lines(op, name),
        _top_check(op, name, "input_shape gives"),
        *_oriented(op),
        "dyc = np.ascontiguousarray(dy)",
        # the kernels overwrite every element (zeroing a 2-4 MiB result
        # first was a tenth of a millisecond per call)
        f"dx = np.empty({x_shape}, dtype=dy.dtype)",
        *_conv_dims(op),
        "if dx.size > 0 and dyc.size > 0:",
        f"    {_ENTRY[n]}_grad_inputs_fn(k.ctypes, dyc.ctypes, dx.ctypes, dims.ctypes)",
        "else:",
        "    dx[:] = 0",
        "return dx",
    ]
    return f"conv{n}d_grad_inputs", body, ["wt", "dy", "shape"], f"{_ENTRY[n]}_grad_inputs"


@ENTRY_POINTS.register(ConvGradWeights)
def _conv_grad_weights(op, node):
    n = op.convdim
    name = f"conv{n}d_grad_wrt_weights: {op}"
    g = op.num_groups
    x_unpack, _, _, _ = _shapes(op)
    body = [
        *[f"{v} = shape[{i}]" for i, v in enumerate(_KERN[n])],
        f"{x_unpack} = x.shape",
        f"n2, f, {', '.join(_TOP[n])} = dy.shape",
        f"cg = c // {g}",
        check("n2 != n", f"{name}: output_grad and input have different batch sizes"),
        *_group_lines(op, name),
        *_pad_lines(op, name),
        _top_check(op, name, "the input and filter_shape give"),
        "xc = np.ascontiguousarray(x)",
        "dyc = np.ascontiguousarray(dy)",
        f"dk = np.zeros((f, cg, {', '.join(_KERN[n])}), dtype=x.dtype)",
        *_conv_dims(op, GRAD_WEIGHT_TASKS),
        "if dk.size > 0 and xc.size > 0:",
        f"    {_ENTRY[n]}_grad_weights_fn(xc.ctypes, dyc.ctypes, dk.ctypes, dims.ctypes)",
        *(_flipped("dkf", "dk", n) if op.filter_flip else ["dkf = dk"]),
        "return dkf",
    ]
    return f"conv{n}d_grad_weights", body, ["x", "dy", "shape"], f"{_ENTRY[n]}_grad_weights"
