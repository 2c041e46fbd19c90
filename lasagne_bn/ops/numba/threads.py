"""How many threads the parallel Numba kernels use: chosen per call.

The batch-norm, convolution and pooling kernels, and the large elementwise
nodes of a node-by-node program (:mod:`.elemwise`), are ``prange`` loops run
by Numba's thread pool.  A parallel launch is not free: with the ``omp``
threading layer (libgomp), a launch wakes the pool's workers, the caller
waits at a barrier for the slowest, and every worker then spins for a few
milliseconds before it sleeps.  On a quiet machine that is a few
microseconds; on a machine whose cores are busy with other processes the
worker the caller waits for may not be scheduled for a whole time slice, so
a millisecond kernel can take a hundred times longer on two threads than on
one (``bn_bench.py --contend`` measures it).  So each kernel's
C entry point asks :func:`threads_for` before it runs:

- one thread when the work is small (below the kernel family's
  ``*_MIN_WORK``, measured where a second thread starts to pay), through
  ``numba.set_num_threads(1)`` for the call: a one-thread launch wakes no
  worker;
- otherwise as many threads as the cores can give now: at most
  ``numba.get_num_threads()`` (``NUMBA_NUM_THREADS``, or the caller's
  ``numba.set_num_threads``), at most the CPUs in the process's affinity
  mask (and its cgroup CPU quota, read at import), and fewer when other
  tasks are runnable: the 4th field of ``/proc/loadavg`` (runnable tasks
  now; 2-5 µs to read, so a reading is reused for up to 1 ms; the lower of
  the last two readings, so that a task runnable for a moment does not
  count) minus our own pool's threads is the other load, counted in
  proportion of our CPUs to the machine's;
- at least ``MIN_WORK / 2`` of the work per thread.

The thread count is set with ``numba.set_num_threads`` (thread-local in
jitted code) for the call and restored after it; nothing global changes,
and no thread is started besides Numba's pool.  :func:`set_kernel_threads`
(or ``LASAGNE_BN_THREADS=<n>`` at import) fixes the count for every call
instead (still capped by Numba's count), which is also how the tests run the
parallel code on small inputs.

The kernels reach this policy through C symbols (:data:`ENTER_SYMBOL`, a
``cfunc`` compiled here) and the setting through a small process-wide C
buffer (:data:`STATE_SYMBOL`): no address is baked into a kernel, so they
stay cacheable on disk, and an edit of this file cannot leave stale policy
code in the kernels' caches (Numba keys a cached function on its own file
only).  Both symbols are registered with LLVM, and Numba's thread pool is
started, by :func:`ensure_symbols`, which the kernel modules call when they
are imported (when a kernel is about to be compiled); importing
:mod:`lasagne_bn` does neither.

>>> from lasagne_bn.ops.numba.threads import kernel_threads, BN_MIN_WORK
>>> kernel_threads(1000, "batch_norm")         # small: one thread, no parallel launch
1
"""

from __future__ import annotations

import ctypes
import math
import os
import sys
import threading

import numba
import numpy as np
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.extending import intrinsic

from lasagne_bn.ops.numba.jit import njit

driver = njit(cache=True, nogil=True)

# Elements (batch norm), multiply-adds (convolution), window reads (pooling)
# and output elements (elementwise)
# below which a call runs on one thread.  Estimates (a few tens of µs of work
# on one thread, against a launch that wakes a sleeping worker): the machine
# was never quiet enough to measure the crossover with
# benchmarks/thread_threshold.py; rerun it on a quiet machine and adjust.
BN_MIN_WORK = 1 << 16
CONV_MIN_WORK = 1 << 20
POOL_MIN_WORK = 1 << 16
ELEMWISE_MIN_WORK = 1 << 16

MIN_WORK = {
    "batch_norm": BN_MIN_WORK,
    "conv": CONV_MIN_WORK,
    "pool": POOL_MIN_WORK,
    "elemwise": ELEMWISE_MIN_WORK,
}

# The kernels name their family by number; the thresholds live in the state
# buffer below (not baked into the cached kernels, so a new value here takes
# effect without recompiling them).
BATCH_NORM, CONV, POOL, ELEMWISE = 0, 1, 2, 3
KINDS = {"batch_norm": BATCH_NORM, "conv": CONV, "pool": POOL, "elemwise": ELEMWISE}

# --------------------------------------------------------------------------
# the process-wide setting, shared with the compiled kernels by symbol name

