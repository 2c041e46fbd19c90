"""``lasagne-bn compare`` and its recorder: the first layer that differs from a legacy run.

``tests/data/compare_legacy_layers.npz`` was recorded on Theano 1.0.5 +
Lasagne master (per /work/shared/LEGACY_ORACLE.md: Python 3.11, numpy
1.23.5, CPU) from the migration guide's ``build_net.py``, with the guide's
command and the recorder this package ships::

    lasagne-bn compare --print-recorder > record_layers.py
    python record_layers.py build_net.py:build legacy_layers.npz \\
        --set batch_norm_use_averages=False

The tests build the network from the guide's own code block, so the guide's
example, its figures and the recorded file stay in step.
"""

from __future__ import annotations

import re
import shutil
import sys

import numpy as np
import pytensor
import pytest
from legacy_helpers import DATA, QUIET, ROOT

import lasagne_bn.cli as cli
import lasagne_bn_compat
from lasagne_bn.layers import BatchNormLayer, get_all_layers, get_all_param_values
from lasagne_bn_compat import record_layers
from lasagne_bn_compat.compare import Recording, compare_layers, read_recording

pytestmark = QUIET
RECORDED = DATA / "compare_legacy_layers.npz"
GUIDE = ROOT / "migration_guide.md"
SECTION = GUIDE.read_text().split("### When outputs differ")[1].split("\n## ")[0]
MODE = "FAST_COMPILE"


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A folder with the guide's build_net.py and the legacy recording, as the cwd."""
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", SECTION, flags=re.S)]
    assert block.startswith("# build_net.py\n")
    (tmp_path / "build_net.py").write_text(block)
    shutil.copy(RECORDED, tmp_path / "legacy_layers.npz")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    lasagne_bn_compat.uninstall()
    sys.modules.pop("build_net", None)


def build_net():
    """The guide's network, built through the shims, as the legacy code is written."""
    lasagne_bn_compat.install()
    import build_net

    return build_net.build()


def guide_commands() -> list[list[str]]:
    block = re.findall(r"```bash\n(.*?)```", SECTION, flags=re.S)[0]
    lines = [line.split("#")[0].strip() for line in block.splitlines()]
    return [line.split()[1:] for line in lines if line.startswith("lasagne-bn ")]


def test_the_guides_network_matches_the_legacy_recording(folder, capsys):
    """The guide's command, as written: every layer matches; the table is the guide's."""
    commands = guide_commands()
    assert [c[0] for c in commands] == ["compare", "compare"]
    assert cli.main([*commands[1], "--mode", MODE]) == 0
    out = capsys.readouterr().out
    assert "all 13 layers match the recording (rtol=0.0001, atol=1e-05)" in out
    rows = [line for line in out.splitlines() if line.startswith("| ")]
    assert len(rows) == 1 + 13  # the header and one row per layer

    # the rows the guide shows are printed; their rounding-level figures vary with the
    # machine and mode, so the layer columns are compared
    def layer_columns(line):
        return line.split(" | ")[:4]

    printed = [layer_columns(line) for line in rows]
    shown = [line for line in SECTION.splitlines() if line.startswith("| ")]
    assert len(shown) == 4 and all(layer_columns(line) in printed for line in shown), shown


def test_a_changed_layer_is_named_first_and_the_guide_says_so(folder):
    """epsilon=1e-2 on conv2's batch norm: that layer is named, not a later, worse one."""
    net = build_net()
    bn = [layer for layer in get_all_layers(net) if isinstance(layer, BatchNormLayer)][1]
    assert bn.name == "conv2_bn"
    bn.epsilon = 1e-2
    result = compare_layers(net, "legacy_layers.npz", mode=MODE)
    first = result.first_difference
    assert (first.index, first.cls, first.name) == (6, "BatchNormLayer", "conv2_bn")
    assert all(row.ok for row in result.layers[:6])
    assert not any(row.ok for row in result.layers[6:])
    assert max(row.excess for row in result.layers) > first.excess > 1
    quoted = re.search(r"```text\n(first difference: .*)\n```", SECTION).group(1)
    assert result.summary() == quoted
    assert "1.13e+03" in SECTION and f"{result.layers[9].excess:.3g}" == "1.13e+03"


def test_exit_status_1_names_the_layer_of_a_changed_recording(folder, tmp_path, capsys):
    changed = dict(np.load(RECORDED))
    changed["layer_8"] = changed["layer_8"] + np.float32(0.5)
    np.savez(tmp_path / "changed.npz", **changed)
    assert cli.main(["compare", "build_net.py:build", "changed.npz", "--mode", MODE]) == 1
    out = capsys.readouterr().out
    assert "first difference: layer 8 TransposedConv2DLayer 'up': max |difference| 0.5," in out
    assert out.count(" <- |") == 1  # ours is unchanged: only that layer's recording differs


