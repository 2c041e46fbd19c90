"""N-channel 2-D and 3-D convolution Ops with Theano 1.0's semantics (PyTensor 3 has none).

Three Ops cover convolution and both of its gradients; each is the
transpose of the others, so every gradient (of any order) is again one of
them:

- :class:`Conv` ``(img, kern) -> out``, the forward convolution;
- :class:`ConvGradInputs` ``(kern, topgrad, shape) -> img`` (also the
  *transposed* convolution, or "deconvolution");
- :class:`ConvGradWeights` ``(img, topgrad, shape) -> kern``.

They are written once for any number of spatial axes (``convdim``);
:class:`Conv2d`, :class:`Conv2dGradInputs`, :class:`Conv2dGradWeights` and
the ``Conv3d`` ones only fix it to 2 or 3.  Layouts are Theano's: images
``(batch, channels, [depth,] rows, cols)``, filters ``(out channels, in
channels // num_groups, [depth,] rows, cols)``.  With
``filter_flip=True`` (the default) the filters are flipped before being
slid over the input, a true convolution; with ``False`` it is a
cross-correlation.  ``border_mode`` is ``'valid'``, ``'full'``, ``'half'``
(``'same'`` is accepted as an alias), an int, or a tuple (one item per
spatial axis) whose items are ints or ``(before, after)`` pairs.  ``'full'`` and ``'half'`` pad by
``dilated_kernel - 1`` and ``dilated_kernel // 2`` on both sides.

Every kernel works on the *correlation* form: ``out[n, f, y, x] = sum over
c, i, j of pad(img)[n, g*Cg + c, y*sh + i*dh, x*sw + j*dw] * k[f, c, i, j]``
with ``k`` the (possibly flipped) filters (a depth axis adds a third
index the same way).  The ``perform`` methods are the vectorised NumPy
implementation that ``FAST_COMPILE``, the python linker and CVM run;
:mod:`lasagne_bn.ops.numba.conv` and :mod:`lasagne_bn.ops.jax.conv` hold
the fast kernels.
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Sequence

import numpy as np
import pytensor.tensor as pt
from numpy.lib.stride_tricks import as_strided
from pytensor.gradient import DisconnectedType, disconnected_type
from pytensor.graph.basic import Apply, Constant, Variable
from pytensor.scalar import upcast
from pytensor.tensor.basic import MakeVector
from pytensor.tensor.elemwise import Elemwise
from pytensor.tensor.shape import Shape_i
from pytensor.tensor.type import TensorType

from lasagne_bn._compat_pytensor import compatible_infer_shape
from lasagne_bn.ops.c_code import RegisteredCCode
from lasagne_bn.ops.compiled_perform import compiled_perform
from lasagne_bn.ops.rewrites import RegisteredOnUnpickle, ensure_registered
from lasagne_bn.ops.validation import check_float

BORDER_STRINGS = ("valid", "full", "half")

Pads = tuple[tuple[int, int], ...]
BorderMode = str | Pads

SPATIAL_NAMES = {1: "length", 2: "rows, cols", 3: "depth, rows, cols"}


def _spatial_names(n: int) -> str:
    return SPATIAL_NAMES.get(n, f"{n} spatial axes")


# --------------------------------------------------------------------------
# argument normalisation (all errors name the argument, value and expectation)


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral | np.integer) and not isinstance(value, bool)


def as_int_tuple(value, name: str, n: int, minimum: int = 1) -> tuple[int, ...]:
    """An int or a length-``n`` sequence of ints, each ``>= minimum``."""
    if _is_int(value):
        items = (int(value),) * n
    elif isinstance(value, Sequence | np.ndarray) and not isinstance(value, str):
        items = tuple(value)
        if len(items) != n or not all(_is_int(v) for v in items):
            raise TypeError(f"{name}={value!r}: expected an int or a tuple of {n} ints")
        items = tuple(int(v) for v in items)
    else:
        raise TypeError(f"{name}={value!r}: expected an int or a tuple of {n} ints")
    if any(v < minimum for v in items):
        raise ValueError(f"{name}={value!r}: expected values >= {minimum}")
    return items


def normalize_border_mode(border_mode, n: int = 2) -> BorderMode:
    """``'valid'``, ``'full'``, ``'half'`` or ``((lo, hi),) * n`` explicit pads.

    Ints and tuples become explicit ``(before, after)`` pairs; all-zero
    padding becomes ``'valid'``; ``'same'`` becomes ``'half'``.
    """
    if isinstance(border_mode, str):
        mode = "half" if border_mode == "same" else border_mode
        if mode not in BORDER_STRINGS:
            raise ValueError(
                f"border_mode={border_mode!r}: expected 'valid', 'full', 'half' (or 'same'), "
                f"a non-negative int or a tuple of {n}"
            )
        return mode
    if _is_int(border_mode):
        items = (border_mode,) * n
    elif isinstance(border_mode, Sequence) and len(border_mode) == n:
        items = tuple(border_mode)
    else:
        raise TypeError(
            f"border_mode={border_mode!r}: expected 'valid', 'full', 'half', a non-negative "
            f"int, or a tuple of {n} ints or (before, after) pairs"
        )
    pads = []
    for item in items:
        if _is_int(item):
            pair = (int(item), int(item))
        elif (
            isinstance(item, Sequence)
            and not isinstance(item, str)
            and len(item) == 2
            and all(_is_int(v) for v in item)
        ):
            pair = (int(item[0]), int(item[1]))
        else:
            raise TypeError(
                f"border_mode={border_mode!r}: each item must be an int or a (before, after) "
                "pair of ints"
            )
        if min(pair) < 0:
            raise ValueError(f"border_mode={border_mode!r}: padding must be >= 0")
        pads.append(pair)
    if all(p == (0, 0) for p in pads):
        return "valid"
    return tuple(pads)


def dilated_size(k, dilation):
    """Extent of a kernel of size ``k`` dilated by ``dilation``."""
    return (k - 1) * dilation + 1


def resolve_pads(border_mode: BorderMode, kernel: Sequence, dilation: Sequence) -> list:
    """``[(lo, hi), ...]`` per spatial axis; entries may be symbolic."""
    out = []
    for axis, (k, d) in enumerate(zip(kernel, dilation, strict=True)):
        dk = dilated_size(k, d)
        if border_mode == "valid":
            out.append((0, 0))
        elif border_mode == "full":
            out.append((dk - 1, dk - 1))
        elif border_mode == "half":
            out.append((dk // 2, dk // 2))
        else:
            out.append(tuple(border_mode[axis]))
    return out


def conv_output_size(size, k, pad, stride, dilation):
    """Output length on one axis; ``None`` when something is unknown."""
    if size is None or k is None:
        return None
    return (size + pad[0] + pad[1] - dilated_size(k, dilation)) // stride + 1


def get_conv_output_shape(image_shape, kernel_shape, border_mode, subsample, filter_dilation=None):
    """Theano's output shape: ``(batch, out channels, *spatial)``, ``None`` if unknown.

    >>> get_conv_output_shape((8, 3, 16, 32, 30), (16, 3, 3, 5, 5), "half", (1, 2, 3))
    (8, 16, 16, 16, 10)
    """
    n = len(image_shape) - 2
    dilation = as_int_tuple(
        filter_dilation if filter_dilation is not None else 1, "filter_dilation", n
    )
    subsample = as_int_tuple(subsample, "subsample", n)
    mode = normalize_border_mode(border_mode, n)
    kern = kernel_shape[-n:]
    spatial = []
    for i in range(n):
        if kern[i] is None or image_shape[2 + i] is None:
            spatial.append(None)
            continue
        pad = (
            resolve_pads(mode, [kern[i]], [dilation[i]])[0]
            if not isinstance(mode, tuple)
            else mode[i]
        )
        spatial.append(
            conv_output_size(image_shape[2 + i], kern[i], pad, subsample[i], dilation[i])
        )
    return (image_shape[0], kernel_shape[0], *spatial)


class ConvParams:
    """Validated convolution parameters shared by the three Ops (``convdim`` spatial axes)."""

    def __init__(
        self, border_mode, subsample, filter_flip, filter_dilation, num_groups, convdim: int = 2
    ):
        self.convdim = int(convdim)
        n = self.convdim
        self.border_mode = normalize_border_mode(border_mode, n)
        self.subsample = as_int_tuple(subsample, "subsample", n)
        if not isinstance(filter_flip, bool | np.bool_):
            raise TypeError(f"filter_flip={filter_flip!r}: expected True or False")
        self.filter_flip = bool(filter_flip)
        self.filter_dilation = as_int_tuple(filter_dilation, "filter_dilation", n)
        if not _is_int(num_groups):
            raise TypeError(f"num_groups={num_groups!r}: expected a positive int")
        if num_groups < 1:
            raise ValueError(f"num_groups={num_groups!r}: expected a positive int")
        self.num_groups = int(num_groups)


# --------------------------------------------------------------------------
# graph-time checks


def _check_ndim(var: Variable, name: str, ndim: int, layout: str) -> None:
    if var.type.ndim != ndim:
        raise TypeError(f"{name} has ndim={var.type.ndim}; expected a {ndim}-d tensor {layout}")


def _as_float_pair(a, b, name_a: str, name_b: str):
    a, b = pt.as_tensor_variable(a), pt.as_tensor_variable(b)
    check_float(a, name_a)
    check_float(b, name_b)
    dtype = upcast(a.type.dtype, b.type.dtype)
    return pt.cast(a, dtype), pt.cast(b, dtype)


def _as_shape_input(shape, name: str, n: int = 2) -> Variable:
    """A length-``n`` int64 vector (the spatial shape an Op must produce)."""
    if isinstance(shape, list | tuple):
        if len(shape) != n:
            raise ValueError(
                f"{name}={shape!r}: expected the {n} spatial sizes ({_spatial_names(n)})"
            )
        for v in shape:
            if v is None or isinstance(v, bool | float | str):
                raise TypeError(
                    f"{name}={shape!r}: each size must be an int or an int scalar tensor"
                )
            if _is_int(v) and v < 1:
                raise ValueError(f"{name}={shape!r}: sizes must be >= 1")
        shape = pt.stack([pt.cast(pt.as_tensor_variable(v), "int64") for v in shape])
    var = pt.as_tensor_variable(shape)
    if var.type.ndim != 1 or not var.type.dtype.startswith(("int", "uint")):
        raise TypeError(f"{name} must be a vector of {n} ints, got {var.type}")
    if var.type.shape[0] not in (None, n):
        raise ValueError(
            f"{name} has {var.type.shape[0]} entries; expected {n} ({_spatial_names(n)})"
        )
    return pt.cast(var, "int64")


def spatial_shape(var: Variable) -> list:
    """``var.shape[2:]`` as a list: ints where static, so the gradient Ops see them."""
    return [s if s is not None else var.shape[2 + i] for i, s in enumerate(var.type.shape[2:])]


def _static_scalar(v: Variable) -> int | None:
    """An int scalar's value if the graph fixes it (constants, static sizes of shapes)."""
    try:
        return int(pt.get_underlying_scalar_constant_value(v))
    except Exception:
        pass
    owner = v.owner
    if owner is None:
        return None
    if isinstance(owner.op, Elemwise) and len(owner.inputs) == 1:  # a cast
        return _static_scalar(owner.inputs[0])
    if isinstance(owner.op, Shape_i):
        return owner.inputs[0].type.shape[owner.op.i]
    return None


