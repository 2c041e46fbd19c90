"""A small Lasagne convnet with batch_norm, as written for Theano (Python 3 syntax).

Usage: legacy_cnn.py RESULTS.npz [STEPS].  Used by tests/compat/test_compat_conv.py.
"""

import sys

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import Conv2DLayer, DenseLayer, InputLayer, MaxPool2DLayer, batch_norm
from theano.tensor.signal.pool import pool_2d


def build_cnn(input_var=None):
    network = InputLayer(shape=(None, 1, 8, 8), input_var=input_var)
    network = batch_norm(Conv2DLayer(network, num_filters=4, filter_size=(3, 3), pad="same"))
    network = MaxPool2DLayer(network, pool_size=(2, 2))
    return DenseLayer(network, num_units=3, nonlinearity=lasagne.nonlinearities.softmax)


def main(results_path, steps=3):
    lasagne.random.set_rng(np.random.RandomState(7))
    rng = np.random.RandomState(1)
    X = rng.randn(12, 1, 8, 8).astype(theano.config.floatX)
    y = rng.randint(0, 3, 12).astype("int32")
    input_var = T.tensor4("inputs")
    target_var = T.ivector("targets")
    network = build_cnn(input_var)
    loss = lasagne.objectives.categorical_crossentropy(
        lasagne.layers.get_output(network), target_var
    ).mean()
    params = lasagne.layers.get_all_params(network, trainable=True)
    updates = lasagne.updates.momentum(loss, params, learning_rate=0.05)
    train_fn = theano.function([input_var, target_var], loss, updates=updates)
    predict_fn = theano.function(
        [input_var], lasagne.layers.get_output(network, deterministic=True)
    )
    losses = [train_fn(X, y) for _ in range(steps)]

    # raw Theano ops on the trained filters
    W = network.input_layer.input_layer.input_layer.input_layer.W
    feature_maps = pool_2d(
        T.nnet.relu(T.nnet.conv2d(input_var, W, border_mode="half")), ws=(2, 2), ignore_border=True
    )
    features_fn = theano.function([input_var], feature_maps)
    np.savez(results_path, losses=np.array(losses), pred=predict_fn(X), features=features_fn(X))


if __name__ == "__main__":
    main(sys.argv[1], *[int(a) for a in sys.argv[2:]])
