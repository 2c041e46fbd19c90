"""lasagne_bn_compat.io: every legacy checkpoint format loads; bad files change nothing."""

from __future__ import annotations

import gzip
import io
import os
import pickle
import pickletools
import subprocess
import warnings

import numpy as np
import pytensor
import pytest
from legacy_helpers import DATA, QUIET, legacy_network_pickle, py2_pickle

import lasagne_bn_compat.io as cio
from lasagne_bn import nonlinearities
from lasagne_bn.layers import (
    DenseLayer,
    DropoutLayer,
    InputLayer,
    batch_norm,
    get_all_layers,
    get_all_params,
    get_output,
)
from lasagne_bn_compat.io import LegacyFormatError, UnsafePickleError

pytestmark = QUIET

ORACLE = DATA / "compat_oracle"


def build_mlp(stat_storage="inv_std", dtype="float64"):
    """The oracle's MLP (tests/data/make_compat_oracle.py), built on lasagne_bn."""
    with pytensor.config.change_flags(floatX=dtype):
        l_in = InputLayer((None, 6), name="in")
        h = batch_norm(DenseLayer(l_in, 5, name="fc"), stat_storage=stat_storage)
        h = DropoutLayer(h, p=0.5, name="drop")
        out = DenseLayer(h, 3, nonlinearity=nonlinearities.softmax, name="out")
    return l_in, out


class Net:
    """A network, its compiled deterministic output, and a snapshot helper."""

    def __init__(self, stat_storage="inv_std", dtype="float64"):
        self.l_in, self.out = build_mlp(stat_storage, dtype)
        self.params = get_all_params(self.out)
        self.predict = pytensor.function(
            [self.l_in.input_var], get_output(self.out, deterministic=True), mode="FAST_COMPILE"
        )

    def snapshot(self):
        return [p.get_value().copy() for p in self.params]

    def unchanged_since(self, snapshot) -> bool:
        now = [p.get_value() for p in self.params]
        pairs = zip(now, snapshot, strict=True)
        return all(a.dtype == b.dtype and a.tobytes() == b.tobytes() for a, b in pairs)


@pytest.fixture(scope="module")
def net():
    return Net()


@pytest.fixture(scope="module")
def var_net():
    return Net(stat_storage="var")


@pytest.fixture(scope="module")
def f32_net():
    return Net(dtype="float32")


@pytest.fixture(scope="module")
def expected():
    with np.load(ORACLE / "expected.npz") as f:
        return dict(f)


@pytest.fixture(scope="module")
def oracle_values():
    with np.load(ORACLE / "mlp_params.npz") as f:
        return [f[f"arr_{i}"] for i in range(len(f.files))]


def mlp_values(seed=0, dtype="float32"):
    r = np.random.RandomState(seed)
    shapes = [(6, 5), (5,), (5,), (5,), (5,), (5, 3), (3,)]
    values = [r.randn(*s).astype(dtype) for s in shapes]
    values[2] = np.abs(values[2]) + 0.5  # gamma
    values[4] = np.abs(values[4]) + 0.5  # inv_std
    return values


# --------------------------------------------------------------------------
# files written by the real Theano 1.0.5 + Lasagne master


ORACLE_FILES = ["mlp_params.npz", "mlp_params_p2.pkl", "mlp_modelzoo.pkl", "mlp_p2.pkl.gz"]


