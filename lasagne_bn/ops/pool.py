"""2-D pooling Ops with Theano 1.0's semantics (``theano.tensor.signal.pool``).

Pooling reduces the last two axes of an input of any ndim >= 2 over
windows of ``ws`` with ``stride`` (default ``ws``) after ``pad`` on both
sides.  Modes: ``'max'`` (padding never wins), ``'sum'``,
``'average_inc_pad'`` (divides by the window size, padding included) and
``'average_exc_pad'`` (divides by the number of input values in the
window).  Output size per axis (``v`` = size + 2 * pad):

- ``ignore_border=True``: ``(v - ws) // stride + 1`` (0 if negative);
- ``ignore_border=False`` (requires ``pad == 0``): also the last, partial
  window: ``(v - 1) // stride + 1`` when ``stride >= ws``, else
  ``max(0, (v - 1 - ws + stride) // stride) + 1``; averages of partial
  windows divide by their clipped size.

Gradients: max pooling routes each output gradient to the *first* maximum
of its window in row-major order (as cuDNN and XLA do; Theano's CPU code
gave it to every tied maximum, which over-counts); the gradient Ops are
differentiable again (grad-of-grad of max pooling is the pooled
second-order gradient taken at the same maxima).

Ops: :class:`Pool2d`, :class:`MaxPool2dGrad`, :class:`AveragePool2dGrad`,
:class:`MaxPool2dGradGrad`; :func:`pool_2d` is Theano's function.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Apply, Variable
from pytensor.graph.op import Op
from pytensor.tensor.type import TensorType

from lasagne_bn.ops.conv import FLOAT_DTYPES, as_int_tuple, static_or

POOL_MODES = ("max", "sum", "average_inc_pad", "average_exc_pad")


# --------------------------------------------------------------------------
# shapes and parameters


def pool_output_length(size, ws, stride, pad, ignore_border):
    """Theano's pooled length of one axis; ``None`` if ``size`` is unknown."""
    if size is None:
        return None
    v = size + 2 * pad
    if ignore_border:
        return max(0, (v - ws) // stride + 1)
    if stride >= ws:
        return (v - 1) // stride + 1
    return max(0, (v - 1 - ws + stride) // stride) + 1


def pool_output_shape(shape, ws, stride, pad, ignore_border):
    """Output shape for an input ``shape`` (entries may be ``None``)."""
    return tuple(shape[:-2]) + tuple(
        pool_output_length(shape[-2 + i], ws[i], stride[i], pad[i], ignore_border)
        for i in range(2)
    )


class PoolParams:
    """Validated pooling parameters (errors name the argument and value)."""

    def __init__(self, ws, stride=None, pad=(0, 0), ignore_border=True, mode="max"):
        self.ws = as_int_tuple(ws, "ws", 2, minimum=1)
        self.stride = self.ws if stride is None else as_int_tuple(stride, "stride", 2, minimum=1)
        self.pad = as_int_tuple(pad, "pad", 2, minimum=0)
        if not isinstance(ignore_border, bool | np.bool_):
            raise TypeError(f"ignore_border={ignore_border!r}: expected True or False")
        self.ignore_border = bool(ignore_border)
        if mode == "average":
            mode = "average_inc_pad"
        if mode == "max_deterministic":
            mode = "max"
        if mode not in POOL_MODES:
            raise ValueError(f"mode={mode!r}: expected one of {', '.join(map(repr, POOL_MODES))}")
        self.mode = mode
        if any(self.pad) and not self.ignore_border:
            raise ValueError(
                f"pad={self.pad} with ignore_border=False: padding requires ignore_border=True"
            )
        if any(p >= w for p, w in zip(self.pad, self.ws, strict=True)):
            raise ValueError(
                f"pad={self.pad} must be smaller than the pooling window ws={self.ws} on each axis"
            )

    def props(self) -> dict:
        return dict(
            ws=self.ws,
            stride=self.stride,
            pad=self.pad,
            ignore_border=self.ignore_border,
            mode=self.mode,
        )


def _check_input(x: Variable, name: str = "input") -> None:
    dtype = getattr(x.type, "dtype", None)
    if dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} has dtype {dtype}; expected a float dtype ({', '.join(FLOAT_DTYPES)})"
        )
    if x.type.ndim < 2:
        raise TypeError(f"{name} has ndim={x.type.ndim}; pooling needs at least 2 dimensions")


# --------------------------------------------------------------------------
# NumPy kernels


def _counts(size, ws, stride, pad, n_out, include_pad):
    """Per-axis divisor of each window (1-D)."""
    start = np.arange(n_out) * stride
    end = np.minimum(start + ws, size + 2 * pad)
    if not include_pad:
        start = np.maximum(start, pad)
        end = np.minimum(end, size + pad)
    return np.maximum(end - start, 0)


