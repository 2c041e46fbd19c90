"""The opt-in graph rewrite that folds inference batch norm into the product before it.

Checked in every mode against the same function without the rewrite: the
folded graph has no ``BatchNormApply`` left after a convolution or dense
product, and its outputs equal the unfolded ones to rounding; a product with
another reader is left alone.
"""

from __future__ import annotations

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest

from lasagne_bn.layers import (
    Conv2DLayer,
    DenseLayer,
    ElemwiseSumLayer,
    InputLayer,
    batch_norm,
    get_all_layers,
    get_output,
)
from lasagne_bn.layers.normalization import BatchNormLayer
from lasagne_bn.nonlinearities import rectify, softmax
from lasagne_bn.ops.bn_fold_rewrite import folding
from tests.compile_modes import MODE_NAMES_WITHOUT_C, mode_for


def _network(x):
    rng = np.random.default_rng(5)
    net = InputLayer((None, 3, 8, 8), x)
    net = batch_norm(Conv2DLayer(net, 4, 3, pad="same", nonlinearity=rectify))
    net = batch_norm(Conv2DLayer(net, 6, 3, stride=2, nonlinearity=rectify))
    net = batch_norm(DenseLayer(net, 5, nonlinearity=rectify))
    net = DenseLayer(net, 3, nonlinearity=softmax)
    for layer in get_all_layers(net):
        if isinstance(layer, BatchNormLayer):
            for p in layer.get_params():
                value = p.get_value()
                positive = p.name in ("inv_std", "gamma")
                draw = (
                    rng.uniform(0.5, 2.0, value.shape)
                    if positive
                    else rng.normal(size=value.shape)
                )
                p.set_value(draw.astype(value.dtype))
    return net


@pytest.fixture(scope="module")
def graph():
    x = pt.tensor4("x")
    y = get_output(_network(x), deterministic=True)
    xs = np.random.default_rng(1).normal(size=(2, 3, 8, 8)).astype(pytensor.config.floatX)
    return x, y, xs


def _bn_nodes(f):
    return [n for n in f.maker.fgraph.apply_nodes if type(n.op).__name__ == "BatchNormApply"]


@pytest.mark.parametrize("mode_name", MODE_NAMES_WITHOUT_C)
def test_folded_graph_matches_and_has_no_batch_norm(graph, mode_name):
    x, y, xs = graph
    mode = mode_for(mode_name)
    plain = pytensor.function([x], y, mode=mode)
    folded = pytensor.function([x], y, mode=folding(mode))
    if mode_name != "cvm":  # the C backends lower batch norm to a plain graph anyway
        assert len(_bn_nodes(plain)) == 3
    assert _bn_nodes(folded) == []
    np.testing.assert_allclose(np.asarray(folded(xs)), np.asarray(plain(xs)), rtol=1e-5)


def test_a_product_with_another_reader_is_not_folded():
    x = pt.tensor4("x")
    conv = Conv2DLayer(InputLayer((None, 2, 5, 5), x), 2, 3, pad="same", nonlinearity=None, b=None)
    net = ElemwiseSumLayer([BatchNormLayer(conv), conv])
    y = get_output(net, deterministic=True)
    xs = np.random.default_rng(2).normal(size=(1, 2, 5, 5)).astype(pytensor.config.floatX)
    folded = pytensor.function([x], y, mode=folding("FAST_COMPILE"))
    assert len(_bn_nodes(folded)) == 1
    plain = pytensor.function([x], y, mode="FAST_COMPILE")
    np.testing.assert_allclose(folded(xs), plain(xs))


def test_folding_is_off_unless_asked():
    x = pt.tensor4("x")
    y = get_output(_network(x), deterministic=True)
    assert len(_bn_nodes(pytensor.function([x], y, mode="FAST_COMPILE"))) == 3
