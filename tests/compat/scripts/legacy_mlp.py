"""A Lasagne + Theano training script as people wrote them (Python 3 syntax).

Used by tests/compat: run unchanged through lasagne_bn_compat.install() and through
``lasagne-bn run``.  Usage: legacy_mlp.py RESULTS.npz WORKDIR [STEPS]
"""

import pickle
import sys

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import DenseLayer, DropoutLayer, InputLayer, batch_norm
from lasagne.nonlinearities import rectify, softmax


def build_mlp(input_var=None):
    l_in = InputLayer(shape=(None, 20), input_var=input_var)
    l_hid = batch_norm(DenseLayer(l_in, num_units=16, nonlinearity=rectify, name="hid"))
    l_hid = DropoutLayer(l_hid, p=0.25)
    return DenseLayer(l_hid, num_units=4, nonlinearity=softmax, name="out")


def main(results_path, workdir, steps=5):
    lasagne.random.set_rng(np.random.RandomState(42))
    rng = np.random.RandomState(0)
    X_train = rng.randn(64, 20).astype(theano.config.floatX)
    y_train = rng.randint(0, 4, 64).astype("int32")

    input_var = T.matrix("inputs")
    target_var = T.ivector("targets")
    network = build_mlp(input_var)

    prediction = lasagne.layers.get_output(network)
    loss = lasagne.objectives.categorical_crossentropy(prediction, target_var).mean()
    loss += 1e-4 * lasagne.regularization.regularize_network_params(
        network, lasagne.regularization.l2
    )
    params = lasagne.layers.get_all_params(network, trainable=True)
    updates = lasagne.updates.adam(loss, params, learning_rate=0.01)
    train_fn = theano.function([input_var, target_var], loss, updates=updates)

    test_prediction = lasagne.layers.get_output(network, deterministic=True)
    test_acc = T.mean(
        T.eq(T.argmax(test_prediction, axis=1), target_var), dtype=theano.config.floatX
    )
    val_fn = theano.function([input_var, target_var], [test_prediction, test_acc])

    losses = []
    for i in range(steps):
        batch = slice((i * 16) % 64, (i * 16) % 64 + 16)
        losses.append(train_fn(X_train[batch], y_train[batch]))
    pred, acc = val_fn(X_train, y_train)

    # save the weights the two ways Lasagne users did, and load them back
    np.savez(workdir + "/model.npz", *lasagne.layers.get_all_param_values(network))
    with open(workdir + "/model.pkl", "wb") as f:
        pickle.dump(lasagne.layers.get_all_param_values(network), f, protocol=2)

    fresh = build_mlp(input_var)
    with np.load(workdir + "/model.npz") as f:
        param_values = [f["arr_%d" % i] for i in range(len(f.files))]
    lasagne.layers.set_all_param_values(fresh, param_values)
    reload_fn = theano.function([input_var], lasagne.layers.get_output(fresh, deterministic=True))
    reloaded = reload_fn(X_train)

    np.savez(
        results_path,
        losses=np.array(losses),
        pred=pred,
        acc=acc,
        reloaded=reloaded,
        argv=np.array(sys.argv),
        name=np.array(__name__),
    )
    print("trained %d steps, final loss %.4f, accuracy %.3f" % (steps, losses[-1], acc))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *[int(a) for a in sys.argv[3:]])