def pool_extent(shape, p, out_hw):
    """Padded size covering the padding and every (possibly partial) window."""
    return tuple(
        max((out_hw[i] - 1) * p.stride[i] + p.ws[i], shape[-2 + i] + 2 * p.pad[i])
        for i in range(2)
    )


def _padded(x, p, out_hw, fill):
    """``x`` padded by ``pad`` (and on the high side up to the last window) with ``fill``."""
    need = pool_extent(x.shape, p, out_hw)
    if not any(p.pad) and need == x.shape[-2:]:
        return x
    xp = np.full(x.shape[:-2] + need, fill, dtype=x.dtype)
    xp[..., p.pad[0] : p.pad[0] + x.shape[-2], p.pad[1] : p.pad[1] + x.shape[-1]] = x
    return xp


def _tap(xp, a, b, p, out_hw):
    (s0, s1), (h, w) = p.stride, out_hw
    return xp[..., a : a + s0 * (h - 1) + 1 : s0, b : b + s1 * (w - 1) + 1 : s1]


def _work(dtype):
    return np.float32 if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def np_pool(x, p: PoolParams) -> np.ndarray:
    out_hw = pool_output_shape(x.shape, p.ws, p.stride, p.pad, p.ignore_border)[-2:]
    out_shape = x.shape[:-2] + out_hw
    if 0 in out_shape:
        return np.zeros(out_shape, dtype=x.dtype)
    work = _work(x.dtype)
    xw = x.astype(work, copy=False)
    if p.mode == "max":
        xp = _padded(xw, p, out_hw, -np.inf)
        out = np.full(out_shape, -np.inf, dtype=work)
        for a in range(p.ws[0]):
            for b in range(p.ws[1]):
                np.maximum(out, _tap(xp, a, b, p, out_hw), out=out)
        return out.astype(x.dtype, copy=False)
    xp = _padded(xw, p, out_hw, 0)
    out = np.zeros(out_shape, dtype=work)
    for a in range(p.ws[0]):
        for b in range(p.ws[1]):
            out += _tap(xp, a, b, p, out_hw)
    if p.mode != "sum":
        out /= pool_divisor(x.shape, p, out_hw).astype(work)
    return out.astype(x.dtype, copy=False)


def pool_divisor(shape, p, out_hw):
    inc = p.mode == "average_inc_pad"
    c0 = _counts(shape[-2], p.ws[0], p.stride[0], p.pad[0], out_hw[0], inc)
    c1 = _counts(shape[-1], p.ws[1], p.stride[1], p.pad[1], out_hw[1], inc)
    return np.outer(c0, c1)


def _crop(gp, x_shape, p):
    return gp[..., p.pad[0] : p.pad[0] + x_shape[-2], p.pad[1] : p.pad[1] + x_shape[-1]]


def _argmax_masks(x, maxout, p, out_hw):
    """Yield ``(a, b, mask)``: windows whose first maximum is at tap ``(a, b)``."""
    work = _work(x.dtype)
    xp = _padded(x.astype(work, copy=False), p, out_hw, -np.inf)
    m = maxout.astype(work, copy=False)
    nan_max = np.isnan(m)
    taken = np.zeros(m.shape, dtype=bool)
    for a in range(p.ws[0]):
        for b in range(p.ws[1]):
            t = _tap(xp, a, b, p, out_hw)
            hit = (t == m) | (nan_max & np.isnan(t))
            hit &= ~taken
            taken |= hit
            yield a, b, hit


def _check_out(name, got, want):
    if tuple(got) != tuple(want):
        raise ValueError(
            f"{name} has shape {tuple(got)}; expected {tuple(want)} (the pooled shape)"
        )


def np_max_pool_grad(x, maxout, gz, p: PoolParams) -> np.ndarray:
    out_hw = pool_output_shape(x.shape, p.ws, p.stride, p.pad, p.ignore_border)[-2:]
    _check_out("maxout", maxout.shape, x.shape[:-2] + out_hw)
    _check_out("output gradient", gz.shape, x.shape[:-2] + out_hw)
    work = _work(x.dtype)
    gp = np.zeros(x.shape[:-2] + pool_extent(x.shape, p, out_hw), dtype=work)
    if 0 not in out_hw:
        g = gz.astype(work, copy=False)
        for a, b, hit in _argmax_masks(x, maxout, p, out_hw):
            _tap(gp, a, b, p, out_hw)[...] += np.where(hit, g, 0)
    return np.ascontiguousarray(_crop(gp, x.shape, p)).astype(x.dtype, copy=False)


