"""Generate tests/data/network_pickles/* with Theano 1.0.5 and Lasagne master (0.2.dev1).

Whole networks pickled with ``pickle.dump(network, f)`` after training, for
the tests that load them through ``lasagne_bn_compat.io.load_network`` and through a
plain ``pickle.load`` after ``lasagne_bn_compat.install()`` (tests/compat, which must
not need Theano).  Not run by the tests.  How it was run, per
/work/shared/LEGACY_ORACLE.md (Python 3.11, numpy 1.23.5, CPU):

    export PYTHONPATH=<Lasagne master checkout>
    export THEANO_FLAGS=device=cpu,floatX=float32,traceback.limit=0,blas.ldflags=
    export THEANO_FLAGS=$THEANO_FLAGS,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_network_pickles.py tests/data/network_pickles

The network: InputLayer (None, 1, 8, 8) -> batch_norm(Conv2DLayer 4x3x3, pad 1)
-> MaxPool2DLayer 2 -> DropoutLayer 0.5 -> batch_norm(DenseLayer 8) ->
DenseLayer 3 softmax, trained for 3 SGD steps (so the batch-norm averages
moved and the dropout's MRG stream holds its training graph; traceback.limit=0
keeps Theano from storing stack traces in every variable).

Files:
- cnn_p2.pkl.gz   pickle.dump(net, gzip.open(...), protocol=2)
- cnn_p4.pkl.gz   pickle.dump(net, gzip.open(...)) (the default protocol, 4)
- cnn_expected.npz the input, the deterministic output, a dropout-free
                  training-mode output (batch statistics), the parameter
                  names and values in get_all_params order
"""

import gzip
import os
import pickle
import sys

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    Conv2DLayer,
    DenseLayer,
    DropoutLayer,
    InputLayer,
    MaxPool2DLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
    get_output,
)

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
sys.setrecursionlimit(10000)
lasagne.random.set_rng(np.random.RandomState(11))
r = np.random.RandomState(12)

l_in = InputLayer((None, 1, 8, 8), name="img")
h = batch_norm(Conv2DLayer(l_in, 4, 3, pad=1, name="conv"))
h = MaxPool2DLayer(h, 2, name="pool")
h = DropoutLayer(h, p=0.5, name="drop")
h = batch_norm(DenseLayer(h, 8, name="fc"))
net = DenseLayer(h, 3, nonlinearity=lasagne.nonlinearities.softmax, name="out")

X = r.randn(3, 6, 1, 8, 8).astype("float32")
y = r.randint(0, 3, (3, 6)).astype("int32")
target = T.ivector("y")
loss = lasagne.objectives.categorical_crossentropy(get_output(net), target).mean()
params = get_all_params(net, trainable=True)
train = theano.function(
    [l_in.input_var, target], loss, updates=lasagne.updates.sgd(loss, params, 0.1)
)
for i in range(len(X)):
    train(X[i], y[i])
deterministic = theano.function([l_in.input_var], get_output(net, deterministic=True))
batch_stats = theano.function(
    [l_in.input_var],
    get_output(
        net, batch_norm_use_averages=False, batch_norm_update_averages=False, deterministic=True
    ),
)

x = r.randn(5, 1, 8, 8).astype("float32")
values = get_all_param_values(net)
expected = {
    "x": x,
    "out": deterministic(x),
    "out_batch_stats": batch_stats(x),
    "param_names": np.array([p.name for p in get_all_params(net)]),
}
expected.update({f"param_{i}": v for i, v in enumerate(values)})

for name, protocol in (("cnn_p2.pkl.gz", 2), ("cnn_p4.pkl.gz", pickle.DEFAULT_PROTOCOL)):
    with gzip.open(os.path.join(out_dir, name), "wb") as f:
        pickle.dump(net, f, protocol=protocol)
np.savez(os.path.join(out_dir, "cnn_expected.npz"), **expected)
print(sorted(os.listdir(out_dir)), pickle.DEFAULT_PROTOCOL)
