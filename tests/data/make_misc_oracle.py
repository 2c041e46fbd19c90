"""Generate tests/data/misc_oracle.npz with Theano 1.0.5 and Lasagne master (0.2.dev1).

Reference outputs of ``lasagne.theano_extensions.conv`` (every conv1d_*
variant, multi-channel, both filter_flip values, strides, paddings) and of
``LocallyConnected2DLayer`` (both channelwise values, both flips, untied
biases), for tests/test_theano_extensions.py and tests/layers/test_local.py
(which must not need Theano).  Not run by the tests.  How it was run, per
/work/shared/LEGACY_ORACLE.md (Python 3.11, numpy 1.23.5, CPU):

    export PYTHONPATH=<Lasagne master checkout>
    export THEANO_FLAGS=device=cpu,floatX=float64,blas.ldflags=,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_misc_oracle.py tests/data/misc_oracle.npz

Keys: ``conv/<name>/<case>/{x,w,out}`` and ``local/<case>/{x,W,b,out}``;
the case names spell the arguments (see CONV_CASES and LOCAL_CASES).  Also
``misc_oracle_net.pkl`` next to it: ``pickle.dump({"net": ..., "emb": ...},
protocol=2)`` of a LocallyConnected2DLayer -> channelwise LocallyConnected2DLayer
-> DenseLayer network and an EmbeddingLayer, for tests/compat/test_compat_io.py;
its inputs and outputs are ``pickle/{x,out,ids,eout}``.
"""

import pickle
import sys

import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    DenseLayer,
    EmbeddingLayer,
    InputLayer,
    LocallyConnected2DLayer,
    get_output,
)
from lasagne.theano_extensions import conv

# name -> (functions, x shape, w shape, keyword arguments)
CONV_CASES = {
    "s1_flip": (None, (2, 3, 11), (4, 3, 4), dict(subsample=(1,), filter_flip=True)),
    "s1_noflip": (None, (2, 3, 11), (4, 3, 4), dict(subsample=(1,), filter_flip=False)),
    "s2_flip": (None, (2, 3, 11), (4, 3, 4), dict(subsample=(2,), filter_flip=True)),
    "s2_noflip": (None, (2, 3, 11), (4, 3, 4), dict(subsample=(2,), filter_flip=False)),
    "pad2": (("conv1d_mc0", "conv1d_mc1"), (2, 3, 9), (4, 3, 3), dict(border_mode=2)),
    "full": (("conv1d_mc0", "conv1d_mc1"), (2, 3, 9), (4, 3, 3), dict(border_mode="full")),
    "half_s2_noflip": (
        ("conv1d_mc0", "conv1d_mc1"),
        (2, 3, 9),
        (4, 3, 3),
        dict(border_mode="half", subsample=(2,), filter_flip=False),
    ),
    "groups": (("conv1d_mc0", "conv1d_mc1"), (2, 4, 9), (6, 2, 3), dict(num_groups=2)),
}
ALL = ("conv1d_sc", "conv1d_mc0", "conv1d_mc1", "conv1d_unstrided", "conv1d_sd", "conv1d_md")

# name -> (x shape, keyword arguments)
LOCAL_CASES = {
    "flip": ((2, 3, 5, 4), dict(num_filters=2, filter_size=3)),
    "noflip_35": ((2, 3, 5, 6), dict(num_filters=4, filter_size=(3, 5), flip_filters=False)),
    "channelwise": ((2, 3, 5, 4), dict(num_filters=3, filter_size=(5, 3), channelwise=True)),
    "channelwise_noflip_untied": (
        (1, 2, 4, 4),
        dict(
            num_filters=2, filter_size=3, channelwise=True, flip_filters=False, untie_biases=True
        ),
    ),
    "untied_linear": (
        (2, 2, 3, 3),
        dict(num_filters=3, filter_size=1, untie_biases=True, nonlinearity=None),
    ),
}


def main(path):
    rng = np.random.RandomState(42)
    data = {}
    x_var, w_var = T.tensor3("x"), T.tensor3("w")
    for case, (names, x_shape, w_shape, kwargs) in CONV_CASES.items():
        x = rng.randn(*x_shape)
        w = rng.randn(*w_shape)
        for name in names or ALL:
            out = getattr(conv, name)(x_var, w_var, x_shape, w_shape, **kwargs)
            data[f"conv/{name}/{case}/x"] = x
            data[f"conv/{name}/{case}/w"] = w
            data[f"conv/{name}/{case}/out"] = theano.function([x_var, w_var], out)(x, w)
    for case, (x_shape, kwargs) in LOCAL_CASES.items():
        x = rng.randn(*x_shape)
        layer = LocallyConnected2DLayer(InputLayer(x_shape), **kwargs)
        W = rng.randn(*layer.W.get_value().shape)
        b = rng.randn(*layer.b.get_value().shape)
        layer.W.set_value(W)
        layer.b.set_value(b)
        x_in = T.tensor4("x")
        out = theano.function([x_in], layer.get_output_for(x_in))(x)
        data.update(
            {
                f"local/{case}/x": x,
                f"local/{case}/W": W,
                f"local/{case}/b": b,
                f"local/{case}/out": out,
            }
        )
    l_in = InputLayer((None, 2, 5, 4))
    lc = LocallyConnected2DLayer(l_in, 3, 3, untie_biases=True, name="lc")
    lc2 = LocallyConnected2DLayer(lc, 3, (3, 1), channelwise=True, flip_filters=False, name="lc2")
    net = DenseLayer(lc2, 4, name="fc")
    emb_in = InputLayer((None, 3), input_var=T.imatrix("ids"))
    emb = EmbeddingLayer(emb_in, 6, 2, name="emb")
    x = rng.randn(2, 2, 5, 4)
    ids = np.array([[0, 5, 2], [1, 1, 3]], "int32")
    data["pickle/x"], data["pickle/ids"] = x, ids
    data["pickle/out"] = theano.function([l_in.input_var], get_output(net))(x)
    data["pickle/eout"] = theano.function([emb_in.input_var], get_output(emb))(ids)
    with open(path.replace(".npz", "_net.pkl"), "wb") as f:
        pickle.dump({"net": net, "emb": emb}, f, protocol=2)
    np.savez_compressed(path, **data)
    print(len(data), "arrays written to", path)


if __name__ == "__main__":
    main(sys.argv[1])