def static_ints(var: Variable, n: int = 2) -> tuple[int | None, ...]:
    """The values of a length-``n`` shape vector that are known when the graph is built.

    Understands constants and ``MakeVector``s of known scalars (constants,
    ``Shape_i`` of static sizes).
    """
    if isinstance(var, Constant):
        return tuple(int(v) for v in var.data)
    owner = var.owner
    if owner is None:
        return (None,) * n
    if isinstance(owner.op, Elemwise) and len(owner.inputs) == 1:  # a cast
        return static_ints(owner.inputs[0], n)
    if isinstance(owner.op, MakeVector):
        return tuple(_static_scalar(v) for v in owner.inputs)
    return (None,) * n


def _static_pads(params: ConvParams, kernel: Sequence[int | None]) -> list | None:
    if any(k is None for k in kernel) and params.border_mode in ("full", "half"):
        return None
    kern = [k if k is not None else 1 for k in kernel]
    return resolve_pads(params.border_mode, kern, params.filter_dilation)


def _spatial_out(params: ConvParams, image, kernel) -> list[int | None]:
    pads = _static_pads(params, kernel)
    out = []
    for i in range(params.convdim):
        if pads is None or image[i] is None or kernel[i] is None:
            out.append(None)
        else:
            out.append(
                conv_output_size(
                    image[i], kernel[i], pads[i], params.subsample[i], params.filter_dilation[i]
                )
            )
    return out


