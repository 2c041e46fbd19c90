"""One code base on PyTensor 3.0.7 through 3.3.x (lasagne_bn._compat_pytensor).

CI runs the suite twice: Python 3.11 with PyTensor 3.0.x and Python 3.13
with the newest PyTensor; these tests check, on whichever is installed,
that our Ops and lasagne_bn_compat's aliases take the installed PyTensor's form and
raise none of its deprecation warnings.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from pytensor.graph.op import Op

import lasagne_bn
from lasagne_bn._compat_pytensor import (
    IFELSE_MODULES,
    PYTENSOR_VERSION,
    _release,
    compatible_infer_shape,
)
from lasagne_bn.ops import batch_normalization_train
from lasagne_bn.ops.pool import pool_2d


def _package_modules():
    # Every module of the package (an Op added anywhere is checked), but not
    # ``__main__``, which runs the CLI when imported.
    names = ["lasagne_bn"]
    for info in pkgutil.walk_packages(lasagne_bn.__path__, "lasagne_bn."):
        if not info.name.endswith("__main__"):
            names.append(info.name)
    return names


def _our_ops_with_infer_shape():
    found = []
    for name in _package_modules():
        for obj in vars(importlib.import_module(name)).values():
            if (
                inspect.isclass(obj)
                and issubclass(obj, Op)
                and obj.__module__ == name
                and "infer_shape" in vars(obj)
            ):
                found.append(obj)
    return found


@pytest.mark.parametrize(
    ("text", "release"),
    [
        ("3.0.7", (3, 0, 7)),
        ("3.3.8", (3, 3, 8)),
        ("3.4.0.dev12+g1a2b3c", (3, 4, 0)),
        ("3.1.1rc1", (3, 1, 1)),
        ("3.2", (3, 2, 0)),
    ],
)
def test_release_reads_the_leading_numbers(text, release):
    assert _release(text) == release


def test_release_refuses_what_is_not_a_version():
    with pytest.raises(ValueError, match="pytensor.__version__='unknown'"):
        _release("unknown")


def test_installed_pytensor_is_a_supported_one():
    assert (3, 0, 7) <= PYTENSOR_VERSION < (3, 4, 0)


def test_every_op_infer_shape_has_the_installed_pytensors_signature():
    ops = _our_ops_with_infer_shape()
    assert len(ops) >= 12, [op.__name__ for op in ops]
    # 3.1.1 calls infer_shape(node, shapes); 3.0.x infer_shape(fgraph, node, shapes).
    expected = 3 if PYTENSOR_VERSION >= (3, 1, 1) else 4
    for op in ops:
        # a class PyTensor 3.1.1+ had to adapt would hold its lambda here
        assert op.infer_shape.__name__ in ("infer_shape", "with_fgraph"), op
        assert len(inspect.signature(op.infer_shape, follow_wrapped=False).parameters) == (
            expected
        ), op


def test_compatible_infer_shape_defines_an_op_without_a_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")

        class Twice(Op):
            def make_node(self, x):
                x = pt.as_tensor_variable(x)
                return pytensor.graph.basic.Apply(self, [x], [x.type()])

            def perform(self, node, inputs, output_storage):
                output_storage[0][0] = 2 * inputs[0]

            @compatible_infer_shape
            def infer_shape(self, node, shapes):
                return [shapes[0]]

    x = pt.matrix("x")
    f = pytensor.function([x], Twice()(x).shape, mode="FAST_RUN")
    # the shape came from infer_shape: Twice itself is not computed
    assert not any(isinstance(node.op, Twice) for node in f.maker.fgraph.apply_nodes)
    assert tuple(f(np.zeros((2, 3), dtype=x.dtype))) == (2, 3)


def test_our_ops_shapes_come_from_infer_shape():
    x = pt.tensor4("x")
    gamma = pt.tensor4("gamma", shape=(1, None, 1, 1))
    beta = pt.tensor4("beta", shape=(1, None, 1, 1))
    out, mean, _ = batch_normalization_train(x, gamma, beta, axes="spatial")
    pooled = pool_2d(x, ws=(2, 2), ignore_border=True)
    f = pytensor.function([x, gamma, beta], [out.shape, mean.shape, pooled.shape], mode="FAST_RUN")
    # batch norm's shapes are its input's: the Op itself is not computed (pooling
    # reads its pooled sizes from its output's static shape by design)
    ops = {type(node.op).__module__ for node in f.maker.fgraph.apply_nodes}
    assert "lasagne_bn.ops.bn" not in ops, ops
    dtype = x.dtype
    shapes = f(
        np.zeros((2, 3, 5, 4), dtype),
        np.ones((1, 3, 1, 1), dtype),
        np.zeros((1, 3, 1, 1), dtype),
    )
    assert [tuple(s) for s in shapes] == [(2, 3, 5, 4), (1, 3, 1, 1), (2, 3, 2, 2)]


def test_ifelse_comes_from_where_pytensor_keeps_it_without_a_warning(legacy_theano):
    theano = legacy_theano
    real = importlib.import_module(IFELSE_MODULES[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from theano.ifelse import IfElse, ifelse

        assert ifelse is real.ifelse
        assert IfElse is real.IfElse
        assert theano.ifelse.cond_make_inplace is not None  # Theano's rewrite names
        x = pt.scalar("x")
        f = pytensor.function([x], ifelse(x > 0, x, -x), mode="FAST_COMPILE")
        assert float(f(np.asarray(-2.0, x.dtype))) == 2.0
    with pytest.raises(AttributeError, match="theano.ifelse"):
        theano.ifelse.no_such_name  # noqa: B018


@pytest.fixture
def legacy_theano():
    import lasagne_bn_compat

    was_installed = lasagne_bn_compat.is_installed()
    lasagne_bn_compat.install()
    import theano

    yield theano
    if not was_installed:
        lasagne_bn_compat.uninstall()


@pytest.mark.slow
def test_importing_the_package_and_compat_raises_no_pytensor_deprecation():
    # A fresh interpreter: Op classes warn (if at all) when first defined.
    code = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import lasagne_bn.layers, lasagne_bn.ops, lasagne_bn.updates
    import lasagne_bn_compat
    lasagne_bn_compat.install()
    import theano, theano.tensor, lasagne, lasagne.layers
    from theano.ifelse import ifelse, IfElse
for w in caught:
    if issubclass(w.category, (DeprecationWarning, FutureWarning)):
        print(f"{w.category.__name__}: {w.message} ({w.filename}:{w.lineno})")
"""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True
    )
    assert result.stdout == "", result.stdout
