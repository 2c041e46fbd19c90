"""Generate tests/data/compat_oracle/* with Theano 1.0.5 and Lasagne master (0.2.dev1).

Legacy checkpoints written by the real software, for tests/compat (which
must not need Theano).  Not run by the tests.  How it was run, per
/work/shared/LEGACY_ORACLE.md (Python 3.11, numpy 1.23.5, CPU):

    export PYTHONPATH=<Lasagne master checkout>
    export THEANO_FLAGS=device=cpu,floatX=float32,traceback.limit=0,blas.ldflags=
    export THEANO_FLAGS=$THEANO_FLAGS,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_compat_oracle.py tests/data/compat_oracle

Files:
- mlp_p2.pkl.gz     pickle.dump(l_out, gzip.open(...), protocol=2) of a trained
                    InputLayer -> batch_norm(DenseLayer) -> DropoutLayer -> DenseLayer
                    network (its DropoutLayer's MRG stream holds the training graph,
                    hence the gzip; traceback.limit=0 keeps Theano from storing stack
                    traces in every variable)
- convnet_p4.pkl    the same with Conv2DLayer + batch_norm + MaxPool2DLayer, protocol 4
- mlp_params.npz    np.savez(f, *get_all_param_values(mlp))
- mlp_params_p2.pkl pickle.dump(get_all_param_values(mlp), f, protocol=2)
- mlp_modelzoo.pkl  {'param values': ..., 'mean value': ..., 'synset words': ...}, protocol 2
- expected.npz      inputs and deterministic outputs of both networks, parameter names
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
lasagne.random.set_rng(np.random.RandomState(3))
r = np.random.RandomState(5)
expected = {}


def train(net, input_var, X, y, steps):
    target = T.ivector("y")
    loss = lasagne.objectives.categorical_crossentropy(get_output(net), target).mean()
    params = get_all_params(net, trainable=True)
    fn = theano.function(
        [input_var, target], loss, updates=lasagne.updates.sgd(loss, params, learning_rate=0.1)
    )
    for i in range(steps):
        fn(X[i], y[i])
    return theano.function([input_var], get_output(net, deterministic=True))


# 1. MLP
l_in = InputLayer((None, 6), name="in")
h = batch_norm(DenseLayer(l_in, 5, name="fc"))
h = DropoutLayer(h, p=0.5, name="drop")
mlp = DenseLayer(h, 3, nonlinearity=lasagne.nonlinearities.softmax, name="out")
X = r.randn(3, 8, 6).astype("float32")
y = r.randint(0, 3, (3, 8)).astype("int32")
det = train(mlp, l_in.input_var, X, y, 3)
expected["mlp_x"] = X[0]
expected["mlp_out"] = det(X[0])
expected["mlp_param_names"] = np.array([p.name for p in get_all_params(mlp)])
expected["mlp_param_tags"] = np.array(
    [
        ",".join(sorted(layer.params[p]))
        for layer in lasagne.layers.get_all_layers(mlp)
        for p in layer.params
    ]
)
with gzip.open(os.path.join(out_dir, "mlp_p2.pkl.gz"), "wb") as f:
    pickle.dump(mlp, f, protocol=2)
values = get_all_param_values(mlp)
np.savez(os.path.join(out_dir, "mlp_params.npz"), *values)
with open(os.path.join(out_dir, "mlp_params_p2.pkl"), "wb") as f:
    pickle.dump(values, f, protocol=2)
with open(os.path.join(out_dir, "mlp_modelzoo.pkl"), "wb") as f:
    pickle.dump(
        {
            "param values": values,
            "mean value": np.array([0.5, 0.25], "float32"),
            "synset words": ["cat", "dog", "bird"],
        },
        f,
        protocol=2,
    )

# 2. conv net
c_in = InputLayer((None, 2, 6, 6), name="img")
c = batch_norm(Conv2DLayer(c_in, 3, 3, pad=1, name="conv"))
c = MaxPool2DLayer(c, 2, name="pool")
convnet = DenseLayer(c, 3, nonlinearity=lasagne.nonlinearities.softmax, name="cls")
Xc = r.randn(2, 4, 2, 6, 6).astype("float32")
yc = r.randint(0, 3, (2, 4)).astype("int32")
det = train(convnet, c_in.input_var, Xc, yc, 2)
expected["conv_x"] = Xc[0]
expected["conv_out"] = det(Xc[0])
expected["conv_param_names"] = np.array([p.name for p in get_all_params(convnet)])
with open(os.path.join(out_dir, "convnet_p4.pkl"), "wb") as f:
    pickle.dump(convnet, f, protocol=4)

np.savez(os.path.join(out_dir, "expected.npz"), **expected)
print(sorted(os.listdir(out_dir)))