def check_static_conv(
    params: ConvParams, img_shape, kern_shape, top_shape=None, where: str = "conv2d"
) -> list[int | None]:
    """Check what is known of the shapes; return the static output spatial shape."""
    g = params.num_groups
    n_out, cg = kern_shape[0], kern_shape[1]
    c = img_shape[1]
    if c is not None and c % g:
        raise ValueError(f"{where}: input has {c} channels, which num_groups={g} does not divide")
    if n_out is not None and n_out % g:
        raise ValueError(
            f"{where}: filters have {n_out} output channels (shape[0]), which num_groups={g} "
            "does not divide"
        )
    if c is not None and cg is not None and c != cg * g:
        raise ValueError(
            f"{where}: input has {c} channels but filters of shape {tuple(kern_shape)} expect "
            f"{cg * g} (filters.shape[1] * num_groups = {cg} * {g})"
        )
    spatial = _spatial_out(params, img_shape[2:], kern_shape[2:])
    for i, s in enumerate(spatial):
        if s is not None and s < 1:
            raise ValueError(
                f"{where}: input of spatial shape {tuple(img_shape[2:])} is too small for "
                f"filters of shape {tuple(kern_shape[2:])} with "
                f"border_mode={params.border_mode!r}, "
                f"subsample={params.subsample}, filter_dilation={params.filter_dilation} "
                f"(axis {i + 2} would have size {s})"
            )
    if top_shape is not None:
        if top_shape[1] is not None and n_out is not None and top_shape[1] != n_out:
            raise ValueError(
                f"{where}: output gradient has {top_shape[1]} channels; expected {n_out} "
                "(the filters' shape[0])"
            )
        for i, s in enumerate(spatial):
            t = top_shape[2 + i]
            if s is not None and t is not None and s != t:
                raise ValueError(
                    f"{where}: an input of spatial shape {tuple(img_shape[2:])} gives outputs of "
                    f"spatial shape {tuple(spatial)}, but the output gradient has "
                    f"{tuple(top_shape[2:])}"
                )
        if top_shape[0] is not None and img_shape[0] is not None and top_shape[0] != img_shape[0]:
            raise ValueError(
                f"{where}: output gradient has batch size {top_shape[0]}; expected {img_shape[0]}"
            )
    return spatial


# --------------------------------------------------------------------------
# NumPy kernels (vectorised; the reference every backend is tested against)


def runtime_pads(params, *kernel: int) -> list[tuple[int, int]]:
    """Explicit ``(before, after)`` pads for filters of spatial shape ``kernel``."""
    return [
        tuple(int(v) for v in p)
        for p in resolve_pads(params.border_mode, kernel, params.filter_dilation)
    ]


def check_runtime(params, x_shape, w_shape, top_shape=None, where="conv2d") -> tuple[int, ...]:
    """Shape checks when values are known; returns the output spatial shape."""
    spatial = check_static_conv(params, x_shape, w_shape, top_shape, where)
    return tuple(int(s) for s in spatial)