class TestOracleFiles:
    @pytest.mark.parametrize("name", ORACLE_FILES)
    def test_load_params_reproduces_lasagne(self, net, expected, name):
        checkpoint = cio.load_params(net.out, ORACLE / name)
        assert (
            checkpoint.format
            == {
                "mlp_params.npz": "npz",
                "mlp_params_p2.pkl": "pickle",
                "mlp_modelzoo.pkl": "model-zoo",
                "mlp_p2.pkl.gz": "network",
            }[name]
        )
        np.testing.assert_allclose(net.predict(expected["mlp_x"]), expected["mlp_out"], rtol=2e-6)

    def test_model_zoo_extras(self):
        checkpoint = cio.read_checkpoint(ORACLE / "mlp_modelzoo.pkl")
        assert checkpoint.extras["synset words"] == ["cat", "dog", "bird"]
        np.testing.assert_array_equal(checkpoint.extras["mean value"], [0.5, 0.25])

    def test_into_a_var_network_and_back(self, var_net, expected, oracle_values, tmp_path):
        cio.load_params(var_net.out, ORACLE / "mlp_params.npz")
        bn = get_all_layers(var_net.out)[2]
        assert bn.stat_storage == "var"
        np.testing.assert_allclose(
            bn.var.get_value(), 1 / oracle_values[4].astype(float) ** 2 - 1e-4, rtol=1e-6
        )
        np.testing.assert_allclose(
            var_net.predict(expected["mlp_x"]), expected["mlp_out"], rtol=2e-6
        )
        cio.save_params(var_net.out, tmp_path / "back.npz")  # inv_std, as Lasagne wrote it
        back = cio.read_checkpoint(tmp_path / "back.npz").values
        for a, b in zip(back, oracle_values, strict=True):
            np.testing.assert_allclose(a, b, rtol=1e-6)
        cio.save_params(var_net.out, tmp_path / "var.npz", stat_storage="var")
        cio.load_params(var_net.out, tmp_path / "var.npz", stat_storage="var")
        np.testing.assert_allclose(
            var_net.predict(expected["mlp_x"]), expected["mlp_out"], rtol=2e-6
        )

    def test_load_network_rebuilds_the_pickled_net(self, expected):
        network = cio.load_network(ORACLE / "mlp_p2.pkl.gz")
        layers = get_all_layers(network)
        assert [type(layer).__name__ for layer in layers] == [
            "InputLayer",
            "DenseLayer",
            "BatchNormLayer",
            "NonlinearityLayer",
            "DropoutLayer",
            "DenseLayer",
        ]
        assert [p.name for p in get_all_params(network)] == list(expected["mlp_param_names"])
        tags = [",".join(sorted(lyr.params[p])) for lyr in layers for p in lyr.params]
        assert tags == list(expected["mlp_param_tags"])
        assert layers[1].nonlinearity is nonlinearities.identity
        assert layers[3].nonlinearity is nonlinearities.rectify
        assert layers[-1].nonlinearity is nonlinearities.softmax
        assert layers[0].input_var.dtype == "float32"
        f = pytensor.function(
            [layers[0].input_var], get_output(network, deterministic=True), mode="FAST_COMPILE"
        )
        np.testing.assert_allclose(f(expected["mlp_x"]), expected["mlp_out"], rtol=1e-6)

    def test_inspect_marks_the_batch_norm_arrays(self):
        for name in ("mlp_params.npz", "mlp_p2.pkl.gz"):
            _, infos = cio.inspect_checkpoint(ORACLE / name)
            roles = [i.role for i in infos]
            assert roles[1:5] == (
                ["bn beta", "bn gamma", "bn mean", "bn inv_std or var"]
                if name.endswith(".npz")
                else ["bn beta", "bn gamma", "bn mean", "bn inv_std"]
            )
            assert roles[0] is roles[5] is roles[6] is None
            assert infos[0].shape == (6, 5) and infos[0].dtype == "float32"


# --------------------------------------------------------------------------
# every format, made by the test with the format's exact structure


def npz_bytes(values):
    buf = io.BytesIO()
    np.savez(buf, *values)
    return buf.getvalue()


def object_npy_bytes(values):
    buf = io.BytesIO()
    holder = np.empty(len(values), dtype=object)
    holder[:] = values
    np.save(buf, holder, allow_pickle=True)
    return buf.getvalue()


FORMATS = {
    "npz": lambda v: npz_bytes(v),
    "pickle-p2": lambda v: pickle.dumps(v, protocol=2),
    "pickle-p4": lambda v: pickle.dumps(v, protocol=4),
    "pickle-p5": lambda v: pickle.dumps(v, protocol=5),
    "python2-list": lambda v: py2_pickle(list(v)),
    "python2-model-zoo": lambda v: py2_pickle(
        {
            "param values": list(v),
            "mean value": np.array([103.9, 116.8, 123.7]),
            "synset words": ["n01440764 tench", "n01443537 goldfish"],
        }
    ),  # fmt: skip
    "model-zoo-p2": lambda v: pickle.dumps({"param values": v, "mean value": 0.5}, protocol=2),
    "object-npy": object_npy_bytes,
    "gzip-pickle": lambda v: gzip.compress(pickle.dumps(v, protocol=2)),
    "network-cpu": lambda v: legacy_network_pickle(v),
    "network-cuda": lambda v: legacy_network_pickle(v, gpu="cuda"),
    "network-gpuarray": lambda v: legacy_network_pickle(v, gpu="gpuarray"),
    "network-p0": lambda v: legacy_network_pickle(v, protocol=0),
}