def np_max_pool_grad_grad(x, maxout, ggx, p: PoolParams) -> np.ndarray:
    out_hw = pool_output_shape(x.shape, p.ws, p.stride, p.pad, p.ignore_border)[-2:]
    _check_out("maxout", maxout.shape, x.shape[:-2] + out_hw)
    if ggx.shape != x.shape:
        raise ValueError(f"second-order gradient has shape {ggx.shape}; expected {x.shape}")
    work = _work(x.dtype)
    out = np.zeros(maxout.shape, dtype=work)
    if 0 not in out_hw:
        gp = _padded(ggx.astype(work, copy=False), p, out_hw, 0)
        for a, b, hit in _argmax_masks(x, maxout, p, out_hw):
            out += np.where(hit, _tap(gp, a, b, p, out_hw), 0)
    return out.astype(x.dtype, copy=False)


def np_average_pool_grad(x_shape, gz, p: PoolParams, dtype) -> np.ndarray:
    out_hw = pool_output_shape(x_shape, p.ws, p.stride, p.pad, p.ignore_border)[-2:]
    _check_out("output gradient", gz.shape, tuple(x_shape[:-2]) + out_hw)
    work = _work(dtype)
    gp = np.zeros(tuple(x_shape[:-2]) + pool_extent(x_shape, p, out_hw), dtype=work)
    if 0 not in out_hw:
        g = gz.astype(work, copy=False)
        if p.mode != "sum":
            g = g / pool_divisor(x_shape, p, out_hw).astype(work)
        for a in range(p.ws[0]):
            for b in range(p.ws[1]):
                _tap(gp, a, b, p, out_hw)[...] += g
    return np.ascontiguousarray(_crop(gp, x_shape, p)).astype(dtype, copy=False)


# --------------------------------------------------------------------------
# Ops


class _PoolOp(Op):
    __props__ = ("ws", "stride", "pad", "ignore_border", "mode")

    def __init__(self, ws, stride=None, pad=(0, 0), ignore_border=True, mode="max"):
        p = PoolParams(ws, stride, pad, ignore_border, mode)
        for k, v in p.props().items():
            setattr(self, k, v)

    @property
    def params(self) -> PoolParams:
        return PoolParams(**self._props_dict())

    def sibling(self, cls, **changes):
        props = self._props_dict() | changes
        if cls is MaxPool2dGrad or cls is MaxPool2dGradGrad:
            props["mode"] = "max"
        return cls(**props)

    def out_type(self, x: Variable) -> TensorType:
        shape = pool_output_shape(x.type.shape, self.ws, self.stride, self.pad, self.ignore_border)
        return TensorType(x.type.dtype, shape=shape)


def _zero_grad_like(var):
    return pt.zeros_like(var)


def _disconnected(g) -> bool:
    return g is None or isinstance(g.type, DisconnectedType)


