"""N-d pooling Ops with Theano 1.0's semantics (``theano.tensor.signal.pool``).

Pooling reduces the last ``nd`` axes (``nd = len(ws)``: 2 for ``pool_2d``,
3 for ``pool_3d``) of an input with at least ``nd`` dimensions over windows
of ``ws`` with ``stride`` (default ``ws``) after ``pad`` on both sides.
Modes: ``'max'`` (padding never wins), ``'sum'``, ``'average_inc_pad'``
(divides by the window size, padding included) and ``'average_exc_pad'``
(divides by the number of input values in the window).  Output size per
axis (``v`` = size + 2 * pad):

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

Ops: :class:`Pool`, :class:`MaxPoolGrad`, :class:`AveragePoolGrad`,
:class:`MaxPoolGradGrad` (window sizes are Op parameters; they print as
``Pool2d{...}`` / ``Pool3d{...}``, and the 2-D names ``Pool2d`` ... are the
same classes), and :class:`DynamicPool` for windows that are symbolic (only
known when the function runs, e.g. computed from the input's shape).
:func:`pool_2d` and :func:`pool_3d` are Theano's functions.

>>> import pytensor.tensor as pt
>>> print(pool_3d(pt.tensor5(), (2, 2, 2), ignore_border=True).owner.op)
Pool3d{ws=(2, 2, 2), stride=(2, 2, 2), pad=(0, 0, 0), ignore_border=True, mode='max'}
"""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytensor.tensor as pt
from pytensor.gradient import disconnected_type
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.tensor.type import TensorType, integer_dtypes

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.c_code import RegisteredCCode
from lasagne_bn.ops.compiled_perform import compiled_perform
from lasagne_bn.ops.conv import _disconnected, as_int_tuple, static_or
from lasagne_bn.ops.rewrites import RegisteredOnUnpickle, ensure_registered
from lasagne_bn.ops.validation import check_float

POOL_MODES = ("max", "sum", "average_inc_pad", "average_exc_pad")


# --------------------------------------------------------------------------
# shapes and parameters


