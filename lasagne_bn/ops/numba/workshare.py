"""Sharing a pass between threads without a barrier: no wait for a thread that has not started.

A ``prange`` loop ends at a barrier: the caller waits there for every worker
of Numba's pool.  On a machine whose cores are busy with other processes a
worker may not be scheduled for a whole time slice, so the pool's policy
(:mod:`.threads`) runs such a call on one thread, and the process then gets
one core's share of a loaded machine where a process with two running
threads gets two (PyTorch's spinning OpenMP threads, on (256, 4096) batch
norm inference with two busy loops: 0.78 ms against our 1.29).

A *work-shared* pass is cut into chunks numbered ``0 .. n-1``.  The caller
publishes the job (its chunk count and arguments) and takes chunks itself,
from a shared atomic counter; helper threads, woken through a futex, take
chunks from the same counter when they get a core.  The caller then waits
only for the chunks a helper has already taken: if no helper is scheduled,
the caller does every chunk, as fast as one thread, and a helper that wakes
late finds nothing left and sleeps again.  So the pass can be offered to all
the process's cores whatever the load.

- Helpers: ``min(NUMBA_NUM_THREADS, CPUs in the affinity mask, cgroup CPU
  quota) - 1`` daemon threads, started by :func:`ensure_helpers` when a
  kernel module is imported (never by ``import lasagne_bn``); a pass offers
  its chunks to ``threads - 1`` of them, where ``threads`` is
  :func:`lasagne_bn.ops.numba.threads.kernel_capacity`: one for small work,
  and at most :func:`~lasagne_bn.ops.numba.threads.set_kernel_threads`'s
  count or the caller's ``numba.set_num_threads``.
- Between jobs the helpers sleep in the kernel (``FUTEX_WAIT``): they never
  spin.  The caller spins for at most ``SPIN`` reads (a few microseconds)
  for a helper to finish its last chunk, then sleeps too.
- One job at a time: a caller that finds the helpers working for another
  thread's pass runs its own pass alone (correct, one core).
- Linux on x86-64, aarch64 and ppc64le only (futex); elsewhere no helper
  starts and the kernels use ``prange``.  A forked child starts its own
  helpers.

The kernels reach this module through C symbols (:data:`SYMBOLS`, ``cfunc``
compiled here and registered with LLVM), as they reach :mod:`.threads`: no
code of this file is compiled into a cached kernel, so editing it cannot
leave a stale copy in a kernel's on-disk cache.  What a chunk means stays
with the kernels: the job's arguments are ``PARAMS`` int64 words the caller
writes and its helpers read (:func:`params`).

>>> from lasagne_bn.ops.numba import workshare
>>> workshare.ensure_helpers() >= 0
True
"""

from __future__ import annotations

import ctypes
import os
import platform
import sys
import threading
from collections.abc import Callable

import numba
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from lasagne_bn.ops.numba import threads
from lasagne_bn.ops.numba.jit import njit

driver = njit(cache=True, nogil=True)

# --------------------------------------------------------------------------
# the shared state: int64 words, each hot one on its own cache line

_LINE = 8
LOCK, COUNTER, DONE, BELL, SLEEPERS, WAITING, HELPERS, JOB = (i * _LINE for i in range(8))
NCHUNKS, OFFERED, JOBS, HELPED = JOB, JOB + 1, JOB + 2, JOB + 3
PARAMS = 24  # words for the kernels' arguments
_PARAM0 = JOB + _LINE
_STATE_SIZE = _PARAM0 + PARAMS
_STATE = (ctypes.c_int64 * _STATE_SIZE)()
STATE_SYMBOL = "lasagne_bn_workshare_state"
_LOW = (1 << 32) - 1  # COUNTER: job generation << 32 | next chunk
SPIN = 4000

_LINUX = sys.platform.startswith("linux")
# futex(2)'s number; the futex words are the low halves of int64 words, so
# little-endian machines only.
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "ppc64le": 221}.get(
    platform.machine().lower(), -1
)
_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_syscall = types.ExternalFunction(
    "syscall",
    types.int64(types.int64, types.int64, types.int64, types.int64, types.int64, types.int64),
)


def _state_ptr(builder):
    """The state buffer, an external global the JIT resolves to :data:`STATE_SYMBOL`."""
    return threads.external_words(builder, STATE_SYMBOL, _STATE_SIZE)


def _word(builder, i):
    return builder.gep(_state_ptr(builder), [i])


@intrinsic
def _state(typingctx):
    def codegen(context, builder, signature, args):
        return _state_ptr(builder)

    return types.CPointer(types.int64)(), codegen


