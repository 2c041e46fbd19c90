"""The per-call thread choice of the parallel Numba kernels (lasagne_bn.ops.numba.threads).

The policy is checked on plain numbers (choose_threads), the live signals on
this machine, and the kernels for the same results on one thread and on
several: their work is cut into a fixed set of tasks whatever the thread
count, so the results are bit for bit the same.
"""

from __future__ import annotations

import time

import numba
import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from busy_cores import busy_cores, wait_for

from lasagne_bn.ops import batch_normalization_test, batch_normalization_train
from lasagne_bn.ops.conv import conv2d
from lasagne_bn.ops.numba import bn_kernels as nk
from lasagne_bn.ops.numba import threads as nt
from lasagne_bn.ops.pool import pool_2d

# About PyTensor's default (Numba) mode itself: the default tier keeps it there.
pytestmark = pytest.mark.default_mode

BIG = 1 << 30


@pytest.fixture
def restore_setting():
    previous = nt.get_kernel_threads()
    yield
    nt.set_kernel_threads(previous)


# --------------------------------------------------------------------------
# the policy, from plain numbers


def choose(work=BIG, min_work=1000, setting=0, ceiling=2, cpus=2, online=2, runnable=1):
    return nt.choose_threads(work, min_work, setting, ceiling, cpus, online, runnable)


def test_small_work_runs_on_one_thread():
    assert choose(work=999) == 1
    assert choose(work=0) == 1
    assert choose(work=1000) == 2


def test_quiet_machine_uses_numbas_count():
    assert choose(runnable=1) == 2
    # our own pool's workers still spinning after the last call are not load
    assert choose(runnable=2) == 2
    assert choose(ceiling=8, cpus=8, online=8, runnable=8) == 8


def test_busy_cores_drop_threads():
    # two busy processes beside us on 2 cores: one thread
    assert choose(runnable=3) == 1
    assert choose(runnable=4) == 1
    assert choose(runnable=50) == 1
    # 8 cores, 3 other busy tasks: 5 threads
    assert choose(ceiling=8, cpus=8, online=8, runnable=11) == 5


def test_load_counts_in_proportion_to_our_cpus():
    # pinned to 4 of 64 CPUs, 32 busy tasks elsewhere: about 2 of them on ours
    assert choose(ceiling=4, cpus=4, online=64, runnable=4 + 32) == 2


def test_affinity_and_ceiling_cap_the_count():
    assert choose(ceiling=8, cpus=2, online=8) == 2
    assert choose(ceiling=2, cpus=8, online=8) == 2
    assert choose(cpus=1) == 1
    assert choose(ceiling=1) == 1


def test_each_thread_gets_half_a_threshold_of_work():
    assert choose(work=1500, ceiling=8, cpus=8, online=8) == 3
    assert choose(work=4000, ceiling=8, cpus=8, online=8) == 8


def test_unknown_signals_fall_back_to_numbas_count():
    assert choose(cpus=-1, online=0, runnable=-1) == 2


def test_fixed_setting_wins_over_size_and_load():
    assert choose(work=1, setting=2, runnable=40) == 2
    assert choose(setting=1) == 1
    assert choose(setting=16) == 2  # never more than Numba's count


# --------------------------------------------------------------------------
# the live choice and the settings


def test_small_inputs_choose_one_thread_on_this_machine():
    for kind, threshold in nt.MIN_WORK.items():
        assert nt.kernel_threads(threshold - 1, kind) == 1
        assert nt.kernel_threads(0, kind) == 1


def test_large_inputs_stay_within_numba_count():
    for kind in nt.MIN_WORK:
        assert 1 <= nt.kernel_threads(BIG, kind) <= numba.get_num_threads()


def test_numba_set_num_threads_is_the_ceiling():
    previous = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        assert nt.kernel_threads(BIG) == 1
    finally:
        numba.set_num_threads(previous)


def test_set_kernel_threads_fixes_the_count(restore_setting):
    assert nt.set_kernel_threads(1) == "auto"
    assert nt.get_kernel_threads() == 1
    assert nt.kernel_threads(BIG) == 1
    assert nt.set_kernel_threads(2) == 1
    assert nt.kernel_threads(10) == min(2, numba.get_num_threads())
    assert nt.set_kernel_threads(None) == 2
    assert nt.get_kernel_threads() == "auto"


@pytest.mark.parametrize(
    ("value", "error"),
    [(0, ValueError), (-2, ValueError), ("many", ValueError), (1.5, TypeError), (True, TypeError)],
)
def test_bad_settings_are_refused(value, error, restore_setting):
    with pytest.raises(error, match="threads"):
        nt.set_kernel_threads(value)
    assert nt.get_kernel_threads() == "auto"


