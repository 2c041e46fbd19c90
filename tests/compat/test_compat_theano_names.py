"""Theano 1.0 names that PyTensor 3 keeps under other names or places, via lasagne_bn_compat."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import QUIET, legacy  # noqa: F401  (the fixture)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy")]

RENAMED = [
    ("theano.gof.utils", "scratchpad", "pytensor.graph.utils", "Scratchpad"),
    ("theano.gof", "PureOp", "pytensor.graph.op", "Op"),
    ("theano.gof", "LocalOptimizer", "pytensor.graph.rewriting.basic", "NodeRewriter"),
    ("theano.gof", "local_optimizer", "pytensor.graph.rewriting.basic", "node_rewriter"),
    ("theano.gof", "COp", "pytensor.link.c.op", "COp"),
    ("theano.gof", "ParamsType", "pytensor.link.c.params_type", "ParamsType"),
    ("theano.gof", "Generic", "pytensor.link.c.type", "Generic"),
    ("theano.gof", "MissingInputError", "pytensor.graph.utils", "MissingInputError"),
    ("theano.gof.graph", "inputs", "pytensor.graph.traversal", "graph_inputs"),
    ("theano.gof.graph", "ancestors", "pytensor.graph.traversal", "ancestors"),
    ("theano.gof.graph", "io_toposort", "pytensor.graph.traversal", "io_toposort"),
    ("theano.gof.graph", "variables", "pytensor.graph.traversal", "vars_between"),
    ("theano.gof.graph", "ops", "pytensor.graph.traversal", "applys_between"),
    ("theano.gof.graph", "Apply", "pytensor.graph.basic", "Apply"),
    ("theano.gof.link", "Container", "pytensor.link.basic", "Container"),
    ("theano.scan_module.scan_utils", "equal_computations", "pytensor.graph.basic", None),
    ("theano.scan_module.scan_op", "Scan", "pytensor.scan.op", "Scan"),
    ("theano.compile.function_module", "Function", "pytensor.compile", "Function"),
    ("theano.compile.debugmode", "DebugMode", "pytensor.compile.debug.debugmode", None),
    ("theano.compile.nanguardmode", "NanGuardMode", "pytensor.compile.debug.nanguardmode", None),
    ("theano.compile.profiling", "ProfileStats", "pytensor.compile", "ProfileStats"),
    ("theano.compile.ops", "Shape", "pytensor.tensor.shape", "Shape"),
    ("theano.compile.ops", "shape_i", "pytensor.tensor.shape", "shape_i"),
    ("theano.scalar.basic", "Scalar", "pytensor.scalar.basic", "ScalarType"),
    ("theano.scalar.basic", "Inv", "pytensor.scalar.basic", "Reciprocal"),
    ("theano.scalar", "Scalar", "pytensor.scalar.basic", "ScalarType"),
    ("theano.tensor.elemwise", "Sum", "pytensor.tensor.math", "Sum"),
    ("theano.tensor.elemwise", "Elemwise", "pytensor.tensor.elemwise", "Elemwise"),
    ("theano.tensor.basic", "Alloc", "pytensor.tensor.basic", "Alloc"),
    ("theano.tensor.basic", "Dot", "pytensor.tensor.math", "Dot"),
    ("theano.tensor.basic", "Reshape", "pytensor.tensor.shape", "Reshape"),
    ("theano.tensor.basic", "NotScalarConstantError", "pytensor.tensor.exceptions", None),
    ("theano.tensor", "TensorSharedVariable", "pytensor.tensor.sharedvar", None),
    ("theano.misc.frozendict", "frozendict", "pytensor.misc.frozendict", "frozendict"),
]


@pytest.mark.parametrize(("module", "name", "target", "target_name"), RENAMED)
def test_renamed_names_are_pytensors_objects(module, name, target, target_name):
    import importlib

    legacy_module = importlib.import_module(module)
    expected = getattr(importlib.import_module(target), target_name or name)
    assert getattr(legacy_module, name) is expected


def test_attribute_paths_match_imports():
    import theano
    import theano.compile.ops
    import theano.gof.graph
    import theano.tensor.sharedvar

    assert theano.gof.graph.is_same_graph is theano.gof.graph.__dict__["is_same_graph"]
    assert theano.compile.ops.Shape is theano.compile.ops.__dict__["Shape"]
    assert (
        theano.tensor.sharedvar.TensorSharedVariable
        is theano.tensor.sharedvar.__dict__["TensorSharedVariable"]
    )
    assert theano.compile.function_module.Function is pytensor.compile.Function


def test_is_same_graph_and_equal_computations():
    import theano
    import theano.tensor as T
    from theano.scan_module.scan_utils import equal_computations

    x, y = T.vector("x"), T.vector("y")
    same = theano.gof.graph.is_same_graph
    assert same(T.sum(x**2), T.sum(x**2))
    assert not same(T.sum(x**2), T.sum(x**3))
    assert same(x.sum() / 2, x.sum() * 0.5)  # equal after canonicalization
    assert same(T.sum(x), T.sum(y), givens={x: y})
    assert not same(T.sum(x), T.sum(y))
    assert equal_computations([x + 1], [x + 1]) and not equal_computations([x + 1], [y + 1])


def test_theano_style_construction():
    import theano
    import theano.tensor as T

    free = theano.Variable("myvariable")  # Theano never checked the type
    assert type(free) is pytensor.graph.basic.Variable and free.owner is None
    v = theano.gof.Variable(T.TensorType("float32", (False,)), name="v")
    assert v.name == "v" and v.type.shape == (None,)
    assert isinstance(T.matrix(), theano.Variable)
    assert theano.TensorType("int32", (True, False)) == pt.TensorType("int32", shape=(1, None))
    # Rop / Lop run
    x = T.vector("x")
    W = theano.shared(np.eye(2))
    jv = T.Rop(T.dot(W, x), x, T.ones_like(x))
    f = pytensor.function([x], jv, mode="FAST_COMPILE")
    np.testing.assert_allclose(f(np.ones(2)), [1.0, 1.0])


def test_stack_takes_tensors_as_separate_arguments_as_theano_did():
    # Keras 2's Theano backend calls T.stack(a, b, c); Theano 1.0 stacked
    # them along axis 0, as stack([a, b, c]) does.
    import theano.tensor as T

    a, b, c = T.vector("a"), T.vector("b"), T.vector("c")
    values = {v: np.arange(3, dtype=v.dtype) + n for n, v in enumerate((a, b, c))}
    expected = np.stack(list(values.values()))
    for stacked in (T.stack(a, b, c), T.stack([a, b, c]), T.stack(tensors=[a, b, c])):
        np.testing.assert_array_equal(stacked.eval(values), expected)
    two = {a: values[a], b: values[b]}
    np.testing.assert_array_equal(T.stack([a, b], axis=1).eval(two), expected[:2].T)
    assert T.stack(a).eval({a: values[a]}).shape == (1, 3)
    with pytest.raises(TypeError, match=r"stack\(\): expected a list of tensors, got none"):
        T.stack()
    with pytest.raises(TypeError, match=r"stack\(\): unexpected keyword arguments \['axes'\]"):
        T.stack([a], axes=0)
