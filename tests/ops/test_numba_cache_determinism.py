"""A kernel compiled in this process and the same kernel loaded from Numba's disk
cache give the same bits.

They did not: with LLVM's "reassoc" the order of a vectorised sum was chosen
each time the loop was optimized, and Numba runs a parallel kernel's loop
body optimized once right after compiling it but optimized again (linked into
its caller) when it loads it from the cache.  The demo, same seed, trained to
other last bits on a cold cache than on a warm one.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Training forward and backward of both layouts (inner > 1 and inner == 1),
# float32 and float64, and Lasagne's inference graph (inv_std folded into
# gamma, a scalar std: a generated wrapper's own loop) through PyTensor's
# default mode; prints one hash of every output.
CHILD = """
import hashlib
import numpy as np
import pytensor
import pytensor.tensor as pt
from lasagne_bn.ops import batch_normalization
from lasagne_bn.ops.numba import bn_kernels as nk

digest = hashlib.sha256()
rng = np.random.default_rng(0)
for shape in [(6, 5, 70), (70, 9, 1)]:
    for dtype in ("float32", "float64"):
        x3 = (3 * rng.standard_normal(shape) + 1).astype(dtype)
        dy3 = rng.standard_normal(shape).astype(dtype)
        C = shape[1]
        gamma, beta = rng.uniform(0.5, 1.5, C), rng.standard_normal(C)
        out3, dx3 = np.empty_like(x3), np.empty_like(x3)
        mean, invstd, var = nk.train_forward(x3, gamma, beta, 1e-4, out3)
        grads = nk.train_backward(x3, dy3, gamma, mean, invstd, np.zeros(C), np.zeros(C), dx3)
        for a in (out3, mean, invstd, var, dx3, *grads):
            digest.update(np.ascontiguousarray(a).tobytes())
x = pt.tensor4("x", dtype="float32")
params = [pt.tensor4(n, dtype="float32", shape=(1, None, 1, 1)) for n in "gbm"]
gamma, beta, mean = params
one = pt.constant(np.ones((1, 1, 1, 1), "float32"))
apply = pytensor.function([x, *params], batch_normalization(x, gamma * 0.9, beta, mean, one))
values = [rng.standard_normal(s).astype("float32") for s in [(7, 5, 9, 11)] + [(1, 5, 1, 1)] * 3]
digest.update(apply(*values).tobytes())
print(digest.hexdigest())
"""


# Split elementwise nodes of a node-by-node program (parallel functions
# cached by PyTensor): an Adam-like update in place, a fused activation with
# a broadcast bias, two outputs; on two threads.
CHILD_SPLIT = """
import hashlib
import numpy as np
import pytensor
import pytensor.tensor as pt
from pytensor.compile.mode import NUMBA, Mode
from lasagne_bn.ops.numba.linker import NumbaNodeLinker
from lasagne_bn.ops.numba.threads import set_kernel_threads

pytensor.config.floatX = "float32"
set_kernel_threads(2)
rng = np.random.default_rng(0)
w = pytensor.shared(rng.standard_normal((33, 70)).astype("float32"))
m = pytensor.shared(np.zeros((33, 70), "float32"))
v = pytensor.shared(np.ones((33, 70), "float32"))
g = pt.matrix("g", dtype="float32")
x = pt.tensor4("x", dtype="float32")
b = pt.tensor("b", dtype="float32", shape=(1, None, 1, 1))
m_new = 0.9 * m + 0.1 * g
v_new = 0.999 * v + 0.001 * g * g
updates = [(m, m_new), (v, v_new), (w, w - 0.01 * m_new / (pt.sqrt(v_new) + 1e-8))]
y = x + b
outs = [pt.tanh(y) * 0.5 + 0.2 * y, pt.exp(-abs(y)) / (1 + y * y)]
mode = Mode(linker=NumbaNodeLinker(max_interface=0, max_nodes=0), optimizer=NUMBA.optimizer)
f = pytensor.function([g, x, b], outs, updates=updates, mode=mode)
digest = hashlib.sha256()
shapes = [(33, 70), (9, 3, 7, 5), (1, 3, 1, 1)]
for k in range(3):
    args = [rng.standard_normal(s).astype("float32") for s in shapes]
    for a in f(*args):
        digest.update(a.tobytes())
for p in (w, m, v):
    digest.update(p.get_value().tobytes())
print(digest.hexdigest())
"""


@pytest.mark.slow
@pytest.mark.parametrize("child", [CHILD, CHILD_SPLIT], ids=["kernels", "split_elemwise"])
def test_fresh_compile_and_disk_cache_agree(tmp_path, child):
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "NUMBA_CACHE_DIR": str(tmp_path / "kernels"),  # our kernels' cache
        "PYTENSOR_FLAGS": f"base_compiledir={tmp_path / 'pytensor'}",  # PyTensor's graphs
    }

    def run() -> str:
        proc = subprocess.run(
            [sys.executable, "-c", child], capture_output=True, text=True, env=env, timeout=600
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.strip()

    fresh = run()  # an empty cache: every kernel is compiled here, then saved
    for cache in ("kernels", "pytensor"):
        assert any((tmp_path / cache).rglob("*.nbi")), f"the first run saved nothing in {cache}"
    cached = run()  # every kernel loaded from the cache
    assert len(fresh) == len(hashlib.sha256().hexdigest())
    assert cached == fresh
