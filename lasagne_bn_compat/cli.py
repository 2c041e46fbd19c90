"""The ``lasagne-bn run``, ``convert``, ``inspect`` and ``compare`` subcommands.

Registered with ``lasagne_bn.cli`` through the ``lasagne_bn.commands``
entry-point group (see pyproject.toml), so that lasagne_bn never imports
this package.  Each ``register_*`` function adds one subparser.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import runpy
import sys

import numpy as np

from lasagne_bn.cli import UserError

__all__ = ["register_compare", "register_convert", "register_inspect", "register_run"]

_RAW = argparse.RawDescriptionHelpFormatter


# --------------------------------------------------------------------------
# run


def register_run(subparsers) -> None:
    """``lasagne-bn run SCRIPT [ARGS]``: a legacy Theano/Lasagne script on lasagne_bn."""
    parser = subparsers.add_parser(
        "run",
        usage="lasagne-bn run [-h] [-m] [--theano-flags FLAGS] SCRIPT [ARGS ...]",
        help="run an unchanged Theano/Lasagne script on PyTensor and lasagne_bn",
        description=(
            "Install the theano/lasagne compatibility layer (lasagne_bn_compat.install()) and run "
            "SCRIPT as __main__ with sys.argv = [SCRIPT, *ARGS], as 'python SCRIPT ARGS' "
            "would.  THEANO_FLAGS is honoured for the options PyTensor has (floatX, mode, "
            "...)."
        ),
        epilog=(
            "Examples:\n"
            "  lasagne-bn run train_mnist.py --epochs 3\n"
            "  THEANO_FLAGS=floatX=float32,mode=FAST_COMPILE lasagne-bn run train_mnist.py\n"
            "  lasagne-bn run -m mypackage.train --lr 0.1"
        ),
        formatter_class=_RAW,
    )
    parser.add_argument(
        "-m", dest="module", action="store_true", help="SCRIPT is a module name (python -m)"
    )
    parser.add_argument(
        "--theano-flags",
        metavar="FLAGS",
        default=None,
        help="Theano-style flags to apply instead of the THEANO_FLAGS environment variable",
    )
    parser.add_argument("script", metavar="SCRIPT", help="the script (or module, with -m)")
    rest = parser.add_argument(
        "args", nargs=argparse.REMAINDER, metavar="ARGS", help="its arguments"
    )
    # argparse counts a REMAINDER positional as required, and so lists ARGS
    # beside SCRIPT when the command line is empty; a script needs no arguments
    rest.required = False
    parser.set_defaults(handler=_run)


def _run(args) -> int:
    import lasagne_bn_compat

    if not args.module and not os.path.isfile(args.script):
        raise UserError(f"no such script: {args.script!r}")
    try:
        lasagne_bn_compat.install(theano_flags=args.theano_flags)
    except RuntimeError as exc:
        raise UserError(str(exc)) from None
    import pytensor

    import lasagne_bn_compat.theano
    from lasagne_bn.ops.numba.linker import is_default_numba_mode
    from lasagne_bn_compat import small_graphs

    lasagne_bn_compat.theano.on_first_compile = _compiling_notice
    old_argv, old_path = sys.argv[:], sys.path[:]
    old_mode = pytensor.config.mode
    if is_default_numba_mode(None):
        # the script's pytensor.function and x.eval() too, not only theano.function
        small_graphs.use_by_default()
    sys.argv = [args.script, *args.args]
    try:
        if args.module:
            sys.path.insert(0, os.getcwd())
            try:
                found = importlib.util.find_spec(args.script) is not None
            except ImportError:
                found = False
            if not found:
                raise UserError(f"no module named {args.script!r}")
            runpy.run_module(args.script, run_name="__main__", alter_sys=True)
        else:
            sys.path.insert(0, os.path.dirname(os.path.abspath(args.script)))
            runpy.run_path(args.script, run_name="__main__")
    except SystemExit as exit_:
        code = exit_.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
        pytensor.config.mode = old_mode
    return 0


def _compiling_notice() -> None:
    from lasagne_bn_compat import small_graphs

    print(
        "lasagne-bn run: compiling the script's first function (graphs of more than "
        f"{small_graphs.SMALL_GRAPH_NODES} nodes compile with Numba: a minute or more the "
        "first time, cached for later runs)",
        file=sys.stderr,
        flush=True,
    )


# --------------------------------------------------------------------------
# compare


def register_compare(subparsers) -> None:
    """``lasagne-bn compare BUILDER RECORDED``: the first layer that differs from a legacy run."""
    parser = subparsers.add_parser(
        "compare",
        help="name the first layer whose output differs from one recorded on legacy Theano",
        description=(
            "Build the network BUILDER returns (FILE.py:FUNCTION or MODULE:FUNCTION, run "
            "unchanged through the theano/lasagne shims), give it the parameters and inputs "
            "RECORDED holds, compute every layer's output with the recorded get_output "
            "options, and compare each with the recorded one.  RECORDED is written on the "
            "legacy machine by record_layers.py (print it with --print-recorder).  Exit "
            "status 0 when every layer matches, 1 when one differs."
        ),
        epilog=(
            "Examples:\n"
            "  lasagne-bn compare --print-recorder > record_layers.py\n"
            "  python record_layers.py build_net.py:build legacy_layers.npz   # on Theano\n"
            "  lasagne-bn compare build_net.py:build legacy_layers.npz"
        ),
        formatter_class=_RAW,
    )
    parser.add_argument("builder", metavar="BUILDER", nargs="?", help="FILE.py:FUNCTION")
    parser.add_argument("recorded", metavar="RECORDED", nargs="?", help="the recorder's .npz")
    parser.add_argument("--rtol", type=float, default=1e-4, help="relative tolerance (1e-4)")
    parser.add_argument("--atol", type=float, default=1e-5, help="absolute tolerance (1e-5)")
    parser.add_argument(
        "--mode", default=None, help="the PyTensor mode to compile in (default: PyTensor's)"
    )
    parser.add_argument(
        "--print-recorder",
        action="store_true",
        help="print record_layers.py, to copy to the machine that runs Theano, and exit",
    )
    parser.set_defaults(handler=_compare)


def _compare(args) -> int:
    from lasagne_bn_compat import compare, record_layers

    if args.print_recorder:
        with open(record_layers.__file__, encoding="utf-8") as f:
            sys.stdout.write(f.read())
        return 0
    if args.builder is None or args.recorded is None:
        raise UserError("BUILDER and RECORDED are required (or --print-recorder)")
    _check_input_file(args.recorded)
    try:
        recording = compare.read_recording(args.recorded)
    except (*_read_errors(), ValueError) as exc:
        raise _read_error(args.recorded, exc) from None
    network = build_network_from_spec(args.builder, what="BUILDER")
    try:
        result = compare.compare_layers(
            network, recording, rtol=args.rtol, atol=args.atol, mode=args.mode
        )
    except ValueError as exc:
        raise UserError(f"{args.recorded}: {exc}") from None
    print(result)
    return 0 if result.ok else 1


# --------------------------------------------------------------------------
# inspect

_HEURISTIC = """\
Batch-norm statistics: named arrays (pickled networks, named .npz) are
recognised by their names (<layer>.mean, .inv_std, .var, .beta, .gamma).
Unnamed arrays (np.savez(f, *get_all_param_values(net)) files, pickled
lists) by position: a BatchNormLayer contributes beta, gamma, mean, inv_std,
all of one shape, one after the other, while the weights around them have
other shapes.  So 4 consecutive arrays of one shape whose last is all > 0
are shown as beta, gamma, mean, 'inv_std or var'; exactly 3 (a layer with
beta=None or gamma=None) as 'beta or gamma', mean, 'inv_std or var'.  The
values cannot tell inv_std from var: Lasagne files hold inv_std."""

_FORMAT_NAMES = {
    "npz": "npz (np.savez of get_all_param_values)",
    "npy": "npy (an np.save'd list of arrays)",
    "pickle": "pickle (a pickled list of arrays)",
    "model-zoo": "model-zoo (a pickled dict with 'param values')",
    "network": "network (a pickled Lasagne network)",
}


def register_inspect(subparsers) -> None:
    """``lasagne-bn inspect FILE``: what a checkpoint holds."""
    parser = subparsers.add_parser(
        "inspect",
        help="list the arrays of a legacy checkpoint and spot batch-norm statistics",
        description=(
            "List the arrays of a checkpoint (any format lasagne_bn_compat.io reads: "
            ".npz, pickles from "
            "Python 2 or 3, model-zoo dicts, pickled Lasagne networks, gzipped or not) with "
            "shapes, dtypes and value ranges, and mark those that look like batch-norm "
            "parameters.  Pickles are read through an allow-list: an unsafe pickle is "
            "refused, nothing in it runs.\n\n" + _HEURISTIC
        ),
        epilog=(
            "Examples:\n  lasagne-bn inspect model.npz\n"
            "  lasagne-bn inspect --lint build.py:build_network model.npz"
        ),
        formatter_class=_RAW,
    )
    parser.add_argument("file", metavar="FILE", nargs="?", help="the checkpoint")
    parser.add_argument(
        "--lint",
        metavar="SPEC",
        help="check the batch-norm layers of the network FILE.py:FUNCTION or MODULE:FUNCTION "
        "returns (bias before a batch norm, a nonlinearity before it, statistics never "
        "trained; with FILE, epsilon against the file's statistics); exit status 1 on findings",
    )
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="with --lint: the training batch size (flags one value per statistic)",
    )
    _add_allow_class(parser)
    parser.set_defaults(handler=_inspect)


def _add_allow_class(parser) -> None:
    parser.add_argument(
        "--allow-class",
        metavar="MODULE.NAME",
        action="append",
        default=[],
        help="a class of your own, importable here, that a pickled checkpoint may name "
        "(repeatable); classes of modules that run commands or code are never allowed",
    )


def _allowed_classes(args) -> dict:
    """``--allow-class`` values as the ``classes`` mapping of lasagne_bn_compat.io's readers."""
    from lasagne_bn_compat._pickle import runs_code

    classes = {}
    for path in args.allow_class:
        module_name, _, name = path.rpartition(".")
        if not module_name or not name.isidentifier():
            raise UserError(f"--allow-class {path!r}: expected MODULE.NAME, e.g. mymodels.MyLayer")
        if runs_code(path):
            raise UserError(
                f"--allow-class {path!r}: {module_name} can run commands or code; a checkpoint "
                "never needs it, so it cannot be allowed"
            )
        try:
            obj = getattr(importlib.import_module(module_name), name)
        except (ImportError, AttributeError) as exc:
            raise UserError(f"--allow-class {path!r}: cannot import it ({exc})") from None
        if not isinstance(obj, type):
            raise UserError(
                f"--allow-class {path!r}: is a {type(obj).__name__}, not a class; only classes "
                "can be allowed"
            )
        classes[path] = obj
    return classes


