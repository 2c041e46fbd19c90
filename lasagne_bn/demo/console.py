"""What the demo prints: plain lines, and progress redrawn in place on a terminal."""

from __future__ import annotations

import contextlib
import sys
import threading
import time


class Console:
    """Lines on stdout; progress that rewrites its line only on a terminal."""

    def __init__(self, quiet: bool, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stdout
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())

    def line(self, text: str = "", progress: bool = False) -> None:
        """Print a line (``progress`` lines are left out by --quiet)."""
        if progress and self.quiet:
            return
        print(text, file=self.stream, flush=True)

    def partial(self, text: str) -> None:
        """Rewrite the current terminal line (nothing off a terminal or with --quiet)."""
        if self.tty and not self.quiet:
            self.stream.write("\r" + text + "\x1b[K")
            self.stream.flush()

    @contextlib.contextmanager
    def task(self, text: str):
        """Show ``text ...`` and the seconds it has been running; end the line with the total.

        Yields a dict whose ``"seconds"`` is set when the task ends.
        """
        result = {"seconds": 0.0}
        show = not self.quiet
        stop = threading.Event()
        start = time.perf_counter()
        ticker = None
        if show and self.tty:

            def tick():
                while not stop.wait(0.5):
                    self.partial(f"{text} ... {time.perf_counter() - start:.0f} s")

            self.partial(f"{text} ...")
            ticker = threading.Thread(target=tick, daemon=True)
            ticker.start()
        elif show:
            print(f"{text} ...", end="", file=self.stream, flush=True)
        try:
            yield result
        finally:
            stop.set()
            if ticker is not None:
                ticker.join()
            result["seconds"] = time.perf_counter() - start
            if show:
                prefix = f"\r{text} ..." if self.tty else ""
                end = "\x1b[K" if self.tty else ""
                print(f"{prefix} {result['seconds']:.1f} s{end}", file=self.stream, flush=True)


def progress_bar(done: int, total: int, width: int = 20) -> str:
    """``[#######-------------]``: ``done`` of ``total`` as a bar of ``width`` cells."""
    filled = width if total <= 0 else min(width, round(width * done / total))
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def rate_text(rate: float | None) -> str:
    """Examples per second for an epoch line; ``None`` when no step was timed."""
    return "- ex/s (no timed step)" if rate is None else f"{rate:,.0f} ex/s"
