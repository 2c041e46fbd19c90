"""lasagne_bn_compat.install(): legacy names resolve to PyTensor / lasagne_bn, or explain."""

from __future__ import annotations

import importlib
import sys
import types
import warnings

import numpy as np
import pytensor
import pytensor.tensor as pt
import pytest
from legacy_helpers import QUIET, legacy  # noqa: F401

import lasagne_bn
import lasagne_bn.layers
import lasagne_bn.ops
import lasagne_bn.updates
import lasagne_bn_compat
from lasagne_bn.utils import is_portable

pytestmark = QUIET


class TestInstall:
    def test_idempotent_and_undone(self):
        meta_before = list(sys.meta_path)
        lasagne_bn_compat.install(theano_flags="")
        lasagne_bn_compat.install(theano_flags="")
        assert lasagne_bn_compat.is_installed()
        assert len(sys.meta_path) == len(meta_before) + 1
        import lasagne.layers.helper
        import theano.tensor

        assert theano.tensor.matrix is pt.matrix
        assert lasagne.layers.helper is lasagne_bn.layers.helper
        lasagne_bn_compat.uninstall()
        lasagne_bn_compat.uninstall()
        assert not lasagne_bn_compat.is_installed()
        assert sys.meta_path == meta_before
        assert not [n for n in sys.modules if n.split(".")[0] in ("theano", "lasagne")]
        with pytest.raises(ImportError):
            import theano  # noqa: F401
        # the shims' targets were left alone
        assert lasagne_bn.layers.helper.__spec__.name == "lasagne_bn.layers.helper"

    def test_bad_flags_argument(self):
        with pytest.raises(TypeError, match="theano_flags=3 must be a str"):
            lasagne_bn_compat.install(theano_flags=3)
        assert not lasagne_bn_compat.is_installed()

    def test_refuses_when_the_real_theano_is_imported(self):
        fake = types.ModuleType("theano")
        sys.modules["theano"] = fake
        try:
            with pytest.raises(RuntimeError, match="real 'theano' package is already imported"):
                lasagne_bn_compat.install()
            assert not lasagne_bn_compat.is_installed()
        finally:
            del sys.modules["theano"]


@pytest.mark.usefixtures("legacy")
class TestNames:
    def test_theano_top_level(self):
        import theano

        x = theano.tensor.dvector("x")
        assert theano.function([x], 2 * x)([1.0]).tolist() == [2.0]
        assert theano.grad is pytensor.grad
        assert theano.config.floatX == pytensor.config.floatX
        assert theano.config.device == "cpu"
        assert theano.tensor is importlib.import_module("theano.tensor")
        assert theano.printing.pp is pytensor.printing.pp
        assert theano.OrderedUpdates().__class__.__name__ == "OrderedDict"
        assert theano.__version__.startswith("1.0.5")

    def test_tensor_and_nnet(self):
        import theano.tensor as T
        from theano.tensor.nnet import bn
        from theano.tensor.nnet.bn import batch_normalization_train

        assert T.matrix is pt.matrix and T.grad is pt.grad and T.mean is pt.mean
        assert bn.batch_normalization_train is lasagne_bn.ops.batch_normalization_train
        assert batch_normalization_train is lasagne_bn.ops.batch_normalization_train
        assert bn.batch_normalization_test is lasagne_bn.ops.batch_normalization_test
        assert T.nnet.bn is bn
        import theano.tensor.nnet.nnet as nnet_nnet

        assert nnet_nnet.softmax is T.nnet.softmax

    def test_lasagne(self):
        import lasagne
        from lasagne.layers import BatchNormLayer, DenseLayer, batch_norm, get_output
        from lasagne.layers.normalization import BatchNormLayer as BN2

        assert DenseLayer is lasagne_bn.layers.DenseLayer
        assert BatchNormLayer is BN2 is lasagne_bn.layers.BatchNormLayer
        assert batch_norm is lasagne_bn.layers.batch_norm
        assert get_output is lasagne_bn.layers.get_output
        assert lasagne.updates is lasagne_bn.updates
        assert lasagne.updates.adam is lasagne_bn.updates.adam
        for name in ("init", "nonlinearities", "objectives", "regularization", "random"):
            assert getattr(lasagne, name) is importlib.import_module(f"lasagne_bn.{name}")
        assert lasagne.utils.floatX is lasagne_bn.utils.floatX

    def test_aliases_keep_their_own_spec(self):
        import theano.scan_module

        assert theano.scan_module is sys.modules["pytensor.scan"]
        assert theano.scan_module.__spec__.name == "pytensor.scan"
        assert theano.scan_module.__name__ == "pytensor.scan"

    def test_gradient_extras(self):
        from theano.gradient import consider_constant, disconnected_grad

        x = pt.scalar()
        assert consider_constant(x).owner is not None
        assert disconnected_grad is pytensor.gradient.disconnected_grad


