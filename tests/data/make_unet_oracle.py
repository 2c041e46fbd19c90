"""Generate tests/data/unet_oracle.npz with Theano 1.0.5 and Lasagne master (0.2.dev1).

A small network with the layer options of Lasagne/Recipes' ``modelzoo/Unet.py``
(written here, not copied): the ``try: from lasagne.layers.dnn import
Conv2DDNNLayer as ConvLayer / except ImportError: Conv2DLayer`` choice,
``batch_norm`` on ``ConvLayer(pad='same', elu)`` and on ``Deconv2DLayer(...,
2, 2, crop='valid', elu)``, ``Pool2DLayer(2)``, ``ConcatLayer(cropping=(None,
None, 'center', 'center'))`` of an odd-sized map, a 1x1 linear convolution,
dimshuffle / reshape and a pixel-wise softmax.  On the CPU the cuDNN import
fails, so the oracle is the ``Conv2DLayer`` branch (``flip_filters=True``),
for tests/compat/test_compat_unet.py (which must not need Theano).  Not run
by the tests.  How it was run, per /work/shared/LEGACY_ORACLE.md (Python 3.11,
numpy 1.23.5, CPU):

    export PYTHONPATH=<Lasagne master checkout>
    export THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_unet_oracle.py tests/data/unet_oracle.npz

Keys: ``x``; ``param/<i>_<name>`` (``get_all_params(out)`` order, set from
``RandomState(41)``); ``<mode>/<i>_<class>`` for every layer of
``get_all_layers(out)``, with mode ``det`` (``deterministic=True``) and
``batch`` (``deterministic=True, batch_norm_update_averages=False,
batch_norm_use_averages=False``); ``branch`` the convolution class's name.
"""

import sys

import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    ConcatLayer,
    Deconv2DLayer,
    DimshuffleLayer,
    InputLayer,
    NonlinearityLayer,
    Pool2DLayer,
    ReshapeLayer,
    batch_norm,
    get_all_layers,
    get_all_params,
    get_output,
)
from lasagne.nonlinearities import elu, softmax

try:
    from lasagne.layers.dnn import Conv2DDNNLayer as ConvLayer
except ImportError:
    from lasagne.layers import Conv2DLayer as ConvLayer


def build(shape=(None, 1, 10, 11), n=3):
    l_in = InputLayer(shape)
    c1 = batch_norm(ConvLayer(l_in, n, 3, nonlinearity=elu, pad="same"))
    c2 = batch_norm(ConvLayer(c1, n, 3, nonlinearity=elu, pad="same"))
    p = Pool2DLayer(c2, 2)
    e = batch_norm(ConvLayer(p, 2 * n, 3, nonlinearity=elu, pad="same"))
    up = batch_norm(Deconv2DLayer(e, 2 * n, 2, 2, crop="valid", nonlinearity=elu))
    cat = ConcatLayer([up, c2], cropping=(None, None, "center", "center"))
    x1 = batch_norm(ConvLayer(cat, n, 3, nonlinearity=elu, pad="same"))
    seg = ConvLayer(x1, 2, 1, nonlinearity=None)
    d = DimshuffleLayer(seg, (1, 0, 2, 3))
    r = ReshapeLayer(d, (2, -1))
    return NonlinearityLayer(DimshuffleLayer(r, (1, 0)), nonlinearity=softmax)


def set_params(out, rng):
    values = {}
    for i, p in enumerate(get_all_params(out)):
        shape = p.get_value().shape
        if p.name in ("inv_std", "gamma"):
            v = rng.uniform(0.5, 1.5, shape)
        elif p.name in ("beta", "mean", "b"):
            v = 0.1 * rng.randn(*shape)
        else:
            v = rng.randn(*shape) * np.sqrt(2.0 / np.prod(shape[1:]))
        v = v.astype(theano.config.floatX)
        p.set_value(v)
        values[f"param/{i:02d}_{p.name}"] = v
    return values


def main(path):
    out = build()
    rng = np.random.RandomState(41)
    data = set_params(out, rng)
    x = rng.randn(2, 1, 10, 11).astype(theano.config.floatX)
    data["x"] = x
    data["branch"] = np.array(ConvLayer.__name__)
    layers = get_all_layers(out)
    x_var = T.tensor4("x")
    modes = {
        "det": dict(deterministic=True),
        "batch": dict(
            deterministic=True, batch_norm_update_averages=False, batch_norm_use_averages=False
        ),
    }
    for mode, kwargs in modes.items():
        f = theano.function([x_var], get_output(layers, x_var, **kwargs))
        for i, (layer, value) in enumerate(zip(layers, f(x), strict=True)):
            data[f"{mode}/{i:02d}_{type(layer).__name__}"] = value
    np.savez_compressed(path, **data)


if __name__ == "__main__":
    main(sys.argv[1])
