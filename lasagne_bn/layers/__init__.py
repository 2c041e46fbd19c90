"""Lasagne-style layers on PyTensor 3, with batch normalization on :mod:`lasagne_bn.ops`.

Everything ``lasagne.layers`` exports for these layer kinds is here under
the same name, so ``from lasagne_bn.layers import *`` reads like Lasagne.

>>> import numpy as np, pytensor
>>> from lasagne_bn.layers import InputLayer, DenseLayer, batch_norm, get_output
>>> l_in = InputLayer((None, 4))
>>> net = batch_norm(DenseLayer(l_in, num_units=3))
>>> f = pytensor.function([l_in.input_var], get_output(net, deterministic=True))
>>> f(np.ones((2, 4))).shape
(2, 3)
"""

from lasagne_bn.layers.base import *  # noqa: F403
from lasagne_bn.layers.base import __all__ as _base_all
from lasagne_bn.layers.bn_fold import *  # noqa: F403
from lasagne_bn.layers.bn_fold import __all__ as _bn_fold_all
from lasagne_bn.layers.bn_freeze import *  # noqa: F403
from lasagne_bn.layers.bn_freeze import __all__ as _bn_freeze_all
from lasagne_bn.layers.bn_recompute import *  # noqa: F403
from lasagne_bn.layers.bn_recompute import __all__ as _bn_recompute_all
from lasagne_bn.layers.conv import *  # noqa: F403
from lasagne_bn.layers.conv import __all__ as _conv_all
from lasagne_bn.layers.dense import *  # noqa: F403
from lasagne_bn.layers.dense import __all__ as _dense_all
from lasagne_bn.layers.embedding import *  # noqa: F403
from lasagne_bn.layers.embedding import __all__ as _embedding_all
from lasagne_bn.layers.helper import *  # noqa: F403
from lasagne_bn.layers.helper import __all__ as _helper_all
from lasagne_bn.layers.input import *  # noqa: F403
from lasagne_bn.layers.input import __all__ as _input_all
from lasagne_bn.layers.local import *  # noqa: F403
from lasagne_bn.layers.local import __all__ as _local_all
from lasagne_bn.layers.merge import *  # noqa: F403
from lasagne_bn.layers.merge import __all__ as _merge_all
from lasagne_bn.layers.noise import *  # noqa: F403
from lasagne_bn.layers.noise import __all__ as _noise_all
from lasagne_bn.layers.normalization import *  # noqa: F403
from lasagne_bn.layers.normalization import __all__ as _normalization_all
from lasagne_bn.layers.pool import *  # noqa: F403
from lasagne_bn.layers.pool import __all__ as _pool_all
from lasagne_bn.layers.recurrent import *  # noqa: F403
from lasagne_bn.layers.recurrent import __all__ as _recurrent_all
from lasagne_bn.layers.shape import *  # noqa: F403
from lasagne_bn.layers.shape import __all__ as _shape_all
from lasagne_bn.layers.special import *  # noqa: F403
from lasagne_bn.layers.special import __all__ as _special_all

__all__ = [
    *_base_all,
    *_helper_all,
    *_input_all,
    *_dense_all,
    *_noise_all,
    *_shape_all,
    *_merge_all,
    *_normalization_all,
    *_special_all,
    *_conv_all,
    *_pool_all,
    *_bn_recompute_all,
    *_bn_freeze_all,
    *_bn_fold_all,
    *_embedding_all,
    *_local_all,
    *_recurrent_all,
]
