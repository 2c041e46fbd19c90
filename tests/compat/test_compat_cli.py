"""``lasagne-bn run / convert / inspect``, registered through the lasagne_bn.commands group."""

from __future__ import annotations

import os
import pickle
from importlib.metadata import EntryPoint

import numpy as np
import pytest
from legacy_helpers import DATA, QUIET, run_cli

import lasagne_bn.cli as cli
import lasagne_bn_compat
import lasagne_bn_compat.io as cio

pytestmark = QUIET
ORACLE = DATA / "compat_oracle"
#: What ``pyproject.toml`` registers in the ``lasagne_bn.commands`` group.
ENTRY_POINTS = [
    EntryPoint(
        name=name, value=f"lasagne_bn_compat.cli:register_{name}", group="lasagne_bn.commands"
    )
    for name in ("run", "convert", "inspect", "compare")
]


@pytest.fixture
def lasagne_bn_cmd(monkeypatch, capsys):
    """``lasagne-bn ARGS`` in this process -> (exit status, stdout, stderr)."""
    monkeypatch.setattr(
        cli,
        "BUILTIN_COMMANDS",
        {k: v for k, v in cli.BUILTIN_COMMANDS.items() if _importable(v)},
    )
    monkeypatch.setattr(cli, "entry_points", lambda group: ENTRY_POINTS)

    def run(*args):
        try:
            status = cli.main([str(a) for a in args])
        except SystemExit as exc:  # argparse's own errors and --help
            status = exc.code
        out = capsys.readouterr()
        return status, out.out, out.err

    yield run
    lasagne_bn_compat.uninstall()


def _importable(spec: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(spec.partition(":")[0]) is not None


@pytest.mark.parametrize("command", ["run", "convert", "inspect"])
def test_help_has_an_example(lasagne_bn_cmd, command):
    status, out, _ = lasagne_bn_cmd(command, "--help")
    assert status == 0
    assert f"lasagne-bn {command} " in out.split("Example")[1]


def test_inspect(lasagne_bn_cmd):
    status, out, err = lasagne_bn_cmd("inspect", ORACLE / "mlp_params.npz")
    assert status == 0, err
    lines = out.splitlines()
    assert "npz (np.savez of get_all_param_values), 7 arrays, 68 values" in lines[0]
    assert lines[1].split() == ["#", "name", "shape", "dtype", "min", "max", "looks", "like"]
    assert lines[6].split()[:4] == ["4", "arr_4", "(5,)", "float32"]
    assert lines[6].endswith("bn inv_std or var")
    assert "statistics are arrays 4" in lines[-1]
    status, out, _ = lasagne_bn_cmd("inspect", ORACLE / "mlp_modelzoo.pkl")
    assert "extra 'synset words': list of 3" in out
    status, out, _ = lasagne_bn_cmd("inspect", ORACLE / "mlp_p2.pkl.gz")
    assert "layers: InputLayer 'in', DenseLayer 'fc', BatchNormLayer 'fc_bn'" in out
    assert "fc_bn.inv_std" in out


def test_user_errors_are_one_line_with_status_2(lasagne_bn_cmd, tmp_path):
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(os.system))
    cases = [
        (("inspect", tmp_path / "missing.npz"), "no such file"),
        (("inspect", evil), "refers to posix.system"),
        (("run", tmp_path / "missing.py"), "no such script"),
        (("run", "-m", "no_such_module_here"), "no module named"),
        (("convert", ORACLE / "mlp_params.npz", tmp_path / "o.npz", "--to", "var"), "--guess"),
        (("convert", ORACLE / "mlp_params.npz", tmp_path / "o.xyz"), "pass --format"),
        (("convert", ORACLE / "mlp_params.npz", tmp_path / "o.npz", "--guess"), "need --to"),
        (
            (
                "convert",
                ORACLE / "mlp_params.npz",
                tmp_path / "o.npz",
                "--to",
                "var",
                "--stats",
                "9",
            ),
            "indices must be in 0..6",
        ),  # fmt: skip
        (
            (
                "convert",
                ORACLE / "mlp_params.npz",
                tmp_path / "o.npz",
                "--to",
                "var",
                "--stats",
                "0",
            ),
            "array 0: inv_std holds",
        ),  # fmt: skip
        (
            ("convert", ORACLE / "mlp_p2.pkl.gz", tmp_path / "o.npz", "--to", "var", "--guess"),
            "needs no --network",
        ),  # fmt: skip
        (
            (
                "convert",
                ORACLE / "mlp_params.npz",
                tmp_path / "o.npz",
                "--to",
                "var",
                "--network",
                "nofile.py:build",
            ),
            "no such file",
        ),  # fmt: skip
    ]
    for args, message in cases:
        status, out, err = lasagne_bn_cmd(*args)
        assert status == 2, (args, out, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"lasagne-bn {args[0]}: error: ")
        assert message in err, (message, err)
    assert not list(tmp_path.glob("o.*"))


