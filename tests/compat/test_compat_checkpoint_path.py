"""lasagne_bn_compat.io.load_params: collect, validate, cast and assign once each, all or nothing.

A pickled network's values are read from the pickle itself (no second
network is built to read them), in Lasagne's ``get_all_params`` order, also
for recurrent layers (whose parameters include their sub-networks'), merge
layers and tied weights (tests/data/make_ckpt_pickles.py, Lasagne master).
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from legacy_helpers import DATA, QUIET

import lasagne_bn_compat._pickle
import lasagne_bn_compat.io as cio
from lasagne_bn.layers import (
    ConcatLayer,
    CustomRecurrentLayer,
    DenseLayer,
    FlattenLayer,
    InputLayer,
    batch_norm,
    bn_storage,
    get_all_param_values,
    get_all_params,
)

pytestmark = QUIET

CKPT = DATA / "ckpt_pickles"
NETWORK_PICKLES = [
    DATA / "compat_oracle" / "mlp_p2.pkl.gz",
    DATA / "network_pickles" / "cnn_p2.pkl.gz",
    DATA / "network_pickles" / "cnn_p4.pkl.gz",
]


def rnn_net(stat_storage="inv_std"):
    """The network of make_ckpt_pickles.py, built on lasagne_bn (float32 parameters)."""
    import pytensor

    with pytensor.config.change_flags(floatX="float32"):
        l_in = InputLayer((None, 5, 3), name="seq")
        in_to_hid = DenseLayer(InputLayer((None, 3)), 4, name="i2h")
        hid_to_hid = DenseLayer(InputLayer((None, 4)), 4, name="h2h")
        rnn = CustomRecurrentLayer(l_in, in_to_hid, hid_to_hid, only_return_final=True, name="rnn")
        side = DenseLayer(FlattenLayer(l_in), 4, name="side")
        tied = DenseLayer(side, 4, W=hid_to_hid.W, name="tied")
        h = ConcatLayer([rnn, tied], name="cat")
        h = batch_norm(DenseLayer(h, 6, name="fc"), stat_storage=stat_storage)
        return DenseLayer(h, 2, name="out")


@pytest.fixture(scope="module")
def rnn_expected():
    with np.load(CKPT / "rnn_expected.npz") as f:
        names = [str(n) for n in f["names"]]
        return names, [f[f"value_{i}"] for i in range(len(names))]


@pytest.fixture
def no_rebuild(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a network was rebuilt to read a pickled one")

    monkeypatch.setattr(lasagne_bn_compat._pickle.Rebuilder, "convert", refuse)


def test_recurrent_concat_tied_network_values_in_lasagnes_order(rnn_expected, no_rebuild):
    names, values = rnn_expected
    net = rnn_net()
    assert [p.name for p in get_all_params(net)] == names  # the same architecture
    checkpoint = cio.load_params(net, CKPT / "rnn_p2.pkl.gz")
    assert checkpoint.format == "network" and checkpoint.network is None
    assert checkpoint.names == names
    for got, want in zip(get_all_param_values(net), values, strict=True):
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_statistics_of_a_pickled_network_convert_into_var_layers(rnn_expected, no_rebuild):
    names, values = rnn_expected
    net = rnn_net("var")
    cio.load_params(net, CKPT / "rnn_p2.pkl.gz")
    i = names.index("fc_bn.inv_std")
    got = get_all_param_values(net)[i]
    np.testing.assert_allclose(got, 1 / values[i].astype(np.float64) ** 2 - 1e-4, rtol=1e-6)


@pytest.mark.parametrize("path", NETWORK_PICKLES, ids=lambda p: p.name)
def test_reading_without_rebuilding_agrees_with_the_rebuilt_network(path):
    rebuilt = cio.read_checkpoint(path)
    params = get_all_params(cio._find_layers(rebuilt.network))
    # load into the rebuilt network itself: its values come back unchanged
    before = [p.get_value() for p in params]
    checkpoint = cio.load_params(rebuilt.network, path)
    assert checkpoint.network is None and checkpoint.names == rebuilt.names
    for a, b in zip(checkpoint.values, rebuilt.values, strict=True):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    for b, p in zip(before, params, strict=True):
        np.testing.assert_array_equal(p.get_value(), b)


def test_an_unusual_pickle_is_still_rebuilt_to_read_it(monkeypatch):
    """Where only a rebuild tells the parameters (here: none can be read directly)."""
    monkeypatch.setattr(cio, "pickled_param_values", lambda layers: None)
    path = NETWORK_PICKLES[0]
    rebuilt = cio.read_checkpoint(path)
    checkpoint = cio.load_params(rebuilt.network, path)
    assert checkpoint.network is not None and checkpoint.names == rebuilt.names


def test_parameters_are_collected_once(monkeypatch):
    net = rnn_net()
    values = get_all_param_values(net)
    calls = {"get_all_layers": 0, "get_all_params": 0}
    for name in calls:
        real = getattr(bn_storage, name)

        def counted(*args, _real=real, _name=name, **kwargs):
            calls[_name] += 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(bn_storage, name, counted)
    buf = io.BytesIO()
    np.savez(buf, *values)
    cio.load_params(net, io.BytesIO(buf.getvalue()))
    assert calls == {"get_all_layers": 1, "get_all_params": 1}


def npz(values) -> io.BytesIO:
    buf = io.BytesIO()
    np.savez(buf, *values)
    return io.BytesIO(buf.getvalue())


def test_a_bad_last_statistic_changes_no_parameter(rnn_expected):
    names, values = rnn_expected
    net = rnn_net()
    before = get_all_param_values(net)
    bad = [v.copy() for v in values]
    bad[names.index("fc_bn.inv_std")][-1] = -1.0
    with pytest.raises(ValueError, match=r"value 12 \(fc_bn.inv_std\).*no parameter was changed"):
        cio.load_params(net, npz(bad))
    for a, b in zip(get_all_param_values(net), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_lossy_last_value_changes_no_parameter(rnn_expected):
    _, values = rnn_expected
    net = rnn_net()
    before = get_all_param_values(net)
    lossy = [v.copy() for v in values]
    lossy[-1] = lossy[-1].astype(np.float64)
    with pytest.raises(TypeError, match="value 14 has dtype float64"):
        cio.load_params(net, npz(lossy))
    for a, b in zip(get_all_param_values(net), before, strict=True):
        np.testing.assert_array_equal(a, b)
    cio.load_params(net, npz(lossy), allow_downcast=True)
    assert get_all_param_values(net)[-1].dtype == np.float32


def test_an_interrupted_assignment_restores_what_it_set(rnn_expected, monkeypatch):
    _, values = rnn_expected
    net = rnn_net()
    params = get_all_params(net)
    before = get_all_param_values(net)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(params[-1], "set_value", interrupted)
    with pytest.raises(KeyboardInterrupt):
        cio.load_params(net, npz(values))
    for p, b in zip(params[:-1], before, strict=False):
        np.testing.assert_array_equal(p.get_value(), b)


def test_a_pickled_recurrent_network_rebuilds(rnn_expected):
    """Lasagne's recurrent layers are merge layers constructed from one ``incoming``."""
    import pytensor

    from lasagne_bn.layers import get_all_layers, get_output
    from lasagne_bn.nonlinearities import softmax

    names, values = rnn_expected
    rebuilt = cio.read_checkpoint(CKPT / "rnn_p2.pkl.gz")
    assert rebuilt.names == names
    for got, want in zip(get_all_param_values(rebuilt.network), values, strict=True):
        np.testing.assert_array_equal(got, want)
    layers = {layer.name: layer for layer in get_all_layers(rebuilt.network)}
    assert isinstance(layers["rnn"], CustomRecurrentLayer)
    assert layers["tied"].W is layers["rnn"].hidden_to_hidden.W  # still tied
    reference = rnn_net()
    reference.nonlinearity = softmax
    cio.load_params(reference, CKPT / "rnn_p2.pkl.gz")
    x = np.random.RandomState(3).randn(4, 5, 3).astype("float32")
    outs = []
    for net in (rebuilt.network, reference):
        l_in = next(layer for layer in get_all_layers(net) if layer.name == "seq")
        out = get_output(net, deterministic=True)
        outs.append(pytensor.function([l_in.input_var], out)(x))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-6)
