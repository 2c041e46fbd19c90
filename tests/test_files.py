"""Writing checkpoint and result files: all or nothing, modes kept, links followed."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import lasagne_bn_compat.io as cio
from lasagne_bn._files import atomic_write, partial_name


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.npz", lambda f: f.write(b"x"))
    finally:
        os.umask(old)
    assert _mode(tmp_path / "a.npz") == 0o644
    assert os.listdir(tmp_path) == ["a.npz"]


def test_overwrite_keeps_the_target_mode(tmp_path):
    path = tmp_path / "w.npz"
    path.write_bytes(b"old")
    os.chmod(path, 0o640)
    cio.write_values(path, [np.ones(3)])
    assert _mode(path) == 0o640
    np.testing.assert_array_equal(cio.read_checkpoint(path).values[0], np.ones(3))


def test_symlink_writes_its_target_and_stays_a_link(tmp_path):
    real = tmp_path / "real.npz"
    real.write_bytes(b"old")
    link = tmp_path / "link.npz"
    link.symlink_to(real)
    cio.write_values(link, [np.arange(4.0)])
    assert link.is_symlink() and os.readlink(link) == str(real)
    np.testing.assert_array_equal(cio.read_checkpoint(real).values[0], np.arange(4.0))


@pytest.mark.parametrize("bad", ["", "   "])
def test_empty_path_is_refused_before_writing(bad, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="names no file"):
        cio.write_values(bad, [np.ones(2)])
    assert os.listdir(tmp_path) == []
    assert not [p for p in os.listdir(tmp_path.parent) if ".partial-" in p]


def test_directory_path_is_refused(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        cio.write_values(tmp_path, [np.ones(2)])


def test_errors_name_the_users_path_not_the_temp_file(tmp_path):
    path = tmp_path / "no-such-folder" / "w.npz"
    with pytest.raises(FileNotFoundError) as info:
        cio.write_values(path, [np.ones(2)])
    assert str(path) in str(info.value) and ".partial-" not in str(info.value)


def test_writer_failure_leaves_old_file_and_no_temp(tmp_path):
    path = tmp_path / "w.bin"
    path.write_bytes(b"old")

    def fail(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match=f"cannot write {path}: No space left"):
        atomic_write(path, fail)
    assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["w.bin"]


def test_stale_temp_file_of_a_killed_writer_is_removed(tmp_path):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    pid = int(dead.stdout)
    stale = tmp_path / partial_name("w.npz", pid)
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / partial_name("other.npz", pid)  # another target's: left alone
    other.write_bytes(b"x")
    cio.write_values(tmp_path / "w.npz", [np.ones(2)])
    assert sorted(os.listdir(tmp_path)) == sorted(["w.npz", other.name])
