"""JAX registrations for the pooling Ops.

Forward pooling reduces the last ``nd`` axes (max, or a sum divided by each
window's count).  Windows of at most :data:`MAX_TAPS` elements are reduced
as a running maximum (sum) of strided slices, one per tap: XLA fuses those
into one elementwise loop, which on its CPU backend runs about twice as fast
as ``lax.reduce_window`` for the 2x2 and 3x3 windows networks use; larger
windows use ``lax.reduce_window``.  The average gradient is the forward's
exact linear transpose.  Max-pooling gradients use explicit first-maximum masks so
that ties go to the same element as in the other backends (XLA's
select-and-scatter breaks ties its own way).  :class:`DynamicPool` runs
only when its windows are concrete at trace time (constants); JAX cannot
compile shapes that depend on run-time values.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from pytensor.link.jax.dispatch import jax_funcify

from lasagne_bn.ops.pool import (
    _KINDS,
    _STATIC_OPS,
    DynamicPool,
    _offsets,
    pool_divisor,
    pool_extent,
)

#: Windows with more elements than this use ``lax.reduce_window``.
MAX_TAPS = 16


def _window_size(p) -> int:
    return int(np.prod(p.ws))


def _pool(p, x):
    """Theano's pooling of the last ``p.nd`` axes."""
    if _window_size(p) <= MAX_TAPS:
        return _pool_taps(p, x)
    nd = p.nd
    size = x.shape[-nd:]
    out_sp = p.out_spatial(x.shape)
    ext = pool_extent(x.shape, p, out_sp)
    lead = x.ndim - nd
    padding = ((0, 0),) * lead + tuple((p.pad[i], ext[i] - size[i] - p.pad[i]) for i in range(nd))
    window = (1,) * lead + p.ws
    strides = (1,) * lead + p.stride
    if p.mode == "max":
        init = np.array(-np.inf, dtype=x.dtype)
        out = lax.reduce_window(x, init, lax.max, window, strides, padding)
    else:
        work = np.float32 if x.dtype == np.float16 else x.dtype
        out = lax.reduce_window(
            x.astype(work), np.array(0, dtype=work), lax.add, window, strides, padding
        )
        if p.mode != "sum":
            out = out / pool_divisor(x.shape, p, out_sp).astype(work)
        out = out.astype(x.dtype)
    return out[(Ellipsis, *(slice(0, n) for n in out_sp))]


def _pool_taps(p, x):
    """:func:`_pool` as a running max (sum) over the window's strided slices."""
    if p.mode == "max":
        xp, out_sp, _ = _padded(p, x, -np.inf)
        return functools.reduce(jnp.maximum, (_tap(xp, off, p, out_sp) for off in _offsets(p)))
    work = np.float32 if x.dtype == np.float16 else x.dtype
    xp, out_sp, _ = _padded(p, x.astype(work), 0)
    out = functools.reduce(jnp.add, (_tap(xp, off, p, out_sp) for off in _offsets(p)))
    if p.mode != "sum":
        out = out / pool_divisor(x.shape, p, out_sp).astype(work)
    return out.astype(x.dtype)


def _padded(p, x, fill):
    """``x`` padded like :func:`lasagne_bn.ops.pool._padded` (covers every window)."""
    nd = p.nd
    out_sp = p.out_spatial(x.shape)
    ext = pool_extent(x.shape, p, out_sp)
    cfg = [(0, 0, 0)] * (x.ndim - nd) + [
        (p.pad[i], ext[i] - x.shape[-nd + i] - p.pad[i], 0) for i in range(nd)
    ]
    return lax.pad(x, np.array(fill, dtype=x.dtype), cfg), out_sp, ext


def _tap(xp, offset, p, out_sp):
    lead = xp.ndim - p.nd
    start = (0,) * lead + tuple(offset)
    limit = xp.shape[:lead] + tuple(
        a + s * (n - 1) + 1 for a, s, n in zip(offset, p.stride, out_sp, strict=True)
    )
    return lax.slice(xp, start, limit, (1,) * lead + p.stride)


