"""migration_guide.md's worked example runs as written, and matches real Theano + Lasagne.

The guide's code blocks that start with ``# <file>.py`` are written to a
folder and run: the legacy script through ``lasagne-bn run``, the shell
commands of the worked example, the lasagne_bn version of the script, and
the weight-loading script.  The legacy script's saved weights are compared
with those the same script saved on Theano 1.0.5 + Lasagne master
(tests/data/guide_oracle_digits_mlp.npz, made by
tests/data/make_guide_oracle.py).  Everything compiles in FAST_COMPILE to
keep the suite quick; tests/compat/test_compat_scripts.py covers the default
mode.
"""

from __future__ import annotations

import os
import re
import runpy
import shlex
import sys
from pathlib import Path

import numpy as np
import pytensor
import pytest
from data.guide_scripts import file_name, python_blocks
from legacy_helpers import DATA, QUIET, ROOT, guide_files, run_cli

import lasagne_bn.cli as cli
import lasagne_bn_compat
import lasagne_bn_compat.io as cio

pytestmark = [*QUIET, pytest.mark.filterwarnings("ignore:THEANO_FLAGS options ignored")]
GUIDE = ROOT / "migration_guide.md"


def guide_commands(section: str) -> list[list[str]]:
    text = GUIDE.read_text()
    body = text.split(f"## {section}")[1].split("\n## ")[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", body, flags=re.S):
        for line in block.splitlines():
            line = line.split("#")[0].strip()
            if line.startswith("lasagne-bn "):
                commands.append(shlex.split(line)[1:])
    return commands


def lasagne_bn_main(args) -> int:
    """``lasagne-bn ARGS`` in this process, with the installed entry points."""
    return cli.main(args)


@pytest.fixture(scope="module")
def worked_example(tmp_path_factory):
    """Run section 4 of the guide in a fresh folder; returns the folder."""
    folder = tmp_path_factory.mktemp("guide")
    for name, code in guide_files().items():
        (folder / name).write_text(code)
    old_cwd, old_path = os.getcwd(), sys.path[:]
    os.chdir(folder)
    outputs = {}
    try:
        with pytensor.config.change_flags(mode="FAST_COMPILE"):
            for args in guide_commands("4. A worked example"):
                if args[0] == "run":
                    args = [args[0], "--theano-flags", "mode=FAST_COMPILE", *args[1:]]
                assert lasagne_bn_main(args) == 0, args
                if args[0] == "run":
                    outputs["legacy"] = dict(np.load("digits_mlp.npz"))
            lasagne_bn_compat.uninstall()
            os.makedirs("after")
            os.chdir("after")
            sys.path.insert(0, str(folder))
            namespace = runpy.run_path(str(folder / "train_digits.py"))
            namespace["main"](mode="FAST_COMPILE")
            outputs["after"] = dict(np.load("digits_mlp.npz"))
            os.chdir(folder)
            runpy.run_path(str(folder / "load_legacy_weights.py"), run_name="__main__")
    finally:
        os.chdir(old_cwd)
        sys.path[:] = old_path
        lasagne_bn_compat.uninstall()
        sys.modules.pop("train_digits", None)
    return folder, outputs


def test_the_guide_has_the_example():
    assert set(guide_files()) == {
        "train_digits_legacy.py",
        "train_digits.py",
        "load_legacy_weights.py",
        "build_net.py",  # section 5's lasagne-bn compare example (tests/compat/test_compare.py)
        "keras_step.py",  # section 2's Keras 2 example (tests/compat/test_guide_keras.py)
        "nolearn_digits.py",  # section 2's nolearn example (tests/compat/test_guide_nolearn.py)
    }
    assert [c[0] for c in guide_commands("4. A worked example")] == ["run", "inspect", "convert"]


def test_legacy_script_matches_real_theano(worked_example):
    _, outputs = worked_example
    with np.load(DATA / "guide_oracle_digits_mlp.npz") as f:
        reference = dict(f)
    assert sorted(outputs["legacy"]) == sorted(reference)
    for key, expected in reference.items():
        np.testing.assert_allclose(outputs["legacy"][key], expected, rtol=1e-9, atol=1e-12)


def test_lasagne_bn_version_matches_the_legacy_script(worked_example):
    _, outputs = worked_example
    for key, value in outputs["legacy"].items():
        np.testing.assert_allclose(outputs["after"][key], value, rtol=1e-12, atol=1e-14)


def test_the_converted_files_agree(worked_example):
    folder, _ = worked_example
    legacy = cio.read_checkpoint(folder / "digits_mlp.npz").values
    by_cli = cio.read_checkpoint(folder / "digits_mlp_var.npz").values
    again = cio.read_checkpoint(folder / "digits_mlp_again.npz").values
    roles = cio.guess_bn_roles(legacy)
    stats = [i for i, r in enumerate(roles) if r == "bn inv_std or var"]
    assert stats == [4, 9]
    for i, (a, b, c) in enumerate(zip(legacy, by_cli, again, strict=True)):
        np.testing.assert_allclose(c, a, rtol=1e-12)
        if i in stats:
            np.testing.assert_allclose(b, 1 / a**2 - 1e-4, rtol=1e-12)
        else:
            np.testing.assert_array_equal(b, a)


def test_section_2_snippet_runs():
    text = GUIDE.read_text().split("## 2.")[1].split("\n## ")[0]
    # the file examples (Keras's keras_step.py) have their own tests
    (snippet,) = [b for b in python_blocks(text) if file_name(b) is None]
    try:
        namespace: dict = {}
        exec(snippet, namespace)
        assert namespace["bn"].batch_normalization_train.__module__ == "lasagne_bn.ops.api"
    finally:
        lasagne_bn_compat.uninstall()


@pytest.mark.slow
def test_lasagne_bn_run_in_a_fresh_process(worked_example, tmp_path):
    """The guide's first command, exactly as a user types it (default mode)."""
    folder, outputs = worked_example
    script = tmp_path / "train_digits_legacy.py"
    script.write_text((folder / "train_digits_legacy.py").read_text())
    proc = run_cli(["run", script.name], tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "Epoch 3: training loss" in proc.stdout
    with np.load(tmp_path / "digits_mlp.npz") as f:
        for key, value in outputs["legacy"].items():
            np.testing.assert_allclose(f[key], value, rtol=1e-9, atol=1e-12)


def test_guide_mentions_every_gone_module():
    from lasagne_bn_compat._finder import GONE

    text = GUIDE.read_text()
    for name in ("lasagne.layers.dnn", "theano.sandbox.cuda", "theano.gpuarray", "cuda_convnet"):
        assert name in text
    assert all(isinstance(advice, str) and advice for advice in GONE.values())
    assert Path(ROOT / "migration_guide.md").exists()
