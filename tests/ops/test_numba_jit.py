"""Our Numba kernels compile once per argument type, never once more per constant.

Jitted callers pass constants (``_forward(..., 1, 1, dh, dw, 0, 0, 0, 0, G)``);
typed as literals, each such call compiled its callee a second time (15 s for
a parallel convolution kernel).  :mod:`lasagne_bn.ops.numba.jit` types those
calls with plain types; this checks every kernel module after a convolution,
pooling and batch-norm training step have been compiled.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
from numba.core.dispatcher import Dispatcher

from lasagne_bn.ops import batch_normalization_train
from lasagne_bn.ops.conv import conv2d
from lasagne_bn.ops.pool import pool_2d


def _train_step():
    x, w, g = pt.tensor4("x"), pt.tensor4("w"), pt.vector("g")
    y = conv2d(x, w, border_mode="half", subsample=(2, 2))
    gamma = g.dimshuffle("x", 0, "x", "x")
    out, _, _ = batch_normalization_train(y, gamma, 0 * gamma, axes="spatial")
    loss = pool_2d(out, ws=(2, 2), ignore_border=True, mode="max").sum()
    fn = pytensor.function([x, w, g], [loss, *pytensor.grad(loss, [x, w, g])])
    r = np.random.default_rng(0)
    return fn(r.normal(size=(2, 3, 8, 8)), r.normal(size=(4, 3, 3, 3)), np.ones(4))


def test_no_kernel_is_compiled_for_literal_arguments():
    results = _train_step()
    assert all(np.isfinite(v).all() for v in results)

    from lasagne_bn.ops.numba import bn_kernels, conv_kernels, pool_kernels, threads, workshare

    compiled, literal = 0, []
    for module in (bn_kernels, conv_kernels, pool_kernels, threads, workshare):
        for name, obj in vars(module).items():
            if isinstance(obj, Dispatcher):
                for sig in obj.signatures:
                    compiled += 1
                    if "Literal" in str(sig):
                        literal.append(f"{module.__name__}.{name}{sig}")
    assert compiled > 20  # the step above compiled the kernels of all three families
    assert literal == []
