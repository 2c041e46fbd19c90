"""Ctrl-C at a safe point: between training steps, not inside a compiled kernel.

A ``KeyboardInterrupt`` raised while Numba or C code is running surfaces as a
``SystemError`` ("returned a result with an exception set") with a long
traceback.  :class:`DeferredInterrupt` catches the first Ctrl-C and raises
it where the caller checks (:meth:`~DeferredInterrupt.check`); a second
Ctrl-C interrupts at once, as usual.

>>> with DeferredInterrupt() as interrupt:
...     for step in range(3):
...         interrupt.check()
"""

from __future__ import annotations

import signal
import threading

__all__ = ["DeferredInterrupt"]


class DeferredInterrupt:
    """Context manager that defers the first SIGINT to the next :meth:`check`."""

    def __init__(self):
        self.pending = False
        self._old = None

    def _handler(self, signum, frame):
        if self.pending:  # the second Ctrl-C: the user means it
            raise KeyboardInterrupt
        self.pending = True

    def check(self) -> None:
        """Raise ``KeyboardInterrupt`` if Ctrl-C was pressed since the block began."""
        if self.pending:
            self.pending = False
            raise KeyboardInterrupt

    def __enter__(self) -> DeferredInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._old = signal.signal(signal.SIGINT, self._handler)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._old is not None:
            signal.signal(signal.SIGINT, self._old)
            self._old = None
        if exc_type is None:
            self.check()