def _check_input_file(path: str) -> None:
    if os.path.isdir(path):
        raise UserError(f"{path!r} is a directory, not a checkpoint file")
    if not os.path.exists(path):
        raise UserError(f"no such file: {path!r}")
    if not os.path.isfile(path):
        raise UserError(f"{path!r} is not a regular file")


def _read_errors():
    from lasagne_bn_compat.io import LegacyFormatError, LegacyNetworkError, UnsafePickleError

    return (LegacyFormatError, LegacyNetworkError, UnsafePickleError, OSError)


def _read_error(path: str, exc: Exception) -> UserError:
    """A reader's error for the command line: one line that names the file."""
    message = str(exc)
    return UserError(message if str(path) in message else f"{path}: {message}")


def _fmt(value) -> str:
    return "" if value is None else f"{value:.4g}"


def _describe(value) -> str:
    if isinstance(value, np.ndarray):
        return f"array {value.shape} {value.dtype}"
    if isinstance(value, list | tuple | dict):
        return f"{type(value).__name__} of {len(value)}"
    return f"{type(value).__name__} {value!r}"[:60]


def _lint(args) -> int:
    from lasagne_bn.lint import lint
    from lasagne_bn_compat.io import read_checkpoint

    network = build_network_from_spec(args.lint)
    checkpoint = None
    if args.file is not None:
        _check_input_file(args.file)
        try:
            checkpoint = read_checkpoint(args.file, classes=_allowed_classes(args))
        except _read_errors() as exc:
            raise _read_error(args.file, exc) from None
    messages = lint(network, batch_size=args.batch_size, checkpoint=checkpoint)
    for message in messages:
        print(message)
    print(f"{len(messages)} finding(s) in {args.lint}")
    return 1 if messages else 0