@intrinsic
def _load(typingctx, i):
    def codegen(context, builder, sig, args):
        (i,) = args
        return builder.load_atomic(_word(builder, i), "seq_cst", 8)

    return types.int64(i), codegen


@intrinsic
def _store(typingctx, i, v):
    def codegen(context, builder, sig, args):
        builder.store_atomic(args[1], _word(builder, args[0]), "seq_cst", 8)
        return context.get_dummy_value()

    return types.void(i, v), codegen


@intrinsic
def _add(typingctx, i, v):
    """Atomic fetch-and-add; the value before."""

    def codegen(context, builder, sig, args):
        return builder.atomic_rmw("add", _word(builder, args[0]), args[1], "seq_cst")

    return types.int64(i, v), codegen


@intrinsic
def _cas(typingctx, i, old, new):
    """Atomic compare-and-swap; the value found (``old`` if it swapped)."""

    def codegen(context, builder, sig, args):
        swap = builder.cmpxchg(_word(builder, args[0]), args[1], args[2], "seq_cst", "seq_cst")
        return builder.extract_value(swap, 0)

    return types.int64(i, old, new), codegen


@intrinsic
def _address(typingctx, i):
    def codegen(context, builder, sig, args):
        return builder.ptrtoint(_word(builder, args[0]), ir.IntType(64))

    return types.int64(i), codegen


@driver
def _futex_wait(i, seen):
    """Sleep while the low 32 bits of word ``i`` are ``seen`` (x86-64, aarch64: little-endian)."""
    _syscall(_SYS_FUTEX, _address(i), _FUTEX_WAIT_PRIVATE, seen & _LOW, 0, 0)


@driver
def _futex_wake(i, n):
    _syscall(_SYS_FUTEX, _address(i), _FUTEX_WAKE_PRIVATE, n, 0, 0)


# --------------------------------------------------------------------------
# the caller's side


@driver
def _begin(wanted):
    """Take the helpers for a job; how many are offered it (0: run alone, nothing taken)."""
    offered = min(wanted, _load(HELPERS))
    if offered <= 0 or _cas(LOCK, 0, 1) != 0:
        return 0
    return offered


@driver
def _launch(nchunks, offered):
    """Publish the job whose arguments the caller wrote into :func:`params`; wake the helpers."""
    _STATE_ARRAY = numba.carray(_state(), (_STATE_SIZE,))
    _STATE_ARRAY[NCHUNKS] = nchunks
    _STATE_ARRAY[OFFERED] = offered
    _STATE_ARRAY[JOBS] += 1
    _store(DONE, 0)
    generation = (_load(COUNTER) >> 32) + 1
    _store(COUNTER, generation << 32)  # publishes the words written before it
    _add(BELL, 1)
    if _load(SLEEPERS) > 0:
        _futex_wake(BELL, offered)
    return 0


@driver
def _claim():
    """The caller's next chunk (>= the chunk count when none is left)."""
    return _add(COUNTER, 1) & _LOW


@driver
def _finish():
    """A chunk is done (caller or helper); wakes a caller waiting for the last one."""
    done = _add(DONE, 1) + 1
    if done >= _load(NCHUNKS) and _load(WAITING) != 0:
        _futex_wake(DONE, 1)
    return 0


@driver
def _end(nchunks):
    """Wait for the chunks the helpers took, then free the helpers for the next job."""
    spins = 0
    while _load(DONE) < nchunks:
        spins += 1
        if spins > SPIN:
            _store(WAITING, 1)
            done = _load(DONE)
            if done < nchunks:
                _futex_wait(DONE, done)
            _store(WAITING, 0)
    _store(LOCK, 0)
    return 0


# --------------------------------------------------------------------------
# the helpers' side


@driver
def _bell():
    return _load(BELL)


@driver
def _helper_claim(helper):
    """Helper ``helper``'s next chunk of the current job; -1 when there is none for it."""
    while True:
        seen = _load(COUNTER)
        chunk = seen & _LOW
        if helper >= _load(OFFERED) or chunk >= _load(NCHUNKS):
            return -1
        # Compare-and-swap, not add: a helper that read an older job's
        # counter must not take a chunk of the next one.
        if _cas(COUNTER, seen, seen + 1) == seen:
            return chunk


@driver
def _helper_finish():
    _add(HELPED, 1)
    return _finish()


@driver
def _sleep(bell):
    """Sleep until a job is published after the helper read ``bell``."""
    _add(SLEEPERS, 1)
    if _load(BELL) == bell:
        _futex_wait(BELL, bell)
    _add(SLEEPERS, -1)
    return 0