def _padded(x: np.ndarray, pads) -> np.ndarray:
    if all(p == (0, 0) for p in pads):
        return x
    shape = x.shape[:2] + tuple(s + lo + hi for s, (lo, hi) in zip(x.shape[2:], pads, strict=True))
    out = np.zeros(shape, dtype=x.dtype)
    inner = tuple(slice(lo, lo + s) for s, (lo, _) in zip(x.shape[2:], pads, strict=True))
    out[(slice(None), slice(None), *inner)] = x
    return out


def _windows(xp: np.ndarray, kernel, out_spatial, params) -> np.ndarray:
    """Read-only view ``(N, C, *out_spatial, *kernel)`` of every receptive field."""
    strides = xp.strides
    spatial = strides[2:]
    return as_strided(
        xp,
        shape=xp.shape[:2] + tuple(out_spatial) + tuple(kernel),
        strides=strides[:2]
        + tuple(s * st for s, st in zip(spatial, params.subsample, strict=True))
        + tuple(s * d for s, d in zip(spatial, params.filter_dilation, strict=True)),
        writeable=False,
    )


def _work(dtype) -> np.dtype:
    return np.dtype("float32") if np.dtype(dtype) == np.float16 else np.dtype(dtype)


def _oriented(w: np.ndarray, flip: bool) -> np.ndarray:
    return w[(slice(None), slice(None)) + (slice(None, None, -1),) * (w.ndim - 2)] if flip else w


def np_conv(x, w, params) -> np.ndarray:
    """Forward convolution of ``x`` ``(N, C, *spatial)`` with ``w`` ``(F, C/G, *kernel)``."""
    out_spatial = check_runtime(params, x.shape, w.shape)
    n = params.convdim
    work = _work(x.dtype)
    kernel = w.shape[2:]
    g = params.num_groups
    cg, fg = x.shape[1] // g, w.shape[0] // g
    xp = _padded(x.astype(work, copy=False), runtime_pads(params, *kernel))
    win = _windows(xp, kernel, out_spatial, params)
    k = _oriented(w.astype(work, copy=False), params.filter_flip)
    out = np.empty((x.shape[0], w.shape[0], *out_spatial), dtype=work)
    win_axes = [1, *range(2 + n, 2 + 2 * n)]
    for gi in range(g):
        res = np.tensordot(
            win[:, gi * cg : (gi + 1) * cg],
            k[gi * fg : (gi + 1) * fg],
            axes=(win_axes, list(range(1, n + 2))),
        )  # (N, *out_spatial, Fg)
        out[:, gi * fg : (gi + 1) * fg] = np.moveaxis(res, -1, 1)
    return out.astype(x.dtype, copy=False)


def np_conv_grad_inputs(w, dy, shape, params) -> np.ndarray:
    """Gradient of the forward convolution w.r.t. an input of spatial ``shape``."""
    spatial = tuple(int(v) for v in shape)
    n = params.convdim
    g = params.num_groups
    nb, f = dy.shape[:2]
    c = w.shape[1] * g
    check_runtime(params, (nb, c, *spatial), w.shape, dy.shape, f"conv{n}d_grad_wrt_inputs")
    work = _work(dy.dtype)
    kernel = w.shape[2:]
    out_spatial = dy.shape[2:]
    pads = runtime_pads(params, *kernel)
    cg, fg = c // g, f // g
    k = _oriented(w.astype(work, copy=False), params.filter_flip)
    dyw = dy.astype(work, copy=False)
    padded = tuple(s + lo + hi for s, (lo, hi) in zip(spatial, pads, strict=True))
    dxp = np.zeros((nb, c, *padded), dtype=work)
    for gi in range(g):
        # (N, *out_spatial, Cg, *kernel): every tap's contribution, then a strided add per tap
        contrib = np.tensordot(
            dyw[:, gi * fg : (gi + 1) * fg], k[gi * fg : (gi + 1) * fg], axes=([1], [0])
        )
        for tap in itertools.product(*(range(k_) for k_ in kernel)):
            region = tuple(
                slice(t * d, t * d + s * (o - 1) + 1, s)
                for t, d, s, o in zip(
                    tap, params.filter_dilation, params.subsample, out_spatial, strict=True
                )
            )
            dxp[(slice(None), slice(gi * cg, (gi + 1) * cg), *region)] += np.moveaxis(
                contrib[(Ellipsis, *tap)], -1, 1
            )
    inner = tuple(slice(lo, lo + s) for s, (lo, _) in zip(spatial, pads, strict=True))
    dx = dxp[(slice(None), slice(None), *inner)]
    return np.ascontiguousarray(dx).astype(dy.dtype, copy=False)


