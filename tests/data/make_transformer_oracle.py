"""Generate tests/data/transformer_oracle.npz with Theano 1.0.5 and Lasagne master.

Outputs and gradients of Lasagne's spatial transformer layers
(``TransformerLayer``, ``TPSTransformerLayer``) on small random inputs, for
tests/layers/test_transformer.py (which must not need Theano).  Not run by
the tests.  How it was run, per /work/shared/LEGACY_ORACLE.md (Python 3.11,
numpy 1.23.5, CPU; the python linker, since Theano's C dot needs BLAS):

    export PYTHONPATH=<Lasagne master checkout>
    export THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=,cxx=
    export THEANO_FLAGS=$THEANO_FLAGS,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_transformer_oracle.py tests/data/transformer_oracle.npz

Lasagne's TPS set-up calls ``np.linspace`` with a float count, which numpy
>= 1.18 refuses; this script lets ``linspace`` take it (as older numpy did),
which changes nothing else.

Keys (``<case>/x``, ``<case>/theta``, ``<case>/out``, ``<case>/grad_x``,
``<case>/grad_theta``, gradients of ``sum(out * w)`` with ``<case>/w``):
- ``affine_<border_mode>``          TransformerLayer, (2, 3, 7, 9) input,
                                    downsample_factor=1
- ``affine_down``                   TransformerLayer, downsample_factor=(0.7, 2.3)
- ``tps_pre_<border_mode>``         TPSTransformerLayer, 16 control points,
                                    precompute_grid=True
- ``tps_nopre``                     precompute_grid=False (Lasagne master's
                                    on-the-fly grid, whose radial terms vanish)
- ``tps_down``                      downsample_factor=(0.7, 2.3), 9 control points
"""

import sys

import numpy as np

_linspace = np.linspace


def _linspace_float_count(start, stop, num=50, *args, **kwargs):
    return _linspace(start, stop, int(num), *args, **kwargs)


np.linspace = _linspace_float_count

import lasagne  # noqa: E402
import theano  # noqa: E402
import theano.tensor as T  # noqa: E402
from lasagne.layers import InputLayer, TPSTransformerLayer, TransformerLayer  # noqa: E402


def run(case, layer_cls, theta, out, rng, shape=(2, 3, 7, 9), **kwargs):
    x = rng.rand(*shape).astype("float32")
    l_in = InputLayer(shape)
    l_loc = InputLayer(theta.shape)
    layer = layer_cls(l_in, l_loc, **kwargs)
    xs, ts = T.tensor4("x"), T.matrix("theta")
    y = lasagne.layers.get_output(layer, {l_in: xs, l_loc: ts})
    w = rng.randn(*[shape[0], shape[1], *layer.output_shape[2:]]).astype("float32")
    gx, gt = theano.grad((y * w).sum(), [xs, ts])
    f = theano.function([xs, ts], [y, gx, gt])
    y_v, gx_v, gt_v = f(x, theta)
    assert y_v.shape[2:] == tuple(layer.output_shape[2:])
    for key, value in dict(x=x, theta=theta, w=w, out=y_v, grad_x=gx_v, grad_theta=gt_v).items():
        out[f"{case}/{key}"] = value


def main(path):
    rng = np.random.RandomState(1234)
    out = {}
    identity = np.array([1, 0, 0, 0, 1, 0], "float32")
    for mode in ("nearest", "mirror", "wrap"):
        # zoom out, rotate a little and shift: samples fall outside the input
        theta = np.tile(identity, (2, 1)) * 1.6 + rng.randn(2, 6).astype("float32") * 0.3
        run(
            f"affine_{mode}", TransformerLayer, theta.astype("float32"), out, rng, border_mode=mode
        )
    theta = np.tile(identity, (2, 1)) + rng.randn(2, 6).astype("float32") * 0.2
    run(
        "affine_down",
        TransformerLayer,
        theta.astype("float32"),
        out,
        rng,
        downsample_factor=(0.7, 2.3),
    )
    for mode in ("nearest", "mirror", "wrap"):
        offsets = (rng.randn(2, 32) * 0.4).astype("float32")
        run(
            f"tps_pre_{mode}",
            TPSTransformerLayer,
            offsets,
            out,
            rng,
            border_mode=mode,
            precompute_grid=True,
        )
    offsets = (rng.randn(2, 32) * 0.4).astype("float32")
    run("tps_nopre", TPSTransformerLayer, offsets, out, rng, precompute_grid=False)
    offsets = (rng.randn(2, 18) * 0.3).astype("float32")
    run(
        "tps_down",
        TPSTransformerLayer,
        offsets,
        out,
        rng,
        control_points=9,
        downsample_factor=(0.7, 2.3),
    )
    np.savez_compressed(path, **out)


if __name__ == "__main__":
    main(sys.argv[1])