def _first_max_masks(p, x, maxout):
    """``(offset, mask)`` per tap: windows whose first maximum (row-major) is at the tap."""
    xp, out_sp, _ = _padded(p, x, -np.inf)
    nan_max = jnp.isnan(maxout)
    taken = jnp.zeros(maxout.shape, dtype=bool)
    masks = []
    for off in _offsets(p):
        t = _tap(xp, off, p, out_sp)
        hit = ((t == maxout) | (nan_max & jnp.isnan(t))) & ~taken
        taken = taken | hit
        masks.append((off, hit))
    return masks, out_sp


def _max_pool_grad(p, x, maxout, gz):
    masks, out_sp = _first_max_masks(p, x, maxout)
    ext = pool_extent(x.shape, p, out_sp)
    lead = x.ndim - p.nd
    zero = np.array(0, dtype=x.dtype)
    inner = tuple(slice(p.pad[i], p.pad[i] + x.shape[lead + i]) for i in range(p.nd))
    if p.stride == p.ws:
        # Windows tile the padded input: each element is one tap of one
        # window, so the gradient is the taps' values interleaved (a
        # reshape), not a sum of scattered copies.
        taps = jnp.stack([jnp.where(hit, gz, zero) for _, hit in masks], axis=-1)
        taps = taps.reshape(gz.shape + p.ws)
        perm = [*range(lead)] + [a for i in range(p.nd) for a in (lead + i, lead + p.nd + i)]
        tiled = tuple(n * w for n, w in zip(gz.shape[lead:], p.ws, strict=True))
        gp = jnp.transpose(taps, perm).reshape(gz.shape[:lead] + tiled)
        # rows and columns past the last window (ignore_border) get nothing
        cfg = [(0, 0, 0)] * lead + [(0, e - t, 0) for e, t in zip(ext, tiled, strict=True)]
        return lax.pad(gp, zero, cfg)[(Ellipsis, *inner)]
    gp = jnp.zeros(x.shape[:lead] + ext, dtype=x.dtype)
    for off, hit in masks:
        # scatter onto the strided grid of this tap: interior padding
        cfg = [(0, 0, 0)] * lead + [
            (a, e - a - s * (n - 1) - 1, s - 1)
            for a, e, s, n in zip(off, ext, p.stride, out_sp, strict=True)
        ]
        gp = gp + lax.pad(jnp.where(hit, gz, zero), zero, cfg)
    return gp[(Ellipsis, *inner)]


def _max_pool_grad_grad(p, x, maxout, ggx):
    masks, out_sp = _first_max_masks(p, x, maxout)
    gp, _, _ = _padded(p, ggx, 0)
    zero = np.array(0, dtype=x.dtype)
    out = jnp.zeros(maxout.shape, dtype=x.dtype)
    for off, hit in masks:
        out = out + jnp.where(hit, _tap(gp, off, p, out_sp), zero)
    return out


def _average_pool_grad(p, x, gz):
    transpose = jax.linear_transpose(lambda v: _pool(p, v), jax.ShapeDtypeStruct(x.shape, x.dtype))
    return transpose(gz)[0]


#: kind (:class:`DynamicPool`'s) -> ``impl(params, *arrays)``
_IMPLS = {
    "pool": _pool,
    "max_grad": _max_pool_grad,
    "max_grad_grad": _max_pool_grad_grad,
    "average_grad": _average_pool_grad,
}


def _funcify_static(impl):
    """``jax_funcify`` of a static-window Op (:class:`Pool` ...) that runs ``impl``."""

    def funcify(op, node, **kwargs):
        p = op.params

        def run(*inputs):
            return impl(p, *inputs)

        run.__name__ = impl.__name__.lstrip("_")  # names the call in PyTensor's JAX source
        return run

    return funcify


for _kind, _cls in _STATIC_OPS.items():
    jax_funcify.register(_cls)(_funcify_static(_IMPLS[_kind]))


@jax_funcify.register(DynamicPool)
def jax_funcify_DynamicPool(op, node, **kwargs):
    n = _KINDS[op.kind]
    impl = _IMPLS[op.kind]

    def dynamic_pool(*inputs):
        try:
            windows = [np.asarray(v).ravel() for v in inputs[n:]]
        except jax.errors.TracerArrayConversionError:
            raise NotImplementedError(
                f"{op}: JAX needs pooling windows known when the function is compiled; "
                "these are computed at run time (e.g. from an input shape that is not "
                "static). Give the input a static shape, or use another mode."
            ) from None
        return impl(op.params_for(*windows), *inputs[:n])

    return dynamic_pool