def np_conv_grad_weights(x, dy, shape, params) -> np.ndarray:
    """Gradient of the forward convolution w.r.t. filters of spatial ``shape``."""
    kernel = tuple(int(v) for v in shape)
    n = params.convdim
    g = params.num_groups
    f = dy.shape[1]
    w_shape = (f, x.shape[1] // g, *kernel)
    check_runtime(params, x.shape, w_shape, dy.shape, f"conv{n}d_grad_wrt_weights")
    work = _work(x.dtype)
    out_spatial = dy.shape[2:]
    cg, fg = x.shape[1] // g, f // g
    xp = _padded(x.astype(work, copy=False), runtime_pads(params, *kernel))
    win = _windows(xp, kernel, out_spatial, params)
    dyw = dy.astype(work, copy=False)
    dk = np.empty((f, cg, *kernel), dtype=work)
    reduce_axes = [0, *range(2, n + 2)]
    for gi in range(g):
        dk[gi * fg : (gi + 1) * fg] = np.tensordot(
            dyw[:, gi * fg : (gi + 1) * fg],
            win[:, gi * cg : (gi + 1) * cg],
            axes=(reduce_axes, reduce_axes),
        )
    return np.ascontiguousarray(_oriented(dk, params.filter_flip)).astype(x.dtype, copy=False)


# 2-D names (the functions work for any number of spatial axes)
np_conv2d = np_conv
np_conv2d_grad_inputs = np_conv_grad_inputs
np_conv2d_grad_weights = np_conv_grad_weights


# --------------------------------------------------------------------------
# Ops


def _disconnected(g) -> bool:
    return g is None or isinstance(g.type, DisconnectedType)


def _layout(kind: str, n: int) -> str:
    spatial = _spatial_names(n)
    if kind == "filters":
        return f"(out channels, in channels // num_groups, {spatial})"
    if kind == "output_grad":
        return f"(batch, out channels, {spatial})"
    return f"(batch, channels, {spatial})"


class _ConvOp(RegisteredOnUnpickle, RegisteredCCode):
    """Shared parameters of the convolution Ops; ``convdim`` is set by each subclass.

    Their C code (modes ``C`` and ``CVM``) is in :mod:`lasagne_bn.ops.c.conv`;
    float16 nodes have none (``CVM`` runs ``perform``).
    """

    __props__ = ("border_mode", "subsample", "filter_flip", "filter_dilation", "num_groups")
    convdim: int = 0  # number of spatial axes
    kind: int = 0  # 0 forward, 1 input gradient, 2 filter gradient
    rewrite_group = "conv"

    def __init__(
        self,
        border_mode: BorderMode = "valid",
        subsample=None,
        filter_flip: bool = True,
        filter_dilation=None,
        num_groups: int = 1,
    ):
        n = self.convdim
        if n < 1:
            raise TypeError(
                f"{type(self).__name__} is generic; use Conv2d/Conv3d (or their gradient Ops)"
            )
        p = ConvParams(
            border_mode,
            (1,) * n if subsample is None else subsample,
            filter_flip,
            (1,) * n if filter_dilation is None else filter_dilation,
            num_groups,
            n,
        )
        self.border_mode = p.border_mode
        self.subsample = p.subsample
        self.filter_flip = p.filter_flip
        self.filter_dilation = p.filter_dilation
        self.num_groups = p.num_groups

    @property
    def params(self) -> ConvParams:
        return ConvParams(**self._props_dict(), convdim=self.convdim)

    def sibling(self, cls_or_kind):
        """The Op of kind ``forward``/``grad_inputs``/``grad_weights`` (or a class) alike."""
        if isinstance(cls_or_kind, str):
            cls_or_kind = FAMILIES[self.convdim][KINDS.index(cls_or_kind)]
        return cls_or_kind(**self._props_dict())

    def do_constant_folding(self, fgraph, node):
        return False


KINDS = ("forward", "grad_inputs", "grad_weights")


class Conv(_ConvOp):
    """Forward convolution ``(img, kern) -> out`` over ``convdim`` spatial axes."""

    kind = 0

    def make_node(self, img, kern):
        ensure_registered("conv")  # our rewrites, once per process
        n = self.convdim
        img, kern = _as_float_pair(img, kern, "input", "filters")
        _check_ndim(img, "input", n + 2, _layout("input", n))
        _check_ndim(kern, "filters", n + 2, _layout("filters", n))
        spatial = check_static_conv(
            self.params, img.type.shape, kern.type.shape, where=f"conv{n}d"
        )
        out = TensorType(img.type.dtype, shape=(img.type.shape[0], kern.type.shape[0], *spatial))
        return Apply(self, [img, kern], [out()])

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        x, w = inputs
        output_storage[0][0] = np_conv(x, w, self.params)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        ishp, kshp = shapes
        return [static_or(node.outputs[0], (ishp[0], kshp[0]) + (None,) * self.convdim)]

    def pullback(self, inputs, outputs, cotangents):
        img, kern = inputs
        (g,) = cotangents
        if _disconnected(g):
            return [disconnected_type(), disconnected_type()]
        d_img = self.sibling("grad_inputs")(kern, g, spatial_shape(img))
        d_kern = self.sibling("grad_weights")(img, g, spatial_shape(kern))
        return [_like(d_img, img), _like(d_kern, kern)]


def static_or(var: Variable, symbolic) -> list:
    """``infer_shape`` entries: ``var``'s static sizes where known, else ``symbolic``.

    A ``None`` in ``symbolic`` stands for a size that only arithmetic on
    shapes could give: it becomes ``var``'s own ``Shape_i``.  Under JAX,
    PyTensor traces arithmetic on shapes, and an allocation or reshape with
    a traced size cannot be compiled, while ``Shape_i`` of a computed array
    is a concrete int there.
    """
    out = []
    for i, (s, sym) in enumerate(zip(var.type.shape, symbolic, strict=True)):
        if s is not None:
            out.append(s)
        elif sym is None:
            out.append(Shape_i(i)(var))
        else:
            out.append(sym)
    return out


def _like(var: Variable, ref: Variable) -> Variable:
    """``var`` with ``ref``'s exact type (static shape included) for gradients."""
    if var.type == ref.type:
        return var
    return pt.specify_shape(pt.cast(var, ref.type.dtype), ref.type.shape)


class _ConvGradOp(_ConvOp):
    """The two gradient Ops: ``(known, topgrad, shape) -> the other operand of Conv``.

    ``known`` is the operand the gradient is not taken for (the filters,
    or the input), ``shape`` the result's spatial shape.  Each is linear in
    ``known`` and in ``topgrad``, so their gradients are the other gradient
    Op and the forward convolution.
    """

    wrt: str  # "inputs" or "weights"
    known: str  # the argument name of ``known``
    shape_name: str  # the argument name of ``shape``

    def make_node(self, known, topgrad, shape):
        ensure_registered("conv")  # our rewrites, once per process
        n = self.convdim
        where = f"conv{n}d_grad_wrt_{self.wrt}"
        known, topgrad = _as_float_pair(known, topgrad, self.known, "output_grad")
        _check_ndim(known, self.known, n + 2, _layout(self.known, n))
        _check_ndim(topgrad, "output_grad", n + 2, _layout("output_grad", n))
        shape = _as_shape_input(shape, self.shape_name, n)
        out_shape = self._out_shape(known.type.shape, topgrad.type.shape, static_ints(shape, n))
        img, kern = self._forward_order(out_shape, known.type.shape)
        check_static_conv(self.params, img, kern, topgrad.type.shape, where)
        out = TensorType(topgrad.type.dtype, shape=out_shape)
        return Apply(self, [known, topgrad, shape], [out()])

    def perform(self, node, inputs, output_storage):
        if compiled_perform(node, inputs, output_storage):
            return
        output_storage[0][0] = self.np_impl(*inputs, self.params)

    @compatible_infer_shape
    def infer_shape(self, node, shapes):
        known, top, _ = shapes
        channels = known[1] if self.num_groups == 1 else None
        # topgrad's batch (input gradient) or out channels (filter gradient)
        out = (top[self.kind - 1], channels) + (None,) * self.convdim
        return [static_or(node.outputs[0], out)]

    def connection_pattern(self, node):
        return [[True], [True], [False]]

    def _forward_order(self, result, known):
        """``(img, kern)`` from the result of this Op and its ``known`` operand."""
        return (result, known) if self.kind == 1 else (known, result)

    def pullback(self, inputs, outputs, cotangents):
        known, top, _ = inputs
        (g,) = cotangents
        if _disconnected(g):
            return [disconnected_type()] * 3
        d_known = self.sibling(KINDS[3 - self.kind])(g, top, spatial_shape(known))  # the other
        d_top = self.sibling("forward")(*self._forward_order(g, known))
        return [_like(d_known, known), _like(d_top, top), disconnected_type()]


class ConvGradInputs(_ConvGradOp):
    """Gradient of :class:`Conv` w.r.t. its input: ``(kern, topgrad, shape) -> img``.

    ``shape`` is the input's spatial shape (``convdim`` sizes): with a
    stride, several input sizes give the same output size.  This is also
    the transposed convolution.
    """

    kind = 1
    wrt = "inputs"
    known = "filters"
    shape_name = "input_shape[2:]"
    np_impl = staticmethod(np_conv_grad_inputs)

    def _out_shape(self, kern, top, spatial):
        c = kern[1] * self.num_groups if kern[1] is not None else None
        return (top[0], c, *spatial)


class ConvGradWeights(_ConvGradOp):
    """Gradient of :class:`Conv` w.r.t. its filters: ``(img, topgrad, shape) -> kern``.

    ``shape`` is the filters' spatial shape (``convdim`` sizes).
    """

    kind = 2
    wrt = "weights"
    known = "input"
    shape_name = "filter_shape[2:]"
    np_impl = staticmethod(np_conv_grad_weights)

    def _out_shape(self, img, top, kernel):
        g, c = self.num_groups, img[1]
        cg = c // g if c is not None and c % g == 0 else None
        return (top[1], cg, *kernel)


class Conv2d(Conv):
    """Forward 2-D convolution ``(img, kern) -> out`` (NCHW, OIHW)."""

    convdim = 2


class Conv2dGradInputs(ConvGradInputs):
    """Gradient of :class:`Conv2d` w.r.t. its input (the transposed 2-D convolution)."""

    convdim = 2


class Conv2dGradWeights(ConvGradWeights):
    """Gradient of :class:`Conv2d` w.r.t. its filters."""

    convdim = 2


class Conv3d(Conv):
    """Forward 3-D convolution ``(img, kern) -> out`` (NCDHW, OIDHW)."""

    convdim = 3


class Conv3dGradInputs(ConvGradInputs):
    """Gradient of :class:`Conv3d` w.r.t. its input (the transposed 3-D convolution)."""

    convdim = 3


class Conv3dGradWeights(ConvGradWeights):
    """Gradient of :class:`Conv3d` w.r.t. its filters."""

    convdim = 3


#: ``convdim -> (forward, input gradient, filter gradient)`` Op classes.
FAMILIES = {
    2: (Conv2d, Conv2dGradInputs, Conv2dGradWeights),
    3: (Conv3d, Conv3dGradInputs, Conv3dGradWeights),
}


# --------------------------------------------------------------------------
# public functions (Theano's signatures)


def _apply_shape_hint(var: Variable, hint, name: str, ndim: int) -> Variable:
    """Check ``hint`` (ints or None) against ``var``'s static shape and impose it."""
    if hint is None:
        return var
    hint = tuple(hint)
    if len(hint) != ndim:
        raise ValueError(f"{name}={hint!r}: expected {ndim} entries (ints or None)")
    clean = []
    for i, h in enumerate(hint):
        if h is None:
            clean.append(None)
            continue
        if isinstance(h, Variable):
            try:
                h = int(pt.get_underlying_scalar_constant_value(h))
            except Exception:
                clean.append(None)
                continue
        if not _is_int(h) or h < 0:
            raise ValueError(f"{name}={hint!r}: entry {i} must be a non-negative int or None")
        known = var.type.shape[i]
        if known is not None and known != h:
            raise ValueError(
                f"{name}={hint!r} does not match the tensor's static shape {var.type.shape}"
            )
        clean.append(int(h))
    if all(c is None for c in clean):
        return var
    return pt.specify_shape(var, tuple(clean))


def _as_nd(var, name: str, n: int):
    var = pt.as_tensor_variable(var)
    _check_ndim(var, name, n + 2, _layout(name, n))
    return var


def _conv_nd(n, input, filters, input_shape, filter_shape, kwargs):
    op = FAMILIES[n][0](**kwargs)
    input = _apply_shape_hint(_as_nd(input, "input", n), input_shape, "input_shape", n + 2)
    filters = _apply_shape_hint(_as_nd(filters, "filters", n), filter_shape, "filter_shape", n + 2)
    return op(input, filters)


#: gradient Op kind -> (its result's shape argument, the known operand's, the leading axes)
_GRAD_ARGS = {
    1: ("input_shape", "filter_shape", "batch, channels"),
    2: ("filter_shape", "input_shape", "out channels, channels"),
}


def _grad_nd(kind, n, known, output_grad, shape, known_shape, kwargs):
    """Gradient Op ``kind`` (1 inputs, 2 filters) of ``n`` axes on ``(known, output_grad)``.

    ``shape`` is the result's shape (required), ``known_shape`` a hint for ``known``.
    """
    op = FAMILIES[n][kind](**kwargs)
    name, known_name, lead = _GRAD_ARGS[kind]
    if shape is None or len(shape) != n + 2:
        raise ValueError(
            f"{name}={shape!r}: expected {n + 2} entries ({lead}, "
            f"{_spatial_names(n)}); the {n} spatial sizes are required"
        )
    known = _apply_shape_hint(_as_nd(known, op.known, n), known_shape, known_name, n + 2)
    output_grad = _as_nd(output_grad, "output_grad", n)
    out = op(known, output_grad, list(shape[2:]))
    hint = [v if _is_int(v) else None for v in shape]
    return _apply_shape_hint(out, hint, name, n + 2)


def _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups) -> dict:
    return dict(
        border_mode=border_mode,
        subsample=subsample,
        filter_flip=filter_flip,
        filter_dilation=filter_dilation,
        num_groups=num_groups,
    )


