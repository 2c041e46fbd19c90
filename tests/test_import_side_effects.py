"""Importing the package changes nothing outside it (DESIGN.md section 1).

Each check runs in a fresh interpreter: it first imports every third-party
module that the package import loads (their own import-time registrations
are theirs), takes a snapshot of the process-wide state we used to change
at import, imports our package, and takes it again:

- glibc's allocator: is a 64 MiB ``malloc`` served by ``mmap``
  (``mallinfo2().hblks``)?  With glibc's defaults it is (the dynamic mmap
  threshold stops at 32 MiB); after ``recycle_host_memory()`` it is not;
- Numba's data models: ``default_manager`` for float16/float32/float64 and
  its table of models per type class;
- the LLVM symbols we register (half-precision libcalls, the kernels'
  thread-policy symbols) and whether Numba's thread pool was started;
- PyTensor's rewrite database ``optdb``, every sub-database recursively
  (canonicalize and specialize included): names, tags, positions, objects.

The same script then makes the explicit calls and checks that each probe
sees their change, so an unchanged snapshot means something.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PROBE = textwrap.dedent(
    r"""
    import ctypes, importlib, json, sys

    def preimport(names):
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:
                pass

    preimport(json.loads(sys.argv[1]))

    import llvmlite.binding as llvm
    from numba.core import types
    from numba.core.datamodel import default_manager
    from numba.np.ufunc import parallel
    from pytensor.compile import optdb
    from pytensor.graph.rewriting.db import RewriteDatabase

    class MallInfo2(ctypes.Structure):
        _fields_ = [(n, ctypes.c_size_t) for n in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.free.argtypes = [ctypes.c_void_p]
    has_mallinfo2 = hasattr(libc, "mallinfo2")
    if has_mallinfo2:
        libc.mallinfo2.restype = MallInfo2

    def malloc_uses_mmap():
        if not has_mallinfo2:
            return None
        before = libc.mallinfo2().hblks
        p = libc.malloc(64 << 20)
        during = libc.mallinfo2().hblks
        libc.free(p)
        return during > before

    def model(t):
        try:
            m = default_manager.lookup(t)
        except NotImplementedError as exc:
            return "NotImplementedError: " + str(exc)
        return type(m).__name__ + ":" + str(m.get_value_type())

    SYMBOLS = ("__truncdfhf2", "__truncsfhf2", "__extendhfsf2", "__extendhfdf2",
               "lasagne_bn_kernel_threads_state", "lasagne_bn_kernel_threads_enter")

    def walk(db, path, out, seen):
        if id(db) in seen:
            return
        seen.add(id(db))
        names = sorted(getattr(db, "_names", ()))
        positions = getattr(db, "__position__", {})
        for name in names:
            objs = sorted(db.__db__.get(name, ()), key=id)
            for obj in objs:
                out.append([path, name, type(obj).__name__, id(obj),
                            positions.get(name) if isinstance(positions, dict) else None])
                if isinstance(obj, RewriteDatabase):
                    walk(obj, path + "/" + name, out, seen)
        tags = sorted((k, len(v)) for k, v in db.__db__.items())
        out.append([path, "#tags", repr(tags)])

    def snapshot():
        rewrites = []
        walk(optdb, "optdb", rewrites, set())
        return {
            "malloc_uses_mmap": malloc_uses_mmap(),
            "models": {str(t): model(t) for t in (types.float16, types.float32, types.float64)},
            "model_table": sorted(
                f"{k.__module__}.{k.__qualname__}={getattr(v, '__qualname__', repr(v))}"
                for k, v in default_manager._handlers.items()),
            "symbols": {s: bool(llvm.address_of_symbol(s)) for s in SYMBOLS},
            "numba_pool_started": bool(parallel._is_initialized),
            "optdb": rewrites,
        }

    result = {"before": snapshot()}
    for statement in json.loads(sys.argv[2]):
        exec(statement)
    result["after_import"] = snapshot()
    for statement in json.loads(sys.argv[3]):
        exec(statement)
    result["after_calls"] = snapshot()
    print("RESULT" + json.dumps(result))
    """
)

FIND_MODULES = textwrap.dedent(
    """
    import json, sys
    before = set(sys.modules)
    {imports}
    ours = ("lasagne_bn", "lasagne_bn_compat")
    print(json.dumps(sorted(n for n in set(sys.modules) - before
                            if n.split(".")[0] not in ours and not n.startswith("__"))))
    """
)


def _env() -> dict:
    env = dict(os.environ)
    # glibc's allocator must start from its defaults for the malloc probe.
    for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return env


def run_probe(imports: list[str], calls: list[str], preload: list[str] | None = None) -> dict:
    """Snapshots before and after ``imports`` (statements), then after ``calls``.

    The third-party modules that ``preload`` (default: ``imports``) loads are
    imported before the first snapshot.
    """
    env = _env()
    statements = "\n".join(imports if preload is None else preload)
    found = subprocess.run(
        [sys.executable, "-c", FIND_MODULES.format(imports=statements)],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    modules = found.stdout.strip().splitlines()[-1]
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, modules, json.dumps(imports), json.dumps(calls)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def _differences(a: dict, b: dict) -> dict:
    diff = {}
    for key in a:
        if a[key] != b[key]:
            if key == "optdb":
                sa = {json.dumps(x) for x in a[key]}
                sb = {json.dumps(x) for x in b[key]}
                diff[key] = {"gone": sorted(sa - sb)[:10], "new": sorted(sb - sa)[:10]}
            else:
                diff[key] = (a[key], b[key])
    return diff


# Compiling a float16 batch norm under Numba: what turns the lazy parts on.
USE_EVERYTHING = [
    "import numpy as np, pytensor, pytensor.tensor as pt",
    "from lasagne_bn.ops import batch_normalization_train, recycle_host_memory",
    "x = pt.matrix('x', dtype='float16')",
    "y = batch_normalization_train(x, np.ones(3, 'float32'), np.zeros(3, 'float32'))[0]",
    "pytensor.function([x], y, mode='NUMBA')(np.ones((4, 3), 'float16'))",
    "recycle_host_memory()",
]


@pytest.fixture(scope="module")
def layers_probe() -> dict:
    return run_probe(["import lasagne_bn.layers"], USE_EVERYTHING)


@pytest.mark.slow
def test_importing_the_layers_changes_nothing_outside_the_package(layers_probe):
    before, after = layers_probe["before"], layers_probe["after_import"]
    assert _differences(before, after) == {}


@pytest.mark.slow
def test_the_probes_see_the_explicit_calls_and_first_use(layers_probe):
    """Each snapshot part changes once the package is used: the checks above mean something."""
    before, used = layers_probe["before"], layers_probe["after_calls"]
    if before["malloc_uses_mmap"] is not None:
        assert before["malloc_uses_mmap"] is True  # glibc's default
        assert used["malloc_uses_mmap"] is False  # recycle_host_memory()
    assert before["models"]["float16"].startswith("NotImplementedError")
    assert used["models"]["float16"].endswith(":half")
    assert used["models"]["float32"] == before["models"]["float32"]
    assert used["models"]["float64"] == before["models"]["float64"]
    # Numba adds models of its own while it compiles; the float model stays Numba's.
    float_model = [
        m for m in before["model_table"] if m.startswith("numba.core.types.scalars.Float=")
    ]
    assert float_model == ["numba.core.types.scalars.Float=FloatModel"]
    assert set(float_model) <= set(used["model_table"])
    assert used["symbols"]["lasagne_bn_kernel_threads_enter"]
    assert not before["symbols"]["lasagne_bn_kernel_threads_enter"]
    assert used["numba_pool_started"]
    names = {row[1] for row in used["optdb"]} - {row[1] for row in before["optdb"]}
    assert {"lasagne_bn_register_jax", "lasagne_bn_jax_static_shapes"} <= names
    assert "local_static_pool_windows" not in names  # no pooling Op built: not registered


@pytest.mark.slow
def test_importing_compat_and_installing_it_changes_nothing_else():
    legacy = ["lasagne_bn_compat.install()", "import theano, lasagne, lasagne.layers"]
    probe = run_probe(
        ["import lasagne_bn_compat"], legacy, preload=["import lasagne_bn_compat", *legacy]
    )
    assert _differences(probe["before"], probe["after_import"]) == {}
    # install() changes import hooks only; importing the legacy names through
    # them imports our package, which changes nothing either.
    assert _differences(probe["before"], probe["after_calls"]) == {}