MISSING_IMPORTS = [
    ("import theano.sandbox.cuda", "mode='JAX'"),
    ("from theano.sandbox import cuda", "mode='JAX'"),
    ("import theano.sandbox.cuda.dnn", "mode='JAX'"),
    ("from theano.tensor.nnet import h_softmax", "two-level softmax"),
]


@pytest.mark.usefixtures("legacy")
class TestMissing:
    @pytest.mark.parametrize(("statement", "advice"), MISSING_IMPORTS)
    def test_import_says_what_to_use(self, statement, advice):
        with pytest.raises(ImportError, match="no counterpart") as info:
            exec(statement, {})
        assert advice in str(info.value)

    def test_attribute_access_is_an_attribute_error(self):
        import lasagne
        import theano

        with pytest.raises(AttributeError, match="mode='JAX'") as info:
            theano.sandbox.cuda  # noqa: B018
        assert isinstance(info.value, lasagne_bn_compat.LegacyNameError)
        assert not hasattr(lasagne.layers, "not_a_layer_module")
        # recurrent layers are lasagne_bn's now
        from lasagne.utils import unroll_scan

        import lasagne_bn

        assert lasagne.layers.GRULayer is lasagne_bn.layers.GRULayer
        assert lasagne.layers.recurrent.LSTMLayer is lasagne_bn.layers.LSTMLayer
        assert unroll_scan is lasagne_bn.utils.unroll_scan

    def test_gpuarray_reports_no_gpu_as_theano_did_on_a_cpu(self):
        import theano
        from theano import gpuarray
        from theano.gpuarray import dnn

        assert theano.gpuarray is gpuarray
        assert gpuarray.pygpu_activated is False
        assert dnn.dnn_available() is False and "mode='JAX'" in dnn.dnn_available.msg

    def test_unknown_names_point_to_the_guide(self):
        import theano

        with pytest.raises(AttributeError, match="migration_guide.md"):
            theano.tensor.nnet.no_such_function  # noqa: B018
        with pytest.raises(ModuleNotFoundError, match="No module named 'theano.no_such'"):
            import theano.no_such  # noqa: F401


@pytest.mark.usefixtures("legacy")
class TestConfig:
    def test_forwarding_and_sections(self):
        import theano

        with pytensor.config.change_flags(floatX="float64"):
            theano.config.floatX = "float32"
            assert pytensor.config.floatX == "float32"
        assert theano.config.gcc.cxxflags == pytensor.config.gcc__cxxflags
        assert theano.config.lib.cnmem == 0.0
        assert theano.config.dnn.enabled == "False"
        with pytest.raises(AttributeError, match="no option 'no_such_option'"):
            theano.config.no_such_option  # noqa: B018

    def test_setting_a_gpu_device_warns_and_stays_on_cpu(self):
        import theano

        with pytest.warns(UserWarning, match="mode='JAX'"):
            theano.config.device = "cuda0"
        assert theano.config.device == "cpu"

    def test_theano_flags(self):
        from lasagne_bn_compat.theano._config import apply_theano_flags

        with pytensor.config.change_flags(floatX="float64"):
            with pytest.warns(UserWarning, match="THEANO_FLAGS options ignored") as rec:
                ignored = apply_theano_flags("floatX=float32, device=cuda,lib.cnmem=0.5,bogus=1")
            assert pytensor.config.floatX == "float32"
        assert set(ignored) == {"device", "lib.cnmem", "bogus"}
        assert "mode='JAX'" in ignored["device"]
        assert "not an option of PyTensor 3" in ignored["bogus"]
        assert len(rec) == 1
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert apply_theano_flags("") == {}


