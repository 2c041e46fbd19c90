"""``lasagne-bn demo``: the whole product on data that ships with scikit-learn.

The demo trains a Lasagne-style convolutional network with batch
normalization on scikit-learn's handwritten digits (1797 images of 8x8
pixels, no download), then shows what the package is for:

1. training with Lasagne's recipe (``get_output(..., return_updates=True)``
   for the running averages, ``updates.adam``), with a progress bar
   (:mod:`.training`, on the network of :mod:`.network`);
2. deterministic evaluation on held-out images (running statistics);
3. saving the weights as legacy Lasagne files (``np.savez(path,
   *get_all_param_values(net))``, batch-norm statistics stored as
   ``inv_std``) and in the ``var`` storage, and reloading both into fresh
   networks, which must predict exactly what the trained one does
   (:mod:`.reload`);
4. compiling inference under every supported mode (default/Numba, C via the
   CVM linker, JAX, FAST_COMPILE) on the same shared parameters, and
   checking that they agree to float32 rounding (:mod:`.modes`);
5. a PNG of the training curves, with the plotted numbers in
   ``metrics.json`` beside it (:mod:`.report`).

:mod:`.command` holds the command line and runs these steps in order.
Exit status: 0 when every check passed, 1 when one failed (one line says
which), 2 for a mistake on the command line.

Importing this package loads neither PyTensor nor NumPy: ``lasagne-bn
--help`` imports it to list the subcommand.
"""

from __future__ import annotations

from lasagne_bn.demo.command import register, run
from lasagne_bn.demo.data import Data, load_data
from lasagne_bn.demo.modes import MODE_TOLERANCE, TABLE_MODES
from lasagne_bn.demo.network import build_network, compile_predict

__all__ = [
    "MODE_TOLERANCE",
    "TABLE_MODES",
    "Data",
    "build_network",
    "compile_predict",
    "load_data",
    "register",
    "run",
]
