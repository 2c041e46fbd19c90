"""Generate tests/data/pool_oracle.npz with Theano 1.0.5 and Lasagne master (0.2.dev1).

Outputs and input gradients (of ``sum(y ** 2)``) of Lasagne's 3-D pooling,
upscaling, feature pooling and spatial pyramid pooling layers, and of
Theano's ``pool_3d``, for tests/layers/test_pool_oracle.py (which must not
need Theano).  Not run by the tests.  How it was run (CPU, float32):

    PYTHONPATH=<Lasagne master checkout> \\
    THEANO_FLAGS=device=cpu,floatX=float32,blas.ldflags=,base_compiledir=<scratch> \\
    <venv>/bin/python tests/data/make_pool_oracle.py tests/data/pool_oracle.npz

Keys: ``<case>/x`` (input), ``<case>/y`` (output), ``<case>/g`` (gradient;
left out where Theano could not take it).  The cases are listed in
``CASES`` of the test module with the same layer arguments.
"""

import sys

import numpy as np
import theano
import theano.tensor as T
from lasagne.layers import (
    FeaturePoolLayer,
    FeatureWTALayer,
    GlobalPoolLayer,
    InputLayer,
    MaxPool3DLayer,
    Pool3DLayer,
    SpatialPyramidPoolingLayer,
    Upscale3DLayer,
    get_output,
)

# name: (layer builder, input shape, small-integer input (ties), take the gradient)
CASES = {
    # 7 x 5 is a size 'fast' does not fit: more bins than output_shape says
    "spp_fast_7x5": (lambda l: SpatialPyramidPoolingLayer(l, [1, 2, 4]), (2, 3, 7, 5), 0, 1),
    "spp_fast_avg": (
        lambda l: SpatialPyramidPoolingLayer(l, [1, 3], mode="average_exc_pad"),
        (2, 3, 10, 9),
        0,
        1,
    ),
    "spp_fast_incpad": (
        lambda l: SpatialPyramidPoolingLayer(l, [2, 3], mode="average_inc_pad"),
        (1, 2, 7, 8),
        0,
        1,
    ),
    "spp_kaiming": (
        lambda l: SpatialPyramidPoolingLayer(l, [1, 2, 4], implementation="kaiming"),
        (2, 3, 7, 5),
        0,
        1,
    ),
    "wta_ties": (lambda l: FeatureWTALayer(l, 3), (2, 6, 4), 1, 1),
    "featurepool_ties": (lambda l: FeaturePoolLayer(l, 2, axis=2), (2, 3, 6), 1, 1),
    "pool3d_avg_inc_pad": (
        lambda l: Pool3DLayer(l, 3, stride=2, pad=1, mode="average_inc_pad"),
        (1, 2, 5, 6, 7),
        0,
        1,
    ),
    # Theano's AveragePoolGrad fails on this one
    "pool3d_avg_exc_pad": (
        lambda l: Pool3DLayer(l, 3, stride=(2, 1, 2), pad=(1, 1, 2), mode="average_exc_pad"),
        (1, 2, 5, 6, 7),
        0,
        0,
    ),
    "pool3d_max_keep": (
        lambda l: MaxPool3DLayer(l, (2, 3, 2), ignore_border=False),
        (1, 2, 5, 7, 5),
        0,
        1,
    ),
    "pool3d_sum": (lambda l: Pool3DLayer(l, 2, stride=1, mode="sum"), (1, 2, 4, 3, 4), 0, 1),
    "up3d_dilate": (lambda l: Upscale3DLayer(l, (2, 3, 1), mode="dilate"), (1, 2, 2, 3, 2), 0, 1),
    "up3d_repeat": (lambda l: Upscale3DLayer(l, (1, 2, 3)), (1, 2, 2, 3, 2), 0, 1),
    "global_max_5d": (lambda l: GlobalPoolLayer(l, pool_function=T.max), (2, 3, 2, 3, 4), 0, 1),
}


def main(path):
    r = np.random.RandomState(3)
    out = {}
    for name, (build, shape, ties, grad) in CASES.items():
        x = (r.randint(-3, 4, size=shape) if ties else r.standard_normal(shape)).astype("float32")
        l_in = InputLayer(shape)
        y = get_output(build(l_in))
        outs = [y] + ([theano.grad((y**2).sum(), l_in.input_var)] if grad else [])
        values = theano.function([l_in.input_var], outs)(x)
        out[name + "/x"], out[name + "/y"] = x, values[0]
        if grad:
            out[name + "/g"] = values[1]
    x = T.tensor4()
    xv = r.standard_normal((3, 5, 4, 5)).astype("float32")
    y = theano.tensor.signal.pool.pool_3d(x, (2, 2, 2), ignore_border=False, stride=(1, 2, 1))
    out["pool_3d_4d/x"], out["pool_3d_4d/y"] = xv, theano.function([x], y)(xv)
    np.savez_compressed(path, **out)


if __name__ == "__main__":
    import theano.tensor.signal.pool  # noqa: F401

    main(sys.argv[1])
