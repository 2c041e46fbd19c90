"""The migration guide's nolearn example, run as the guide says, against nolearn on Theano 1.0.5.

``nolearn_digits.py`` (extracted from migration_guide.md) trains a
batch-normed ``NeuralNet`` three epochs on scikit-learn's digits;
``nolearn_digits_oracle.npz`` is what the same script saved on Theano 1.0.5,
Lasagne master and nolearn 0.6.1 (tests/data/make_nolearn_oracle.py).
nolearn is installed as the guide says (``pip install --no-deps``, from the
package registry, into a scratch folder: it names the real Theano and
Lasagne as requirements).  Each run is a ``lasagne-bn run`` subprocess, as a
user runs it; the compiled default mode compiles the training step's
kernels: the full tier.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from legacy_helpers import DATA, ROOT, guide_files, run_cli
from sklearn.datasets import load_digits

pytestmark = pytest.mark.slow

INSTALL = "pip install --no-deps nolearn==0.6.1 tabulate"


@pytest.fixture(scope="module")
def nolearn_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("nolearn")
    command = [sys.executable, "-m", "pip", "-q", "--disable-pip-version-check"]
    command += ["install", "--target", str(folder), *INSTALL.split()[2:]]
    subprocess.run(command, check=True, capture_output=True, timeout=600)
    return folder


def test_the_guide_installs_and_runs_the_script():
    text = (ROOT / "migration_guide.md").read_text()
    assert INSTALL in text
    assert "THEANO_FLAGS=floatX=float32 lasagne-bn run nolearn_digits.py" in text


@pytest.mark.parametrize("mode", ["default", "FAST_COMPILE"])
def test_a_nolearn_net_trains_as_it_did_on_theano(tmp_path, nolearn_folder, mode):
    (tmp_path / "nolearn_digits.py").write_text(guide_files()["nolearn_digits.py"])
    flags = [] if mode == "default" else ["--theano-flags", f"floatX=float32,mode={mode}"]
    env = {
        "HOME": str(tmp_path),
        "THEANO_FLAGS": "floatX=float32",
        "PYTHONPATH": os.pathsep.join([str(ROOT), str(nolearn_folder)]),
    }
    proc = run_cli(["run", *flags, "nolearn_digits.py"], tmp_path, env, timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "# Neural Network with 3810 learnable parameters" in proc.stdout
    with np.load(tmp_path / "nolearn_digits.npz") as got:
        with np.load(DATA / "nolearn_digits_oracle.npz") as want:
            assert sorted(got) == sorted(want)
            assert len(want) == 2 + 7  # hidden W, the 4 batch-norm arrays, output W and b
            for key in want:
                np.testing.assert_allclose(got[key], want[key], rtol=1e-4, atol=1e-5, err_msg=key)
            labels = load_digits().target[:600]
            accuracy = (want["proba"].argmax(1) == labels).mean()
    assert f"accuracy {accuracy:.3f}" in proc.stdout
