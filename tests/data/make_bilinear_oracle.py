"""Generate tests/data/bilinear_oracle.npz with Theano 1.0.5 (``bilinear_upsampling``).

Theano 1.0's ``theano.tensor.nnet.abstract_conv.bilinear_upsampling`` (which
Keras 2's Theano backend calls for ``resize_images(..., 'bilinear')``) on a
seeded input, for integer ratios with the 1-D and the 2-D kernel and for
fractional ratios, and the kernels ``bilinear_kernel_1D`` / ``_2D``, for
tests/compat/test_compat_bilinear.py (which must not need Theano).  Not run
by the tests.  How it was run, per /work/shared/LEGACY_ORACLE.md (Python
3.11, numpy 1.23.5, CPU):

    export THEANO_FLAGS=device=cpu,floatX=float64,blas.ldflags=,base_compiledir=<scratch>
    <venv>/bin/python tests/data/make_bilinear_oracle.py tests/data/bilinear_oracle.npz

Keys: ``x`` (2, 3, 4, 5); ``up/<case>`` for each case of ``bilinear_cases.CASES``;
``k1/<r>`` and ``k2/<r>`` the kernels for r in 1, 2, 3.
"""

import sys

import numpy as np
import theano
import theano.tensor as T
from bilinear_cases import CASES  # this script's folder is on sys.path
from theano.tensor.nnet.abstract_conv import (
    bilinear_kernel_1D,
    bilinear_kernel_2D,
    bilinear_upsampling,
)


def main(path):
    x = np.random.RandomState(43).randn(2, 3, 4, 5).astype(theano.config.floatX)
    data = {"x": x}
    xv = T.tensor4("x")
    for name, kwargs in CASES.items():
        data["up/" + name] = theano.function([xv], bilinear_upsampling(xv, **kwargs))(x)
    for r in (1, 2, 3):
        data[f"k1/{r}"] = bilinear_kernel_1D(r).eval()
        data[f"k2/{r}"] = bilinear_kernel_2D(r).eval()
    data["k2/2x3"] = bilinear_kernel_2D((2, 3)).eval()
    data["k1/3/raw"] = bilinear_kernel_1D(3, normalize=False).eval()
    np.savez_compressed(path, **data)


if __name__ == "__main__":
    main(sys.argv[1])