def test_convert_guess_and_back(lasagne_bn_cmd, tmp_path):
    out_var = tmp_path / "var.npz"
    status, out, err = lasagne_bn_cmd(
        "convert", ORACLE / "mlp_params.npz", out_var, "--to", "var", "--guess"
    )
    assert status == 0, err
    assert "arrays 4 converted inv_std -> var (epsilon 0.0001)" in out
    original = cio.read_checkpoint(ORACLE / "mlp_params.npz").values
    converted = cio.read_checkpoint(out_var).values
    np.testing.assert_allclose(converted[4], 1 / original[4].astype(float) ** 2 - 1e-4, rtol=1e-6)
    for i in (0, 1, 2, 3, 5, 6):
        np.testing.assert_array_equal(converted[i], original[i])
    back = tmp_path / "back.pkl"
    status, out, _ = lasagne_bn_cmd("convert", out_var, back, "--to", "inv_std", "--stats", "4")
    assert status == 0 and "var -> inv_std" in out
    for a, b in zip(cio.read_checkpoint(back).values, original, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_convert_model_zoo_and_network(lasagne_bn_cmd, tmp_path):
    zoo = tmp_path / "zoo.pkl"
    status, out, _ = lasagne_bn_cmd(
        "convert", ORACLE / "mlp_modelzoo.pkl", zoo, "--to", "var", "--epsilon", "1e-3", "--guess"
    )
    assert status == 0 and "epsilon 0.001" in out
    checkpoint = cio.read_checkpoint(zoo)
    assert checkpoint.format == "model-zoo" and checkpoint.extras["synset words"][0] == "cat"
    net_npz = tmp_path / "net.npz"
    status, out, _ = lasagne_bn_cmd("convert", ORACLE / "mlp_p2.pkl.gz", net_npz, "--to", "var")
    assert status == 0 and "(each layer's epsilon)" in out
    plain = tmp_path / "plain.pkl"
    status, out, _ = lasagne_bn_cmd("convert", ORACLE / "mlp_p2.pkl.gz", plain)
    assert status == 0 and "converted" not in out
    assert cio.read_checkpoint(plain).format == "pickle"


def test_convert_with_a_legacy_network_description(lasagne_bn_cmd, tmp_path):
    """--network runs legacy build code (theano/lasagne names) to find the statistics."""
    build = tmp_path / "build.py"
    build.write_text(
        "import lasagne\n"
        "from lasagne.layers import InputLayer, DenseLayer, DropoutLayer, batch_norm\n"
        "def build_network():\n"
        "    l = InputLayer((None, 6))\n"
        "    l = batch_norm(DenseLayer(l, 5, name='fc'), epsilon=1e-3)\n"
        "    l = DropoutLayer(l, p=0.5)\n"
        "    return DenseLayer(l, 3, nonlinearity=lasagne.nonlinearities.softmax)\n"
    )
    out_path = tmp_path / "out.npz"
    status, out, err = lasagne_bn_cmd(
        "convert", ORACLE / "mlp_params.npz", out_path, "--to", "var",
        "--network", f"{build}:build_network",
    )  # fmt: skip
    assert status == 0, err
    original = cio.read_checkpoint(ORACLE / "mlp_params.npz").values
    np.testing.assert_allclose(
        cio.read_checkpoint(out_path).values[4],
        1 / original[4].astype(float) ** 2 - 1e-3,
        rtol=1e-6,
    )


def test_run_returns_the_script_status(lasagne_bn_cmd, tmp_path):
    script = tmp_path / "s.py"
    script.write_text(
        "import sys, theano\n"
        "print(theano.config.floatX, sys.argv[1:])\n"
        "sys.exit(int(sys.argv[1]))\n"
    )
    status, out, _ = lasagne_bn_cmd("run", "--theano-flags", "", script, "3", "--x")
    assert status == 3
    assert "['3', '--x']" in out


def test_entry_points_in_a_fresh_process(tmp_path):
    """What the installed ``lasagne-bn`` does: find the subcommands by entry point."""
    proc = run_cli(["inspect", ORACLE / "mlp_params_p2.pkl"], tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "pickle (a pickled list of arrays), 7 arrays" in proc.stdout
    proc = run_cli(["inspect", tmp_path / "nope"], tmp_path, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"lasagne-bn inspect: error: no such file: '{tmp_path / 'nope'}'"


def test_pyproject_registers_these_entry_points():
    """The in-process tests above stand in for exactly what installing registers."""
    import tomllib

    from legacy_helpers import ROOT

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"]["lasagne_bn.commands"]
    assert declared == {ep.name: ep.value for ep in ENTRY_POINTS}


# --------------------------------------------------------------------------
# messages (issue 12): one line that says what is wrong


def test_inspect_and_convert_on_a_directory_say_so(lasagne_bn_cmd, tmp_path):
    for args in (("inspect", tmp_path), ("convert", tmp_path, tmp_path / "o.npz")):
        status, _, err = lasagne_bn_cmd(*args)
        assert status == 2
        assert err.strip().endswith(f"'{tmp_path}' is a directory, not a checkpoint file")


def test_run_usage_shows_args_as_optional(lasagne_bn_cmd):
    status, out, _ = lasagne_bn_cmd("run", "--help")
    assert status == 0
    assert out.startswith(
        "usage: lasagne-bn run [-h] [-m] [--theano-flags FLAGS] SCRIPT [ARGS ...]"
    )


def test_inspect_into_a_closed_pipe_ends_quietly(tmp_path):
    """``lasagne-bn inspect f | head -1``: no BrokenPipeError traceback."""
    import subprocess

    from legacy_helpers import cli_env

    proc = subprocess.run(
        f"{__import__('sys').executable} -m lasagne_bn inspect "
        f"{ORACLE / 'mlp_params_p2.pkl'} | head -1",
        shell=True,
        env=cli_env(tmp_path, None),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.stdout.count("\n") == 1 and "pickle" in proc.stdout
    assert proc.stderr == ""


class Trusted:
    """A class of the user's own, named by a pickle."""

    def __init__(self, values=None):
        self.values = values


def test_allow_class_lets_a_trusted_class_through(lasagne_bn_cmd, tmp_path):
    path = tmp_path / "zoo.pkl"
    values = [np.ones((3, 2), "float32"), np.zeros(2, "float32")]
    path.write_bytes(pickle.dumps({"param values": values, "config": Trusted(3)}, protocol=2))
    status, _, err = lasagne_bn_cmd("inspect", path)
    assert status == 2 and f"--allow-class {__name__}.Trusted" in err
    status, out, err = lasagne_bn_cmd("inspect", path, "--allow-class", f"{__name__}.Trusted")
    assert status == 0, err
    assert "model-zoo" in out and "extra 'config': Trusted" in out


@pytest.mark.parametrize(
    "name", ["posix.system", "os.system", "builtins.eval", "subprocess.Popen"]
)
def test_allow_class_never_allows_what_runs_code(lasagne_bn_cmd, tmp_path, name):
    path = tmp_path / "w.npz"
    np.savez(path, np.ones(2))
    status, _, err = lasagne_bn_cmd("inspect", path, "--allow-class", name)
    assert status == 2 and "can run commands or code" in err and "cannot be allowed" in err


def test_allow_class_refuses_non_classes(lasagne_bn_cmd, tmp_path):
    path = tmp_path / "w.npz"
    np.savez(path, np.ones(2))
    status, _, err = lasagne_bn_cmd("inspect", path, "--allow-class", "numpy.savez")
    assert status == 2 and "not a class" in err
    status, _, err = lasagne_bn_cmd("inspect", path, "--allow-class", "nomodule")
    assert status == 2 and "expected MODULE.NAME" in err


def test_refusing_os_system_never_suggests_allowing_it(tmp_path):
    class Evil:
        def __reduce__(self):
            return os.system, ("true",)

    data = pickle.dumps([np.zeros(2), Evil()], protocol=2)
    with pytest.raises(cio.UnsafePickleError) as info:
        cio.read_checkpoint(__import__("io").BytesIO(data))
    message = str(info.value)
    assert "posix.system" in message and "do not allow it" in message
    assert "classes=" not in message and "--allow-class" not in message


def test_run_applies_import_time_flags_and_says_it_compiles(tmp_path):
    """optimizer=None and base_compiledir reach PyTensor (set before it is imported)."""
    compiledir = tmp_path / "cache"
    script = tmp_path / "s.py"
    script.write_text(
        "import theano, theano.tensor as T\n"
        "x = T.dvector('x')\n"
        "f = theano.function([x], x + 1)\n"
        "g = theano.function([x], x + 2)\n"
        "print(theano.config.optimizer, theano.config.base_compiledir, f([1.0])[0])\n"
    )
    flags = f"optimizer=None,base_compiledir={compiledir},floatX=float64"
    proc = run_cli(["run", "--theano-flags", flags, script], tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["None", str(compiledir), "2.0"]
    assert proc.stderr.count("lasagne-bn run: compiling") == 1
    assert "ignored" not in proc.stderr


def test_second_install_applies_its_flags(legacy_flags_restored):
    import pytensor

    lasagne_bn_compat.install()
    lasagne_bn_compat.install(theano_flags="floatX=float32")
    assert pytensor.config.floatX == "float32"
    lasagne_bn_compat.install(theano_flags="floatX=float64")
    assert pytensor.config.floatX == "float64"
    with pytest.warns(UserWarning, match="optimizer: PyTensor reads it only when it is first"):
        lasagne_bn_compat.install(
            theano_flags=f"optimizer={'o1' if pytensor.config.optimizer != 'o1' else 'o2'}"
        )


@pytest.fixture
def legacy_flags_restored():
    import pytensor

    floatx = pytensor.config.floatX
    yield
    pytensor.config.floatX = floatx
    lasagne_bn_compat.uninstall()


def test_cli_lint(tmp_path):
    build = tmp_path / "build.py"
    build.write_text(
        "import lasagne\n"
        "def build_network():\n"
        "    l = lasagne.layers.InputLayer((None, 4))\n"
        "    l = lasagne.layers.DenseLayer(l, 3, name='fc')\n"
        "    return lasagne.layers.BatchNormLayer(l, name='bn')\n"
    )
    proc = run_cli(["inspect", "--lint", f"{build}:build_network"], tmp_path, timeout=300)
    assert proc.returncode == 1, proc.stderr
    assert "bn: bias-before-bn: fc keeps its bias" in proc.stdout
    assert "3 finding(s)" in proc.stdout


def test_run_without_a_script_says_only_that_script_is_required(lasagne_bn_cmd):
    status, _, err = lasagne_bn_cmd("run")
    assert status == 2
    assert err.strip().endswith("error: the following arguments are required: SCRIPT"), err


def test_convert_of_a_hostile_gzipped_pickle_names_the_file(lasagne_bn_cmd, tmp_path):
    import gzip

    path = tmp_path / "evil.pkl.gz"
    path.write_bytes(gzip.compress(b"cos\nsystem\n(S'touch pwned'\ntR."))
    for args in (("inspect", path), ("convert", path, tmp_path / "o.npz")):
        status, _, err = lasagne_bn_cmd(*args)
        assert status == 2 and err.count("\n") == 1, err
        assert str(path) in err and "os.system" in err, err
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "pwned").exists()
