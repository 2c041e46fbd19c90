"""The migration guide's Keras 2 example, run as the guide says, against Keras on Theano 1.0.5.

``keras_step.py`` (extracted from migration_guide.md) loads ``keras_bn.h5``,
a batch-normed CNN that Keras 2.2.4 trained and saved on Theano 1.0.5, and
trains it one step; ``keras_step_oracle.npz`` is what the same script saved
there (all three made by tests/data/make_keras_oracle.py).  Keras imports
its backend once per process, so each run is a ``lasagne-bn run``
subprocess, as a user runs it.  The compiled default mode compiles the
training step's kernels (minutes on empty caches): the full tier.
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest
from legacy_helpers import DATA, ROOT, guide_files, run_cli

pytestmark = pytest.mark.slow


def test_the_guide_command_runs_the_script():
    text = (ROOT / "migration_guide.md").read_text()
    assert "KERAS_BACKEND=theano THEANO_FLAGS=floatX=float32 lasagne-bn run keras_step.py" in text


@pytest.mark.parametrize("mode", ["default", "FAST_COMPILE"])
def test_a_keras_model_saved_on_theano_trains_as_it_did_there(tmp_path, mode):
    (tmp_path / "keras_step.py").write_text(guide_files()["keras_step.py"])
    for name in ("keras_bn.h5", "keras_batch.npz"):
        shutil.copy(DATA / name, tmp_path)
    flags = [] if mode == "default" else ["--theano-flags", f"floatX=float32,mode={mode}"]
    env = {"KERAS_BACKEND": "theano", "HOME": str(tmp_path), "THEANO_FLAGS": "floatX=float32"}
    proc = run_cli(["run", *flags, "keras_step.py"], tmp_path, env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "loss 0.6423, accuracy 0.81" in proc.stdout
    oracle = DATA / "keras_step_oracle.npz"
    with np.load(tmp_path / "keras_step.npz") as got, np.load(oracle) as want:
        assert sorted(got) == sorted(want)
        assert any(k.endswith("moving_variance") for k in want)
        for key in want:
            np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6, err_msg=key)
