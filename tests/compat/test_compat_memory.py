"""Reading checkpoints in bounded memory, also under an address-space limit.

HPC schedulers set ``ulimit -v``, and so does anyone containing a file they
do not trust.  Under 1.5 GiB every reader and CLI command must read a small
checkpoint (no buffer sized by the 2 GiB ``max_bytes`` limit), and must
refuse bombs and hostile headers with one line, not a ``MemoryError``
traceback.  The children import only what the reader under test needs
(numpy and ``lasagne_bn_compat.io``; the CLI children import pytensor,
which works under the limit too).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from legacy_helpers import ROOT, legacy_network_pickle

#: The limit of the children: ``ulimit -v 1572864``.
LIMIT_AS = 1536 * 1024**2
MIB = 1024**2

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="RLIMIT_AS is enforced on Linux"
)


def run_limited(code: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``code`` in a fresh interpreter whose address space is limited to :data:`LIMIT_AS`."""
    prologue = (
        f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({LIMIT_AS}, {LIMIT_AS}))\n"
    )
    env = dict(os.environ)
    # pytest puts tests/ on sys.path (pyproject's pythonpath); the helpers import from it.
    env["PYTHONPATH"] = os.pathsep.join(
        str(p) for p in (ROOT, ROOT / "tests", ROOT / "tests" / "compat")
    )
    env.pop("THEANO_FLAGS", None)
    return subprocess.run(
        [sys.executable, "-c", prologue + textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _deflate_repeated(block: bytes, times: int) -> bytes:
    """A raw deflate stream of ``block * times``, made without compressing it all.

    After a full flush the compressor forgets its window, so compressing the
    same block again gives the same bytes: they are repeated.
    """
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    again = c.compress(block) + c.flush(zlib.Z_FULL_FLUSH)
    return first + again * (times - 2) + c.compress(block) + c.flush()


def gzip_bomb(inflated: int) -> bytes:
    """A gzip file inflating to ``inflated`` bytes of zeros (its CRC is not checked first)."""
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    body = _deflate_repeated(bytes(16 * MIB), inflated // (16 * MIB))
    return header + body + struct.pack("<II", 0, inflated & 0xFFFFFFFF)


def npz_liar(declared: int) -> bytes:
    """An .npz whose one member declares ``declared`` bytes (its header agrees) but holds 64."""
    header = repr({"descr": "<u1", "fortran_order": False, "shape": (declared - 128,)})
    header = header.encode() + b" " * (117 - len(header)) + b"\n"
    member = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header + bytes(64)
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("arr_0.npy", member)
    raw = bytearray(data.getvalue())
    for sig, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = raw.index(sig)
        raw[at + offset : at + offset + 4] = struct.pack("<I", declared)
    return bytes(raw)


def pickle_liar(declared: int) -> bytes:
    """A protocol-4 pickle whose BINBYTES8 declares ``declared`` bytes and holds 16."""
    return b"\x80\x04\x8e" + struct.pack("<Q", declared) + bytes(16) + b"."


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """Small checkpoints of every format, and hostile files, written once."""
    folder = tmp_path_factory.mktemp("checkpoints")
    rng = np.random.default_rng(0)
    values = [rng.standard_normal((20, 10)).astype("float32"), np.ones(10, "float32")]
    paths = {}

    def put(name, data):
        paths[name] = folder / name
        paths[name].write_bytes(data)

    buf = io.BytesIO()
    np.savez(buf, *values)
    put("model.npz", buf.getvalue())
    buf = io.BytesIO()
    np.savez_compressed(buf, *values)
    put("compressed.npz", buf.getvalue())
    buf = io.BytesIO()
    np.save(buf, values[0])
    put("weights.npy", buf.getvalue())
    put("model.pkl", pickle.dumps(values, protocol=2))
    put("zoo.pkl", pickle.dumps({"param values": values, "mean value": 1.0}, protocol=2))
    put("model.pkl.gz", gzip.compress(pickle.dumps(values, protocol=2)))
    shapes = [(4, 3), (3,), (3,), (3,), (3,), (3, 2), (2,)]
    network_values = [np.abs(rng.standard_normal(s)) + 0.5 for s in shapes]
    put("network.pkl", legacy_network_pickle(network_values))
    put("bomb.pkl.gz", gzip_bomb(3 * 1024**3))
    put("eval.pkl.gz", gzip.compress(b"cos\nsystem\n(S'touch pwned'\ntR."))
    put("liar.npz", npz_liar(2 * 1024**3 - 4096))
    put("liar.pkl", pickle_liar(2 * 1024**3 - 4096))
    # small files (a deflate stream holds at most ~1000x: the bomb is 3 MB)
    sizes = {k: p.stat().st_size for k, p in paths.items()}
    assert all(size < (4 * MIB if k == "bomb.pkl.gz" else 8192) for k, size in sizes.items())
    return paths


READERS = """
import json, sys, warnings
warnings.simplefilter("ignore")
import lasagne_bn_compat.io as cio
results = {}
for name, path in json.loads(sys.argv[1] if len(sys.argv) > 1 else INPUT).items():
    try:
        checkpoint = cio.read_checkpoint(path)
        _, infos = cio.inspect_checkpoint(path)
        results[name] = ["ok", checkpoint.format, len(infos)]
    except (cio.LegacyFormatError, cio.UnsafePickleError, cio.LegacyNetworkError) as exc:
        results[name] = ["refused", type(exc).__name__, str(exc)]
print(json.dumps(results))
"""


def _check_readers(files, tmp_path, names):
    inputs = json.dumps({n: str(files[n]) for n in names})
    child = run_limited(f"INPUT = {inputs!r}\n" + READERS, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    return json.loads(child.stdout.splitlines()[-1])


def test_every_format_reads_under_a_1_5_gib_address_space_limit(files, tmp_path):
    names = [
        "model.npz",
        "compressed.npz",
        "weights.npy",
        "model.pkl",
        "zoo.pkl",
        "model.pkl.gz",
        "network.pkl",
    ]
    results = _check_readers(files, tmp_path, names)
    formats = {n: r[1] for n, r in results.items() if r[0] == "ok"}
    assert formats == {
        "model.npz": "npz",
        "compressed.npz": "npz",
        "weights.npy": "npy",
        "model.pkl": "pickle",
        "zoo.pkl": "model-zoo",
        "model.pkl.gz": "pickle",
        "network.pkl": "network",
    }, results


def test_bombs_and_lying_headers_are_refused_in_one_line_under_the_limit(files, tmp_path):
    names = ["bomb.pkl.gz", "eval.pkl.gz", "liar.npz", "liar.pkl"]
    results = _check_readers(files, tmp_path, names)
    for name in names:
        status, kind, message = results[name]
        assert status == "refused", (name, results[name])
        assert "\n" not in message and str(files[name]) in message, (name, message)
    assert results["eval.pkl.gz"][1] == "UnsafePickleError"
    assert "posix.system" in results["eval.pkl.gz"][2] or "os.system" in results["eval.pkl.gz"][2]
    assert "memory" in results["bomb.pkl.gz"][2] or "limit" in results["bomb.pkl.gz"][2]


def test_file_objects_read_under_the_limit(files, tmp_path):
    child = run_limited(
        f"""
        import io
        import lasagne_bn_compat.io as cio
        with open({str(files["model.npz"])!r}, "rb") as f:
            print(cio.read_checkpoint(f).format)
        data = open({str(files["model.pkl"])!r}, "rb").read()
        print(cio.read_checkpoint(io.BytesIO(data)).format)
        """,
        tmp_path,
    )
    assert child.returncode == 0, child.stderr[-3000:]
    assert child.stdout.split() == ["npz", "pickle"]


CLI = """
import contextlib, io, sys, warnings
warnings.simplefilter("ignore")
from lasagne_bn.cli import main

for argv in ARGVS:
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exc:
            status = exc.code
    print(repr((argv[0], argv[1], status, err.getvalue())))
"""


@pytest.mark.slow  # fresh interpreters that import pytensor
def test_cli_commands_work_and_refuse_in_one_line_under_the_limit(files, tmp_path):
    script = tmp_path / "legacy.py"
    script.write_text(
        "import sys\n"
        "import lasagne_bn_compat.io as cio\n"
        "print(len(cio.read_checkpoint(sys.argv[1]).values))\n"
    )
    argvs = [
        ["inspect", str(files["model.npz"])],
        ["inspect", str(files["network.pkl"])],
        ["convert", str(files["model.npz"]), str(tmp_path / "out.pkl")],
        ["convert", str(files["model.pkl.gz"]), str(tmp_path / "out.npz")],
        ["inspect", str(files["bomb.pkl.gz"])],
        ["convert", str(files["eval.pkl.gz"]), str(tmp_path / "x.npz")],
        ["inspect", str(files["liar.npz"])],
        ["run", str(script), str(files["model.npz"])],
    ]
    child = run_limited(f"ARGVS = {argvs!r}\n" + CLI, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    import ast

    seen = [ast.literal_eval(line) for line in child.stdout.splitlines() if line.startswith("(")]
    assert len(seen) == len(argvs), child.stdout
    for (_command, path, status, err), argv in zip(seen, argvs, strict=True):
        hostile = any(k in path for k in ("bomb", "eval", "liar"))
        if hostile:
            assert status == 2 and err.count("\n") == 1 and path in err, (argv, err)
            assert "Traceback" not in err
        else:
            assert status == 0 and err == "", (argv, err)
    assert (tmp_path / "out.pkl").exists() and (tmp_path / "out.npz").exists()


# --------------------------------------------------------------------------
# peak memory of reading a large checkpoint


PEAK = """
import json, resource, sys, tracemalloc
import numpy as np
import lasagne_bn_compat.io as cio
def rss_hwm():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
def rss():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024

path = sys.argv[1] if len(sys.argv) > 1 else PATH
cio.read_checkpoint(SMALL)  # warm: whatever reading imports is not the checkpoint's
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # reset VmHWM to the current RSS
before = rss()
tracemalloc.start()
checkpoint = cio.read_checkpoint(path)
traced = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
print(json.dumps({"traced": traced, "rss": rss_hwm() - before,
                  "nbytes": sum(v.nbytes for v in checkpoint.values)}))
"""


def _big_values(total: int) -> list:
    rng = np.random.default_rng(0)
    n = total // 4 // 4
    return [rng.standard_normal(n).astype("float32") for _ in range(4)]


@pytest.mark.slow  # writes and reads 100 MB per format
@pytest.mark.parametrize("fmt", ["npz", "npz-compressed", "npy", "pickle"])
def test_peak_memory_of_reading_a_100_mb_checkpoint_is_at_most_2x(fmt, files, tmp_path):
    values = _big_values(100 * 10**6)
    path = tmp_path / "big"
    if fmt == "npz":
        np.savez(path.with_suffix(".npz"), *values)
        path = path.with_suffix(".npz")
    elif fmt == "npz-compressed":
        np.savez_compressed(path.with_suffix(".npz"), *values)
        path = path.with_suffix(".npz")
    elif fmt == "npy":
        path = path.with_suffix(".npy")
        np.save(path, np.concatenate(values))
    else:
        path = path.with_suffix(".pkl")
        path.write_bytes(pickle.dumps(values, protocol=4))
    size = path.stat().st_size
    del values
    setup = f"PATH = {str(path)!r}\nSMALL = {str(files['model.npz'])!r}\n"
    child = run_limited(setup + PEAK, tmp_path)
    assert child.returncode == 0, child.stderr[-3000:]
    got = json.loads(child.stdout.splitlines()[-1])
    assert got["nbytes"] >= 99 * 10**6
    # the values themselves are 1x; at most about as much again on the way
    assert got["traced"] <= 2.1 * size, (fmt, got, size)
    assert got["rss"] <= 2.1 * size, (fmt, got, size)


#: The test files that read and write checkpoints and pickled networks.
FILE_TESTS = [
    "tests/compat/test_compat_io.py",
    "tests/compat/test_compat_limits.py",
    "tests/compat/test_compat_network_pickles.py",
    "tests/compat/test_compat_network_limits.py",
    "tests/compat/test_compat_checkpoint_path.py",
    "tests/compat/test_compat_statistics.py",
    "tests/compat/test_compat_interchange.py",
    "tests/test_files.py",
]


@pytest.mark.slow  # the file tests again, in fresh interpreters (minutes)
@pytest.mark.parametrize("test_file", FILE_TESTS)
def test_the_file_tests_pass_under_a_1_5_gib_address_space_limit(test_file, tmp_path):
    """``ulimit -v 1572864`` for each file of them, in a child of its own.

    One child per file, as a user's process holds one job: in one child for
    all of them, the interchange tests' PyTorch (about 0.5 GiB of address
    space) and the LLVM modules of every kernel the others compiled on an
    empty cache added up past the limit, so the result depended on the
    order the caches were filled in.  Deselected: the JAX compile of one
    network-pickle test, whose XLA compiler aborts the whole process once
    numba, torch and jax together hold most of the 1.5 GiB (reading is not
    what it tests).
    """
    # --full: the child runs what it is given, slow or not (the tiers are the parent's).
    args = ["-n", "0", "-q", "-p", "no:cacheprovider", "--full", "-k", "not jax"]
    child = run_limited(
        f"import sys, pytest\nsys.exit(pytest.main({[*args, str(ROOT / test_file)]!r}))\n",
        ROOT,
        timeout=1800,
    )
    assert child.returncode == 0, child.stdout[-4000:] + child.stderr[-2000:]
