"""JAX mode's run-time argument checks raise the one-line ValueError of every other mode.

A symbolic ``epsilon`` fed -1 (or ``running_average_factor`` fed 5) is
refused on the host, where a traced program sends it; JAX reports that as
``JaxRuntimeError: INTERNAL: CpuCallback error ...``.  Through
:func:`lasagne_bn.ops.jax.linker.jax_mode` and the compat
``theano.function(mode='JAX')`` the user gets our ``OutOfRange`` itself.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

pytest.importorskip("jax")

from lasagne_bn.ops.api import batch_normalization_test, batch_normalization_train  # noqa: E402
from lasagne_bn.ops.jax.linker import jax_mode  # noqa: E402
from lasagne_bn.ops.validation import OutOfRange  # noqa: E402

EPS = "epsilon=-1.0 is out of range: expected a value in (0.0, inf)"
FACTOR = "running_average_factor=5.0 is out of range: expected a value in [0.0, 1.0]"


def _graph():
    x = pt.matrix("x")
    g, b, rm, rv = (pt.vector(n) for n in ("g", "b", "rm", "rv"))
    eps, factor = pt.scalar("eps"), pt.scalar("factor")
    train = batch_normalization_train(
        x, g, b, epsilon=eps, running_average_factor=factor, running_mean=rm, running_var=rv
    )
    test = batch_normalization_test(x, g, b, rm, rv, epsilon=eps)
    return [x, g, b, rm, rv, eps, factor], [*train, test]


def _check(fn):
    x = np.random.default_rng(0).normal(size=(4, 3))
    ones, zeros = np.ones(3), np.zeros(3)
    for eps, factor, message in ((-1.0, 0.1, EPS), (1e-4, 5.0, FACTOR)):
        with pytest.raises(OutOfRange) as info:
            fn(x, ones, zeros, zeros, ones, eps, factor)
        assert str(info.value) == message
        assert type(info.value).__module__ == "lasagne_bn.ops.validation"
    outs = fn(x, ones, zeros, zeros, ones, 1e-4, 0.5)  # still works after the errors
    np.testing.assert_allclose(outs[4], 0.5 + 0.5 * x.var(0, ddof=1), rtol=1e-5)


def test_jax_mode_raises_our_value_error():
    inputs, outputs = _graph()
    _check(pytensor.function(inputs, outputs, mode=jax_mode()))


def test_compat_theano_function_in_jax_mode_raises_our_value_error():
    import lasagne_bn_compat

    lasagne_bn_compat.install(theano_flags="")
    try:
        import theano

        inputs, outputs = _graph()
        _check(theano.function(inputs, outputs, mode="JAX"))
    finally:
        lasagne_bn_compat.uninstall()


def test_other_runtime_errors_pass_through_unchanged():
    x = pt.vector("x")
    fn = pytensor.function([x], x[pt.constant(np.int64(0))] * 2, mode=jax_mode())
    assert float(fn(np.ones(2))) == 2.0
    with pytest.raises(Exception) as info:  # noqa: PT011 - JAX's own error, whatever it is
        fn(np.ones(0))
    assert not isinstance(info.value, OutOfRange)