def conv2d(
    input,
    filters,
    input_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1, 1),
    filter_flip=True,
    filter_dilation=(1, 1),
    num_groups=1,
):
    """2-D convolution of a batch of multi-channel images (Theano's ``conv2d``).

    Parameters
    ----------
    input : 4-D tensor ``(batch, channels, rows, cols)``
    filters : 4-D tensor ``(out channels, channels // num_groups, rows, cols)``
    input_shape, filter_shape : tuple of int or None, optional
        Known sizes; checked against the tensors and used to fix static shapes.
    border_mode : 'valid', 'full', 'half' ('same'), int, or tuple of two
        ints or ``(before, after)`` pairs
    subsample : int or (int, int)
        Strides.
    filter_flip : bool
        ``True`` flips the filters (a convolution), ``False`` does not
        (a cross-correlation).
    filter_dilation : int or (int, int)
    num_groups : int
        Split channels into groups that are convolved separately.

    Returns
    -------
    4-D tensor ``(batch, out channels, out rows, out cols)``.
    """
    kw = _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups)
    return _conv_nd(2, input, filters, input_shape, filter_shape, kw)


def conv2d_grad_wrt_inputs(
    output_grad,
    filters,
    input_shape,
    filter_shape=None,
    border_mode="valid",
    subsample=(1, 1),
    filter_flip=True,
    filter_dilation=(1, 1),
    num_groups=1,
):
    """Gradient of :func:`conv2d` w.r.t. its input: the transposed convolution.

    ``input_shape`` is the shape of the input (upsampled) tensor, a sequence
    of 4 entries; only the last two are required (ints or scalars), the
    first two may be ``None``.
    """
    kw = _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups)
    return _grad_nd(1, 2, filters, output_grad, input_shape, filter_shape, kw)