def _inspect(args) -> int:
    from lasagne_bn_compat.io import inspect_checkpoint

    if args.lint is not None:
        return _lint(args)
    if args.file is None:
        raise UserError("FILE is required (or --lint SPEC)")
    _check_input_file(args.file)
    try:
        checkpoint, infos = inspect_checkpoint(args.file, classes=_allowed_classes(args))
    except _read_errors() as exc:
        raise _read_error(args.file, exc) from None
    total = sum(int(np.prod(i.shape)) for i in infos)
    print(f"{args.file}: {_FORMAT_NAMES[checkpoint.format]}, {len(infos)} arrays, {total} values")
    if checkpoint.network is not None:
        from lasagne_bn.layers import get_all_layers
        from lasagne_bn_compat.io import _find_layers

        layers = get_all_layers(_find_layers(checkpoint.network))
        print("layers: " + ", ".join(f"{type(lyr).__name__} {lyr.name!r}" for lyr in layers))
    for key, value in checkpoint.extras.items():
        print(f"extra {key!r}: {_describe(value)}")
    rows = [("#", "name", "shape", "dtype", "min", "max", "looks like")]
    rows += [
        (str(i.index), i.name, str(i.shape), i.dtype, _fmt(i.min), _fmt(i.max), i.role or "")
        for i in infos
    ]
    widths = [max(len(row[c]) for row in rows) for c in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    from lasagne_bn_compat.io import AMBIGUOUS

    ambiguous = [str(i.index) for i in infos if i.role == AMBIGUOUS]
    if ambiguous:
        print(
            f"arrays {', '.join(ambiguous)}: one shape in a row that shapes cannot split into "
            "layers (a bias kept before a batch norm?); 'convert' needs --network or --stats"
        )
    stats = [i for i in infos if i.role and ("inv_std" in i.role or "var" in i.role)]
    if stats:
        print(
            f"{len(stats)} batch-norm layer(s): their statistics are arrays "
            f"{', '.join(str(i.index) for i in stats)} (see 'lasagne-bn inspect --help')"
        )
    else:
        print("no batch-norm statistics recognised (see 'lasagne-bn inspect --help')")
    return 0


# --------------------------------------------------------------------------
# convert


def register_convert(subparsers) -> None:
    """``lasagne-bn convert IN OUT``: change a checkpoint's format and/or BN statistics."""
    parser = subparsers.add_parser(
        "convert",
        help="convert a checkpoint between formats and between inv_std and var statistics",
        description=(
            "Read IN (any format 'lasagne-bn inspect' reads) and write OUT.  With --to, "
            "batch-norm statistics are converted: var = 1/inv_std**2 - epsilon, inv_std = "
            "1/sqrt(var + epsilon).  Which arrays are statistics comes from the pickled "
            "network (when IN is one), from --network (a function that builds the network, "
            "with each layer's own epsilon), from --stats, or, with --guess, from the "
            "heuristic of 'lasagne-bn inspect'."
        ),
        epilog=(
            "Examples:\n"
            "  lasagne-bn convert model.pkl model.npz                  # format only\n"
            "  lasagne-bn convert in.npz out.npz --to var --epsilon 1e-4 --guess\n"
            "  lasagne-bn convert in.npz out.npz --to var --network build.py:build_network\n"
            "  lasagne-bn convert in.npz out.npz --to var --stats 4,9 --epsilon 1e-3"
        ),
        formatter_class=_RAW,
    )
    parser.add_argument("input", metavar="IN", help="the checkpoint to read")
    parser.add_argument("output", metavar="OUT", help="the file to write (replaced atomically)")
    parser.add_argument(
        "--to", choices=("inv_std", "var"), help="convert batch-norm statistics to this"
    )
    parser.add_argument(
        "--from",
        dest="from_",
        choices=("inv_std", "var"),
        help="what IN's statistics are (default: the other one)",
    )
    parser.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help="epsilon of the conversion (default: each layer's with --network or a pickled "
        "network, else Lasagne's default 1e-4)",
    )
    parser.add_argument(
        "--format",
        choices=("npz", "pickle", "model-zoo"),
        help="format of OUT (default: from its extension; model-zoo stays model-zoo)",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--network",
        metavar="SPEC",
        help="FILE.py:FUNCTION or MODULE:FUNCTION returning the network (legacy code works: "
        "it runs with lasagne_bn_compat installed)",
    )
    source.add_argument(
        "--stats", metavar="I,J,...", help="indices of the arrays that are statistics"
    )
    source.add_argument(
        "--guess", action="store_true", help="take the statistics 'lasagne-bn inspect' marks"
    )
    _add_allow_class(parser)
    parser.set_defaults(handler=_convert)


