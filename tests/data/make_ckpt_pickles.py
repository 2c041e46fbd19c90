"""Generate tests/data/ckpt_pickles/* with Theano 1.0.5 and Lasagne master (0.2.dev1).

Pickled networks whose ``get_all_params`` order is not a plain chain of
layers, for the tests that read their parameter values without rebuilding
them (``lasagne_bn_compat.io.load_params``): a ``CustomRecurrentLayer`` (its
parameters include those of its input-to-hidden and hidden-to-hidden
sub-networks), a ``ConcatLayer`` of two branches, a tied weight (one shared
variable in two layers) and a batch norm.  Not run by the tests.  Run as in
/work/shared/LEGACY_ORACLE.md (Python 3.11, numpy 1.23.5, CPU):

    export PYTHONPATH=<Lasagne master checkout>
    export THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_ckpt_pickles.py tests/data/ckpt_pickles

Files:
- rnn_p2.pkl.gz       pickle.dump(net, gzip.open(...), protocol=2)
- rnn_expected.npz    Lasagne's get_all_params names (``names``) and values
                      (``value_<i>``), in that order
"""

import gzip
import os
import pickle
import sys

import lasagne
import numpy as np
from lasagne.layers import (
    ConcatLayer,
    CustomRecurrentLayer,
    DenseLayer,
    InputLayer,
    batch_norm,
    get_all_param_values,
    get_all_params,
)

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
lasagne.random.set_rng(np.random.RandomState(21))

l_in = InputLayer((None, 5, 3), name="seq")
in_to_hid = DenseLayer(InputLayer((None, 3)), 4, name="i2h")
hid_to_hid = DenseLayer(InputLayer((None, 4)), 4, name="h2h")
rnn = CustomRecurrentLayer(l_in, in_to_hid, hid_to_hid, only_return_final=True, name="rnn")
side = DenseLayer(lasagne.layers.FlattenLayer(l_in), 4, name="side")
tied = DenseLayer(side, 4, W=hid_to_hid.W, name="tied")  # shares h2h.W
h = ConcatLayer([rnn, tied], name="cat")
h = batch_norm(DenseLayer(h, 6, name="fc"))
net = DenseLayer(h, 2, nonlinearity=lasagne.nonlinearities.softmax, name="out")
# statistics that are not the initial 0 and 1
bn = h.input_layer
bn.mean.set_value(np.linspace(-1, 1, 6).astype("float32"))
bn.inv_std.set_value(np.linspace(0.5, 2, 6).astype("float32"))

with gzip.open(os.path.join(out_dir, "rnn_p2.pkl.gz"), "wb") as f:
    pickle.dump(net, f, protocol=2)
names = [str(p.name) for p in get_all_params(net)]
values = get_all_param_values(net)
np.savez(
    os.path.join(out_dir, "rnn_expected.npz"),
    names=np.array(names),
    **{f"value_{i}": v for i, v in enumerate(values)},
)
print(len(names), names)
