"""Generate tests/data/lasagne_oracle.npz with Theano 1.0.5 and Lasagne master (0.2.dev1).

Not run by the tests (they must not need Theano).  How it was run, per
/work/shared/LEGACY_ORACLE.md:

    L=$(mktemp -d)
    python3 -m venv $L/venv
    $L/venv/bin/pip install numpy==1.23.5 scipy==1.9.3 Theano==1.0.5
    mkdir -p $L/lasagne && git --git-dir=<Lasagne mirror> archive HEAD | tar -x -C $L/lasagne
    PYTHONPATH=$L/lasagne \
    THEANO_FLAGS=device=cpu,floatX=float64,blas.ldflags=,base_compiledir=$L/theano-cache \
        $L/venv/bin/python tests/data/make_lasagne_oracle.py

Everything is float64; the inputs are drawn from fixed seeds and stored
next to the results.
"""

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    BatchNormLayer,
    DenseLayer,
    InputLayer,
    batch_norm,
    get_all_layers,
    get_all_params,
    get_output,
)

out = {}

# 1. BatchNormLayer on (N, C, H, W) input: train / deterministic / use+update
r = np.random.RandomState(10)
x = r.randn(5, 3, 2, 4) * 2 + 1
init = dict(beta=r.randn(3), gamma=r.rand(3) + 0.5, mean=r.randn(3), inv_std=r.rand(3) + 0.5)
out.update({"bn4_x": x, **{"bn4_init_" + k: v for k, v in init.items()}})
for case, kwargs in [
    ("train", {}),
    ("det", {"deterministic": True}),
    ("use_update", {"batch_norm_use_averages": True}),
]:
    layer = BatchNormLayer(InputLayer((None, 3, 2, 4)), **{k: v.copy() for k, v in init.items()})
    xv = T.tensor4("x")
    f = theano.function([xv], get_output(layer, xv, **kwargs))
    out[f"bn4_{case}_out"] = f(x)
    out[f"bn4_{case}_mean"] = layer.mean.get_value()
    out[f"bn4_{case}_inv_std"] = layer.inv_std.get_value()

# 2. batch_norm(DenseLayer) network, three SGD steps
r = np.random.RandomState(11)
W1, W2, b2 = r.randn(6, 5) * 0.5, r.randn(5, 3), r.randn(3)
X, Y = r.randn(3, 16, 6), r.randint(0, 3, (3, 16)).astype("int32")
out.update(net_W1=W1, net_W2=W2, net_b2=b2, net_X=X, net_Y=Y)
l_in = InputLayer((None, 6))
l1 = batch_norm(DenseLayer(l_in, 5, W=W1.copy(), name="fc"))
net = DenseLayer(l1, 3, W=W2.copy(), b=b2.copy(), nonlinearity=lasagne.nonlinearities.softmax)
y = T.ivector("y")
loss = lasagne.objectives.categorical_crossentropy(get_output(net), y).mean()
params = get_all_params(net, trainable=True)
train = theano.function(
    [l_in.input_var, y], loss, updates=lasagne.updates.sgd(loss, params, learning_rate=0.1)
)
out["net_losses"] = np.array([train(X[i], Y[i]) for i in range(3)])
for p in get_all_params(net):
    out["net_param_" + (p.name or "unnamed")] = p.get_value()
det = theano.function([l_in.input_var], get_output(net, deterministic=True))
out["net_det_out"] = det(X[0])
out["net_layer_names"] = np.array([str(lyr.name) for lyr in get_all_layers(net)])
out["net_layer_types"] = np.array([type(lyr).__name__ for lyr in get_all_layers(net)])
out["net_param_names"] = np.array([str(p.name) for p in get_all_params(net)])
out["net_count_params"] = np.array(lasagne.layers.count_params(net))

np.savez("lasagne_oracle.npz", **out)
print(sorted(out))