def build_network_from_spec(spec: str, what: str = "--network"):
    """The network that ``FILE.py:FUNCTION`` or ``MODULE:FUNCTION`` returns (shims installed).

    ``what`` names the argument in error messages.
    """
    import lasagne_bn_compat

    target, sep, func_name = spec.rpartition(":")
    if not sep or not target or not func_name:
        raise UserError(f"{what} {spec!r}: expected FILE.py:FUNCTION or MODULE:FUNCTION")
    lasagne_bn_compat.install()
    if target.endswith(".py"):
        if not os.path.isfile(target):
            raise UserError(f"{what} {spec!r}: no such file {target!r}")
        namespace = runpy.run_path(target, run_name="__lasagne_bn_network__")
    else:
        try:
            namespace = vars(importlib.import_module(target))
        except ImportError as exc:
            raise UserError(f"{what} {spec!r}: cannot import {target!r} ({exc})") from None
    func = namespace.get(func_name)
    if not callable(func):
        raise UserError(f"{what} {spec!r}: {target!r} has no function {func_name!r}")
    network = func()
    from lasagne_bn.layers import Layer

    layers = network if isinstance(network, list | tuple) else [network]
    if not layers or not all(isinstance(layer, Layer) for layer in layers):
        raise UserError(
            f"{what} {spec!r}: {func_name}() returned {type(network).__name__}, not a layer "
            "or a list of layers"
        )
    return network