@pytest.mark.usefixtures("legacy")
class TestTensorExtras:
    def test_shared_is_portable_and_takes_broadcastable(self):
        import theano

        v = theano.shared(np.zeros((1, 3)), name="v", broadcastable=(True, False))
        assert v.type.shape == (1, None)
        assert is_portable(v)
        s = theano.shared(np.float32(2))
        assert s.get_value() == 2 and is_portable(s)

    def test_broadcast_helpers_and_renames(self):
        import theano.tensor as T

        x = T.matrix()
        assert T.addbroadcast(x, 0).type.shape == (1, None)
        assert T.patternbroadcast(x, (False, True)).type.shape == (None, 1)
        assert T.unbroadcast(x, 0) is x
        assert T.flatten(T.tensor4(), outdim=2).ndim == 2
        assert T.inv(x).owner.op == pt.reciprocal(x).owner.op
        with pytest.raises(ValueError, match="broadcastable=\\(True,\\) has 1 entries"):
            T.patternbroadcast(x, (True,))

    def test_nnet_functions_match_numpy(self):
        import theano
        import theano.tensor as T

        x = T.tensor3("x")
        p = T.matrix("p")
        t = T.ivector("t")
        outs = [
            T.nnet.relu(x),
            T.nnet.relu(x, 0.1),
            T.nnet.elu(x),
            T.nnet.selu(x),
            T.nnet.softsign(x),
            T.nnet.hard_sigmoid(x),
            T.nnet.sigmoid(x),
            T.nnet.softmax(x),
            T.nnet.logsoftmax(x),
            T.nnet.categorical_crossentropy(T.nnet.softmax(p), t),
            T.nnet.categorical_crossentropy(T.nnet.softmax(p), T.nnet.softmax(p)),
            T.nnet.binary_crossentropy(T.nnet.sigmoid(p), 0.25),
            T.nnet.sigmoid_binary_crossentropy(p, 0.25),
        ]
        f = theano.function([x, p, t], outs, mode="FAST_COMPILE")
        r = np.random.RandomState(0)
        xv, pv, tv = r.randn(2, 3, 4), r.randn(5, 4), np.array([0, 3, 1, 2, 2], "int32")
        got = f(xv, pv, tv)
        sm = lambda a: np.exp(a) / np.exp(a).sum(-1, keepdims=True)  # noqa: E731
        sig = lambda a: 1 / (1 + np.exp(-a))  # noqa: E731
        expected = [
            np.maximum(xv, 0),
            np.where(xv > 0, xv, 0.1 * xv),
            np.where(xv > 0, xv, np.expm1(xv)),
            1.0507009873554805 * np.where(xv > 0, xv, 1.6732632423543772 * np.expm1(xv)),
            xv / (1 + abs(xv)),
            np.clip(0.2 * xv + 0.5, 0, 1),
            sig(xv),
            sm(xv),
            np.log(sm(xv)),
            -np.log(sm(pv)[np.arange(5), tv]),
            -(sm(pv) * np.log(sm(pv))).sum(-1),
            -(0.25 * np.log(sig(pv)) + 0.75 * np.log(1 - sig(pv))),
            -(0.25 * np.log(sig(pv)) + 0.75 * np.log(1 - sig(pv))),
        ]
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12, err_msg=f"output {i}")

    def test_nnet_errors(self):
        import theano.tensor as T

        with pytest.raises(TypeError, match="true_dist has ndim 3"):
            T.nnet.categorical_crossentropy(T.matrix(), T.tensor3())
        with pytest.raises(TypeError, match="class indices must be integers"):
            T.nnet.categorical_crossentropy(T.matrix(), T.vector())

    def test_random_streams(self):
        import theano
        from theano.sandbox.rng_mrg import MRG_RandomStreams
        from theano.tensor.shared_randomstreams import RandomStreams

        assert MRG_RandomStreams is RandomStreams
        srng = MRG_RandomStreams(seed=123)
        u = srng.uniform((200,))
        mask = srng.binomial((200,), p=0.25, dtype=theano.config.floatX)
        n = srng.normal((3, 2), avg=5.0, std=0.1)
        f = theano.function([], [u, mask, n], mode="FAST_COMPILE")
        (u1, m1, n1), (u2, _, _) = f(), f()
        assert u1.shape == (200,) and 0 <= u1.min() and u1.max() < 1
        assert not np.array_equal(u1, u2)  # the state advances
        assert m1.dtype == np.dtype(theano.config.floatX) and set(np.unique(m1)) <= {0, 1}
        assert 0.1 < m1.mean() < 0.4
        assert n1.shape == (3, 2) and abs(n1.mean() - 5) < 0.2
        again = MRG_RandomStreams(seed=123).uniform((200,))
        assert np.array_equal(theano.function([], again, mode="FAST_COMPILE")(), u1)

    def test_mrg_truncated_normal_stays_within_two_standard_deviations(self):
        # Keras 2's truncated_normal calls MRG_RandomStreams.normal(truncate=True).
        import theano
        from theano.sandbox.rng_mrg import MRG_RandomStreams

        srng = MRG_RandomStreams(seed=7)
        draws = srng.normal((100_000,), avg=1.0, std=3.0, truncate=True, dtype="float32")
        value = theano.function([], draws, mode="FAST_COMPILE")()
        assert value.dtype == np.float32
        assert -5.0 <= value.min() and value.max() <= 7.0
        assert value.min() < -4.9 and value.max() > 6.9  # the whole interval, not a clip
        # The normal truncated at two standard deviations: std 0.8796 sigma.
        assert abs(value.mean() - 1.0) < 0.05 and abs(value.std() - 3.0 * 0.8796) < 0.03
        plain = theano.function([], srng.normal((100_000,), std=3.0), mode="FAST_COMPILE")()
        assert np.abs(plain).max() > 6.0  # truncate=False is the whole normal


