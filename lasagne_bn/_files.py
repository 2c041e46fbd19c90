"""Writing files so that a reader never sees half of one.

Checkpoints and the demo's results are written to a temporary file beside
the target and moved over it in one ``rename``: a crash, Ctrl-C or full disk
leaves the old file as it was.  The temporary files are named
``.<target name>.partial-<pid>`` so that one left behind by a process that
was killed (``kill -9``) is recognisable: the next write to the same target
removes those whose process is gone.

>>> import os, tempfile
>>> folder = tempfile.mkdtemp()
>>> atomic_write(os.path.join(folder, "w.bin"), lambda f: f.write(b"abc"))
>>> sorted(os.listdir(folder))
['w.bin']
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import BinaryIO

__all__ = ["RunFolder", "atomic_write", "partial_name"]

_PARTIAL = re.compile(r"\.(?P<name>.+)\.partial-(?P<pid>\d+)\Z")


def partial_name(target_name: str, pid: int | None = None) -> str:
    """The name of the temporary file written before ``target_name`` is replaced."""
    return f".{target_name}.partial-{os.getpid() if pid is None else pid}"


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def remove_stale_partials(folder: str, target_name: str, directories: bool = False) -> list[str]:
    """Delete temporary files (or folders) for ``target_name`` whose writer is gone."""
    removed = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        match = _PARTIAL.match(name)
        if match is None or match["name"] != target_name:
            continue
        pid = int(match["pid"])
        if pid == os.getpid() or _process_alive(pid):
            continue
        path = os.path.join(folder, name)
        try:
            if directories and os.path.isdir(path) and not os.path.islink(path):
                import shutil

                shutil.rmtree(path)
            else:
                os.unlink(path)
            removed.append(name)
        except OSError:
            pass
    return removed


def resolve_target(path: str | os.PathLike, argument: str = "path") -> str:
    """The file a write to ``path`` must replace: symlinks followed, bad paths refused.

    Raises
    ------
    ValueError
        For an empty path or one that names a directory.
    """
    text = os.fspath(path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    if not text.strip():
        raise ValueError(f"{argument}={text!r} names no file: expected a file path")
    target = os.path.realpath(text)  # a symlink's target is written, the link stays
    if os.path.isdir(target):
        raise ValueError(f"{argument}={text!r} is a directory: expected a file path")
    return target


def atomic_write(path: str | os.PathLike, writer: Callable[[BinaryIO], object]) -> None:
    """Write ``path`` through ``writer(f)`` (a binary file), all or nothing.

    The new file keeps the permission bits of the file it replaces, or gets
    the umask's for a new file; a symlink at ``path`` keeps pointing where it
    did, and its target gets the new content.  Errors name ``path``, never
    the temporary file.

    Raises
    ------
    ValueError
        If ``path`` is empty or a directory.
    OSError
        If the folder cannot be written (the subclass for the errno, e.g.
        ``PermissionError``); nothing is left behind.
    """
    shown = os.fspath(path)
    target = resolve_target(path)
    folder, name = os.path.split(target)
    remove_stale_partials(folder, name)
    tmp = os.path.join(folder, partial_name(name))
    try:
        mode = os.stat(target).st_mode & 0o7777
    except FileNotFoundError:
        mode = None
    try:
        # 0o666 through the umask: what open() gives a new file
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
    except OSError as err:
        raise OSError(err.errno, f"cannot write {shown}: {err.strerror}", shown) from None
    try:
        with os.fdopen(fd, "wb") as f:
            writer(f)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename in (tmp, target, None):
            raise OSError(exc.errno, f"cannot write {shown}: {exc.strerror}", shown) from None
        raise


class RunFolder:
    """The files of one run, written aside and moved into ``folder`` together.

    A run that fails or is interrupted leaves ``folder`` as the previous run
    left it; a finished one replaces every file named in ``names`` (also
    those it did not write, so no file of an older run stays beside the new
    ones).  Use it as a context manager: files are published on a normal
    exit and discarded on an exception.

    >>> import tempfile
    >>> from pathlib import Path
    >>> out = Path(tempfile.mkdtemp())
    >>> with RunFolder(out, ["a.txt"]) as run:
    ...     _ = run.path("a.txt").write_text("new")
    >>> (out / "a.txt").read_text()
    'new'
    """

    def __init__(self, folder: str | os.PathLike, names: list[str]):
        from pathlib import Path

        self.folder = Path(folder)
        self.names = list(names)
        remove_stale_partials(str(self.folder), "run", directories=True)
        self.stage = self.folder / partial_name("run")
        self.stage.mkdir(exist_ok=True)

    def path(self, name: str):
        """Where this run writes ``name`` now."""
        if name not in self.names:
            raise ValueError(f"name={name!r} is not one of this run's files {self.names}")
        return self.stage / name

    def final(self, name: str):
        """Where ``name`` will be once the run is published."""
        return self.folder / name

    def publish(self) -> None:
        for name in self.names:
            staged, final = self.stage / name, self.folder / name
            if staged.exists():
                os.replace(staged, final)
            elif final.exists():
                final.unlink()
        self.discard()

    def discard(self) -> None:
        import shutil

        shutil.rmtree(self.stage, ignore_errors=True)

    def __enter__(self) -> RunFolder:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.publish()
        else:
            self.discard()
