"""Layer and MergeLayer: parameters, tags, shapes, and construction errors."""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn import init
from lasagne_bn.layers import InputLayer, Layer, MergeLayer


class _Symbolic(Layer):
    def get_output_shape_for(self, input_shape):
        return (pt.scalar(),)


def test_layer_from_shape_or_layer():
    layer = Layer((None, 3), name="a")
    assert layer.input_shape == (None, 3) and layer.input_layer is None
    child = Layer(layer)
    assert child.input_layer is layer and child.input_shape == (None, 3)
    assert child.output_shape == (None, 3)
    with pytest.raises(NotImplementedError):
        child.get_output_for(pt.matrix())


@pytest.mark.parametrize("shape", [(None, 0), (-1, 3)])
def test_non_positive_shape_raises(shape):
    with pytest.raises(ValueError, match="non-positive input_shape"):
        Layer(shape)


def test_bad_incoming_raises():
    with pytest.raises(TypeError, match="must be a Layer or a shape tuple"):
        Layer(3)
    with pytest.raises(TypeError, match="only ints or None"):
        Layer((None, 2.5))


def test_symbolic_output_shape_raises():
    with pytest.raises(ValueError, match="symbolic output shape"):
        _ = _Symbolic((2, 3)).output_shape


def test_add_param_names_and_tags():
    layer = Layer((None, 3), name="lyr")
    w = layer.add_param(init.Constant(1), (3, 2), name="W")
    b = layer.add_param(np.zeros(2), (2,), name="b", regularizable=False)
    s = layer.add_param(init.Constant(0), (2,), name="s", trainable=False, custom=True)
    assert (w.name, b.name, s.name) == ("lyr.W", "lyr.b", "lyr.s")
    assert layer.params[w] == {"trainable", "regularizable"}
    assert layer.params[b] == {"trainable"}
    assert layer.params[s] == {"regularizable", "custom"}
    assert layer.get_params() == [w, b, s]
    assert layer.get_params(trainable=True) == [w, b]
    assert layer.get_params(custom=True) == [s]
    assert layer.get_params(regularizable=True, trainable=True) == [w]
    assert layer.get_params(trainable=False, custom=False) == []
    unnamed = Layer((None, 3))
    assert unnamed.add_param(init.Constant(0), (1,), name="c").name == "c"


def test_merge_layer():
    a, b = InputLayer((None, 2)), InputLayer((None, 3))
    m = MergeLayer([a, b, (None, 4)], name="m")
    assert m.input_layers == [a, b, None]
    assert m.input_shapes == [(None, 2), (None, 3), (None, 4)]
    with pytest.raises(NotImplementedError):
        _ = m.output_shape
    with pytest.raises(TypeError, match=r"incomings\[1\]"):
        MergeLayer([a, "b"])


def test_input_layer():
    layer = InputLayer((None, 1, 5), name="in")
    assert layer.input_var.name == "in.input"
    assert layer.input_var.type.shape == (None, 1, None)
    assert layer.input_var.dtype == pytensor.config.floatX
    assert layer.output_shape == (None, 1, 5) and layer.get_params() == []
    assert InputLayer((2,)).input_var.name == "input"
    x = pt.tensor3("x")
    assert InputLayer((None, 1, 5), input_var=x).input_var is x
    with pytest.raises(ValueError, match="shape has 2 dimensions, but variable has 3"):
        InputLayer((None, 5), input_var=x)
    with pytest.raises(ValueError, match="disagrees"):
        InputLayer((None, 4), input_var=pt.matrix(shape=(None, 5)))
    with pytest.raises(ValueError, match="non-positive shape"):
        InputLayer((0, 5))