def test_the_recorder_runs_on_this_stack_too(folder, tmp_path, capsys):
    """``lasagne-bn run record_layers.py ...``: the same file, here; the comparison matches."""
    script = tmp_path / "record_layers.py"
    assert cli.main(["compare", "--print-recorder"]) == 0
    script.write_text(capsys.readouterr().out)
    assert script.read_text() == (ROOT / "lasagne_bn_compat" / "record_layers.py").read_text()
    np.savez(
        tmp_path / "x.npz", np.linspace(-2, 2, 3 * 144, dtype="float32").reshape(3, 1, 12, 12)
    )
    args = ["build_net.py:build", "here.npz", "--inputs", "x.npz", "--set", "deterministic=False"]
    # run sets the process's flags, as in a user's process; here they are put back
    with pytensor.config.change_flags(mode=pytensor.config.mode):
        assert cli.main(["run", "--theano-flags", f"mode={MODE}", str(script), *args]) == 0
    assert "recorded 13 layers to here.npz" in capsys.readouterr().out
    rec = read_recording("here.npz")
    assert rec.meta["settings"] == {"deterministic": False}
    assert rec.inputs[0].shape == (3, 1, 12, 12)
    sys.modules.pop("build_net", None)
    assert compare_layers(build_net(), rec, mode=MODE).ok


def test_made_inputs_follow_the_seed_and_batch(folder, tmp_path):
    net = build_net()
    for seed in (0, 0, 1):
        record_layers.record(net, tmp_path / f"s{seed}.npz", batch=5, seed=seed)
    x0, x1 = (read_recording(tmp_path / f"s{s}.npz").inputs[0] for s in (0, 1))
    # of the input variable's dtype (floatX where the network was built)
    assert x0.shape == (5, 1, 12, 12) and x0.dtype == get_all_layers(net)[0].input_var.dtype
    np.testing.assert_array_equal(
        x0, np.random.RandomState(0).standard_normal(x0.shape).astype(x0.dtype)
    )
    assert not np.array_equal(x0, x1)
    # inputs by input layer name
    x = np.zeros((1, 1, 12, 12), "float32")
    record_layers.record(net, tmp_path / "named.npz", given={"image": x})
    np.testing.assert_array_equal(read_recording(tmp_path / "named.npz").inputs[0], x)


def test_another_network_is_refused_and_left_unchanged(folder):
    lasagne_bn_compat.install()
    from lasagne.layers import DenseLayer, InputLayer

    other = DenseLayer(InputLayer((None, 144)), 3)
    before = get_all_param_values(other)
    with pytest.raises(ValueError, match=r"^network: 2 layers, the recording 13; build"):
        compare_layers(other, "legacy_layers.npz")
    net = build_net()
    rec = read_recording("legacy_layers.npz")
    wrong = Recording(rec.inputs, [*rec.params[:-1], np.zeros(4, "float32")], rec.outputs,
                      rec.meta)  # fmt: skip
    before = get_all_param_values(net)
    with pytest.raises(ValueError, match=r"^network: parameter 16 'classes.b' has shape \(3,\)"):
        compare_layers(net, wrong)
    for old, new in zip(before, get_all_param_values(net), strict=True):
        np.testing.assert_array_equal(old, new)  # nothing was set
    bad_input = Recording([np.zeros((2, 1, 12, 13), "float32")], rec.params, rec.outputs,
                          rec.meta)  # fmt: skip
    with pytest.raises(ValueError, match=r"input layer 0 has shape \(None, 1, 12, 12\)"):
        compare_layers(net, bad_input)


@pytest.mark.parametrize("rtol", [-1, float("nan"), "1e-4", True])
def test_bad_tolerances_are_refused(folder, rtol):
    with pytest.raises(ValueError, match=r"^rtol=.*: expected a number >= 0$"):
        compare_layers(build_net(), "legacy_layers.npz", rtol=rtol)


def test_files_that_are_not_recordings_are_refused_in_one_line(folder, tmp_path, capsys):
    np.savez(tmp_path / "weights.npz", np.ones(3))
    with pytest.raises(ValueError, match=r"has no 'meta' entry; expected a file written by"):
        read_recording(tmp_path / "weights.npz")
    assert cli.main(["compare", "build_net.py:build", "weights.npz"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "weights.npz" in err[0] and "record_layers.py" in err[0]
    assert cli.main(["compare", "build_net.py:build"]) == 2
    assert "BUILDER and RECORDED are required" in capsys.readouterr().err
    assert cli.main(["compare", "nowhere.py:build", "legacy_layers.npz"]) == 2
    assert "BUILDER 'nowhere.py:build': no such file 'nowhere.py'" in capsys.readouterr().err


def test_nan_where_legacy_had_nan_is_equal_and_elsewhere_differs():
    from lasagne_bn_compat.compare import _difference

    a = np.array([1.0, np.nan, np.inf])
    assert _difference(a, a.copy(), 1e-4, 1e-5) == (0.0, 0.0)
    max_abs, excess = _difference(np.array([1.0, 2.0, np.inf]), a, 1e-4, 1e-5)
    assert max_abs == np.inf and excess == np.inf


@pytest.mark.parametrize(
    "items, message",
    [(["deterministic"], "expected NAME=VALUE"), (["x=not a literal"], "is not a Python literal")],
)
def test_recorder_settings_are_checked(items, message):
    with pytest.raises(ValueError, match=message):
        record_layers.parse_settings(items)
    assert record_layers.parse_settings(["batch_norm_use_averages=False"]) == {
        "deterministic": True,
        "batch_norm_use_averages": False,
    }
