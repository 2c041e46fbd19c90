"""JAX mode whose run-time argument checks raise our one-line ``ValueError``.

A traced JAX program cannot raise: a symbolic ``epsilon`` fed -1 is found
out of range in the traced graph and sent to the host, where
:meth:`lasagne_bn.ops.validation.Range.check` raises (see
:func:`lasagne_bn.ops.jax.bn._scalar_check`).  XLA then reports the failed
callback as ``JaxRuntimeError: INTERNAL: CpuCallback error ...``, our
message buried in a traceback.  The host check records the error it raises
(:func:`raised_on_host`); :class:`JAXLinker` catches the runtime error
where the compiled function returns and raises the recorded error instead,
so that a user sees the same ``ValueError`` as in every other mode.

PyTensor's own ``mode="JAX"`` has no such boundary of ours: there the
message stays inside JAX's error.  :func:`jax_mode` is PyTensor's JAX mode
with this linker; ``lasagne_bn_compat``'s ``theano.function`` compiles
``mode='JAX'`` with it.

>>> import pytensor, pytensor.tensor as pt
>>> x = pt.vector("x")
>>> f = pytensor.function([x], x * 2, mode=jax_mode())
>>> [float(v) for v in f([1.0, 2.0])]
[2.0, 4.0]
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from pytensor.compile.mode import Mode, get_mode
from pytensor.link.jax.linker import JAXLinker as _PyTensorJAXLinker

__all__ = ["JAXLinker", "jax_mode", "raised_on_host", "take_raised_on_host"]

# Errors raised in host callbacks, by message, until the call that ran them
# returns.  A callback may run on another thread than the caller (GPU), so
# they are matched to the caller's runtime error by their message; the few
# never taken (under PyTensor's own JAX mode) are dropped oldest first.
_RAISED: OrderedDict[str, BaseException] = OrderedDict()
_LOCK = threading.Lock()
_KEEP = 16


def raised_on_host(error: BaseException) -> BaseException:
    """Record ``error``, about to be raised in a host callback; returns it."""
    with _LOCK:
        _RAISED[str(error)] = error
        while len(_RAISED) > _KEEP:
            _RAISED.popitem(last=False)
    return error


def take_raised_on_host(runtime_error: BaseException) -> BaseException | None:
    """The recorded error whose message ``runtime_error``'s contains (forgotten), or None."""
    text = str(runtime_error)
    with _LOCK:
        for message in reversed(_RAISED):
            if message in text:
                return _RAISED.pop(message)
    return None


class JAXLinker(_PyTensorJAXLinker):
    """PyTensor's JAX linker; an error our host checks raised is raised as itself."""

    def jit_compile(self, fn):
        jitted = super().jit_compile(fn)

        def call(*args):
            try:
                return jitted(*args)
            except Exception as exc:  # jax.errors.JaxRuntimeError, whose module may move
                error = take_raised_on_host(exc)
                if error is None:
                    raise
                raise error.with_traceback(None) from None

        return call


def jax_mode() -> Mode:
    """PyTensor's ``"JAX"`` mode (same rewrites) with :class:`JAXLinker`.

    Returns
    -------
    pytensor.compile.mode.Mode

    Examples
    --------
    >>> jax_mode().linker.__class__.__name__
    'JAXLinker'
    """
    return Mode(linker=JAXLinker(), optimizer=get_mode("JAX").provided_optimizer)