def _output_format(args, checkpoint) -> str:
    if args.format:
        return args.format
    ext = os.path.splitext(args.output)[1].lower()
    if ext == ".npz":
        return "npz"
    if checkpoint.format == "model-zoo":
        return "model-zoo"
    if ext in (".pkl", ".pickle", ".p"):
        return "pickle"
    raise UserError(
        f"cannot tell the format of {args.output!r} from its extension; pass --format "
        "npz, pickle or model-zoo"
    )


def _stat_indices(args, checkpoint) -> list[int]:
    from lasagne_bn_compat.io import AMBIGUOUS, guess_bn_roles

    n = len(checkpoint.values)
    if args.stats is not None:
        try:
            indices = [int(s) for s in args.stats.split(",") if s.strip()]
        except ValueError:
            raise UserError(f"--stats {args.stats!r}: expected comma-separated indices") from None
        bad = [i for i in indices if not 0 <= i < n]
        if bad or not indices:
            raise UserError(f"--stats {args.stats!r}: indices must be in 0..{n - 1}")
        return indices
    if checkpoint.stat_indices is not None:
        return list(checkpoint.stat_indices)
    roles = guess_bn_roles(checkpoint.values)
    ambiguous = [i for i, role in enumerate(roles) if role == AMBIGUOUS]
    guessed = [
        i
        for i, role in enumerate(roles)
        if role and role != AMBIGUOUS and ("inv_std" in role or "var" in role)
    ]
    if args.guess and ambiguous:
        raise UserError(
            f"{args.input}: arrays {', '.join(map(str, ambiguous))} have one shape in a row "
            "that cannot be split into batch-norm layers by shape (a layer that kept its bias "
            "before a batch norm?); --guess would be a guess: pass --network FILE.py:FUNCTION "
            "or --stats I,J,..."
        )
    if args.guess:
        if not guessed:
            raise UserError(
                f"{args.input}: no array looks like a batch-norm statistic; pass --stats or "
                "--network"
            )
        return guessed
    hint = (
        f"--guess (would convert arrays {', '.join(map(str, guessed))}), "
        if guessed and not ambiguous
        else ""
    )
    raise UserError(
        f"{args.input} does not say which arrays are batch-norm statistics: pass "
        f"{hint}--stats I,J,... or --network FILE.py:FUNCTION"
    )


