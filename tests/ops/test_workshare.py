"""Elementwise batch-norm passes shared with helper threads (lasagne_bn.ops.numba.workshare).

The shared path must give the bits of the ``prange`` path on every layout
and dtype, let helpers do part of the work, survive concurrent callers and
a fork, leave idle helpers asleep, and be what a loaded machine gets.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from busy_cores import busy_cores

from lasagne_bn.ops import batch_normalization_test
from lasagne_bn.ops.numba import bn_kernels as nk
from lasagne_bn.ops.numba import workshare

# About PyTensor's default (Numba) mode itself: the default tier keeps it there.
pytestmark = pytest.mark.default_mode

HELPERS = workshare.ensure_helpers()
needs_helpers = pytest.mark.skipif(
    HELPERS == 0, reason="no helper thread here (one CPU, or not Linux): nothing is shared"
)

# (outer, channels, inner): rows two per sweep, rows one per sweep, runs of an inner axis
SHAPES = [(64, 4096 + 5, 1), (301, 513, 1), (9, 37, 333)]


def _operands(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x3, dy3 = (rng.standard_normal(shape) for _ in range(2))
    work = np.float32 if dtype == "float32" else np.float64
    consts = [rng.standard_normal(shape[1]).astype(work) for _ in range(4)]
    if dtype == "float16":  # the kernels take float16 as its bits
        x3, dy3 = (a.astype(np.float16).view(np.uint16) for a in (x3, dy3))
        return x3, dy3, consts
    return x3.astype(dtype), dy3.astype(dtype), consts


def _shared_until_helped(run, calls=200):
    """Run ``run()`` until a helper has done a chunk of one of its jobs (or ``calls`` times)."""
    before = workshare.stats()["helper_chunks"]
    for _ in range(calls):
        assert run(), "the job was not shared"
        if workshare.stats()["helper_chunks"] > before:
            return True
    return False


@needs_helpers
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_shared_passes_give_the_prange_bits(shape, dtype):
    x3, dy3, (v0, v1, v2, v3) = _operands(shape, dtype)
    pairs = shape[2] == 1 and nk._pair_sweeps(v1)
    chunk = nk._span_items(x3, pairs)[1]
    want_out, want_dx = np.empty_like(x3), np.empty_like(x3)
    nk._affine_chunks(x3, v0, v1, v2, want_out, chunk, pairs)
    nk._grad_chunks(x3, dy3, v0, v1, v2, v3, want_dx, chunk, pairs)
    out, dx = np.empty_like(x3), np.empty_like(x3)

    def affine():
        out.fill(0)
        return nk._shared(nk._AFFINE, x3, x3, out, v0, v1, v2, v2, pairs, 2)

    def grad():
        dx.fill(0)
        return nk._shared(nk._GRAD, x3, dy3, dx, v0, v1, v2, v3, pairs, 2)

    helped = _shared_until_helped(affine) | _shared_until_helped(grad)
    assert np.array_equal(out, want_out)
    assert np.array_equal(dx, want_dx)
    # On a machine this busy the helper may never get a core; the bits hold anyway.
    if not helped:
        pytest.xfail("no helper ran within 200 jobs (machine too busy): only the caller's bits")


@needs_helpers
def test_one_thread_and_small_work_are_not_shared():
    x3, _, (v0, v1, v2, _) = _operands((64, 4096, 1), "float32")
    out = np.empty_like(x3)
    assert not nk._shared(nk._AFFINE, x3, x3, out, v0, v1, v2, v2, False, 1)
    small, v = x3[:1, :8], [c[:8] for c in (v0, v1, v2)]
    assert not nk._shared(nk._AFFINE, small, small, out[:1, :8], *v, v[2], False, 2)


@needs_helpers
def test_concurrent_callers_get_their_own_results():
    """Two threads' passes at once: one shares, the other runs alone; neither mixes them up."""
    cases = [_operands((128, 4096, 1), "float32", seed) for seed in (1, 2)]
    wants = []
    for x3, _, (v0, v1, v2, _) in cases:
        want = np.empty_like(x3)
        nk._affine_chunks(x3, v0, v1, v2, want, nk._span_items(x3, True)[1], True)
        wants.append(want)
    errors = []

    def run(case, want):
        x3, _, (v0, v1, v2, _) = case
        out = np.empty_like(x3)
        for _ in range(100):
            out.fill(np.nan)
            if not nk._shared(nk._AFFINE, x3, x3, out, v0, v1, v2, v2, True, 2):
                nk._affine_chunks(x3, v0, v1, v2, out, nk._span_items(x3, True)[1], True)
            if not np.array_equal(out, want):
                errors.append("mismatch")
                return

    threads = [threading.Thread(target=run, args=cw) for cw in zip(cases, wants, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors


@needs_helpers
def test_idle_helpers_sleep():
    """Between jobs the helpers wait in the kernel: the process uses no CPU while it sleeps.

    A helper that spun would burn a core's worth of each window (half of one
    even on a loaded machine); other threads of the process (a garbage
    collector, a library's pool winding down) take a little now and then, so
    the quietest of three windows is what is judged.
    """
    x3, _, (v0, v1, v2, _) = _operands((64, 4096, 1), "float32")
    out = np.empty_like(x3)
    for _ in range(20):
        nk._shared(nk._AFFINE, x3, x3, out, v0, v1, v2, v2, False, 2)
    time.sleep(0.05)
    shares = []
    for _ in range(3):
        cpu, wall = time.process_time(), time.monotonic()
        time.sleep(0.3)
        shares.append((time.process_time() - cpu) / (time.monotonic() - wall))
    assert min(shares) < 0.2, f"CPU share of the process while idle: {shares}"


@needs_helpers
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
def test_a_forked_child_starts_its_own_helpers():
    script = textwrap.dedent(
        """
        import os, sys
        import numpy as np
        from lasagne_bn.ops.numba import bn_kernels as nk, workshare

        x3 = np.random.default_rng(0).standard_normal((64, 4096, 1)).astype(np.float32)
        v = np.ones(4096, np.float32)
        want = np.empty_like(x3)
        nk._affine_chunks(x3, v, v, v, want, nk._span_items(x3, True)[1], True)

        def check():
            out = np.empty_like(x3)
            for _ in range(50):
                assert nk._shared(nk._AFFINE, x3, x3, out, v, v, v, v, True, 2)
                assert np.array_equal(out, want)

        check()
        pid = os.fork()
        if pid == 0:
            ok = workshare.stats()["helpers"] == workshare.helper_count() > 0
            try:
                check()
            except AssertionError:
                ok = False
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        check()
        sys.exit(os.waitstatus_to_exitcode(status))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=300)
    assert result.returncode == 0, result.stderr.decode()[-2000:]


@needs_helpers
@pytest.mark.slow
def test_a_loaded_machine_shares_the_pass():
    """With every CPU busy the policy gives the pass one thread: it is offered to the helpers."""
    x = pt.tensor(dtype="float32", shape=(None, None))
    c = [pytensor.shared(np.ones(4096, np.float32)) for _ in range(4)]
    fn = pytensor.function([x], batch_normalization_test(x, *c, axes="per-activation"))
    data = np.random.default_rng(0).standard_normal((256, 4096)).astype(np.float32)
    want = fn(data)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    with busy_cores(cpus):
        time.sleep(0.2)
        before = workshare.stats()["jobs"]
        for _ in range(50):
            assert np.array_equal(fn(data), want)
        jobs = workshare.stats()["jobs"] - before
    assert jobs > 0