@intrinsic
def _param_block(typingctx):
    def codegen(context, builder, sig, args):
        return builder.gep(_state_ptr(builder), [ir.Constant(ir.IntType(64), _PARAM0)])

    return types.CPointer(types.int64)(), codegen


@driver
def _params():
    return _param_block()


# --------------------------------------------------------------------------
# C symbols for the kernels

_I64 = types.int64
_SIGNATURES = {
    "begin": (_begin, _I64(_I64)),
    "launch": (_launch, _I64(_I64, _I64)),
    "claim": (_claim, _I64()),
    "finish": (_finish, _I64()),
    "end": (_end, _I64(_I64)),
    "bell": (_bell, _I64()),
    "helper_claim": (_helper_claim, _I64(_I64)),
    "helper_finish": (_helper_finish, _I64()),
    "sleep": (_sleep, _I64(_I64)),
    "params": (_params, types.CPointer(_I64)()),
}
SYMBOLS = {name: f"lasagne_bn_workshare_{name}" for name in _SIGNATURES}

#: For the kernels (see bn_kernels.py): ``offered = begin(threads - 1)``; if
#: offered, write the arguments into ``params()[:PARAMS]``, ``launch(n,
#: offered)``, take chunks with ``claim()`` (calling ``finish()`` after
#: each) until it returns ``>= n``, then ``end(n)``.  A helper thread loops
#: on ``bell()``, ``helper_claim(helper)`` (and ``helper_finish()``), ``sleep(bell)``.
begin, launch, claim, finish, end, bell, helper_claim, helper_finish, sleep, params = (
    types.ExternalFunction(SYMBOLS[name], sig) for name, (_, sig) in _SIGNATURES.items()
)
_cfuncs: list = []
_lock = threading.Lock()
_helpers: list[threading.Thread] = []
_started_in = [0]  # the pid whose helpers run


def ensure_symbols() -> None:
    """Compile the job functions and register them, and the state, with LLVM (once)."""
    if _cfuncs:
        return
    with _lock:
        if _cfuncs:
            return
        llvm.add_symbol(STATE_SYMBOL, ctypes.addressof(_STATE))
        compiled = []
        for name, (fn, sig) in _SIGNATURES.items():
            cfunc = numba.cfunc(sig, cache=True)(fn.py_func)
            llvm.add_symbol(SYMBOLS[name], cfunc.address)
            compiled.append(cfunc)
        _cfuncs.extend(compiled)


def helper_count() -> int:
    """How many helper threads this process starts: the cores it may use, minus the caller's."""
    if not _LINUX or _SYS_FUTEX < 0 or sys.byteorder != "little":
        return 0
    cpus = threads.affinity_cpus()
    ceiling = numba.config.NUMBA_NUM_THREADS
    if cpus > 0:
        ceiling = min(ceiling, cpus)
    limit = threads.cpu_limit()
    if limit > 0:
        ceiling = min(ceiling, limit)
    return max(0, ceiling - 1)


def stats() -> dict[str, int]:
    """Helper threads running, jobs shared since the process started, and chunks the helpers did.

    >>> sorted(stats())
    ['helper_chunks', 'helpers', 'jobs']
    """
    return {
        "helpers": int(_STATE[HELPERS]),
        "jobs": int(_STATE[JOBS]),
        "helper_chunks": int(_STATE[HELPED]),
    }


def ensure_helpers(main: Callable[[int], None] | None = None) -> int:
    """Start the helper threads (once per process) running ``main(helper)``; how many run.

    ``main`` is the kernels' helper loop (bn_kernels passes its own); with
    ``None`` the count is only reported.
    """
    ensure_symbols()
    with _lock:
        if main is not None and _started_in[0] != os.getpid():
            _start(main)
        return int(_STATE[HELPERS])


_main: list = []


def _start(main) -> None:
    _helpers.clear()
    for helper in range(helper_count()):
        thread = threading.Thread(
            target=main, args=(helper,), name=f"lasagne_bn-helper-{helper}", daemon=True
        )
        thread.start()
        _helpers.append(thread)
    _started_in[0] = os.getpid()
    _main[:] = [main]
    _STATE[HELPERS] = len(_helpers)


def _after_fork_in_child() -> None:
    # The parent's helpers do not exist here (and a job the fork cut short
    # is void): start the child's own, without the lock another parent
    # thread may have held at the fork.
    global _lock
    _lock = threading.Lock()
    for word in (HELPERS, LOCK, SLEEPERS, WAITING, NCHUNKS, OFFERED):
        _STATE[word] = 0
    if _main and _started_in[0]:
        _start(_main[0])


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
