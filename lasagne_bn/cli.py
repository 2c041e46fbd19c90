"""The ``lasagne-bn`` command line.

Subcommands are registered, not hard-wired: this module knows the ones the
library itself provides, and other packages (the ``lasagne_bn_compat`` migration layer)
add theirs through the ``lasagne_bn.commands`` entry-point group, each entry
pointing at a ``register(subparsers)`` function.  That keeps ``lasagne_bn``
free of imports from ``lasagne_bn_compat``.

A command handler receives the parsed arguments and returns an exit code.
It raises :class:`UserError` for a mistake the user can fix (bad path,
unknown mode); the CLI prints it as one line and exits with status 2, never
with a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from lasagne_bn import __version__

BUILTIN_COMMANDS = {
    # name: "module:register"
    "demo": "lasagne_bn.demo:register",
    "bench": "lasagne_bn.bench:register",
}


class UserError(Exception):
    """A mistake on the command line; printed as one line, exit status 2."""


def int_argument(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An argparse ``type`` for an integer in ``[minimum, maximum]`` (no maximum: unbounded)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if maximum is None and value < minimum:
            raise argparse.ArgumentTypeError(f"expected an integer >= {minimum}, got {value}")
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(
                f"expected an integer in [{minimum}, {maximum}], got {value}"
            )
        return value

    return parse


def add_recycle_memory_argument(parser: argparse.ArgumentParser) -> None:
    """``--recycle-memory`` / ``--no-recycle-memory`` (on by default) for a command."""
    parser.add_argument(
        "--recycle-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help=(
            "keep large freed buffers in the process for the next step (glibc's mmap and "
            "trim thresholds, lasagne_bn.ops.recycle_host_memory); default: on, unless "
            "MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES set "
            "glibc's allocator"
        ),
    )


def apply_recycle_memory(args: argparse.Namespace) -> bool:
    """What ``--recycle-memory`` asks for (an application's choice); whether it was made."""
    if not getattr(args, "recycle_memory", False):
        return False
    from lasagne_bn.ops.host_memory import recycle_unless_configured

    return recycle_unless_configured()


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse's own errors: one line, status 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def _load(spec: str) -> Callable:
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="lasagne-bn",
        description=(
            "Run, train and migrate Lasagne/Theano networks with batch normalization "
            "on PyTensor 3."
        ),
        epilog="Example: lasagne-bn demo --epochs 3 --out demo-out",
    )
    parser.add_argument("--version", action="version", version=f"lasagne-bn {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    registrars = {name: _load(spec) for name, spec in BUILTIN_COMMANDS.items()}
    # The same distribution can be seen twice (an editable install plus the
    # checkout on PYTHONPATH): the first registration of a name wins.
    for ep in entry_points(group="lasagne_bn.commands"):
        if ep.name not in registrars:
            registrars[ep.name] = ep.load()
    for register in registrars.values():
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``lasagne-bn``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        return int(args.handler(args) or 0)
    except UserError as err:
        print(f"lasagne-bn {args.command}: error: {err}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `lasagne-bn inspect f | head -1`: the reader left; say nothing more
        _silence_stdout()
        return 141
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        print(f"lasagne-bn {args.command}: interrupted", file=sys.stderr)
        return 130


def _interrupted(exc: BaseException) -> bool:
    """Whether ``exc`` is Ctrl-C, also when a compiled kernel wrapped it in a SystemError."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return True
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return False


def _silence_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
