"""Fuzzing every loading path with broken checkpoints: one documented error or success.

Random bytes, truncated files and files with mutated bytes, made from real
checkpoints of every supported format (written by Theano 1.0.5 + Lasagne,
and by this package), go to ``read_checkpoint``, ``load_params``,
``load_network`` and ``inspect_checkpoint``.  Each ends in success or in one
of :data:`DOCUMENTED` with a one-line message; nothing in the file runs (a
marker file stays absent); a failed ``load_params`` changes no parameter;
memory stays bounded (``max_bytes`` is small).
"""

from __future__ import annotations

import gzip
import io
import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from legacy_helpers import DATA, QUIET, legacy_network_pickle
from test_compat_io import Net, mlp_values, npz_bytes

import lasagne_bn_compat.io as cio

pytestmark = [*QUIET, pytest.mark.slow]

#: The exceptions lasagne_bn_compat.io documents for a bad file.
DOCUMENTED = (
    cio.LegacyFormatError,
    cio.UnsafePickleError,
    cio.LegacyNetworkError,
    ValueError,
    TypeError,
)
LIMIT = 8 * 1024**2
ORACLE = DATA / "compat_oracle"


def _seeds() -> dict[str, bytes]:
    values = mlp_values(0)
    seeds = {p.name: p.read_bytes() for p in sorted(ORACLE.iterdir()) if p.name != "expected.npz"}
    seeds["npz"] = npz_bytes(values)
    seeds["pickle p2"] = pickle.dumps(values, protocol=2)
    seeds["model-zoo"] = pickle.dumps({"param values": values, "mean value": 1.0}, protocol=2)
    seeds["gzip"] = gzip.compress(pickle.dumps(values))
    seeds["network"] = legacy_network_pickle(mlp_values(0, "float32")[:7])
    buf = io.BytesIO()
    holder = np.empty(len(values), dtype=object)
    holder[:] = values
    np.save(buf, holder, allow_pickle=True)
    seeds["object npy"] = buf.getvalue()
    return seeds


SEEDS = _seeds()


@st.composite
def broken_files(draw) -> bytes:
    kind = draw(st.sampled_from(["random", "truncated", "mutated", "spliced"]))
    if kind == "random":
        return draw(st.binary(max_size=512))
    seed = SEEDS[draw(st.sampled_from(sorted(SEEDS)))]
    if kind == "truncated":
        return seed[: draw(st.integers(0, max(len(seed) - 1, 0)))]
    data = bytearray(seed)
    if kind == "mutated":
        for _ in range(draw(st.integers(1, 8))):
            at = draw(st.integers(0, len(data) - 1))
            data[at] = draw(st.integers(0, 255))
        return bytes(data)
    at = draw(st.integers(0, len(data)))
    return bytes(data[:at]) + draw(st.binary(max_size=64)) + bytes(data[at:])


def _one_line(exc: BaseException) -> None:
    message = str(exc)
    assert message and "\n" not in message, repr(message)


@pytest.fixture(scope="module")
def net():
    return Net()


def _check(call, marker: Path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            result = call()
        except DOCUMENTED as exc:
            _one_line(exc)
            result = None
    assert not marker.exists()
    return result


FUZZ = settings(
    max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "150")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@FUZZ
@given(data=broken_files())
def test_every_reader_ends_in_success_or_a_documented_error(data, tmp_path):
    marker = tmp_path / "executed"
    _check(lambda: cio.read_checkpoint(io.BytesIO(data), max_bytes=LIMIT), marker)
    _check(lambda: cio.inspect_checkpoint(io.BytesIO(data), max_bytes=LIMIT), marker)
    _check(lambda: cio.load_network(io.BytesIO(data), max_bytes=LIMIT), marker)


@FUZZ
@given(data=broken_files())
def test_failed_load_changes_no_parameter(data, net, tmp_path):
    before = net.snapshot()
    loaded = _check(
        lambda: cio.load_params(net.out, io.BytesIO(data), allow_downcast=True, max_bytes=LIMIT),
        tmp_path / "executed",
    )
    if loaded is None:
        assert net.unchanged_since(before)
    else:  # restore for the next example
        for p, v in zip(net.params, before, strict=True):
            p.set_value(v)