def pool_output_length(
    size: int | None, ws: int, stride: int, pad: int, ignore_border: bool
) -> int | None:
    """Theano's pooled length of one axis; ``None`` if ``size`` is unknown.

    Examples
    --------
    >>> pool_output_length(5, 2, 2, 0, True), pool_output_length(5, 2, 2, 0, False)
    (2, 3)
    >>> pool_output_length(None, 2, 2, 0, True) is None
    True
    """
    if size is None:
        return None
    v = size + 2 * pad
    if ignore_border:
        return max(0, (v - ws) // stride + 1)
    if stride >= ws:
        return (v - 1) // stride + 1
    return max(0, (v - 1 - ws + stride) // stride) + 1


def pool_output_shape(shape, ws, stride, pad, ignore_border):
    """Output shape for an input ``shape`` (entries may be ``None``); ``nd = len(ws)``."""
    nd = len(ws)
    return tuple(shape[:-nd]) + tuple(
        pool_output_length(shape[-nd + i], ws[i], stride[i], pad[i], ignore_border)
        for i in range(nd)
    )


def _window_dims(ws, nd) -> int:
    """The number of pooled axes: ``nd`` if given, else ``len(ws)`` (2 for an int)."""
    if nd is not None:
        return nd
    if isinstance(ws, list | tuple | np.ndarray):
        return len(ws)
    return 2


class PoolParams:
    """Validated pooling parameters (errors name the argument and value).

    ``nd`` (the number of pooled axes) defaults to ``len(ws)``, or 2 when
    ``ws`` is an int; ``pad=None`` means no padding.
    """

    def __init__(self, ws, stride=None, pad=None, ignore_border=True, mode="max", nd=None):
        nd = _window_dims(ws, nd)
        self.nd = nd
        self.ws = as_int_tuple(ws, "ws", nd, minimum=1)
        self.stride = self.ws if stride is None else as_int_tuple(stride, "stride", nd, minimum=1)
        self.pad = (0,) * nd if pad is None else as_int_tuple(pad, "pad", nd, minimum=0)
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

    def out_spatial(self, shape) -> tuple:
        """The pooled sizes of the last ``nd`` axes of ``shape``."""
        return pool_output_shape(shape, self.ws, self.stride, self.pad, self.ignore_border)[
            -self.nd :
        ]


def _check_input(x: Variable, nd: int, name: str = "input") -> None:
    check_float(x, name)
    if x.type.ndim < nd:
        raise TypeError(f"{name} has ndim={x.type.ndim}; pooling needs at least {nd} dimensions")


# --------------------------------------------------------------------------
# NumPy kernels (any number of pooled axes)


def _counts(size, ws, stride, pad, n_out, include_pad):
    """Per-axis divisor of each window (1-D)."""
    start = np.arange(n_out) * stride
    end = np.minimum(start + ws, size + 2 * pad)
    if not include_pad:
        start = np.maximum(start, pad)
        end = np.minimum(end, size + pad)
    return np.maximum(end - start, 0)


def pool_extent(shape, p, out_sp):
    """Padded size covering the padding and every (possibly partial) window."""
    nd = p.nd
    return tuple(
        max((out_sp[i] - 1) * p.stride[i] + p.ws[i], shape[-nd + i] + 2 * p.pad[i])
        for i in range(nd)
    )


def _inner(p, shape):
    """Index of the unpadded input inside the padded array."""
    nd = p.nd
    return (Ellipsis,) + tuple(slice(p.pad[i], p.pad[i] + shape[-nd + i]) for i in range(nd))


def _padded(x, p, out_sp, fill):
    """``x`` padded by ``pad`` (and on the high side up to the last window) with ``fill``."""
    need = pool_extent(x.shape, p, out_sp)
    if not any(p.pad) and need == x.shape[-p.nd :]:
        return x
    xp = np.full(x.shape[: -p.nd] + need, fill, dtype=x.dtype)
    xp[_inner(p, x.shape)] = x
    return xp


def _offsets(p):
    """Every tap (offset inside the window), in row-major order."""
    return itertools.product(*(range(w) for w in p.ws))


def _tap(xp, offset, p, out_sp):
    index = tuple(
        slice(a, a + s * (n - 1) + 1, s) for a, s, n in zip(offset, p.stride, out_sp, strict=True)
    )
    return xp[(Ellipsis, *index)]


def _work(dtype):
    return np.float32 if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def np_pool(x, p: PoolParams) -> np.ndarray:
    out_sp = p.out_spatial(x.shape)
    out_shape = x.shape[: -p.nd] + out_sp
    if 0 in out_shape:
        return np.zeros(out_shape, dtype=x.dtype)
    work = _work(x.dtype)
    xw = x.astype(work, copy=False)
    if p.mode == "max":
        xp = _padded(xw, p, out_sp, -np.inf)
        out = np.full(out_shape, -np.inf, dtype=work)
        for off in _offsets(p):
            np.maximum(out, _tap(xp, off, p, out_sp), out=out)
        return out.astype(x.dtype, copy=False)
    xp = _padded(xw, p, out_sp, 0)
    out = np.zeros(out_shape, dtype=work)
    for off in _offsets(p):
        out += _tap(xp, off, p, out_sp)
    if p.mode != "sum":
        out /= pool_divisor(x.shape, p, out_sp).astype(work)
    return out.astype(x.dtype, copy=False)


def pool_divisor(shape, p, out_sp):
    """Each window's divisor (broadcasts against the pooled axes)."""
    inc = p.mode == "average_inc_pad"
    nd = p.nd
    out = np.ones((), dtype=np.int64)
    for i in range(nd):
        c = _counts(shape[-nd + i], p.ws[i], p.stride[i], p.pad[i], out_sp[i], inc)
        out = np.multiply.outer(out, c)
    return out


def _crop(gp, x_shape, p):
    return gp[_inner(p, x_shape)]


def _argmax_masks(x, maxout, p, out_sp):
    """Yield ``(offset, mask)``: windows whose first maximum is at tap ``offset``."""
    work = _work(x.dtype)
    xp = _padded(x.astype(work, copy=False), p, out_sp, -np.inf)
    m = maxout.astype(work, copy=False)
    nan_max = np.isnan(m)
    taken = np.zeros(m.shape, dtype=bool)
    for off in _offsets(p):
        t = _tap(xp, off, p, out_sp)
        hit = (t == m) | (nan_max & np.isnan(t))
        hit &= ~taken
        taken |= hit
        yield off, hit


def _check_out(name, got, want):
    if tuple(got) != tuple(want):
        raise ValueError(
            f"{name} has shape {tuple(got)}; expected {tuple(want)} (the pooled shape)"
        )


def np_max_pool_grad(x, maxout, gz, p: PoolParams) -> np.ndarray:
    out_sp = p.out_spatial(x.shape)
    _check_out("maxout", maxout.shape, x.shape[: -p.nd] + out_sp)
    _check_out("output gradient", gz.shape, x.shape[: -p.nd] + out_sp)
    work = _work(x.dtype)
    gp = np.zeros(x.shape[: -p.nd] + pool_extent(x.shape, p, out_sp), dtype=work)
    if 0 not in out_sp:
        g = gz.astype(work, copy=False)
        for off, hit in _argmax_masks(x, maxout, p, out_sp):
            _tap(gp, off, p, out_sp)[...] += np.where(hit, g, 0)
    return np.ascontiguousarray(_crop(gp, x.shape, p)).astype(x.dtype, copy=False)


def np_max_pool_grad_grad(x, maxout, ggx, p: PoolParams) -> np.ndarray:
    out_sp = p.out_spatial(x.shape)
    _check_out("maxout", maxout.shape, x.shape[: -p.nd] + out_sp)
    if ggx.shape != x.shape:
        raise ValueError(f"second-order gradient has shape {ggx.shape}; expected {x.shape}")
    work = _work(x.dtype)
    out = np.zeros(maxout.shape, dtype=work)
    if 0 not in out_sp:
        gp = _padded(ggx.astype(work, copy=False), p, out_sp, 0)
        for off, hit in _argmax_masks(x, maxout, p, out_sp):
            out += np.where(hit, _tap(gp, off, p, out_sp), 0)
    return out.astype(x.dtype, copy=False)


def np_average_pool_grad(x_shape, gz, p: PoolParams, dtype) -> np.ndarray:
    x_shape = tuple(x_shape)
    out_sp = p.out_spatial(x_shape)
    _check_out("output gradient", gz.shape, x_shape[: -p.nd] + out_sp)
    work = _work(dtype)
    gp = np.zeros(x_shape[: -p.nd] + pool_extent(x_shape, p, out_sp), dtype=work)
    if 0 not in out_sp:
        g = gz.astype(work, copy=False)
        if p.mode != "sum":
            g = g / pool_divisor(x_shape, p, out_sp).astype(work)
        for off in _offsets(p):
            _tap(gp, off, p, out_sp)[...] += g
    return np.ascontiguousarray(_crop(gp, x_shape, p)).astype(dtype, copy=False)


# --------------------------------------------------------------------------
# Ops with static windows


class _PoolCCode(RegisteredOnUnpickle, RegisteredCCode):
    """The C code of every pooling Op (:mod:`lasagne_bn.ops.c.pool`)."""

    rewrite_group = "pool"


class _PoolOp(_PoolCCode):
    """Shared parameters of the static-window pooling Ops.

    Their C code (modes ``C`` and ``CVM``) is in :mod:`lasagne_bn.ops.c.pool`.
    """

    __props__ = ("ws", "stride", "pad", "ignore_border", "mode")
    _label = "Pool{}d"  # the printed name, by the number of pooled axes
    c_kind = 0  # what c/pool.py computes: 0 pool, 1 max grad, 2 max grad grad, 3 average grad
    np_impl = staticmethod(np_pool)  # the NumPy reference: ``np_impl(*inputs, params)``

    def __init__(self, ws, stride=None, pad=None, ignore_border=True, mode="max"):
        p = PoolParams(ws, stride, pad, ignore_border, mode)
        for k, v in p.props().items():
            setattr(self, k, v)

    @property
    def nd(self) -> int:
        return len(self.ws)

    @property
    def params(self) -> PoolParams:
        return PoolParams(**self._props_dict())

    def __str__(self) -> str:
        props = ", ".join(f"{k}={v!r}" for k, v in self._props_dict().items())
        return f"{self._label.format(self.nd)}{{{props}}}"

    def sibling(self, cls, **changes):
        props = self._props_dict() | changes
        if issubclass(cls, _MaxPoolGradOp):
            props["mode"] = "max"
        return cls(**props)

    def out_type(self, x: Variable) -> TensorType:
        shape = pool_output_shape(x.type.shape, self.ws, self.stride, self.pad, self.ignore_border)
        return TensorType(x.type.dtype, shape=shape)

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        output_storage[0][0] = self.np_impl(*inputs, self.params)


def _zero_grad_like(var):
    return pt.zeros_like(var)


class Pool(_PoolOp):
    """Pooling over the last ``len(ws)`` axes (see the module docstring)."""

    def make_node(self, x):
        ensure_registered("pool")  # our rewrites, once per process
        x = pt.as_tensor_variable(x)
        _check_input(x, self.nd)
        return Apply(self, [x], [self.out_type(x)()])

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        # pooled sizes as the output's own Shape_i, not as arithmetic (see static_or)
        return [static_or(node.outputs[0], (*shapes[0][: -self.nd], *([None] * self.nd)))]

    def pullback(self, inputs, outputs, cotangents):
        (x,), (out,), (gz,) = inputs, outputs, cotangents
        if _disconnected(gz):
            return [disconnected_type()]
        if self.mode == "max":
            return [self.sibling(MaxPoolGrad)(x, out, gz)]
        return [self.sibling(AveragePoolGrad)(x, gz)]


class _MaxPoolGradOp(_PoolOp):
    """``(x, maxout, g)``: :class:`MaxPoolGrad` and :class:`MaxPoolGradGrad`.

    Both are linear in ``g`` and each is the other's transpose, so each
    one's gradient w.r.t. ``g`` is the other; ``x`` and ``maxout`` only pick
    each window's first maximum.
    """

    def _as_inputs(self, x, maxout, g):
        ensure_registered("pool")  # our rewrites, once per process
        x, maxout, g = (pt.as_tensor_variable(v) for v in (x, maxout, g))
        _check_input(x, self.nd)
        return x, pt.cast(maxout, x.type.dtype), pt.cast(g, x.type.dtype)

    def pullback(self, inputs, outputs, cotangents):
        x, maxout, _ = inputs
        (g,) = cotangents
        if _disconnected(g):
            return [disconnected_type()] * 3
        other = MaxPoolGradGrad if isinstance(self, MaxPoolGrad) else MaxPoolGrad
        return [_zero_grad_like(x), _zero_grad_like(maxout), self.sibling(other)(x, maxout, g)]


class MaxPoolGrad(_MaxPoolGradOp):
    """Gradient of max pooling: ``(x, maxout, gz) -> gx`` (first maximum of each window)."""

    _label = "MaxPool{}dGrad"
    c_kind = 1
    np_impl = staticmethod(np_max_pool_grad)

    def make_node(self, x, maxout, gz):
        x, maxout, gz = self._as_inputs(x, maxout, gz)
        ref = self.out_type(x)
        for v, name in ((maxout, "maxout"), (gz, "output gradient")):
            if v.type.ndim != x.type.ndim:
                raise TypeError(f"{name} has ndim={v.type.ndim}; expected {x.type.ndim}")
            for a, b in zip(v.type.shape, ref.shape, strict=True):
                if a is not None and b is not None and a != b:
                    raise ValueError(f"{name} has shape {v.type.shape}; expected {ref.shape}")
        return Apply(self, [x, maxout, gz], [x.type()])

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [shapes[0]]


class MaxPoolGradGrad(_MaxPoolGradOp):
    """``(x, maxout, ggx) -> ggz``: ``ggx`` read at each window's first maximum."""

    _label = "MaxPool{}dGradGrad"
    c_kind = 2
    np_impl = staticmethod(np_max_pool_grad_grad)

    def make_node(self, x, maxout, ggx):
        x, maxout, ggx = self._as_inputs(x, maxout, ggx)
        if ggx.type.ndim != x.type.ndim or maxout.type.ndim != x.type.ndim:
            raise TypeError("maxout and the second-order gradient must have the input's ndim")
        return Apply(self, [x, maxout, ggx], [self.out_type(x)()])

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [static_or(node.outputs[0], shapes[1])]


class AveragePoolGrad(_PoolOp):
    """Gradient of sum / average pooling: ``(x, gz) -> gx`` (``x`` gives the shape)."""

    _label = "AveragePool{}dGrad"
    c_kind = 3

    @staticmethod
    def np_impl(x, gz, p):
        return np_average_pool_grad(x.shape, gz, p, x.dtype)

    def make_node(self, x, gz):
        ensure_registered("pool")  # our rewrites, once per process
        x, gz = pt.as_tensor_variable(x), pt.as_tensor_variable(gz)
        _check_input(x, self.nd)
        if self.mode == "max":
            raise ValueError(
                "AveragePoolGrad needs mode 'sum', 'average_inc_pad' or 'average_exc_pad'"
            )
        gz = pt.cast(gz, x.type.dtype)
        if gz.type.ndim != x.type.ndim:
            raise TypeError(f"output gradient has ndim={gz.type.ndim}; expected {x.type.ndim}")
        return Apply(self, [x, gz], [x.type()])

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        return [shapes[0]]

    def connection_pattern(self, node):
        return [[False], [True]]

    def pullback(self, inputs, outputs, cotangents):
        x, gz = inputs
        (gg,) = cotangents
        if _disconnected(gg):
            return [disconnected_type()] * 2
        return [disconnected_type(), self.sibling(Pool)(gg)]


# the 2-D names (one class per kind serves every number of pooled axes)
Pool2d = Pool
MaxPool2dGrad = MaxPoolGrad
MaxPool2dGradGrad = MaxPoolGradGrad
AveragePool2dGrad = AveragePoolGrad

#: :class:`DynamicPool`'s kinds and the static-window Ops that compute the same
_STATIC_OPS = {
    "pool": Pool,
    "max_grad": MaxPoolGrad,
    "max_grad_grad": MaxPoolGradGrad,
    "average_grad": AveragePoolGrad,
}


# --------------------------------------------------------------------------
# symbolic windows


_KINDS = {
    # kind: (number of array inputs, what it computes)
    "pool": 1,  # (x) -> pooled
    "max_grad": 3,  # (x, maxout, gz) -> gx
    "max_grad_grad": 3,  # (x, maxout, ggx) -> ggz
    "average_grad": 2,  # (x, gz) -> gx
}


class DynamicPool(_PoolCCode):
    """Pooling whose ``ws``, ``stride`` and ``pad`` are symbolic int vectors.

    Inputs: the arrays of ``kind`` (``'pool'``: ``x``; ``'max_grad'``:
    ``x, maxout, gz``; ``'max_grad_grad'``: ``x, maxout, ggx``;
    ``'average_grad'``: ``x, gz``), then ``ws``, ``stride``, ``pad``.  The
    values are checked when the function runs (the errors of
    :class:`PoolParams`).  Once the windows are constants, a rewrite swaps
    in the static Ops (:class:`Pool` ...) and their fast kernels; otherwise
    every backend but JAX (which needs static shapes) runs the NumPy code,
    or the C code under ``C`` / ``CVM``.
    """

    __props__ = ("kind", "nd", "ignore_border", "mode")

    def __init__(self, kind="pool", nd=2, ignore_border=True, mode="max"):
        if kind not in _KINDS:
            raise ValueError(f"kind={kind!r}: expected one of {', '.join(map(repr, _KINDS))}")
        # validates nd, ignore_border and mode with a stand-in window
        p = PoolParams((1,) * int(nd), None, None, ignore_border, mode, nd=int(nd))
        if kind in ("max_grad", "max_grad_grad") and p.mode != "max":
            raise ValueError(f"kind={kind!r} needs mode='max', got mode={mode!r}")
        if kind == "average_grad" and p.mode == "max":
            raise ValueError("kind='average_grad' needs a sum or average mode, got mode='max'")
        self.kind, self.nd, self.ignore_border, self.mode = kind, p.nd, p.ignore_border, p.mode

    def _windows(self, ws, stride, pad):
        out = []
        for v, name in ((ws, "ws"), (stride, "stride"), (pad, "pad")):
            v = pt.as_tensor_variable(v)
            if v.type.ndim == 0:
                v = pt.stack([v] * self.nd)
            if v.type.ndim != 1 or v.type.dtype not in integer_dtypes:
                raise TypeError(
                    f"{name}={v}: expected an int or a vector of {self.nd} ints, got "
                    f"{v.type.dtype} with ndim={v.type.ndim}"
                )
            if v.type.shape[0] not in (None, self.nd):
                raise ValueError(f"{name} has {v.type.shape[0]} entries; expected {self.nd}")
            out.append(pt.cast(v, "int64"))
        return out

    def make_node(self, *inputs):
        ensure_registered("pool")  # our rewrites, once per process
        n = _KINDS[self.kind]
        if len(inputs) != n + 3:
            raise TypeError(f"DynamicPool(kind={self.kind!r}) takes {n + 3} inputs")
        arrays = [pt.as_tensor_variable(v) for v in inputs[:n]]
        x = arrays[0]
        _check_input(x, self.nd)
        arrays = [x] + [pt.cast(v, x.type.dtype) for v in arrays[1:]]
        for v in arrays[1:]:
            if v.type.ndim != x.type.ndim:
                raise TypeError(f"{v} has ndim={v.type.ndim}; expected {x.type.ndim}")
        if self.kind in ("pool", "max_grad_grad"):
            shape = x.type.shape[: -self.nd] + (None,) * self.nd
            out = TensorType(x.type.dtype, shape=shape)()
        else:
            out = x.type()
        return Apply(self, [*arrays, *self._windows(*inputs[n:])], [out])

    def params_for(self, ws, stride, pad) -> PoolParams:
        return PoolParams(
            tuple(int(v) for v in ws),
            tuple(int(v) for v in stride),
            tuple(int(v) for v in pad),
            self.ignore_border,
            self.mode,
            nd=self.nd,
        )

    def static_op(self, ws, stride, pad):
        """The Op with static windows that computes the same thing."""
        return _STATIC_OPS[self.kind](**self.params_for(ws, stride, pad).props())

    def perform(self, node, inputs, output_storage):
        n = _KINDS[self.kind]
        p = self.params_for(*inputs[n:])
        output_storage[0][0] = _STATIC_OPS[self.kind].np_impl(*inputs[:n], p)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        if self.kind == "pool":
            return [static_or(node.outputs[0], (*shapes[0][: -self.nd], *([None] * self.nd)))]
        if self.kind == "max_grad_grad":
            return [shapes[1]]
        return [shapes[0]]

    def connection_pattern(self, node):
        n = _KINDS[self.kind]
        arrays = [[True]] * n
        if self.kind == "average_grad":
            arrays = [[False], [True]]
        return arrays + [[False]] * 3

    def pullback(self, inputs, outputs, cotangents):
        n = _KINDS[self.kind]
        windows = list(inputs[n:])
        (g,) = cotangents
        none = [disconnected_type()] * 3
        if _disconnected(g):
            return [disconnected_type()] * (n + 3)
        if self.kind == "pool":
            x, out = inputs[0], outputs[0]
            if self.mode == "max":
                return [self._sibling("max_grad")(x, out, g, *windows), *none]
            return [self._sibling("average_grad")(x, g, *windows), *none]
        if self.kind == "average_grad":
            return [disconnected_type(), self._sibling("pool")(g, *windows), *none]
        x, maxout = inputs[0], inputs[1]
        other = "max_grad_grad" if self.kind == "max_grad" else "max_grad"
        return [
            _zero_grad_like(x),
            _zero_grad_like(maxout),
            self._sibling(other)(x, maxout, g, *windows),
            *none,
        ]

    def _sibling(self, kind):
        return DynamicPool(kind, self.nd, self.ignore_border, self.mode)


def _static_ints(v):
    """``v`` as a tuple of Python ints if it is a plain value or a constant, else None."""
    if isinstance(v, Constant):
        v = v.data
    if isinstance(v, Variable):
        try:
            v = pt.get_underlying_scalar_constant_value(v) if v.type.ndim == 0 else None
        except Exception:
            return None
        if v is None:
            return None
    arr = np.asarray(v)
    if arr.dtype.kind not in "iu" and not (arr.dtype == object and arr.ndim == 1):
        return None
    try:
        return tuple(int(e) for e in arr.ravel()) if arr.ndim else int(arr)
    except TypeError:
        return None


def _is_symbolic(v) -> bool:
    if isinstance(v, Variable):
        return not isinstance(v, Constant)
    if isinstance(v, list | tuple):
        return any(_is_symbolic(e) for e in v)
    return False


# --------------------------------------------------------------------------
# public functions


def _pool_nd(name, nd, input, ws, ignore_border, stride, pad, mode):
    if ws is None:
        raise ValueError(f"ws=None: give the pooling window size, e.g. ws={(2,) * nd}")
    if ignore_border is None:
        warnings.warn(
            f"{name}: ignore_border was not given; using False (Theano 1.0's default). "
            "Pass ignore_border explicitly (True is what cuDNN and Lasagne use).",
            UserWarning,
            stacklevel=3,
        )
        ignore_border = False
    if pad is None:
        pad = (0,) * nd
    if any(_is_symbolic(v) for v in (ws, stride, pad)):
        if stride is None:
            stride = ws
        op = DynamicPool("pool", nd, ignore_border, mode)
        windows = ((ws, "ws"), (stride, "stride"), (pad, "pad"))
        return op(input, *(_as_window(v, name, nd) for v, name in windows))
    ws, stride, pad = (_constant_window(v) for v in (ws, stride, pad))
    p = PoolParams(ws, stride, pad, ignore_border, mode, nd=nd)
    return Pool(**p.props())(input)


def _constant_window(v):
    if isinstance(v, Constant):
        return _static_ints(v)
    return v


def _as_window(v, name, nd):
    if isinstance(v, list | tuple):
        if len(v) != nd:
            raise TypeError(f"{name}={v!r}: expected an int or a tuple of {nd} ints")
        return pt.stack([pt.cast(pt.as_tensor_variable(e), "int64") for e in v])
    return v


def pool_2d(input, ws=None, ignore_border=None, stride=None, pad=(0, 0), mode="max"):
    """Pool the last two axes of ``input`` (Theano's ``pool_2d``).

    Parameters
    ----------
    input : tensor with ndim >= 2
    ws : int or (int, int)
        Window size; symbolic ints (or an int vector) are accepted too (see
        :class:`DynamicPool`).
    ignore_border : bool
        ``True`` drops a partial last window; ``None`` means ``False`` (Theano
        1.0's default) with a warning.
    stride : int or (int, int), optional
        Defaults to ``ws`` (non-overlapping windows).
    pad : int or (int, int) or None
        Zero padding on both sides (``ignore_border=True`` only); ``None``: none.
    mode : 'max', 'sum', 'average_inc_pad', 'average_exc_pad'
        (``'average'`` is ``'average_inc_pad'``).

    >>> import pytensor.tensor as pt
    >>> pool_2d(pt.tensor4(), (2, 2), ignore_border=True).type.shape
    (None, None, None, None)
    """
    return _pool_nd("pool_2d", 2, input, ws, ignore_border, stride, pad, mode)


def pool_3d(input, ws=None, ignore_border=None, stride=None, pad=(0, 0, 0), mode="max"):
    """Pool the last three axes of ``input`` (Theano's ``pool_3d``).

    The arguments are those of :func:`pool_2d`, with three entries per
    tuple.

    >>> import pytensor.tensor as pt
    >>> x = pt.tensor5(shape=(1, 2, 5, 6, 7))
    >>> pool_3d(x, (2, 2, 2), ignore_border=False).type.shape
    (1, 2, 3, 3, 4)
    """
    return _pool_nd("pool_3d", 3, input, ws, ignore_border, stride, pad, mode)


def max_pool_2d_same_size(input, patch_size):
    """Keep only each non-overlapping patch's maximum (other values become 0)."""
    x = pt.as_tensor_variable(input)
    out = pool_2d(x, patch_size, ignore_border=True)
    op = Pool(as_int_tuple(patch_size, "patch_size", 2), None, None, True, "max")
    return MaxPoolGrad(**op._props_dict())(x, out, out)


__all__ = [
    "AveragePool2dGrad",
    "AveragePoolGrad",
    "DynamicPool",
    "MaxPool2dGrad",
    "MaxPool2dGradGrad",
    "MaxPoolGrad",
    "MaxPoolGradGrad",
    "Pool",
    "Pool2d",
    "max_pool_2d_same_size",
    "np_average_pool_grad",
    "np_max_pool_grad",
    "np_max_pool_grad_grad",
    "np_pool",
    "pool_2d",
    "pool_3d",
    "pool_output_length",
    "pool_output_shape",
]