def conv2d_grad_wrt_weights(
    input,
    output_grad,
    filter_shape,
    input_shape=None,
    border_mode="valid",
    subsample=(1, 1),
    filter_flip=True,
    filter_dilation=(1, 1),
    num_groups=1,
):
    """Gradient of :func:`conv2d` w.r.t. its filters.

    ``filter_shape`` has 4 entries; the last two (rows, cols) are required.
    """
    kw = _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups)
    return _grad_nd(2, 2, input, output_grad, filter_shape, input_shape, kw)


def conv3d(
    input,
    filters,
    input_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=(1, 1, 1),
    filter_flip=True,
    filter_dilation=(1, 1, 1),
    num_groups=1,
):
    """3-D convolution of a batch of multi-channel volumes (Theano's ``conv3d``).

    As :func:`conv2d` with a leading depth axis: ``input`` is ``(batch,
    channels, depth, rows, cols)``, ``filters`` ``(out channels, channels //
    num_groups, depth, rows, cols)``; ``border_mode``, ``subsample`` and
    ``filter_dilation`` take three values (``border_mode`` items may be
    ``(before, after)`` pairs).

    >>> x = pt.tensor5(shape=(2, 3, 8, 9, 10))
    >>> w = pt.tensor5(shape=(4, 3, 3, 3, 3))
    >>> conv3d(x, w, border_mode="half", subsample=(2, 1, 1)).type.shape
    (2, 4, 4, 9, 10)
    """
    kw = _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups)
    return _conv_nd(3, input, filters, input_shape, filter_shape, kw)


