"""Keep every CPU busy with spinning child processes, for the load tests."""

from __future__ import annotations

import contextlib
import multiprocessing
import time
from collections.abc import Iterator


def _spin(ready, stop) -> None:
    ready.set()
    # A lock-free flag: ``Event.is_set`` takes a lock, and spinners that
    # queue on it sleep, so /proc/loadavg would not count them all.
    while not stop.value:
        pass


@contextlib.contextmanager
def busy_cores(count: int) -> Iterator[None]:
    """Run ``count`` busy loops until the block ends; they all spin when it starts.

    The children are spawned, not forked: forking a process in which JAX's
    threads run can deadlock the child (Python warns of it), and a spawned
    child imports only this module.  Starting one can take longer than any
    fixed pause, so this waits until each child says it spins.
    """
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.RawValue("b", 0)
    ready = [ctx.Event() for _ in range(count)]
    procs = [ctx.Process(target=_spin, args=(r, stop), daemon=True) for r in ready]
    for p in procs:
        p.start()
    try:
        for r in ready:
            if not r.wait(30):
                raise RuntimeError("a spinning child process did not start within 30 s")
        yield
    finally:
        stop.value = 1
        for p in procs:
            p.join(5)


def wait_for(reading, at_least: int, seconds: float = 5.0) -> int:
    """The first ``reading()`` >= ``at_least`` within ``seconds`` (else the last one)."""
    deadline = time.monotonic() + seconds
    seen = reading()
    while seen < at_least and time.monotonic() < deadline:
        time.sleep(0.01)
        seen = reading()
    return seen
