"""describe_network: the printed table of a network, line by line."""

from __future__ import annotations

from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    Conv2DLayer,
    DenseLayer,
    InputLayer,
    MaxPool2DLayer,
    batch_norm,
    count_params,
    describe_network,
)


def small_network():
    net = InputLayer((None, 1, 6, 6), name="input")
    net = batch_norm(Conv2DLayer(net, 4, 3, name="conv"))
    net = MaxPool2DLayer(net, 2, name="pool")  # no parameters
    return DenseLayer(net, 3, nonlinearity=nonlinearities.softmax, name="out")


def test_one_line_per_layer_with_shape_and_parameter_count():
    assert describe_network(small_network()).splitlines() == [
        "name            type                        output shape     params",
        "input           InputLayer                  (None, 1, 6, 6)       0",
        "conv            Conv2DLayer                 (None, 4, 4, 4)      36",
        "conv_bn         BatchNormLayer              (None, 4, 4, 4)      16",
        "conv_bn_nonlin  NonlinearityLayer(rectify)  (None, 4, 4, 4)       0",
        "pool            MaxPool2DLayer              (None, 4, 2, 2)       0",
        "out             DenseLayer(softmax)         (None, 3)            51",
        "total                                                           103",
    ]


def test_tags_filter_the_counts_and_the_total_is_count_params():
    net = small_network()
    lines = describe_network(net, trainable=True).splitlines()
    assert lines[3].split() == ["conv_bn", "BatchNormLayer", "(None,", "4,", "4,", "4)", "8"]
    total = int(lines[-1].split()[-1])
    assert total == count_params(net, trainable=True) == 103 - 8


def test_a_shared_parameter_is_counted_once_and_names_may_be_missing():
    l_in = InputLayer((None, 5))
    first = DenseLayer(l_in, 5, nonlinearity=nonlinearities.LeakyRectify(0.1))
    second = DenseLayer(first, 5, W=first.W, b=None)  # the same weights again
    assert describe_network(second).splitlines() == [
        "name   type                      output shape  params",
        "       InputLayer                (None, 5)          0",
        "       DenseLayer(LeakyRectify)  (None, 5)         30",
        "       DenseLayer(rectify)       (None, 5)          0",
        "total                                              30",
    ]
    assert count_params(second) == 30
    assert second.W is first.W
