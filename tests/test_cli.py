"""The ``lasagne-bn`` command line: help, version, examples, and errors without tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lasagne_bn import __version__, cli

ROOT = Path(__file__).resolve().parents[1]


def run_cli(capsys, *argv):
    """``lasagne-bn argv...`` in this process: (exit status, stdout, stderr)."""
    try:
        status = cli.main(list(argv))
    except SystemExit as exit_:  # argparse's --help, --version and usage errors
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err


def subcommands() -> list[str]:
    parser = cli.build_parser()
    (action,) = [a for a in parser._actions if a.dest == "command"]
    return sorted(action.choices)


def assert_one_line_error(err: str, *fragments: str) -> None:
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for fragment in fragments:
        assert fragment in lines[0], err


def test_help_lists_the_subcommands_and_an_example(capsys):
    status, out, _ = run_cli(capsys, "--help")
    assert status == 0
    assert "usage: lasagne-bn" in out
    for name in ("demo", "bench"):
        assert name in out
    assert "Example: lasagne-bn demo" in out


def test_version(capsys):
    status, out, _ = run_cli(capsys, "--version")
    assert status == 0
    assert out.strip() == f"lasagne-bn {__version__}"


def test_builtin_subcommands_are_registered():
    assert {"demo", "bench"} <= set(subcommands())


def test_an_entry_point_seen_twice_registers_once(monkeypatch):
    """An editable install plus the checkout on PYTHONPATH lists each entry point twice."""
    from importlib.metadata import EntryPoint

    twice = [
        EntryPoint(
            name="inspect",
            value="lasagne_bn_compat.cli:register_inspect",
            group="lasagne_bn.commands",
        )
    ] * 2
    monkeypatch.setattr(cli, "entry_points", lambda group: twice)
    assert "inspect" in subcommands()


@pytest.mark.parametrize("name", subcommands())
def test_every_subcommand_help_has_an_example(capsys, name):
    status, out, _ = run_cli(capsys, name, "--help")
    assert status == 0
    assert f"usage: lasagne-bn {name}" in out
    assert "example" in out.lower()
    example_lines = [line for line in out.splitlines() if f"lasagne-bn {name}" in line]
    assert len(example_lines) >= 2, out  # the usage line and at least one example


def test_no_subcommand_prints_help_and_exits_2(capsys):
    status, out, _ = run_cli(capsys)
    assert status == 2
    assert "usage: lasagne-bn" in out


def test_unknown_subcommand_is_one_line_exit_2(capsys):
    status, out, err = run_cli(capsys, "frobnicate")
    assert status == 2
    assert out == ""
    assert_one_line_error(err, "lasagne-bn: error:", "frobnicate")


def test_user_error_is_one_line_exit_2(capsys, monkeypatch):
    def register(subparsers):
        parser = subparsers.add_parser("boom", epilog="example: lasagne-bn boom")

        def handler(args):
            raise cli.UserError("no such file: missing.npz")

        parser.set_defaults(handler=handler)

    monkeypatch.setattr(cli, "BUILTIN_COMMANDS", {**cli.BUILTIN_COMMANDS, "boom": "x:y"})
    real_load = cli._load
    monkeypatch.setattr(cli, "_load", lambda spec: register if spec == "x:y" else real_load(spec))
    status, out, err = run_cli(capsys, "boom")
    assert status == 2
    assert_one_line_error(err, "lasagne-bn boom: error: no such file: missing.npz")


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["demo", "--epochs", "-1"], "argument --epochs: expected an integer >= 1, got -1"),
        (["demo", "--epochs", "many"], "argument --epochs: expected an integer"),
        (["demo", "--batch-size", "1"], "argument --batch-size"),
        (["demo", "--mode", "theano"], "argument --mode: invalid choice: 'theano'"),
        (["demo", "--min-accuracy", "95"], "argument --min-accuracy"),
        (["demo", "--limit", "10"], "argument --limit: expected an integer >= 100"),
        (["demo", "--seed", "-3"], "argument --seed"),
        (["bench", "--reps", "0"], "argument --reps: expected an integer in [1, 1000], got 0"),
        (["bench", "--reps", "1001"], "expected an integer in [1, 1000], got 1001"),
        (["bench", "--reps", "x"], "argument --reps: expected an integer, got 'x'"),
        (["bench", "--shape", "1,3"], "one value per statistic"),
        (["bench", "--shape", "2,3,4"], "expected 2 or 4 positive sizes"),
        (["bench", "--mode", "gpu"], "argument --mode: invalid choice"),
    ],
)
def test_bad_options_are_one_line_exit_2(capsys, argv, fragment):
    status, out, err = run_cli(capsys, *argv)
    assert status == 2
    assert out == ""
    assert_one_line_error(err, f"lasagne-bn {argv[0]}: error:", fragment)


def test_demo_out_that_is_a_file_is_a_user_error(capsys, tmp_path):
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a directory")
    status, _, err = run_cli(capsys, "demo", "--out", str(a_file))
    assert status == 2
    assert_one_line_error(err, "lasagne-bn demo: error: --out", "not a directory")
    status, _, err = run_cli(capsys, "demo", "--out", str(a_file / "sub"))
    assert status == 2
    assert_one_line_error(err, "lasagne-bn demo: error: --out", "cannot write there")


def test_bench_runs_a_tiny_shape(capsys):
    status, out, err = run_cli(
        capsys, "bench", "--shape", "4,3,5,5", "--shape", "6,7", "--reps", "1"
    )
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0].startswith("batch norm, float32, mode default")
    rows = [line.split() for line in lines if line.split()[:1] in (["train"], ["infer"])]
    rows += [line.split()[-4:] for line in lines if line.startswith("(")]
    assert len(rows) == 4, out
    for row in rows:
        assert row[0] in ("train", "infer")
        assert float(row[1]) > 0 and float(row[2]) > 0 and row[3].endswith("x")


def test_python_dash_m_runs_the_cli():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, "-m", "lasagne_bn", "--version"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"lasagne-bn {__version__}"
