"""Our Numba kernels compile once per argument type, never once more per constant.

Jitted callers pass constants (``_forward(..., 1, 1, dh, dw, 0, 0, 0, 0, G)``);
typed as literals, each such call compiled its callee a second time (15 s for
a parallel convolution kernel).  :mod:`lasagne_bn.ops.numba.jit` types those
calls with plain types; this checks every kernel module after a convolution,
pooling and batch-norm training step have been compiled afresh.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


# In a child with an empty Numba cache, so that every kernel is compiled
# (a kernel loaded from the cache registers no signature with its callees'
# dispatchers, and there would be nothing to check).
CHILD = """
import numpy as np
import pytensor
import pytensor.tensor as pt
from numba.core.dispatcher import Dispatcher

from lasagne_bn.ops import batch_normalization_train
from lasagne_bn.ops.conv import conv2d
from lasagne_bn.ops.pool import pool_2d

x, w, g = pt.tensor4("x"), pt.tensor4("w"), pt.vector("g")
y = conv2d(x, w, border_mode="half", subsample=(2, 2))
gamma = g.dimshuffle("x", 0, "x", "x")
out, _, _ = batch_normalization_train(y, gamma, 0 * gamma, axes="spatial")
loss = pool_2d(out, ws=(2, 2), ignore_border=True, mode="max").sum()
fn = pytensor.function([x, w, g], [loss, *pytensor.grad(loss, [x, w, g])])
r = np.random.default_rng(0)
results = fn(r.normal(size=(2, 3, 8, 8)), r.normal(size=(4, 3, 3, 3)), np.ones(4))
assert all(np.isfinite(v).all() for v in results)

from lasagne_bn.ops.numba import bn_kernels, conv_kernels, pool_kernels, threads

compiled, literal = 0, []
for module in (bn_kernels, conv_kernels, pool_kernels, threads):
    for name, obj in vars(module).items():
        if isinstance(obj, Dispatcher):
            for sig in obj.signatures:
                compiled += 1
                if "Literal" in str(sig):
                    literal.append(f"{module.__name__}.{name}{sig}")
print(compiled)
print(literal)
"""


@pytest.mark.slow
def test_no_kernel_is_compiled_for_literal_arguments(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NUMBA_CACHE_DIR": str(tmp_path)}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, env=env, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled, literal = proc.stdout.strip().splitlines()[-2:]
    assert int(compiled) > 20  # the step compiled the kernels of all three families
    assert literal == "[]"