class Pool2d(_PoolOp):
    """Pooling over the last two axes (see the module docstring)."""

    def make_node(self, x):
        x = pt.as_tensor_variable(x)
        _check_input(x)
        return Apply(self, [x], [self.out_type(x)()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np_pool(inputs[0], self.params)

    def infer_shape(self, fgraph, node, shapes):
        # pooled sizes as the output's own Shape_i, not as arithmetic (see static_or)
        return [static_or(node.outputs[0], (*shapes[0][:-2], None, None))]

    def pullback(self, inputs, outputs, cotangents):
        (x,), (out,), (gz,) = inputs, outputs, cotangents
        if _disconnected(gz):
            return [disconnected_type()]
        if self.mode == "max":
            return [self.sibling(MaxPool2dGrad)(x, out, gz)]
        return [self.sibling(AveragePool2dGrad)(x, gz)]


class MaxPool2dGrad(_PoolOp):
    """Gradient of max pooling: ``(x, maxout, gz) -> gx`` (first maximum of each window)."""

    def make_node(self, x, maxout, gz):
        x, maxout, gz = (pt.as_tensor_variable(v) for v in (x, maxout, gz))
        _check_input(x)
        ref = self.out_type(x)
        gz = pt.cast(gz, x.type.dtype)
        maxout = pt.cast(maxout, x.type.dtype)
        for v, name in ((maxout, "maxout"), (gz, "output gradient")):
            if v.type.ndim != x.type.ndim:
                raise TypeError(f"{name} has ndim={v.type.ndim}; expected {x.type.ndim}")
            for a, b in zip(v.type.shape, ref.shape, strict=True):
                if a is not None and b is not None and a != b:
                    raise ValueError(f"{name} has shape {v.type.shape}; expected {ref.shape}")
        return Apply(self, [x, maxout, gz], [x.type()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np_max_pool_grad(*inputs, self.params)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]

    def pullback(self, inputs, outputs, cotangents):
        x, maxout, gz = inputs
        (gg,) = cotangents
        if _disconnected(gg):
            return [disconnected_type()] * 3
        return [
            _zero_grad_like(x),
            _zero_grad_like(maxout),
            self.sibling(MaxPool2dGradGrad)(x, maxout, gg),
        ]


class MaxPool2dGradGrad(_PoolOp):
    """``(x, maxout, ggx) -> ggz``: ``ggx`` read at each window's first maximum."""

    def make_node(self, x, maxout, ggx):
        x, maxout, ggx = (pt.as_tensor_variable(v) for v in (x, maxout, ggx))
        _check_input(x)
        maxout = pt.cast(maxout, x.type.dtype)
        ggx = pt.cast(ggx, x.type.dtype)
        if ggx.type.ndim != x.type.ndim or maxout.type.ndim != x.type.ndim:
            raise TypeError("maxout and the second-order gradient must have the input's ndim")
        return Apply(self, [x, maxout, ggx], [self.out_type(x)()])

    def perform(self, node, inputs, output_storage):
        output_storage[0][0] = np_max_pool_grad_grad(*inputs, self.params)

    def infer_shape(self, fgraph, node, shapes):
        return [static_or(node.outputs[0], shapes[1])]

    def pullback(self, inputs, outputs, cotangents):
        x, maxout, ggx = inputs
        (g,) = cotangents
        if _disconnected(g):
            return [disconnected_type()] * 3
        return [
            _zero_grad_like(x),
            _zero_grad_like(maxout),
            self.sibling(MaxPool2dGrad)(x, maxout, g),
        ]


class AveragePool2dGrad(_PoolOp):
    """Gradient of sum / average pooling: ``(x, gz) -> gx`` (``x`` gives the shape)."""

    def make_node(self, x, gz):
        x, gz = pt.as_tensor_variable(x), pt.as_tensor_variable(gz)
        _check_input(x)
        if self.mode == "max":
            raise ValueError(
                "AveragePool2dGrad needs mode 'sum', 'average_inc_pad' or 'average_exc_pad'"
            )
        gz = pt.cast(gz, x.type.dtype)
        if gz.type.ndim != x.type.ndim:
            raise TypeError(f"output gradient has ndim={gz.type.ndim}; expected {x.type.ndim}")
        return Apply(self, [x, gz], [x.type()])

    def perform(self, node, inputs, output_storage):
        x, gz = inputs
        output_storage[0][0] = np_average_pool_grad(x.shape, gz, self.params, x.dtype)

    def infer_shape(self, fgraph, node, shapes):
        return [shapes[0]]

    def connection_pattern(self, node):
        return [[False], [True]]

    def pullback(self, inputs, outputs, cotangents):
        x, gz = inputs
        (gg,) = cotangents
        if _disconnected(gg):
            return [disconnected_type()] * 2
        return [disconnected_type(), self.sibling(Pool2d)(gg)]


# --------------------------------------------------------------------------
# public functions


def pool_2d(input, ws=None, ignore_border=None, stride=None, pad=(0, 0), mode="max"):
    """Pool the last two axes of ``input`` (Theano's ``pool_2d``).

    Parameters
    ----------
    input : tensor with ndim >= 2
    ws : int or (int, int)
        Window size.
    ignore_border : bool
        ``True`` drops a partial last window; ``None`` means ``False`` (Theano
        1.0's default) with a warning.
    stride : int or (int, int), optional
        Defaults to ``ws`` (non-overlapping windows).
    pad : int or (int, int)
        Zero padding on both sides (``ignore_border=True`` only).
    mode : 'max', 'sum', 'average_inc_pad', 'average_exc_pad'
        (``'average'`` is ``'average_inc_pad'``).
    """
    if ws is None:
        raise ValueError("ws=None: give the pooling window size, e.g. ws=(2, 2)")
    if ignore_border is None:
        warnings.warn(
            "pool_2d: ignore_border was not given; using False (Theano 1.0's default). "
            "Pass ignore_border explicitly (True is what cuDNN and Lasagne use).",
            UserWarning,
            stacklevel=2,
        )
        ignore_border = False
    return Pool2d(ws, stride, pad, ignore_border, mode)(input)


def max_pool_2d_same_size(input, patch_size):
    """Keep only each non-overlapping patch's maximum (other values become 0)."""
    x = pt.as_tensor_variable(input)
    out = pool_2d(x, patch_size, ignore_border=True)
    op = Pool2d(patch_size, None, (0, 0), True, "max")
    return MaxPool2dGrad(**op._props_dict())(x, out, out)


__all__ = [
    "AveragePool2dGrad",
    "MaxPool2dGrad",
    "MaxPool2dGradGrad",
    "Pool2d",
    "max_pool_2d_same_size",
    "np_average_pool_grad",
    "np_max_pool_grad",
    "np_max_pool_grad_grad",
    "np_pool",
    "pool_output_length",
    "pool_output_shape",
    "pool_2d",
]
