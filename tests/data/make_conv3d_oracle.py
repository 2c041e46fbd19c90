"""Generate tests/data/conv3d_oracle/* with Theano 1.0.5 and Lasagne master (0.2.dev1).

Reference outputs of 3-D convolutions for tests/compat/test_compat_conv3d.py
(which must not need Theano).  Not run by the tests.  Run as
tests/data/make_compat_oracle.py is (CPU, floatX=float32):

    PYTHONPATH=<Lasagne master checkout> THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=
    <venv>/bin/python tests/data/make_conv3d_oracle.py tests/data/conv3d_oracle

Files:
- net_p4.pkl     pickle.dump(l_out, f, protocol=4) of InputLayer -> Conv3DLayer ->
                 TransposedConv3DLayer -> Conv3DLayer(flip_filters=False, num_groups=2)
- expected.npz   the network's input ``x`` and output ``y``, its parameter values
                 ``p0``...; and T.nnet.conv3d / conv3d_grad_wrt_inputs /
                 conv3d_grad_wrt_weights cases: ``case<i>_{x,w,y,gx,gw}`` (y the output,
                 gx, gw the gradients of sum(y * r) with ``case<i>_r``)
"""

import os
import pickle
import sys

import lasagne
import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    Conv3DLayer,
    InputLayer,
    TransposedConv3DLayer,
    get_all_param_values,
    get_output,
)

out_dir = sys.argv[1]
os.makedirs(out_dir, exist_ok=True)
lasagne.random.set_rng(np.random.RandomState(3))
r = np.random.RandomState(5)

l_in = InputLayer((None, 2, 5, 6, 7))
l1 = Conv3DLayer(l_in, 4, 3, stride=(1, 2, 1), pad="same", name="c1")
l2 = TransposedConv3DLayer(
    l1, 4, (2, 3, 2), stride=2, crop=1, nonlinearity=None, b=lasagne.init.Normal(0.1), name="t2"
)
l3 = Conv3DLayer(
    l2, 2, 2, pad="full", flip_filters=False, num_groups=2, untie_biases=True,
    b=lasagne.init.Normal(0.1), nonlinearity=lasagne.nonlinearities.tanh, name="c3",
)  # fmt: skip
x = r.randn(2, 2, 5, 6, 7).astype("float32")
y = theano.function([l_in.input_var], get_output(l3))(x)
with open(os.path.join(out_dir, "net_p4.pkl"), "wb") as f:
    pickle.dump(l3, f, protocol=4)
arrays = {"x": x, "y": y}
for i, v in enumerate(get_all_param_values(l3)):
    arrays[f"p{i}"] = v

cases = [
    ((2, 3, 4, 5, 6), (4, 3, 2, 3, 2), dict(border_mode="valid")),
    ((1, 4, 5, 6, 5), (6, 2, 3, 3, 3),
     dict(border_mode="half", subsample=(2, 1, 2), num_groups=2)),
    ((2, 2, 6, 5, 7), (3, 2, 2, 2, 3), dict(border_mode=(1, 0, 2), filter_dilation=(2, 1, 2),
                                            filter_flip=False)),
    ((1, 2, 4, 5, 6), (3, 2, 3, 2, 2), dict(border_mode="full", subsample=(2, 2, 1))),
]  # fmt: skip
for i, (xs, ws, kw) in enumerate(cases):
    xv, wv = r.randn(*xs).astype("float32"), r.randn(*ws).astype("float32")
    xt, wt, rt = T.tensor5(), T.tensor5(), T.tensor5()
    yt = T.nnet.conv3d(xt, wt, **kw)
    yv = theano.function([xt, wt], yt)(xv, wv)
    rv = r.randn(*yv.shape).astype("float32")
    gx = T.nnet.abstract_conv.conv3d_grad_wrt_inputs(rt, wt, xs, filter_shape=ws, **kw)
    gw = T.nnet.abstract_conv.conv3d_grad_wrt_weights(xt, rt, ws, input_shape=xs, **kw)
    gxv, gwv = theano.function([xt, wt, rt], [gx, gw], on_unused_input="ignore")(xv, wv, rv)
    arrays.update(
        {f"case{i}_{k}": v for k, v in dict(x=xv, w=wv, r=rv, y=yv, gx=gxv, gw=gwv).items()}
    )
np.savez(os.path.join(out_dir, "expected.npz"), **arrays)
print("ok", y.shape, [arrays[f"case{i}_y"].shape for i in range(len(cases))])