def _convert(args) -> int:
    from lasagne_bn.layers.bn_storage import convert_param_values, inv_std_to_var, var_to_inv_std
    from lasagne_bn_compat.io import read_checkpoint, write_values

    _check_input_file(args.input)
    if args.to is None and (args.from_ or args.network or args.stats or args.guess):
        raise UserError("--from, --network, --stats and --guess need --to inv_std|var")
    try:
        checkpoint = read_checkpoint(args.input, classes=_allowed_classes(args))
    except _read_errors() as exc:
        raise _read_error(args.input, exc) from None
    out_format = _output_format(args, checkpoint)
    values = list(checkpoint.values)
    done = ""
    recorded = checkpoint.stat_storage
    if recorded is not None and args.to == recorded:
        raise UserError(
            f"{args.input} records that its batch-norm statistics are already {recorded}: "
            "converting them again would break them"
        )
    if recorded is not None and args.from_ not in (None, recorded):
        raise UserError(
            f"--from {args.from_}: {args.input} records that its statistics are {recorded}"
        )
    var_indices = checkpoint.stat_indices if recorded == "var" else None
    if args.to is not None:
        src = args.from_ or recorded or ("var" if args.to == "inv_std" else "inv_std")
        if src == args.to:
            raise UserError(f"--from {src} --to {args.to} converts nothing")
        network = checkpoint.network
        if network is not None and (args.network or args.stats or args.guess):
            raise UserError(f"{args.input} is a pickled network: it needs no --network/--stats")
        if args.network:
            network = build_network_from_spec(args.network)
        try:
            if network is not None:
                from lasagne_bn.layers.bn_storage import bn_stat_indices
                from lasagne_bn_compat.io import _find_layers

                layers = _find_layers(network)
                values = convert_param_values(
                    layers, values, from_storage=src, to_storage=args.to, epsilon=args.epsilon
                )
                indices = [i for i, _ in bn_stat_indices(layers)]
                eps = "each layer's epsilon" if args.epsilon is None else f"epsilon {args.epsilon}"
            else:
                indices = _stat_indices(args, checkpoint)
                epsilon = 1e-4 if args.epsilon is None else args.epsilon
                convert = inv_std_to_var if args.to == "var" else var_to_inv_std
                for i in indices:
                    try:
                        values[i] = convert(values[i], epsilon)
                    except (ValueError, TypeError) as exc:
                        raise ValueError(f"array {i}: {exc}") from None
                eps = f"epsilon {epsilon}"
        except (ValueError, TypeError) as exc:
            raise UserError(f"{args.input}: {exc}") from None
        done = f"; arrays {', '.join(map(str, indices))} converted {src} -> {args.to} ({eps})"
        var_indices = indices if args.to == "var" else None
    extras = checkpoint.extras if out_format == "model-zoo" else None
    if checkpoint.extras and out_format != "model-zoo":
        print(f"note: {', '.join(map(repr, checkpoint.extras))} not written ({out_format})")
    try:
        write_values(args.output, values, out_format, extras=extras, var_indices=var_indices)
    except (OSError, TypeError, ValueError) as exc:
        raise UserError(f"cannot write {args.output!r}: {exc}") from None
    print(f"wrote {args.output} ({out_format}, {len(values)} arrays){done}")
    return 0