def conv3d_grad_wrt_inputs(
    output_grad,
    filters,
    input_shape,
    filter_shape=None,
    border_mode="valid",
    subsample=(1, 1, 1),
    filter_flip=True,
    filter_dilation=(1, 1, 1),
    num_groups=1,
):
    """Gradient of :func:`conv3d` w.r.t. its input: the transposed 3-D convolution.

    ``input_shape`` has 5 entries; the last three (depth, rows, cols) are
    required (ints or int scalars), the first two may be ``None``.
    """
    kw = _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups)
    return _grad_nd(1, 3, filters, output_grad, input_shape, filter_shape, kw)


def conv3d_grad_wrt_weights(
    input,
    output_grad,
    filter_shape,
    input_shape=None,
    border_mode="valid",
    subsample=(1, 1, 1),
    filter_flip=True,
    filter_dilation=(1, 1, 1),
    num_groups=1,
):
    """Gradient of :func:`conv3d` w.r.t. its filters.

    ``filter_shape`` has 5 entries; the last three (depth, rows, cols) are
    required.
    """
    kw = _kwargs(border_mode, subsample, filter_flip, filter_dilation, num_groups)
    return _grad_nd(2, 3, input, output_grad, filter_shape, input_shape, kw)


def _border_1d(border_mode):
    if isinstance(border_mode, str):
        return border_mode
    if _is_int(border_mode):
        return (0, int(border_mode))
    if isinstance(border_mode, Sequence) and len(border_mode) == 1:
        return (0, border_mode[0])
    raise TypeError(
        f"border_mode={border_mode!r}: expected 'valid', 'full', 'half', an int, or a "
        "1-tuple holding an int or a (before, after) pair"
    )


def conv1d(
    input,
    filters,
    input_shape=None,
    filter_shape=None,
    border_mode="valid",
    subsample=1,
    filter_flip=True,
    filter_dilation=1,
    num_groups=1,
):
    """1-D convolution ``(batch, channels, length)`` * ``(out, channels // groups, size)``.

    Computed as a 2-D convolution over a size-1 row axis.
    """
    input = pt.as_tensor_variable(input)
    filters = pt.as_tensor_variable(filters)
    _check_ndim(input, "input", 3, "(batch, channels, length)")
    _check_ndim(filters, "filters", 3, "(out channels, channels // num_groups, length)")
    (stride,) = as_int_tuple(subsample, "subsample", 1)
    (dilation,) = as_int_tuple(filter_dilation, "filter_dilation", 1)
    mode = _border_1d(border_mode)
    if input_shape is not None:
        input = _apply_shape_hint(input, input_shape, "input_shape", 3)
    if filter_shape is not None:
        filters = _apply_shape_hint(filters, filter_shape, "filter_shape", 3)
    out = conv2d(
        input.dimshuffle(0, 1, "x", 2),
        filters.dimshuffle(0, 1, "x", 2),
        border_mode=mode,
        subsample=(1, stride),
        filter_flip=filter_flip,
        filter_dilation=(1, dilation),
        num_groups=num_groups,
    )
    return out[:, :, 0, :]


__all__ = [
    "Conv",
    "Conv2d",
    "Conv2dGradInputs",
    "Conv2dGradWeights",
    "Conv3d",
    "Conv3dGradInputs",
    "Conv3dGradWeights",
    "ConvGradInputs",
    "ConvGradWeights",
    "conv1d",
    "conv2d",
    "conv2d_grad_wrt_inputs",
    "conv2d_grad_wrt_weights",
    "conv3d",
    "conv3d_grad_wrt_inputs",
    "conv3d_grad_wrt_weights",
    "get_conv_output_shape",
    "np_conv",
    "np_conv2d",
    "np_conv2d_grad_inputs",
    "np_conv2d_grad_weights",
    "np_conv_grad_inputs",
    "np_conv_grad_weights",
]