STATE_SYMBOL = "lasagne_bn_kernel_threads_state"
_SETTING, _CPU_LIMIT, _ONLINE, _SEEN_AT, _SEEN, _SEEN_BEFORE = 0, 1, 2, 3, 4, 5
_MIN_WORK_SLOT = 8  # + kind
_STATE_SIZE = 16
_STATE = (ctypes.c_int64 * _STATE_SIZE)()


def external_words(builder: ir.IRBuilder, symbol: str, size: int) -> ir.Value:
    """An ``int64*`` to the process-wide buffer ``symbol`` (``size`` words), declared as
    an external global: the JIT resolves it by name when the code loads, so no
    address is baked into a cached kernel."""
    module = builder.module
    try:
        var = module.get_global(symbol)
    except KeyError:
        var = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(64), size), symbol)
        var.linkage = "external"
    return builder.bitcast(var, ir.IntType(64).as_pointer())


@intrinsic
def _state_pointer(typingctx):
    """Pointer to the process-wide int64 setting buffer (resolved when the kernel loads)."""
    sig = types.CPointer(types.int64)()

    def codegen(context, builder, signature, args):
        return external_words(builder, STATE_SYMBOL, _STATE_SIZE)

    return sig, codegen


# --------------------------------------------------------------------------
# cheap signals: libc calls, by symbol name (cacheable)

_open = types.ExternalFunction("open", types.int32(types.voidptr, types.int32))
_read = types.ExternalFunction("read", types.intp(types.int32, types.voidptr, types.uintp))
_close = types.ExternalFunction("close", types.int32(types.int32))
_sched_getaffinity = types.ExternalFunction(
    "sched_getaffinity", types.int32(types.int32, types.uintp, types.voidptr)
)
# Numba's own thread-count functions, by the symbols its threading layer
# registers (``numba.get_num_threads()`` in jitted code goes through a
# ctypes pointer, which makes a function uncacheable).
_get_num_threads = types.ExternalFunction("get_num_threads", types.intc())
set_num_threads = types.ExternalFunction("set_num_threads", types.void(types.intc))
_clock_gettime = types.ExternalFunction("clock_gettime", types.int32(types.int32, types.voidptr))
_CLOCK_MONOTONIC = 1
_LOADAVG = np.frombuffer(b"/proc/loadavg\0", dtype=np.uint8)
_LINUX = sys.platform.startswith("linux")
_MASK_WORDS = 16  # 1024 CPUs


@driver
def runnable_tasks() -> int:
    """Tasks runnable on the machine now (4th field of /proc/loadavg); -1 if unknown."""
    if not _LINUX:
        return -1
    buf = np.empty(96, dtype=np.uint8)
    fd = _open(_LOADAVG.ctypes.data, 0)
    if fd < 0:
        return -1
    n = _read(fd, buf.ctypes.data, 96)
    _close(fd)
    # "0.52 0.58 0.59 3/176 4242": skip three fields, read the digits
    i = 0
    spaces = 0
    while i < n and spaces < 3:
        if buf[i] == 32:
            spaces += 1
        i += 1
    value = -1
    while i < n and 48 <= buf[i] <= 57:
        value = (0 if value < 0 else value * 10) + (buf[i] - 48)
        i += 1
    return value


@driver
def monotonic_ns() -> int:
    """CLOCK_MONOTONIC in nanoseconds (a vDSO call, tens of ns); 0 if unavailable."""
    ts = np.zeros(2, dtype=np.int64)
    if not _LINUX or _clock_gettime(_CLOCK_MONOTONIC, ts.ctypes.data) != 0:
        return 0
    return ts[0] * 1_000_000_000 + ts[1]


# Reading /proc/loadavg takes 2-5 µs; a reading is reused for this long.
REFRESH_NS = 1_000_000


@driver
def _recent_runnable(state) -> int:
    """The lower of the last two ``runnable_tasks()`` readings, taken at least
    REFRESH_NS apart (a reading is reused in between).

    One reading counts a task that is runnable for a moment: while our two
    threads keep both cores of a 2-core machine busy, a kernel worker or
    daemon that wakes waits for a core, and one conv call in nine of a
    DCGAN training step read it and ran on one thread.  A busy process is
    in both readings; such a task seldom is.
    """
    now = monotonic_ns()
    if now == 0:
        return runnable_tasks()
    if state[_SEEN_AT] == 0:
        state[_SEEN] = runnable_tasks()
        state[_SEEN_BEFORE] = state[_SEEN]
        state[_SEEN_AT] = now
    elif now - state[_SEEN_AT] >= REFRESH_NS:
        state[_SEEN_BEFORE] = state[_SEEN]
        state[_SEEN] = runnable_tasks()
        state[_SEEN_AT] = now
    return min(state[_SEEN], state[_SEEN_BEFORE])


