"""Pickled networks that would exhaust memory or the stack: one-line errors; deep ones load."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytensor
import pytest
from legacy_helpers import QUIET, ROOT, LegacyNames
from pytensor.compile.mode import Mode

import lasagne_bn_compat.io as cio
from lasagne_bn.layers import DenseLayer, get_all_layers, get_output
from lasagne_bn_compat.io import LegacyFormatError, LegacyNetworkError

pytestmark = QUIET

RELU = "lasagne.nonlinearities.rectify"


def _load(data: bytes):
    return cio.load_network(io.BytesIO(data))


def _one_line(exc_info) -> str:
    message = str(exc_info.value)
    assert "\n" not in message and "<file object>" in message
    return message


@pytest.mark.parametrize("pickled_w", ["missing", "initializer"])
def test_huge_num_units_is_refused_before_allocating(pickled_w):
    with LegacyNames() as names:
        l_in = names.layer("input.InputLayer", shape=(None, 4), input_var=names.input_var(2))
        attrs = {"num_units": 10**11, "b": None, "nonlinearity": names.func(RELU)}
        if pickled_w == "initializer":
            attrs["W"] = names.cls("lasagne.init.GlorotUniform")(gain=1.0, c01b=False)
        data = names.dumps(names.layer("dense.DenseLayer", l_in, name="fc", **attrs))
    tracemalloc.start()
    try:
        with pytest.raises(LegacyNetworkError) as info:
            _load(data)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 2**20
    message = _one_line(info)
    assert "DenseLayer 'fc': " in message and "parameter fc.W" in message
    assert "(4, 100000000000)" in message
    assert "3,200,000,000,000 bytes" in message


def test_huge_num_filters_is_refused():
    with LegacyNames() as names:
        l_in = names.layer("input.InputLayer", shape=(None, 3, 8, 8), input_var=names.input_var(4))
        conv = names.layer(
            "conv.Conv2DLayer", l_in, name="conv", num_filters=10**10, filter_size=(3, 3),
            stride=(1, 1), pad=(0, 0), untie_biases=False, flip_filters=True, n=2,
            nonlinearity=names.func(RELU),
        )  # fmt: skip
        data = names.dumps(conv)
    with pytest.raises(
        LegacyNetworkError, match="Conv2DLayer 'conv': .* parameter conv.W of shape"
    ) as info:
        _load(data)
    _one_line(info)


def test_declared_size_must_match_the_pickled_parameter():
    with LegacyNames() as names:
        l_in = names.layer("input.InputLayer", shape=(None, 4), input_var=names.input_var(2))
        fc = names.layer(
            "dense.DenseLayer", l_in, name="fc", num_units=10**11, nonlinearity=names.func(RELU),
            W=names.shared(np.ones((4, 3), "float32"), "fc.W"), b=None,
        )  # fmt: skip
        data = names.dumps(fc)
    with pytest.raises(LegacyNetworkError, match="DenseLayer 'fc'") as info:
        _load(data)
    assert "(4, 3)" in _one_line(info)


def test_list_nested_100000_deep():
    depth = 100_000
    data = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."
    for read in (cio.read_checkpoint, cio.load_network, cio.inspect_checkpoint):
        with pytest.raises(LegacyFormatError) as info:
            read(io.BytesIO(data))
        _one_line(info)


def test_layer_nested_deep_in_containers_is_refused():
    with LegacyNames() as names:
        holder = [names.layer("input.InputLayer", shape=(None, 4), input_var=names.input_var(2))]
        for _ in range(5000):
            holder = [holder]
        data = names.dumps(holder)
    with pytest.raises(LegacyNetworkError, match="nests values more than 100 deep") as info:
        _load(data)
    _one_line(info)


def _nonlinearity_layer(names, incoming=None):
    return names.layer(
        "special.NonlinearityLayer", incoming, name="loop", input_shape=(None, 4),
        nonlinearity=names.func(RELU),
    )  # fmt: skip


def test_layer_that_is_its_own_input():
    with LegacyNames() as names:
        layer = _nonlinearity_layer(names)
        layer.input_layer = layer
        data = names.dumps(layer)
    with pytest.raises(LegacyNetworkError, match="'loop' is its own input: a network") as info:
        _load(data)
    _one_line(info)


def test_cycle_of_two_layers():
    with LegacyNames() as names:
        first = _nonlinearity_layer(names)
        second = _nonlinearity_layer(names, first)
        first.input_layer = second
        data = names.dumps(second)
    with pytest.raises(LegacyNetworkError, match="is its own input through 2 layers") as info:
        _load(data)
    _one_line(info)


def test_chain_of_800_layers_loads_and_predicts():
    rng = np.random.default_rng(0)
    weights = [rng.normal(0, 0.5, (4, 4)).astype("float32") for _ in range(400)]
    with LegacyNames() as names:
        layer = names.layer("input.InputLayer", shape=(None, 4), input_var=names.input_var(2))
        for i, w in enumerate(weights):
            layer = names.layer(
                "dense.DenseLayer", layer, name=f"fc{i}", num_units=4, num_leading_axes=1,
                W=names.shared(w, f"fc{i}.W"), b=None, nonlinearity=names.func(
                    "lasagne.nonlinearities.linear"),
            )  # fmt: skip
            layer = names.layer(
                "special.NonlinearityLayer", layer, name=f"nl{i}",
                nonlinearity=names.func("lasagne.nonlinearities.tanh"),
            )  # fmt: skip
        data = names.dumps(layer)
    net = _load(data)
    layers = get_all_layers(net)
    assert len(layers) == 801
    assert sum(isinstance(layer, DenseLayer) for layer in layers) == 400
    x = rng.normal(size=(3, 4)).astype("float32")
    # the python linker compiles 800 layers in a second (Numba would take minutes)
    mode = Mode(linker="py", optimizer=None)
    f = pytensor.function([layers[0].input_var], get_output(net), mode=mode)
    expected = x.astype("float64")
    for w in weights:
        expected = np.tanh(expected @ w)
    np.testing.assert_allclose(f(x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("flag_byte", "method_byte"), [(0, 99), (1, 0)], ids=["unknown method", "encrypted"]
)
def test_npz_member_zipfile_cannot_read_is_a_format_error(flag_byte, method_byte, tmp_path):
    """Found by the fuzz test: zipfile's NotImplementedError / RuntimeError escaped."""
    buf = io.BytesIO()
    np.savez(buf, np.arange(3.0))
    data = bytearray(buf.getvalue())
    for header in (b"PK\x03\x04", b"PK\x01\x02"):  # local and central headers
        start = data.index(header)
        flags = start + (6 if header == b"PK\x03\x04" else 8)
        data[flags] |= flag_byte
        data[flags + 2] = method_byte
    with pytest.raises(LegacyFormatError, match="is truncated or not an .npz file") as info:
        cio.read_checkpoint(io.BytesIO(bytes(data)))
    _one_line(info)


def test_tuples_nested_a_million_deep_are_refused_not_a_crash():
    """Python's C code recurses into nested tuples (hashing a dict key) and segfaults."""
    import subprocess
    import sys

    code = (
        "import io, lasagne_bn_compat.io as cio\n"
        "bomb = b'\\x80\\x02}N' + b'\\x85' * 10**6 + b'K\\x01s.'\n"
        "try:\n"
        "    cio.read_checkpoint(io.BytesIO(bomb))\n"
        "except cio.CheckpointError as exc:\n"
        "    print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "more than 10000 levels deep" in proc.stdout


def test_nesting_check_counts_containers_not_items():
    import pickle

    from lasagne_bn_compat._pickle import check_pickle_nesting

    check_pickle_nesting(pickle.dumps([[[[1]]]], protocol=2), limit=4)
    with pytest.raises(cio.CheckpointError, match="more than 3 levels"):
        check_pickle_nesting(pickle.dumps([[[[1]]]], protocol=2), limit=3)
    many = pickle.dumps([np.ones(2)] * 3000 + [{"a": (1, 2)}] * 3000, protocol=4)
    check_pickle_nesting(many, limit=5)  # long, not deep
