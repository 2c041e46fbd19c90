"""Run a compiled function with the parallel kernels fixed to a thread count."""

from __future__ import annotations

from lasagne_bn.ops.numba.threads import set_kernel_threads


def on_threads(count: int, fn, *args):
    """``fn(*args)`` with every kernel call on ``count`` threads; the setting is restored."""
    previous = set_kernel_threads(count)
    try:
        return fn(*args)
    finally:
        set_kernel_threads(previous)