@driver
def affinity_cpus() -> int:
    """CPUs in the calling thread's affinity mask; -1 if unknown."""
    if not _LINUX:
        return -1
    mask = np.zeros(_MASK_WORDS, dtype=np.uint64)
    if _sched_getaffinity(0, _MASK_WORDS * 8, mask.ctypes.data) < 0:
        return -1
    count = 0
    for word in mask:
        while word:
            word &= word - np.uint64(1)
            count += 1
    return count


# --------------------------------------------------------------------------
# the policy


@driver
def choose_threads(work, min_work, setting, ceiling, cpus, online, runnable) -> int:
    """The thread count for a call, from plain numbers (no system calls).

    Parameters
    ----------
    work, min_work : int
        The call's work and the size below which one thread does it.
    setting : int
        0 for the automatic choice, or a fixed count (:func:`set_kernel_threads`).
    ceiling : int
        ``numba.get_num_threads()``.
    cpus : int
        CPUs this process may use (affinity, quota); <= 0 if unknown.
    online : int
        CPUs of the machine (what ``runnable`` is spread over); <= 0 if unknown.
    runnable : int
        Runnable tasks now, our own thread included; < 0 if unknown.
    """
    if setting > 0:
        return max(1, min(setting, ceiling))
    n = ceiling if cpus <= 0 else min(ceiling, cpus)
    if n <= 1 or work < min_work:
        return 1
    # each thread gets at least half of what made a second thread pay
    n = min(n, 2 * work // min_work)
    if runnable > 0:
        # Our caller and our pool's workers (which spin for a while after a
        # launch) are runnable too: only what is beyond them is other load.
        others = runnable - ceiling
        if others > 0:
            have = cpus if cpus > 0 else ceiling
            if 0 < have < online:
                others = (others * have + online - 1) // online  # others on our CPUs
            n = min(n, have - others)
    return max(1, n)


@driver
def _usable_cpus(state) -> int:
    """CPUs of the affinity mask, at most the cgroup quota's; <= 0 if unknown."""
    cpus = affinity_cpus()
    limit = state[_CPU_LIMIT]
    if limit > 0 and (cpus <= 0 or limit < cpus):
        cpus = limit
    return cpus


@driver
def threads_for(work, min_work) -> int:
    """How many threads a call with ``work`` (family threshold ``min_work``) uses now."""
    state = numba.carray(_state_pointer(), (_STATE_SIZE,))
    setting = state[_SETTING]
    ceiling = np.int64(_get_num_threads())
    if setting > 0 or ceiling <= 1 or work < min_work:
        return choose_threads(work, min_work, setting, ceiling, 0, 0, -1)
    cpus = _usable_cpus(state)
    if 0 < cpus <= 1:
        return 1
    runnable = _recent_runnable(state)
    return choose_threads(work, min_work, 0, ceiling, cpus, state[_ONLINE], runnable)


# --------------------------------------------------------------------------
# Python side


def _enter(work, kind):
    """Set this thread's Numba thread count for a call of family ``kind``; the count to restore."""
    previous = np.int64(_get_num_threads())
    state = numba.carray(_state_pointer(), (_STATE_SIZE,))
    n = threads_for(work, state[_MIN_WORK_SLOT + kind])
    if n != previous:
        set_num_threads(n)
    return previous


ENTER_SYMBOL = "lasagne_bn_kernel_threads_enter"
_enter_cfunc: list = []  # the compiled _enter, once ensure_symbols() ran
_symbols_lock = threading.Lock()


def ensure_symbols() -> None:
    """Start Numba's thread pool and register the kernels' two symbols with LLVM (once).

    The kernel modules call it when imported: a parallel kernel loaded from
    Numba's disk cache finds no thread pool unless one was started, and
    every kernel links :data:`ENTER_SYMBOL` and :data:`STATE_SYMBOL`.
    """
    if _enter_cfunc:
        return
    with _symbols_lock:
        if _enter_cfunc:
            return
        # get/set_num_threads in jitted code need the pool (and its symbols).
        numba.get_num_threads()
        llvm.add_symbol(STATE_SYMBOL, ctypes.addressof(_STATE))
        cfunc = numba.cfunc(types.int64(types.int64, types.int64), cache=True)(_enter)
        llvm.add_symbol(ENTER_SYMBOL, cfunc.address)
        _enter_cfunc.append(cfunc)


#: For the kernels: ``previous = enter_threads(work, KIND)`` before their
#: parallel loops, ``set_num_threads(previous)`` after.
enter_threads = types.ExternalFunction(ENTER_SYMBOL, types.int64(types.int64, types.int64))


def cpu_limit() -> int:
    """CPUs allowed by the process's cgroup quota (read at import); 0 if none."""
    return int(_STATE[_CPU_LIMIT])


def _cgroup_cpu_limit() -> int:
    """CPUs allowed by a cgroup v2 quota (``cpu.max``), rounded up; 0 if none."""
    try:
        with open("/proc/self/cgroup") as f:
            path = next(
                (line.split(":", 2)[2].strip() for line in f if line.startswith("0::")), None
            )
        if path is None:
            return 0
        with open(f"/sys/fs/cgroup{path}/cpu.max") as f:
            quota, period = f.read().split()[:2]
    except (OSError, ValueError, StopIteration, IndexError):
        return 0
    if quota == "max":
        return 0
    return max(1, math.ceil(int(quota) / int(period)))


def _parse_setting(value, name: str) -> int:
    if value is None or (isinstance(value, str) and value.strip().lower() == "auto"):
        return 0
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            raise ValueError(
                f"{name}={value!r}: expected 'auto' or a positive number of threads"
            ) from None
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name}={value!r}: expected None, 'auto' or a positive int")
    if value < 1:
        raise ValueError(f"{name}={value}: expected a positive number of threads (or 'auto')")
    return int(value)


