"""Whole networks pickled under Theano 1.0 + Lasagne: lasagne_bn_compat.io and a plain pickle.load.

The pickles (tests/data/network_pickles, made by make_network_pickles.py
with the real Theano 1.0.5 and Lasagne master) hold a trained CNN with
batch norm, dropout and a dense head, in protocols 2 and 4.
"""

from __future__ import annotations

import gzip
import pickle
import sys

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from compile_modes import mode_params
from legacy_helpers import DATA, QUIET, legacy  # noqa: F401  (the fixture)
from pytensor.tensor.sharedvar import TensorSharedVariable
from pytensor.tensor.type import TensorType

import lasagne_bn_compat.io as cio
from lasagne_bn.layers import (
    BatchNormLayer,
    DropoutLayer,
    get_all_layers,
    get_all_params,
    get_output,
)

pytestmark = [*QUIET, pytest.mark.usefixtures("legacy")]

PICKLES = DATA / "network_pickles"
FILES = ["cnn_p2.pkl.gz", "cnn_p4.pkl.gz"]


@pytest.fixture(scope="module")
def expected():
    with np.load(PICKLES / "cnn_expected.npz") as f:
        return dict(f)


def plain_load(name):
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10000))  # as when it was pickled
    try:
        with gzip.open(PICKLES / name) as f:
            return pickle.load(f)
    finally:
        sys.setrecursionlimit(limit)


LOADERS = {
    "pickle.load": plain_load,
    "lasagne_bn_compat.io": lambda name: cio.load_network(PICKLES / name),
}


def outputs(net, mode=None):
    """Deterministic and batch-statistics outputs of ``net``, one compiled function."""
    l_in = get_all_layers(net)[0]
    det = get_output(net, deterministic=True)
    batch = get_output(
        net, deterministic=True, batch_norm_use_averages=False, batch_norm_update_averages=False
    )
    return pytensor.function([l_in.input_var], [det, batch], mode=mode)


def check_outputs(f, expected):
    det, batch = f(expected["x"])
    np.testing.assert_allclose(det, expected["out"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(batch, expected["out_batch_stats"], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("name", FILES)
def test_loads_with_lasagnes_structure_and_values(name, loader, expected):
    net = LOADERS[loader](name)
    layers = get_all_layers(net)
    assert [type(layer).__name__ for layer in layers] == [
        "InputLayer", "Conv2DLayer", "BatchNormLayer", "NonlinearityLayer", "MaxPool2DLayer",
        "DropoutLayer", "DenseLayer", "BatchNormLayer", "NonlinearityLayer", "DenseLayer",
    ]  # fmt: skip
    params = get_all_params(net)
    assert [p.name for p in params] == list(expected["param_names"])
    for i, p in enumerate(params):
        # the loaded objects are PyTensor's own classes, nothing legacy
        assert type(p) is TensorSharedVariable and type(p.type) is TensorType
        np.testing.assert_array_equal(p.get_value(), expected[f"param_{i}"])
    assert [p.name for p in get_all_params(net, trainable=True)] == [
        n for n in expected["param_names"] if not n.endswith(("mean", "inv_std"))
    ]
    check_outputs(outputs(net, "FAST_COMPILE"), expected)


@pytest.mark.parametrize("mode", mode_params())
def test_plain_pickle_load_computes_lasagnes_outputs_in_every_mode(mode, expected):
    check_outputs(outputs(plain_load("cnn_p2.pkl.gz"), mode), expected)


def test_plain_loaded_network_trains():
    """Dropout draws afresh and the batch-norm averages move, as in Lasagne."""
    net = plain_load("cnn_p4.pkl.gz")
    layers = get_all_layers(net)
    drop = next(layer for layer in layers if isinstance(layer, DropoutLayer))
    assert not hasattr(drop, "_srng")  # the pickled Theano stream is replaced
    bn = next(layer for layer in layers if isinstance(layer, BatchNormLayer))
    assert bn.stat_storage == "inv_std" and bn.param_shape == (4,)
    before = bn.mean.get_value()
    x = np.random.RandomState(0).randn(6, 1, 8, 8).astype("float32")
    f = pytensor.function([layers[0].input_var], get_output(net), mode="FAST_COMPILE")
    a, b = f(x), f(x)
    assert a.shape == (6, 3) and not np.allclose(a, b)  # new dropout masks
    np.testing.assert_allclose(a.sum(axis=1), 1, rtol=1e-5)
    assert not np.allclose(bn.mean.get_value(), before)


def test_theano_pickled_types_become_pytensors_and_isinstance_still_holds():
    import theano
    import theano.tensor as T
    from theano.tensor.sharedvar import TensorSharedVariable as LegacyShared
    from theano.tensor.type import TensorType as LegacyType

    assert T.TensorType is LegacyType
    t = T.TensorType("float32", (False, True))
    assert type(t) is TensorType and t == pt.TensorType("float32", shape=(None, 1))
    assert T.TensorType(dtype="float64", broadcastable=(True,)).shape == (1,)
    assert isinstance(t, T.TensorType) and issubclass(TensorType, T.TensorType)
    shared = theano.shared(np.zeros(2))
    assert isinstance(shared, LegacyShared) and isinstance(shared, T.TensorVariable)
    assert isinstance(T.constant(1.0), T.TensorConstant) and not isinstance(
        T.matrix(), T.TensorConstant
    )
    v = T.TensorVariable(t, None, None, "v")
    assert type(v) is pt.TensorVariable and v.name == "v" and v.type == t


def test_ops_of_pickled_training_graphs_load_inert():
    from theano.sandbox.rng_mrg import mrg_uniform
    from theano.tensor.nnet.abstract_conv import AbstractConv2d
    from theano.tensor.signal.pool import MaxPoolGrad

    for cls, advice in [(MaxPoolGrad, "pool_2d"), (mrg_uniform, "uniform")]:
        with pytest.raises(TypeError, match=advice):
            cls(ignore_border=True)
        op = cls.__new__(cls)  # as pickle makes it
        op.__setstate__({"mode": "max"})
        with pytest.raises(TypeError, match="no counterpart"):
            op(pt.matrix())
    # Theano's convolution and pooling Op classes are real here (legacy code
    # instantiates them); a pickled one still loads as a record
    op = AbstractConv2d.__new__(AbstractConv2d)
    op.__dict__.update({"border_mode": "valid", "imshp": (None,) * 4})
    assert isinstance(
        AbstractConv2d(border_mode="half")(pt.tensor4(), pt.tensor4()), pt.TensorVariable
    )


def test_compat_io_keeps_refusing_unsafe_pickles(tmp_path):
    """The allow-list path is unchanged: a pickle naming os.system is refused unexecuted."""
    path = tmp_path / "evil.pkl"
    path.write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    with pytest.raises(cio.UnsafePickleError, match="os.system"):
        cio.load_network(path)
