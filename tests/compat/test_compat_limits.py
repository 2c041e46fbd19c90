"""Reading has limits: bombs, lying headers and oversized files end in one-line errors."""

from __future__ import annotations

import gzip
import io
import pickle
import struct
import tracemalloc
import zipfile

import numpy as np
import pytest

import lasagne_bn_compat.io as cio
from lasagne_bn_compat.io import LegacyFormatError

MIB = 1024**2


def _gzip_bomb(inflated: int) -> bytes:
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9) as f:
        chunk = b"\0" * MIB
        for _ in range(inflated // MIB):
            f.write(chunk)
    return out.getvalue()


def test_gzip_bomb_is_refused_without_inflating_it(tmp_path):
    bomb = _gzip_bomb(64 * MIB)  # 64 KiB on disk
    path = tmp_path / "model.pkl.gz"
    path.write_bytes(bomb)
    tracemalloc.start()
    try:
        with pytest.raises(LegacyFormatError) as info:
            cio.read_checkpoint(path, max_bytes=4 * MIB)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * MIB  # stopped near the limit, not after 64 MiB
    message = str(info.value)
    assert "\n" not in message and str(path) in message
    assert "more than the limit of 4,194,304 bytes" in message and "max_bytes=" in message


def test_gzip_within_the_limit_reads(tmp_path):
    values = [np.arange(6.0).reshape(2, 3), np.ones(3, "float32")]
    path = tmp_path / "ok.pkl.gz"
    path.write_bytes(gzip.compress(pickle.dumps(values, protocol=2)))
    got = cio.read_checkpoint(path, max_bytes=MIB).values
    for a, b in zip(got, values, strict=True):
        np.testing.assert_array_equal(a, b)


def _npy_header(shape, dtype="<f4") -> bytes:
    header = repr({"descr": dtype, "fortran_order": False, "shape": shape}).encode()
    header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header


@pytest.mark.parametrize("shape", [(2**32, 2**32), (2**62, 4), (10**12,)])
def test_npy_header_declaring_a_huge_array_is_refused(shape, tmp_path):
    path = tmp_path / "w.npy"
    path.write_bytes(_npy_header(shape) + b"\0" * 64)
    with pytest.raises(LegacyFormatError, match="is truncated: its header declares") as info:
        cio.read_checkpoint(path)
    assert str(shape) in str(info.value) and "\n" not in str(info.value)


def test_npz_member_declaring_more_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, np.zeros(2 * MIB // 8))  # 2 MiB of zeros, compressed below
    data = io.BytesIO()
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            dst.writestr(info.filename, src.read(info))
    bomb = tmp_path / "bomb.npz"
    bomb.write_bytes(data.getvalue())
    assert bomb.stat().st_size < 64 * 1024
    with pytest.raises(LegacyFormatError, match="declare 2,097,28"):
        cio.read_checkpoint(bomb, max_bytes=MIB)
    assert len(cio.read_checkpoint(bomb, max_bytes=4 * MIB).values[0]) == 2 * MIB // 8


def test_npz_member_lying_about_its_size_stops_at_the_limit(tmp_path):
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("arr_0.npy", _npy_header((MIB,), "<f8") + b"\0" * (8 * MIB))
    raw = bytearray(data.getvalue())
    # shrink the declared uncompressed size in both headers to 100 bytes
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = raw.index(sig)
        raw[at + offset : at + offset + 4] = struct.pack("<I", 100)
    with pytest.raises(LegacyFormatError) as info:
        cio.read_checkpoint(io.BytesIO(bytes(raw)), max_bytes=MIB)
    assert "\n" not in str(info.value)


def test_file_larger_than_the_limit_is_refused(tmp_path):
    path = tmp_path / "big.npz"
    np.savez(path, np.ones(MIB // 8 + 1000))
    with pytest.raises(LegacyFormatError, match="the file is larger"):
        cio.read_checkpoint(path, max_bytes=MIB)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_bad_max_bytes(bad):
    with pytest.raises(ValueError, match="max_bytes=.* must be a positive int"):
        cio.read_checkpoint(io.BytesIO(b"x"), max_bytes=bad)