def test_environment_setting_is_parsed():
    assert nt._parse_setting("3", "LASAGNE_BN_THREADS") == 3
    assert nt._parse_setting(" auto ", "LASAGNE_BN_THREADS") == 0
    with pytest.raises(ValueError, match="LASAGNE_BN_THREADS='x'"):
        nt._parse_setting("x", "LASAGNE_BN_THREADS")


def test_bad_kind_and_work_are_refused():
    with pytest.raises(ValueError, match="kind='gemm'"):
        nt.kernel_threads(10, "gemm")
    with pytest.raises(TypeError, match="work=-1"):
        nt.kernel_threads(-1)


def test_signals_are_read():
    assert nt.runnable_tasks() >= 1  # this thread at least
    assert nt.affinity_cpus() >= 1


def test_busy_cores_give_one_thread():
    """With as many busy processes as our CPUs, a large call gets one thread."""
    cpus = nt.affinity_cpus()
    if cpus > 4:
        pytest.skip("needs a machine with at most 4 CPUs to load fully")
    with busy_cores(cpus):
        assert wait_for(nt.runnable_tasks, cpus + 1) >= cpus + 1
        # the policy takes the lower of two readings at least 1 ms apart
        for _ in range(2):
            time.sleep(0.002)
            threads = nt.kernel_threads(BIG)
        assert threads == 1


def test_a_moments_load_is_not_counted():
    """One reading that sees another task is not enough: the policy takes the lower of
    the last two (a task that wakes for a moment while our threads fill the cores)."""
    state = np.zeros(16, dtype=np.int64)
    state[nt._SEEN_AT] = 1  # an old reading: the next call reads again
    state[nt._SEEN] = 7
    got = nt._recent_runnable(state)
    assert state[nt._SEEN_BEFORE] == 7  # the old reading moved back
    assert state[nt._SEEN_AT] > 1 and got == min(7, state[nt._SEEN])
    state[nt._SEEN_AT] = nt.monotonic_ns()  # fresh: reused, not read
    state[nt._SEEN], state[nt._SEEN_BEFORE] = 5, 2
    assert nt._recent_runnable(state) == 2
    state[nt._SEEN], state[nt._SEEN_BEFORE] = 2, 5
    assert nt._recent_runnable(state) == 2
    state[nt._SEEN], state[nt._SEEN_BEFORE] = 4, 4
    assert nt._recent_runnable(state) == 4


def test_kernels_restore_the_callers_count(restore_setting):
    x3 = np.ones((4, 3, 5), dtype=np.float32)
    out3 = np.empty_like(x3)
    ones = np.ones(3)
    before = numba.get_num_threads()
    for setting in (1, 2, "auto"):
        nt.set_kernel_threads(setting)
        nk.train_forward(x3, ones, ones, 1e-4, out3)
        assert numba.get_num_threads() == before


# --------------------------------------------------------------------------
# one thread and several give the same bits


@pytest.fixture(scope="module")
def compiled():
    """Training and inference of batch norm, conv and pooling, default mode."""
    x = pt.tensor4("x")
    g, b = pt.vector("g"), pt.vector("b")
    k = pt.tensor4("k")
    y = conv2d(x, k, border_mode="half")
    out, _, _ = batch_normalization_train(y, g, b, axes="spatial")
    pooled = pool_2d(out, ws=(2, 2), ignore_border=True)
    dense, gd, bd = pt.matrix("d"), pt.vector("gd"), pt.vector("bd")
    dout, _, _ = batch_normalization_train(dense, gd, bd)
    cost = (pooled**2).sum() + (dout**3).sum()
    grads = pytensor.grad(cost, [x, k, g, b, dense, gd])
    train = pytensor.function([x, k, g, b, dense, gd, bd], [pooled, dout, *grads])
    m, v = pt.vector("m"), pt.vector("v")
    infer = pytensor.function([x, g, b, m, v], batch_normalization_test(x, g, b, m, v, "spatial"))
    return train, infer


def test_one_and_two_threads_agree_bitwise(compiled, restore_setting):
    train, infer = compiled
    rng = np.random.default_rng(0)
    fx = pytensor.config.floatX
    x = rng.standard_normal((4, 3, 8, 8)).astype(fx)
    k = rng.standard_normal((5, 3, 3, 3)).astype(fx)
    g, b = rng.uniform(0.5, 1.5, 5).astype(fx), rng.standard_normal(5).astype(fx)
    d = (10 + rng.standard_normal((33, 300))).astype(fx)
    gd, bd = np.ones(300, dtype=fx), np.zeros(300, dtype=fx)
    m, v = rng.standard_normal(3).astype(fx), rng.uniform(0.5, 2, 3).astype(fx)
    results = {}
    for threads in (1, 2):
        nt.set_kernel_threads(threads)
        results[threads] = [*train(x, k, g, b, d, gd, bd), infer(x, g[:3], b[:3], m, v)]
    for one, two in zip(results[1], results[2], strict=True):
        np.testing.assert_array_equal(one, two)
