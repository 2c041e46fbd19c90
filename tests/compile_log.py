"""Where a cold test run's time goes: each worker's Numba and C compilations, as JSON lines.

Enabled by ``LBN_COMPILE_LOG=DIR`` (``tests/conftest.py`` loads it): every worker
appends ``{"kind", "what", "test", "seconds"}`` records to ``DIR/<worker>.jsonl``,
``kind`` being ``numba`` (one dispatcher compiling one signature, without the
nested compilations of what it calls, which have their own records) or ``c``
(PyTensor compiling one C module).
``benchmarks/compile_report.py`` sums them per kernel and per test file.
"""

from __future__ import annotations

import json
import os
import time
from hashlib import sha256
from pathlib import Path

import pytest

_current_test = ["(collection)"]
_out: list = []


def _write(kind: str, what: str, seconds: float) -> None:
    if _out:
        rec = {"kind": kind, "what": what, "test": _current_test[0], "seconds": round(seconds, 3)}
        _out[0].write(json.dumps(rec) + "\n")
        _out[0].flush()


def _install_numba() -> None:
    from numba.core import event

    class Listener(event.Listener):
        """Each compilation's own time: a nested one (a kernel a graph calls) is
        its own record, and is not counted again in its caller's."""

        def __init__(self) -> None:
            self.stack: list[list[float]] = []  # [start, seconds of nested compilations]

        def on_start(self, ev) -> None:
            self.stack.append([time.perf_counter(), 0.0])

        def on_end(self, ev) -> None:
            start, nested = self.stack.pop()
            total = time.perf_counter() - start
            if self.stack:
                self.stack[-1][1] += total
            func = getattr(ev.data.get("dispatcher"), "py_func", None)
            name = f"{getattr(func, '__module__', '')}.{getattr(func, '__qualname__', '?')}"
            args = tuple(str(a) for a in ev.data.get("args", ()))
            _write("numba", f"{name}{args}", total - nested)

    event.register("numba:compile", Listener())


def _install_c() -> None:
    from pytensor.link.c import cmodule

    original = cmodule.ModuleCache.module_from_key

    def module_from_key(self, key, lnk=None):
        start = time.perf_counter()
        try:
            return original(self, key, lnk)
        finally:
            seconds = time.perf_counter() - start
            if seconds > 0.2:  # a compilation, not a cache hit
                op = type(lnk.fgraph.outputs[0].owner.op).__name__ if lnk is not None else "?"
                # the module's cache key tells one module from another across workers
                digest = sha256(repr(key).encode()).hexdigest()[:12]
                _write("c", f"{op}(key {digest})", seconds)

    cmodule.ModuleCache.module_from_key = module_from_key


def start() -> None:
    directory = Path(os.environ["LBN_COMPILE_LOG"])
    directory.mkdir(parents=True, exist_ok=True)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    _out.append(open(directory / f"{worker}.jsonl", "a"))  # noqa: SIM115 (open for the session)
    _install_numba()
    _install_c()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _current_test[0] = item.nodeid
    return (yield)