@pytest.mark.parametrize("kind", list(FORMATS))
def test_reads_every_format(kind, tmp_path):
    values = mlp_values(1)
    if kind.startswith("network"):
        values = [
            values[0][:4, :3],
            *(v[:3] for v in values[1:5]),
            values[5][:3, :2],
            values[6][:2],
        ]
    path = tmp_path / "checkpoint"
    path.write_bytes(FORMATS[kind](values))
    checkpoint = cio.read_checkpoint(path)
    assert len(checkpoint.values) == len(values)
    for a, b in zip(checkpoint.values, values, strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    if kind == "python2-model-zoo":
        assert checkpoint.format == "model-zoo"
        assert checkpoint.extras["synset words"][1] == "n01443537 goldfish"
    if kind.startswith("network"):
        network = checkpoint.network
        assert [layer.name for layer in get_all_layers(network)] == [
            "in", "fc", "fc_bn", "fc_bn_nonlin", "out"
        ]  # fmt: skip
        assert network.nonlinearity is nonlinearities.softmax


def test_load_params_from_python2_pickle_and_object_npy(net, tmp_path):
    values = mlp_values(2)
    for name, data in (("py2.pkl", py2_pickle(values)), ("obj.npy", object_npy_bytes(values))):
        (tmp_path / name).write_bytes(data)
        cio.load_params(net.out, tmp_path / name)
        for p, v in zip(net.params, values, strict=True):
            assert p.get_value().dtype == np.float64
            np.testing.assert_array_equal(p.get_value(), v)


def test_named_npz_loads_by_name(net, tmp_path):
    values = mlp_values(3)
    named = {p.name: v for p, v in zip(net.params, values, strict=True)}
    path = tmp_path / "named.npz"
    np.savez(path, **dict(reversed(list(named.items()))))
    cio.load_params(net.out, path)
    for p, v in zip(net.params, values, strict=True):
        np.testing.assert_array_equal(p.get_value(), v)


# --------------------------------------------------------------------------
# writing


@pytest.mark.parametrize("fmt", cio.WRITE_FORMATS)
def test_save_params_round_trip(fmt, net, tmp_path):
    values = mlp_values(4)
    cio.load_params(net.out, io.BytesIO(npz_bytes(values)))
    path = tmp_path / "saved.bin"
    extras = {"mean value": np.float32(0.5), "synset words": ["a", "b"]}
    cio.save_params(net.out, path, fmt, extras=extras if fmt == "model-zoo" else None)
    assert path.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp")]
    checkpoint = cio.read_checkpoint(path)
    assert checkpoint.format == fmt
    for a, b in zip(checkpoint.values, values, strict=True):
        np.testing.assert_array_equal(a, b)
    if fmt == "npz":
        with np.load(path) as f:  # the Lasagne idiom
            assert [f[f"arr_{i}"].shape for i in range(len(f.files))] == [v.shape for v in values]
        return
    raw = path.read_bytes()
    loaded = pickle.loads(raw)  # a plain pickle.load, no encoding argument
    got = loaded if fmt == "pickle" else loaded["param values"]
    for a, b in zip(got, values, strict=True):
        np.testing.assert_array_equal(a, b)
    if fmt == "model-zoo":
        assert loaded["synset words"] == ["a", "b"] and loaded["mean value"] == 0.5
    ops = list(pickletools.genops(raw))
    assert max(op.proto for op, _, _ in ops) <= 2
    globals_ = {arg for op, arg, _ in ops if op.name == "GLOBAL"}
    assert globals_ <= {
        "numpy.core.multiarray _reconstruct",
        "numpy.core.multiarray scalar",
        "numpy ndarray",
        "numpy dtype",
        "_codecs encode",
    }


@pytest.mark.slow
def test_written_pickles_load_in_the_legacy_environment(net, tmp_path):
    """If the oracle's Python (numpy 1.23) is here, it loads our pickles with plain pickle."""
    legacy_python = os.environ.get("LEGACY_PYTHON", "/tmp/legacy/venv/bin/python")
    if not os.path.exists(legacy_python):
        pytest.skip("the legacy environment (LEGACY_ORACLE.md) is not set up here")
    cio.save_params(net.out, tmp_path / "m.pkl", "model-zoo", extras={"words": ["x"]})
    code = (
        "import pickle,sys,numpy; d=pickle.load(open(sys.argv[1],'rb')); "
        "print(numpy.__version__, [v.shape for v in d['param values']], d['words'])"
    )
    out = subprocess.run(
        [legacy_python, "-c", code, str(tmp_path / "m.pkl")], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "[(6, 5), (5,), (5,), (5,), (5,), (5, 3), (3,)] ['x']" in out.stdout


# --------------------------------------------------------------------------
# refusals: nothing changes


class Evil:
    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def evil_pickles(marker):
    import builtins
    import subprocess as sp

    return {
        "os.system": pickle.dumps([np.zeros(2), Evil(os.system, f"touch {marker}")], protocol=2),
        "builtins.eval": pickle.dumps(Evil(builtins.eval, f"open({str(marker)!r}, 'w')")),
        "subprocess.Popen": pickle.dumps(
            {"param values": [Evil(sp.Popen, ["touch", str(marker)])]}, protocol=2
        ),
        "builtins.getattr": pickle.dumps(Evil(getattr, np.ndarray, "tofile")),
        "numpy.load": pickle.dumps(Evil(np.load, str(marker))),
    }


BAD_FILES = {
    "empty": lambda v: b"",
    "truncated npz": lambda v: npz_bytes(v)[: len(npz_bytes(v)) // 2],
    "npz with a corrupt member": lambda v: npz_bytes(v).replace(
        np.ascontiguousarray(v[0]).tobytes()[:16], b"\0" * 16
    ),
    "truncated pickle": lambda v: pickle.dumps(v, protocol=2)[:-40],
    "truncated python-2 pickle": lambda v: py2_pickle(v)[:300],
    "truncated gzip": lambda v: gzip.compress(pickle.dumps(v))[:-10],
    "not a checkpoint": lambda v: b"hello, world\n",
    "pickle of a string": lambda v: pickle.dumps("weights"),
    "dict without values": lambda v: pickle.dumps({"weights": 3}),
    "list with a string": lambda v: pickle.dumps([*v[:-1], "x"]),
    "npz with a gap": lambda v: (lambda b: (np.savez(b, arr_0=v[0], arr_2=v[1]), b)[1])(
        io.BytesIO()
    ).getvalue(),
}


class TestRefusals:
    @pytest.mark.parametrize("kind", list(BAD_FILES))
    def test_bad_files(self, kind, net, tmp_path):
        path = tmp_path / "bad"
        path.write_bytes(BAD_FILES[kind](mlp_values(5)))
        before = net.snapshot()
        with pytest.raises(LegacyFormatError) as info:
            cio.load_params(net.out, path)
        assert str(path) in str(info.value)
        assert net.unchanged_since(before)

    @pytest.mark.parametrize("name", ["os.system", "builtins.eval", "subprocess.Popen",
                                      "builtins.getattr", "numpy.load"])  # fmt: skip
    def test_disallowed_callables_are_refused(self, name, net, tmp_path):
        marker = tmp_path / "marker"
        data = evil_pickles(marker)[name]
        path = tmp_path / "evil.pkl"
        path.write_bytes(data)
        before = net.snapshot()
        expected_global = {"os.system": "posix.system"}.get(name, name)
        for call in (
            lambda: cio.load_params(net.out, path),
            lambda: cio.read_checkpoint(path),
            lambda: cio.load_network(path),
            lambda: cio.inspect_checkpoint(path),
        ):
            with pytest.raises(UnsafePickleError, match=f"refers to {expected_global}") as info:
                call()
            assert "nothing was executed" in str(info.value)
            assert isinstance(info.value, ValueError)
        assert not marker.exists()
        assert net.unchanged_since(before)

    def test_unsafe_pickle_inside_npz_and_gzip(self, tmp_path):
        marker = tmp_path / "marker"
        evil = evil_pickles(marker)["os.system"]
        (tmp_path / "evil.gz").write_bytes(gzip.compress(evil))
        with pytest.raises(UnsafePickleError, match="posix.system"):
            cio.read_checkpoint(tmp_path / "evil.gz")
        holder = np.empty(1, dtype=object)
        holder[0] = Evil(os.system, f"touch {marker}")
        with open(tmp_path / "evil.npz", "wb") as f:
            np.savez(f, holder)  # allow_pickle on save: the member is a pickle
        with pytest.raises(UnsafePickleError, match="posix.system"):
            cio.read_checkpoint(tmp_path / "evil.npz")
        assert not marker.exists()

    def test_codecs_and_reconstructor_are_restricted(self):
        from lasagne_bn_compat._pickle import safe_loads

        rot13 = b"\x80\x02c_codecs\nencode\nX\x01\x00\x00\x00aX\x05\x00\x00\x00rot13\x86R."
        with pytest.raises(UnsafePickleError, match="encoding 'rot13'"):
            safe_loads(rot13)
        recon = (
            b"\x80\x02ccopy_reg\n_reconstructor\nccollections\nOrderedDict\n"
            b"c__builtin__\nobject\nN\x87R."
        )
        with pytest.raises(UnsafePickleError, match="_reconstructor was asked"):
            safe_loads(recon)
        with pytest.raises(UnsafePickleError, match="persistent id"):
            safe_loads(b"\x80\x02X\x01\x00\x00\x00aQ.")

    def test_wrong_count(self, net, tmp_path):
        path = tmp_path / "short.npz"
        path.write_bytes(npz_bytes(mlp_values(6)[:-1]))
        before = net.snapshot()
        with pytest.raises(ValueError, match="holds 6 arrays but the network has 7 param"):
            cio.load_params(net.out, path)
        assert net.unchanged_since(before)

    def test_wrong_shape(self, net, tmp_path):
        values = mlp_values(7)
        values[5] = values[5].T.copy()
        path = tmp_path / "shape.pkl"
        path.write_bytes(pickle.dumps(values, protocol=2))
        before = net.snapshot()
        with pytest.raises(ValueError, match=r"value 5 has shape \(3, 5\) but parameter 5 "
                                             r"\(out.W\) has shape \(5, 3\)"):  # fmt: skip
            cio.load_params(net.out, path)
        assert net.unchanged_since(before)

    def test_wrong_dtype(self, net, f32_net, tmp_path):
        values = mlp_values(8, dtype="float64")
        path = tmp_path / "f64.npz"
        path.write_bytes(npz_bytes(values))
        before = f32_net.snapshot()
        with pytest.raises(TypeError, match="value 0 has dtype float64.*allow_downcast=True"):
            cio.load_params(f32_net.out, path)
        assert f32_net.unchanged_since(before)
        cio.load_params(f32_net.out, path, allow_downcast=True)
        assert f32_net.params[0].get_value().dtype == np.float32
        values[3] = values[3].astype(complex)
        path.write_bytes(npz_bytes(values))
        before = net.snapshot()
        with pytest.raises(TypeError, match="value 3 has dtype complex128"):
            cio.load_params(net.out, path)
        assert net.unchanged_since(before)

    def test_a_downcast_that_overflows_is_never_silent(self, f32_net, tmp_path):
        values = mlp_values(8, dtype="float64")
        values[5][1, 2] = 1e300  # out.W: beyond float32, becomes inf when cast
        path = tmp_path / "huge.npz"
        path.write_bytes(npz_bytes(values))
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            cio.load_params(f32_net.out, path, allow_downcast=True)
        ours = [w for w in seen if issubclass(w.category, cio.NonFiniteWarning)]
        assert len(ours) == 1, [str(w.message) for w in seen]
        message = str(ours[0].message)
        assert str(path) in message and "value 5 (out.W)" in message and "1 value" in message
        assert "inf" in message and "\n" not in message
        # numpy's own "overflow encountered in cast" is not shown beside it
        assert not [w for w in seen if "overflow encountered" in str(w.message)]
        assert np.isinf(f32_net.params[5].get_value()[1, 2])

    def test_bad_statistics_into_a_var_network(self, var_net, tmp_path):
        values = mlp_values(9)
        values[4][2] = -1.0
        path = tmp_path / "neg.npz"
        path.write_bytes(npz_bytes(values))
        before = var_net.snapshot()
        with pytest.raises(
            ValueError, match=r"value 4 \(fc_bn.var\): inv_std holds 1 value.*e.g. -1.0"
        ):
            cio.load_params(var_net.out, path)
        assert var_net.unchanged_since(before)

    def test_network_with_a_layer_lasagne_bn_lacks(self):
        with pytest.raises(cio.LegacyNetworkError, match="lasagne.layers.recurrent.LSTMLayer"):
            from lasagne_bn_compat._pickle import Rebuilder, stand_in

            Rebuilder().convert(stand_in("lasagne.layers.recurrent.LSTMLayer")())
        with pytest.raises(LegacyFormatError, match="holds parameter values"):
            cio.load_network(ORACLE / "mlp_params.npz")


class TestArguments:
    def test_bad_arguments(self, net, tmp_path):
        with pytest.raises(ValueError, match="stat_storage='std' is not known"):
            cio.load_params(net.out, ORACLE / "mlp_params.npz", stat_storage="std")
        with pytest.raises(TypeError, match="source=123 \\(int\\) must be a path"):
            cio.read_checkpoint(123)
        with pytest.raises(ValueError, match="format='hdf5' is not a format"):
            cio.save_params(net.out, tmp_path / "x", "hdf5")
        with pytest.raises(ValueError, match="extras are only written with format='model-zoo'"):
            cio.save_params(net.out, tmp_path / "x", "npz", extras={"a": 1})
        with pytest.raises(TypeError, match="cannot write a set"):
            cio.save_params(net.out, tmp_path / "x", "model-zoo", extras={"a": {1}})
        with pytest.raises(LegacyFormatError, match="is a directory"):
            cio.read_checkpoint(tmp_path)
        with pytest.raises(TypeError, match="network=3 \\(int\\) must be a lasagne_bn layer"):
            cio.load_params(3, ORACLE / "mlp_params.npz")
        with pytest.raises(TypeError, match="network=\\[\\] \\(list\\) must be"):
            cio.save_params([], tmp_path / "x")
        with pytest.raises(TypeError, match="classes=\\['a'\\] must be a mapping"):
            cio.read_checkpoint(ORACLE / "mlp_params.npz", classes=["a"])
        assert not (tmp_path / "x").exists()


def test_guess_bn_roles_heuristic():
    r = np.random.RandomState(0)
    W, v = r.randn(4, 3), r.rand(3) + 0.1
    # gamma only (beta=None): a run of three
    assert cio.guess_bn_roles([W, v, r.randn(3), v]) == [
        None, "bn beta or gamma", "bn mean", "bn inv_std or var"
    ]  # fmt: skip
    # two consecutive BN layers of one width, then a bias
    roles = cio.guess_bn_roles([W, *[v] * 8, r.randn(3, 2), r.randn(2)])
    assert roles[1:9] == ["bn beta", "bn gamma", "bn mean", "bn inv_std or var"] * 2
    assert roles[9:] == [None, None]
    # a negative "statistic" is no statistic; a bias and a scale are no BN layer
    assert cio.guess_bn_roles([W, v, v, v, -v]) == [None] * 5
    assert cio.guess_bn_roles([W, v, v]) == [None] * 3
    named = cio.guess_bn_roles([W, v, v], ["a.W", "bn.mean", "bn.var"])
    assert named == [None, "bn mean", "bn var"]


def test_rebuilder_maps_theano_functions_and_merge_layers():
    """Stand-ins as the unpickler makes them: T.mul as a merge function, a leaky rectifier."""
    from lasagne_bn_compat._pickle import Rebuilder, stand_in

    def obj(path, **state):
        o = stand_in(path)()
        o.__setstate__(state)
        return o

    l_in = obj("lasagne.layers.input.InputLayer", shape=(None, 3), input_var=None, name="in")
    mul = obj("theano.tensor.elemwise.Elemwise", scalar_op=obj("theano.scalar.basic.Mul"))
    leaky = obj("lasagne.nonlinearities.LeakyRectify", leakiness=0.2)
    act = obj(
        "lasagne.layers.special.NonlinearityLayer",
        input_layer=l_in, input_shape=(None, 3), nonlinearity=leaky, name="act",
    )  # fmt: skip
    merged = obj(
        "lasagne.layers.merge.ElemwiseMergeLayer",
        input_layers=[l_in, act], input_shapes=[(None, 3), (None, 3)], merge_function=mul,
        cropping=None, name="prod",
    )  # fmt: skip
    relu = obj(
        "lasagne.layers.special.NonlinearityLayer",
        input_layer=merged, input_shape=(None, 3), name="relu",
        nonlinearity=stand_in("theano.tensor.nnet.nnet.relu"),
    )  # fmt: skip
    net = Rebuilder().convert(relu)
    layers = get_all_layers(net)
    assert [layer.name for layer in layers] == ["in", "act", "prod", "relu"]
    assert layers[1].nonlinearity.leakiness == 0.2
    assert layers[2].input_layers == [layers[0], layers[1]]
    x = np.array([[-2.0, 1.0, 3.0]])
    f = pytensor.function([layers[0].input_var], get_output(net), mode="FAST_COMPILE")
    np.testing.assert_allclose(f(x), np.maximum(x * np.where(x > 0, x, 0.2 * x), 0))
    with pytest.raises(cio.LegacyNetworkError, match="cannot rebuild argument 'nonlinearity'"):
        Rebuilder().convert(
            obj(
                "lasagne.layers.special.NonlinearityLayer",
                input_layer=None,
                input_shape=(None, 3),
                name="x",
                nonlinearity=stand_in("theano.tensor.basic.some_unknown_function"),
            )  # fmt: skip
        )


def test_lasagne_pickle_with_local_and_embedding_layers():
    """Pickled by Lasagne master (tests/data/make_misc_oracle.py): rebuilt, same outputs."""
    from lasagne_bn.layers import EmbeddingLayer, LocallyConnected2DLayer, get_all_layers

    loaded = cio.load_network(DATA / "misc_oracle_net.pkl")
    expected = np.load(DATA / "misc_oracle.npz")
    net, emb = loaded["net"], loaded["emb"]
    lc, lc2 = get_all_layers(net)[1:3]
    assert type(lc) is LocallyConnected2DLayer and type(emb) is EmbeddingLayer
    assert lc.untie_biases and lc2.channelwise and not lc2.flip_filters
    x, ids = pytensor.tensor.tensor4(), pytensor.tensor.imatrix()
    f = pytensor.function(
        [x, ids], [get_output(net, x), get_output(emb, ids)], mode="FAST_COMPILE"
    )
    out, eout = f(expected["pickle/x"], expected["pickle/ids"])
    np.testing.assert_allclose(out, expected["pickle/out"], rtol=1e-10, atol=1e-12)
    np.testing.assert_array_equal(eout, expected["pickle/eout"])


def _with_dtype_flags(array: np.ndarray, flags: int, copy: bool = True) -> bytes:
    """A protocol-2 pickle of a float32 ``array`` whose dtype's state sets ``flags``."""
    data = pickle.dumps(array, protocol=2)
    # the state's end: elsize -1, alignment -1, flags 0, then TUPLE
    end = b"J\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00t"
    assert data.count(end) == 1 and data.count(b"\x89\x88") == 1
    data = data.replace(end, end[:-3] + bytes([ord("K"), flags]) + b"t")
    if not copy:  # (str, False, False) asks NumPy for its own shared float32
        data = data.replace(b"\x89\x88", b"\x89\x89")
    return data


@pytest.mark.parametrize("copy", [True, False])
def test_a_dtype_state_numpy_never_makes_is_refused_and_freed_cleanly(copy, capfd):
    """A float32 dtype flagged as holding objects (found by the fuzz campaign)."""
    from lasagne_bn_compat._pickle import safe_loads

    array = np.arange(6, dtype=np.float32)
    crafted = _with_dtype_flags(array, 1, copy)  # 1: NPY_ITEM_HASOBJECT
    with pytest.raises(UnsafePickleError, match=r"dtype \(float32\).*never gives it"):
        safe_loads(crafted)
    import gc

    gc.collect()
    # NumPy's shared float32 is untouched, and freeing printed nothing
    assert np.dtype(np.float32).flags == 0 and not np.dtype(np.float32).hasobject
    assert "get_clear_loop" not in capfd.readouterr().err


@pytest.mark.parametrize(
    "array",
    [
        np.arange(6, dtype=np.float32).reshape(2, 3),
        np.zeros(3, dtype=[("x", "f4"), ("y", "i8")]),
        np.zeros(2, dtype=np.dtype([("a", "f4"), ("b", "f8")], align=True)),
        np.zeros(2, dtype=("f4", (2,))),
        np.array(["ab", "c"]),
    ],
    ids=["float32", "structured", "aligned", "subarray", "unicode"],
)
def test_dtypes_numpy_pickled_load_as_they_were(array):
    from lasagne_bn_compat._pickle import safe_loads

    for protocol in (0, 2, 4):
        data = pickle.dumps(array, protocol=protocol)
        back = safe_loads(data)
        # flags as NumPy's own unpickling sets them (NumPy 2.5 flags an aligned
        # struct read back from a pickle differently from the one it was made from)
        numpys = pickle.loads(data)
        assert back.dtype == array.dtype and back.dtype.flags == numpys.dtype.flags
        np.testing.assert_array_equal(back, array)
