"""Large freed buffers stay in the process (lasagne_bn.ops.host_memory)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lasagne_bn.ops import host_memory

pytestmark = pytest.mark.skipif(host_memory._glibc() is None, reason="needs glibc")

# 40 MiB arrays are above glibc's largest dynamic mmap threshold (32 MiB), so
# by default every one is a fresh mmap whose pages fault in on first write.
# Huge pages are switched off in the child so the count does not depend on
# how an mmap happens to be aligned: a fresh 40 MiB array is 10 240 faults.
FAULTS_PER_STEP = """
import ctypes, resource, sys
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE
import numpy as np
if sys.argv[1] == "ops":
    import lasagne_bn.ops
def step():
    a = np.empty(10 * 2**20, np.float32)
    a.fill(1.0)
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def faults_per_step(*, import_ops: bool, env: dict | None = None) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_STEP, "ops" if import_ops else "plain"],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(proc.stdout.split()[-1])


@pytest.fixture(scope="module")
def without_ops() -> float:
    return faults_per_step(import_ops=False)


def test_default_glibc_faults_a_big_array_in_every_time(without_ops):
    assert without_ops >= 10240


def test_importing_the_ops_recycles_big_buffers(without_ops):
    assert faults_per_step(import_ops=True) < 0.05 * without_ops


@pytest.mark.parametrize(
    "env", [{"LASAGNE_BN_RECYCLE_MEMORY": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}]
)
def test_the_user_can_keep_glibcs_own_settings(env, without_ops):
    assert faults_per_step(import_ops=True, env=env) >= 0.9 * without_ops


@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"mmap_threshold": 0}, ValueError),
        ({"trim_threshold": 2**31}, ValueError),
        ({"mmap_threshold": 1.5e8}, TypeError),
        ({"trim_threshold": True}, TypeError),
    ],
)
def test_bad_thresholds_are_named(kwargs, error):
    (name,) = kwargs
    with pytest.raises(error, match=name):
        host_memory.recycle_host_memory(**kwargs)