@pytest.mark.usefixtures("legacy")
def test_theano_variable_without_owner_and_isinstance():
    import lasagne
    import theano
    import theano.tensor as T

    v = theano.Variable("a type")  # Theano's owner was optional
    assert v.owner is None and isinstance(v, theano.Variable)
    assert isinstance(T.matrix(), theano.Variable) and isinstance(v, pytensor.graph.Variable)
    assert issubclass(pt.TensorVariable, theano.Variable)

    class Mine(theano.Variable):
        pass

    assert not isinstance(T.matrix(), Mine) and isinstance(Mine("t"), theano.Variable)
    layer = lasagne.layers.InputLayer((None, 3))
    assert lasagne.layers.get_output(layer, v) is v


@pytest.mark.usefixtures("legacy")
def test_embedding_and_local_layers_and_conv1d_extensions_import():
    import lasagne.layers.embedding
    import lasagne.layers.local
    from lasagne.theano_extensions.conv import conv1d_mc0, conv1d_sc

    assert lasagne.layers.EmbeddingLayer is lasagne_bn.layers.EmbeddingLayer
    local = lasagne.layers.local
    assert local.LocallyConnected2DLayer is lasagne_bn.layers.LocallyConnected2DLayer
    assert lasagne.layers.embedding.EmbeddingLayer is lasagne_bn.layers.EmbeddingLayer
    assert callable(conv1d_mc0) and callable(conv1d_sc)


@pytest.mark.usefixtures("legacy")
def test_legacy_theano_batch_norm_with_running_averages():
    """Raw Theano BN code: training updates on theano.shared, then the test op."""
    import theano
    import theano.tensor as T
    from theano.tensor.nnet import bn

    r = np.random.RandomState(1)
    x = T.tensor4("x")
    gamma = theano.shared(r.rand(3) + 0.5, name="gamma")
    beta = theano.shared(r.randn(3), name="beta")
    running_mean = theano.shared(np.zeros(3), name="rm")
    running_var = theano.shared(np.ones(3), name="rv")
    out, mean, invstd, new_rm, new_rv = bn.batch_normalization_train(
        x, gamma, beta, "spatial", 1e-4, 0.1, running_mean, running_var
    )
    train = theano.function(
        [x], out, updates=[(running_mean, new_rm), (running_var, new_rv)], mode="FAST_COMPILE"
    )
    test = theano.function(
        [x],
        bn.batch_normalization_test(x, gamma, beta, running_mean, running_var, "spatial", 1e-4),
        mode="FAST_COMPILE",
    )
    xv = r.randn(4, 3, 2, 2) * 2 + 1
    y = train(xv)
    m = xv.mean(axis=(0, 2, 3))
    v = xv.var(axis=(0, 2, 3))
    g, b = gamma.get_value()[None, :, None, None], beta.get_value()[None, :, None, None]
    expected = (xv - m[None, :, None, None]) / np.sqrt(v + 1e-4)[None, :, None, None] * g + b
    np.testing.assert_allclose(y, expected, rtol=1e-10)
    np.testing.assert_allclose(running_mean.get_value(), 0.1 * m)
    np.testing.assert_allclose(running_var.get_value(), 0.9 + 0.1 * v * 16 / 15)
    rm, rv = running_mean.get_value(), running_var.get_value()
    expected_test = (xv - rm[None, :, None, None]) / np.sqrt(rv + 1e-4)[None, :, None, None]
    np.testing.assert_allclose(test(xv), expected_test * g + b, rtol=1e-10)


def test_docstring_example():
    import doctest

    assert doctest.testmod(lasagne_bn_compat, optionflags=doctest.ELLIPSIS).failed == 0
    assert not lasagne_bn_compat.is_installed()
