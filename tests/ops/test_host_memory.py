"""Large freed buffers stay in the process, when asked (lasagne_bn.ops.host_memory)."""

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
import lasagne_bn.ops
from lasagne_bn.ops import host_memory
if sys.argv[1] == "recycle":
    lasagne_bn.ops.recycle_host_memory()
elif sys.argv[1] == "cli-default":
    host_memory.recycle_unless_configured()
def step():
    a = np.empty(10 * 2**20, np.float32)
    a.fill(1.0)
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(5):
    step()
print((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5)
"""


def faults_per_step(how: str = "import", env: dict | None = None) -> float:
    proc = subprocess.run(
        [sys.executable, "-c", FAULTS_PER_STEP, how],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=True,
    )
    return float(proc.stdout.split()[-1])


@pytest.fixture(scope="module")
def imported_only() -> float:
    return faults_per_step("import")


def test_importing_the_ops_leaves_glibc_alone(imported_only):
    # glibc's default: a fresh mmap, every page faulted in, every step
    assert imported_only >= 10240


def test_recycle_host_memory_keeps_big_buffers(imported_only):
    assert faults_per_step("recycle") < 0.05 * imported_only


def test_the_commands_default_recycles_unless_the_user_set_glibc(imported_only):
    assert faults_per_step("cli-default") < 0.05 * imported_only
    env = {"MALLOC_TRIM_THRESHOLD_": "131072"}
    assert faults_per_step("cli-default", env=env) >= 0.9 * imported_only


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