def set_kernel_threads(threads: int | str | None = "auto") -> int | str:
    """Fix the thread count of the parallel Numba kernels, or go back to choosing per call.

    Parameters
    ----------
    threads : int, 'auto' or None
        A positive int: every batch-norm, convolution, pooling and split elementwise call
        uses that many threads (at most ``numba.get_num_threads()``), however
        small its input and however busy the machine.  ``'auto'`` or
        ``None`` (the default, also what ``LASAGNE_BN_THREADS`` sets at
        import): chosen per call from the work size and the free cores.
        The setting is process-wide.

    Returns
    -------
    int or str
        The previous setting, to restore it.

    Examples
    --------
    >>> previous = set_kernel_threads(1)      # never a parallel launch
    >>> kernel_threads(10**8, "batch_norm")
    1
    >>> set_kernel_threads(previous)
    1
    """
    value = _parse_setting(threads, "threads")
    previous = _STATE[_SETTING]
    _STATE[_SETTING] = value
    return previous or "auto"


def get_kernel_threads() -> int | str:
    """The current setting: a fixed thread count, or ``'auto'``.

    Examples
    --------
    >>> from lasagne_bn.ops import set_kernel_threads
    >>> previous = set_kernel_threads(2)
    >>> get_kernel_threads()
    2
    >>> set_kernel_threads(previous)
    2
    """
    return _STATE[_SETTING] or "auto"


def kernel_threads(work: int, kind: str = "batch_norm") -> int:
    """The thread count a kernel call of ``kind`` with ``work`` would use now, on this thread.

    ``work``: elements for ``'batch_norm'``, multiply-adds for ``'conv'``,
    window reads (output elements times window size) for ``'pool'``,
    output elements (all outputs) for ``'elemwise'``.

    Examples
    --------
    >>> kernel_threads(64, "pool")
    1
    """
    if kind not in KINDS:
        raise ValueError(f"kind={kind!r}: expected one of {sorted(KINDS)}")
    if isinstance(work, bool) or not isinstance(work, int | np.integer) or work < 0:
        raise TypeError(f"work={work!r}: expected a non-negative int")
    ensure_symbols()
    return int(threads_for(int(work), _STATE[_MIN_WORK_SLOT + KINDS[kind]]))


def _init() -> None:
    _STATE[_SETTING] = _parse_setting(os.environ.get("LASAGNE_BN_THREADS"), "LASAGNE_BN_THREADS")
    _STATE[_CPU_LIMIT] = _cgroup_cpu_limit()
    _STATE[_ONLINE] = os.cpu_count() or 0
    for kind, number in KINDS.items():
        _STATE[_MIN_WORK_SLOT + number] = MIN_WORK[kind]


_init()
